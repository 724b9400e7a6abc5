"""dspark-sim: simulation and capacity planning for speculative decoding around a real decoder."""

__version__ = "0.1.0"
__all__ = ["prefix_schedule"]


def __getattr__(name: str):
    # Lazy, so that `import dspark_sim` stays light (numpy is loaded on first use).
    if name == "prefix_schedule":
        from .sim.speculation.prefix_schedule import prefix_schedule

        return prefix_schedule
    raise AttributeError(f"module 'dspark_sim' has no attribute {name!r}")
