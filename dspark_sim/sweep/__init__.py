"""Load sweeps, SLA capacity search and what-if helpers on top of the serving simulator.

- spec.py: points (policy x load x seed) and their cache keys; point.py: one point's metrics;
- cache.py: per-point results on disk; executors.py: local processes or Ray;
- frontier.py: Pareto frontiers and the SLA table; plots.py: the figures;
- run.py: `run_sweep` / `write_sweep`; plan.py: minimum replicas per policy (`plan_capacity`).
"""
