"""Hardware and acceptance profiles: the contracts between measurement and simulation."""
from .acceptance import AcceptanceProfile, EmpiricalRequest, TaskAcceptance
from .curve import Curve
from .hardware import HardwareProfile
from .registry import (load_acceptance_profile, load_hw_profile, shipped_acceptance_names,
                       shipped_hw_names)

__all__ = ["AcceptanceProfile", "EmpiricalRequest", "TaskAcceptance", "Curve", "HardwareProfile",
           "load_acceptance_profile", "load_hw_profile", "shipped_acceptance_names",
           "shipped_hw_names"]
