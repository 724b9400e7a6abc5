"""The decode core: a frozen target, drafters, lossless verification and the speculative loop."""
