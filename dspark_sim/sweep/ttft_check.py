"""Time to first token, measured against the replay's: a check of prefill and admission, never fitted.

A fit on throughput and tok/s/user cannot see how an engine admits and prefills new requests; a
measured first-token time can. Where the replay's differs from it by more than TTFT_FACTOR either
way, the reports (`profile fit`'s and `validate-published`'s) say so in one sentence.
"""
from __future__ import annotations

TTFT_FACTOR = 2.0       # simulated / measured first-token times beyond x/÷ this are called out


def beyond(measured_s: float, simulated_s: float) -> bool:
    """Whether the simulated first token is off the measured by more than TTFT_FACTOR."""
    ratio = simulated_s / measured_s
    return not 1 / TTFT_FACTOR <= ratio <= TTFT_FACTOR


def warning(pairs: list[tuple[float, float]], measured: str = "measured") -> str:
    """One sentence for (measured, simulated) first-token pairs with some beyond TTFT_FACTOR,
    else "" (`measured`: what the first numbers are, e.g. "published")."""
    pairs = [(m, s) for m, s in pairs if m and m > 0]
    off = [p for p in pairs if beyond(*p)]
    if not off:
        return ""
    ratios = [s / m for m, s in pairs]
    return (f"The simulated first tokens are x{min(ratios):.2g}..x{max(ratios):.2g} of the {measured} "
            f"({len(off)} of {len(pairs)} loads beyond x/÷ {TTFT_FACTOR:g}): the replay's prefill and "
            "admission are not this engine's, and throughput alone cannot show it, so a gain that "
            "changes how long requests wait for their first token is not established here.")
