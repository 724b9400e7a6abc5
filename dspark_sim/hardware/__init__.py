"""Hardware profiles: analytic (roofline over a GPU table and a model shape) and measured (profiler)."""
