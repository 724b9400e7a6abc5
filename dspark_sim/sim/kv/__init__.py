"""The KV pool room: one interface (pool.py) with two implementations, reservation at admission
and vLLM's paged blocks (paged.py)."""
