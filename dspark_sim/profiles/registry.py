"""Find shipped profiles by name, or load a profile from a path."""
from __future__ import annotations

from pathlib import Path

from ..fileio import path_or_shipped
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
    return path_or_shipped(name_or_path, HW_PROFILE_DIR, ".yaml", "shipped hardware profile",
                           shipped_hw_names())


def acceptance_profile_path(name_or_path: str | Path) -> Path:
    """Path of an acceptance profile given as a path or a shipped profile's name."""
    return path_or_shipped(name_or_path, ACCEPTANCE_DIR, ACCEPTANCE_SUFFIX,
                           "shipped acceptance profile", shipped_acceptance_names())


def load_hw_profile(name_or_path: str | Path) -> HardwareProfile:
    """Load a hardware profile by path or shipped name."""
    return HardwareProfile.load(hw_profile_path(name_or_path))


def load_acceptance_profile(name_or_path: str | Path) -> AcceptanceProfile:
    """Load an acceptance profile by path or shipped name."""
    return AcceptanceProfile.load(acceptance_profile_path(name_or_path))


def save_profiles(profiles: list[AcceptanceProfile], directory: str | Path = ACCEPTANCE_DIR) -> list[Path]:
    """Write acceptance profiles as DIRECTORY/NAME.acceptance.json (the shipped profiles' writers)."""
    paths = [Path(directory) / f"{prof.name}{ACCEPTANCE_SUFFIX}" for prof in profiles]
    for prof, path in zip(profiles, paths):
        prof.save(path)
    return paths
