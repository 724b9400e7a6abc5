"""Published GPU speculative-decoding sweeps (shipped as data) and their replay by the simulator:
`dspark-sim validate-published` (cases.py: format and loader; predict.py: fit and prediction;
report.py: table and plot)."""
