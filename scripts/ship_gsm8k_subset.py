"""Write the GSM8K *train* questions the default commands use into the package
(dspark_sim/data/prompts/gsm8k-train-subset.jsonl, with GSM8K's MIT license beside it), so that
`distill` and `calibrate` run with no path on a fresh install.

With seed 0 (the default) `distill` answers the first 1,200 questions of a seeded permutation of
the 7,473 train questions and `calibrate` rolls out held-out ones from the far end of the same
permutation (train/prompts.py); this ships exactly those: the first N_TRAIN and the last
N_HELDOUT of the permutation, each with its line index in train.jsonl so that prompt ids
(`gsm8k-train-<index>`) and texts are the ones the full file gives. The GSM8K *test* questions,
which the shipped acceptance profiles measure, are a different file and never used here.

    .venv/bin/python scripts/ship_gsm8k_subset.py [../shared/prompts/gsm8k]
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

from dspark_sim.fileio import write_jsonl_atomic
from dspark_sim.train.prompts import (GSM8K_SUBSET, GSM8K_SUBSET_HELDOUT, GSM8K_SUBSET_TRAIN,
                                      read_prompt_jsonl)

src = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/prompts/gsm8k")
rows = read_prompt_jsonl(src / "train.jsonl", task="math")
perm = np.random.default_rng(0).permutation(len(rows))
keep = sorted(set(perm[:GSM8K_SUBSET_TRAIN].tolist()) | set(perm[::-1][:GSM8K_SUBSET_HELDOUT].tolist()))
write_jsonl_atomic(GSM8K_SUBSET, ({"index": i, "of": len(rows), "question": rows[i].text} for i in keep))
shutil.copyfile(src / "LICENSE", GSM8K_SUBSET.with_name("GSM8K-LICENSE"))
print(f"wrote {len(keep)} of {len(rows)} questions to {GSM8K_SUBSET}")
