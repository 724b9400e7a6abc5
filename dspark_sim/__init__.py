"""dspark-sim: simulation and capacity planning for speculative decoding around a real decoder."""

__version__ = "0.1.0"
