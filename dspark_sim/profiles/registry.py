"""Find shipped profiles by name, or load a profile from a path."""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .acceptance import AcceptanceProfile
from .hardware import HardwareProfile

PACKAGE_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = PACKAGE_DIR.parent
HW_PROFILE_DIR = REPO_DIR / "hw_profiles"
ACCEPTANCE_DIR = PACKAGE_DIR / "data" / "acceptance"
ACCEPTANCE_SUFFIX = ".acceptance.json"


def shipped_hw_names() -> list[str]:
    """Names of the hardware profiles shipped in hw_profiles/."""
    return sorted(p.stem for p in HW_PROFILE_DIR.glob("*.yaml"))


def shipped_acceptance_names() -> list[str]:
    """Names of the acceptance profiles shipped with the package."""
    return sorted(p.name[: -len(ACCEPTANCE_SUFFIX)] for p in ACCEPTANCE_DIR.glob(f"*{ACCEPTANCE_SUFFIX}"))


def hw_profile_path(name_or_path: str | Path) -> Path:
    """Path of a hardware profile given as a path or a shipped profile's name."""
    path = Path(name_or_path)
    if path.exists():
        return path
    shipped = HW_PROFILE_DIR / f"{name_or_path}.yaml"
    if shipped.exists():
        return shipped
    raise InputError(f"no such file, and no shipped hardware profile of that name "
                     f"(shipped: {', '.join(shipped_hw_names()) or 'none'})", file=name_or_path)


def acceptance_profile_path(name_or_path: str | Path) -> Path:
    """Path of an acceptance profile given as a path or a shipped profile's name."""
    path = Path(name_or_path)
    if path.exists():
        return path
    shipped = ACCEPTANCE_DIR / f"{name_or_path}{ACCEPTANCE_SUFFIX}"
    if shipped.exists():
        return shipped
    raise InputError(f"no such file, and no shipped acceptance profile of that name "
                     f"(shipped: {', '.join(shipped_acceptance_names()) or 'none'})", file=name_or_path)


def load_hw_profile(name_or_path: str | Path) -> HardwareProfile:
    """Load a hardware profile by path or shipped name."""
    return HardwareProfile.load(hw_profile_path(name_or_path))


def load_acceptance_profile(name_or_path: str | Path) -> AcceptanceProfile:
    """Load an acceptance profile by path or shipped name."""
    return AcceptanceProfile.load(acceptance_profile_path(name_or_path))
