"""Optional compiled builds of the simulator's hottest code (dspark_sim/sim/engines/native.py says which
and why). Everything else is in pyproject.toml. Each source is copied into build/native with the
SHA-256 of the original appended, so the package can tell a build from stale code; without
Cython or a C compiler the build is skipped with a warning and the same code runs in Python,
with the same results, slower."""
import hashlib
from pathlib import Path

from setuptools import Extension, setup

PACKAGE = Path("dspark_sim/sim/engines")
BUILDS = {"_loop_native": "loop.py", "_stretch_kernel_native": "stretch_kernel.pyx"}
STAGE = Path("build/native")


def staged_sources() -> list[Extension]:
    """Copy each source to build/native/dspark_sim/sim/engines/<module><suffix> (a package tree, so that
    Cython names the module dspark_sim.sim.engines.<module>) with its name and hash appended."""
    target = STAGE / PACKAGE
    target.mkdir(parents=True, exist_ok=True)
    for depth in range(1, len(PACKAGE.parts) + 1):      # every folder on the way is a package
        (STAGE.joinpath(*PACKAGE.parts[:depth]) / "__init__.py").touch()
    out = []
    for module, source in BUILDS.items():
        text = (PACKAGE / source).read_bytes()
        staged = target / (module + Path(source).suffix)
        body = text + (f'\nNATIVE_SOURCE = "{source}"\n'
                       f'NATIVE_SOURCE_SHA256 = "{hashlib.sha256(text).hexdigest()}"\n').encode()
        if not staged.exists() or staged.read_bytes() != body:
            staged.write_bytes(body)
        # no fused multiply-add: iteration times must round as Python's float arithmetic does
        out.append(Extension(".".join(PACKAGE.parts + (module,)), [str(staged)], optional=True,
                             extra_compile_args=["-O2", "-ffp-contract=off"]))
    return out


try:
    from Cython.Build import cythonize
except ImportError:          # pyproject's build requires Cython; a bare `setup.py` call may not have it
    extensions = []
else:
    extensions = cythonize(staged_sources(), language_level=3, quiet=True)

setup(ext_modules=extensions)
