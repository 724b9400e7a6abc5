"""The package's import graph read from the source (ast): every import, at module level, under
TYPE_CHECKING and inside functions alike. Used by the layers contract (tests/sim/test_layers.py)
and runnable for the circles of any subpackage:

    .venv/bin/python tests/sim/import_graph.py [dspark_sim.sim]
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def modules(package: str = "dspark_sim") -> dict[str, Path]:
    """Dotted name -> source file of every module of `package` (.py and .pyx)."""
    base = ROOT / package.replace(".", "/")
    out = {}
    for path in sorted(list(base.rglob("*.py")) + list(base.rglob("*.pyx"))):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(known: dict[str, Path], name: str) -> str | None:
    """The longest known module that `name` is or is inside of."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of `known` that `module` imports anywhere in its source."""
    is_package = path.stem == "__init__"
    package = module if is_package else module.rpartition(".")[0]
    if path.suffix == ".pyx":
        return set()        # the C twin imports no package module (checked by its own test)
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(known, alias.name)
                if target:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:      # `from pkg import submodule` imports the submodule
                target = _resolve(known, f"{source}.{alias.name}")
                if target and target != _resolve(known, source):
                    found.add(target)
                    continue
                target = _resolve(known, source)
                if target:
                    found.add(target)
    found.discard(module)
    return found


def graph(package: str = "dspark_sim") -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    pkg = sys.argv[1] if len(sys.argv) > 1 else "dspark_sim"
    found = circles(graph(pkg))
    for comp in found:
        print(f"circle of {len(comp)}: {' '.join(comp)}")
    print(f"{len(found)} circles among {len(modules(pkg))} modules of {pkg}")
