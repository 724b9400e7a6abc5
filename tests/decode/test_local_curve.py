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
