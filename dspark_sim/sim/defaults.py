"""Shipped profiles `replay` uses by default (a light module: the CLI imports it for --help)."""

DEFAULT_HW = "h200-qwen3-8b-roofline"
DEFAULT_ACCEPTANCE = "paper-dspark-g5"
DEFAULT_MTP1_ACCEPTANCE = "paper-mtp1"
