"""Shipped profiles `replay` uses by default (a light module: the CLI imports it for --help)."""

DEFAULT_HW = "h100-qwen3-8b-estimate"
DEFAULT_ACCEPTANCE = "paper-dspark-g5"
DEFAULT_MTP1_ACCEPTANCE = "paper-mtp1"
