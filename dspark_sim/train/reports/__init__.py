"""Reports of drafter training runs: the tables of docs/drafters/ built from what
scripts/ship_drafters.sh writes (measure reports, training summaries, calibration reports).
Each module runs as `python -m dspark_sim.train.reports.<name>`; nothing else imports them.

- drafter_seeds.py: tau per task per drafter over seeds, the sequential head's share
  (docs/drafters/seeds*.md); helpers the shipping script uses (zero-head, rename).
- tau_decomposition.py: a drafter's tau gain split into position 1 and positions 2..gamma
  (docs/drafters/tau-decomposition*.md).
- drafters_table.py: the shipped drafters in the shape of the DSpark paper's Table 1
  (docs/drafters/results.md).
"""
