"""The CLI's layers: a command module (cli/*_cmd.py) imports cli/options.py, cli/render.py and
the library, never another command module; options and render import no cli module. Every
import counts: at the top, inside functions, under TYPE_CHECKING."""
from __future__ import annotations

import ast
from pathlib import Path

import dspark_sim.cli

CLI = Path(dspark_sim.cli.__file__).parent
PACKAGE = "dspark_sim.cli"
SHARED = {f"{PACKAGE}.options", f"{PACKAGE}.render"}


def imported_modules(source: str, module: str) -> set[str]:
    """Every module `source` (the text of `module`) imports, as absolute dotted names; for
    `from X import name` both X and X.name (the name may be a module)."""
    package = module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.add(origin)
            found.update(f"{origin}.{alias.name}" for alias in node.names)
    return found


def cli_imports(source: str, module: str) -> set[str]:
    """The modules of the cli package that `module` imports (the package itself left out)."""
    return {m for m in imported_modules(source, module)
            if m.startswith(PACKAGE + ".") and m.count(".") == PACKAGE.count(".") + 1}


def violations(source: str, module: str) -> set[str]:
    """The cli modules `module` may not import."""
    own = cli_imports(source, module) - {module}
    if module in SHARED:
        return own
    return own - SHARED


def _modules() -> dict[str, str]:
    return {f"{PACKAGE}.{p.stem}": p.read_text() for p in sorted(CLI.glob("*.py"))
            if p.name != "__init__.py"}


def test_command_modules_import_only_options_render_and_the_library():
    bad = {m: sorted(violations(src, m)) for m, src in _modules().items()}
    assert {m: v for m, v in bad.items() if v} == {}


def test_every_cli_module_is_a_command_module_or_shared():
    others = {m for m in _modules() if m not in SHARED and not m.endswith("_cmd")}
    assert others == set(), "a cli helper belongs in options.py, render.py or the library"


def test_the_check_sees_imports_in_functions_and_under_type_checking():
    source = """
from typing import TYPE_CHECKING
from .options import TargetOpt
from ..sim.replay import replay
if TYPE_CHECKING:
    from .sim_cmd import something
def f():
    from . import fit_cmd
    import dspark_sim.cli.serve_cmd
    from ..cli import decode_cmd
"""
    assert violations(source, f"{PACKAGE}.hardware_cmd") == {
        f"{PACKAGE}.sim_cmd", f"{PACKAGE}.fit_cmd", f"{PACKAGE}.serve_cmd", f"{PACKAGE}.decode_cmd"}
    assert violations("from .render import ms\n", f"{PACKAGE}.options") == {f"{PACKAGE}.render"}
    assert violations("from .options import TargetOpt\n", f"{PACKAGE}.sim_cmd") == set()
