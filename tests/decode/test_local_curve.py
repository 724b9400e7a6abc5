"""This machine's decode-loop curve for `--verify scheduled` (decode/local_curve.py): timed once,
cached under a key of what changes the timings, timed again when the key or the file changes."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture()
def loop(monkeypatch, tmp_path):
    from toys import tiny_llama

    from dspark_sim.decode.drafters import make_drafter
    from dspark_sim.decode.target import HFTarget

    monkeypatch.setenv("DSPARK_SIM_CACHE", str(tmp_path / "cache"))
    target = HFTarget(tiny_llama(seed=0, vocab=260), name="tiny")
    return target, make_drafter("ngram", target)


def test_the_curve_is_timed_once_then_read_from_the_cache(loop):
    from dspark_sim.decode.local_curve import cached_local_curve, curve_cache_path, machine_key

    target, drafter = loop
    timed = []
    first = cached_local_curve(target, drafter, 2, on_measure=timed.append)
    path = curve_cache_path(machine_key(target, drafter, 2))
    assert timed == [path] and path.is_file()
    assert list(first.step_curve.x) == [1, 2, 3]                 # widths 1 .. gamma + 1
    assert first.extra["runner"] == "decode-loop" and first.draft_time("ngram", 1) > 0
    again = cached_local_curve(target, drafter, 2, on_measure=timed.append)
    assert len(timed) == 1 and again.step_curve.y.tolist() == first.step_curve.y.tolist()
    cached_local_curve(target, drafter, 2, refresh=True, on_measure=timed.append)
    assert len(timed) == 2
    path.write_text("schema: [not a profile\n")                    # a damaged entry is re-timed
    cached_local_curve(target, drafter, 2, on_measure=timed.append)
    assert len(timed) == 3


def test_the_key_holds_what_changes_the_timings(loop):
    from dspark_sim.decode.local_curve import curve_cache_path, machine_key

    target, drafter = loop
    key = machine_key(target, drafter, 2)
    assert {"cpu", "isa", "threads", "torch", "target", "kind", "gamma"} <= set(key)
    assert curve_cache_path(key) != curve_cache_path(machine_key(target, drafter, 3))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert curve_cache_path(machine_key(target, drafter, 2)) != curve_cache_path(key)
    finally:
        torch.set_num_threads(threads)


def test_cpu_identity_reads_the_vector_isa():
    from dspark_sim.hardware.measure import cpu_identity, describe_device

    cpu = cpu_identity()
    assert cpu["cpu"] and set(cpu["isa"]) <= {"avx2", "avx512f", "avx512_bf16", "avx512_vnni",
                                             "amx_tile", "asimd", "sve"}
    assert cpu["cpu"] in describe_device("cpu")


def test_a_cached_curve_that_is_not_monotone_is_repaired_and_the_source_named(loop, capsys):
    """A cached curve whose step time falls as the verified tokens grow (what a noisy timing
    can leave in the cache): `generate --verify scheduled` names the cache file it read and
    reads the curve's non-decreasing least-squares fit, saying which points moved; `--verify
    lagged` (meant for jagged curves) reads it as measured and says so."""
    import numpy as np
    import yaml

    from dspark_sim.cli.decode_cmd import _this_machine_curve
    from dspark_sim.decode.local_curve import nondecreasing, verify_cost_curve

    target, drafter = loop
    prof, source = _this_machine_curve(target, drafter, 2, refresh=False)
    assert source.startswith("this machine's decode loop, measured now (cached in ")
    path = source.split("cached in ")[1].rstrip(")")
    doc = yaml.safe_load(open(path))
    doc["step_time"]["seconds"] = [0.040, 0.063, 0.059]          # 3 tokens cheaper than 2
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    prof, source = _this_machine_curve(target, drafter, 2, refresh=False)
    assert source == f"this machine's decode loop, cached in {path}"
    fixed, lines = verify_cost_curve(prof, source, repair=True)
    assert lines[0] == f"verify-cost curve: {source}"
    assert "not monotone in the verified tokens (2 tokens 63.0 ms > 3 tokens 59.0 ms)" in lines[1]
    assert "2: 63.0 -> 61.0 ms, 3: 59.0 -> 61.0 ms" in lines[1]
    assert np.allclose(fixed.step_curve.y, [0.040, 0.061, 0.061])
    assert prof.step_curve.y.tolist() == [0.040, 0.063, 0.059]        # the cache is untouched
    kept, lines = verify_cost_curve(prof, source, repair=False)
    assert kept is prof and "read as measured" in lines[1]
    ok, lines = verify_cost_curve(fixed, source, repair=True)
    assert ok is fixed and lines == [f"verify-cost curve: {source}"]
    assert nondecreasing(np.array([3.0, 1.0, 2.0, 5.0, 4.0])).tolist() == [2.0, 2.0, 2.0, 4.5, 4.5]
