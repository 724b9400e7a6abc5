"""Compiled builds of the simulator's hottest code, and the check that they match the source.

setup.py compiles, when Cython and a C compiler are there (the build is optional):
  - loop.py (the per-iteration engine) unchanged, as `_loop_native`;
  - stretch_kernel.pyx (a typed C twin of stretch.steady_stretch_py) as `_stretch_kernel_native`.
Each build carries the name and SHA-256 of the source it was made from (`NATIVE_SOURCE`,
`NATIVE_SOURCE_SHA256`; setup.py maps builds to sources). A build
is used only if that equals the source file beside it now, so editing loop.py without
rebuilding falls back to the Python code with a warning instead of running stale code. The
results are the same either way, bit for bit (tests/sim/test_native.py); only the speed differs.
DSPARK_SIM_PURE_PYTHON=1 turns the builds off.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import warnings
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
BUILDS = ("_loop_native", "_stretch_kernel_native")      # the compiled modules setup.py makes
_checked: dict[str, ModuleType | None] = {}


def disabled() -> bool:
    return os.environ.get("DSPARK_SIM_PURE_PYTHON", "") not in ("", "0")


def source_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compiled(name: str) -> ModuleType | None:
    """The compiled module `name` (one of BUILDS) if it is built from the current source and
    not switched off, else None."""
    if disabled():
        return None
    if name not in _checked:
        _checked[name] = _load(name)
    return _checked[name]


def _load(name: str) -> ModuleType | None:
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        return None
    recorded = getattr(module, "NATIVE_SOURCE", None)
    source = HERE / recorded if recorded else None
    # an installed wheel may ship the build without its .pyx: the build is then the package's own
    if source is None or (source.exists() and
                          getattr(module, "NATIVE_SOURCE_SHA256", None) != source_sha256(source)):
        warnings.warn(f"{Path(module.__file__).name} was built from another version of "
                      f"{recorded or 'its source'}; using the Python code (rebuild: pip install -e .)",
                      RuntimeWarning, stacklevel=3)
        return None
    return module


def status() -> dict[str, bool]:
    """Which compiled builds are in use."""
    return {name: compiled(name) is not None for name in BUILDS}
