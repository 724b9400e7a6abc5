"""Confidence calibration: Sequential Temperature Scaling and calibration metrics."""
from .metrics import auroc, brier, ece, reliability
from .sts import RolloutSteps, fit_sts, survival

__all__ = ["auroc", "brier", "ece", "reliability", "RolloutSteps", "fit_sts", "survival"]
