"""The simulator's readings of vLLM checked by vLLM's own code, in vLLM's interpreter: cost
tables, batch-size schedules and speculative-config JSON (tests/sim/test_vllm_reference.py),
and `recommend`'s printed configs parsed by vLLM's SpeculativeConfig.

Needs `make setup-vllm` (its venv has pytest; conftest.py: skipped without it, failed under
DSPARK_SIM_REQUIRE_VLLM=1)."""
import json
import subprocess
from pathlib import Path

import pytest

from dspark_sim.cli import main
from dspark_sim.vllm.runtime import engine_env

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]


def _run(python, args, **kw):
    env = {**engine_env(python), "PYTHONPATH": f"{REPO}:{REPO / 'tests' / 'sim'}"}
    return subprocess.run([str(python), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600, **kw)


def test_reference_readings_pass_against_vllm_itself(vllm_interpreter):
    res = _run(vllm_interpreter, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           "tests/sim/test_vllm_reference.py"])
    tail = res.stdout[-2000:] + res.stderr[-2000:]
    assert res.returncode == 0, tail
    assert "skipped" not in res.stdout.splitlines()[-1], tail       # vLLM was there to compare


@pytest.mark.parametrize("extra", [[], ["--acceptance", "eagle3-llama31-8b-g7", "--hw", "constant-10ms"],
                                   ["--acceptance", "vllm-ngram-smollm2-135m-g7-t0", "--hw", "constant-10ms"]],
                         ids=["dspark", "eagle3-with-model", "ngram-with-lookup"])
def test_recommended_configs_parse_with_vllms_speculative_config(tmp_path, vllm_interpreter, extra):
    python = vllm_interpreter
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"arrival_s": {0.1 * i:.1f}, "prompt_tokens": {40 + 17 * i % 300}, '
                             f'"output_tokens": {20 + 11 * i % 120}, "task": "chat"}}\n'
                             for i in range(80)))
    out = tmp_path / "rec"
    assert main(["recommend", "--trace", str(trace), "--sla", "30,60", "--points", "3",
                 "--load-range", "2,16", "--requests-per-user", "4", "--workers", "1",
                 "--out", str(out), *extra]) == 0
    specs = [c["speculative_config"] for c in json.loads((out / "recommend.json").read_text())["choices"]
             if c["speculative_config"]]
    assert specs
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    code = ("import json, sys; from test_vllm_reference import _vllm_parse; "
            f"[_vllm_parse(s) for s in json.load(open({str(tmp_path / 'specs.json')!r}))]; print('parsed')")
    res = _run(python, ["-c", code])
    assert res.returncode == 0 and "parsed" in res.stdout, res.stderr[-2000:]
