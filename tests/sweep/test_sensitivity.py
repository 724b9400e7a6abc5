"""`sweep --acceptance-scale`: one sweep per factor, the scaled profiles, the sensitivity table."""
import numpy as np
import pandas as pd
import pytest
from sweepkit import REPO

from dspark_sim.cli import main
from dspark_sim.errors import InputError
from dspark_sim.profiles import AcceptanceProfile, load_acceptance_profile
from dspark_sim.sweep.whatif import improved_acceptance, scaled_acceptance

CHAT = str(REPO / "traces" / "chat-heavy-hour.jsonl")


def test_scaled_acceptance_multiplies_and_caps():
    prof = load_acceptance_profile("production-dspark-g5")
    low, high = scaled_acceptance(prof, 0.5), scaled_acceptance(prof, 1.2)
    np.testing.assert_allclose(low.tasks["default"].position_accept, 0.435)
    np.testing.assert_allclose(high.tasks["default"].position_accept, 1.0)   # capped
    assert low.name == "production-dspark-g5-x0.5" and low.extra["derived_from"] == prof.name
    # the tau-matching what-if still gives its tau after the shared scaling helper
    better = improved_acceptance(prof, 1.05)
    assert better.tasks["default"].mean_tau(5) == pytest.approx(1.05 * prof.tasks["default"].mean_tau(5))
    with pytest.raises(InputError):
        scaled_acceptance(prof, 0.0)


def test_production_profile_states_its_assumption():
    prof = load_acceptance_profile("production-dspark-g5")
    assert prof.gamma == 5 and prof.drafter_kind == "dspark"
    np.testing.assert_allclose(prof.tasks["default"].position_accept,
                               load_acceptance_profile("paper-mtp1").tasks["default"].position_accept[0])
    assert prof.extra["notes"].startswith("ASSUMPTION") and "assumption" in prof.extra


def test_sweep_acceptance_scale_moves_only_the_scaled_policies(tmp_path, capsys):
    out = tmp_path / "sens"
    rc = main(["sweep", "--trace", CHAT, "--policies", "mtp1,dspark", "--points", "3",
               "--load-range", "2,32", "--requests-per-user", "3", "--requests", "300",
               "--acceptance", "mtp1=paper-mtp1,dspark=production-dspark-g5", "--prefill",
               "disaggregated", "--sla", "60", "--workers", "1", "--acceptance-scale", "0.8,1",
               "--scale-policies", "dspark", "--out", str(out)])
    assert rc == 0
    assert "SLA throughput vs scaled acceptance" in capsys.readouterr().out
    table = pd.read_csv(out / "sensitivity.csv")
    assert set(table["acceptance_scale"]) == {0.8, 1.0}
    mtp1 = table[table["policy"] == "mtp1"]["throughput_tok_s_per_gpu"].to_numpy()
    assert mtp1[0] == pytest.approx(mtp1[1])                       # not scaled: same points
    d = table[table["policy"] == "dspark"].set_index("acceptance_scale")["throughput_tok_s_per_gpu"]
    assert d[0.8] < d[1.0]                                        # worse drafts, less throughput
    scaled = AcceptanceProfile.load(out / "acceptance" / "production-dspark-g5-x0.8.acceptance.json")
    np.testing.assert_allclose(scaled.tasks["default"].position_accept, 0.87 * 0.8)
    assert (out / "scale-x0.8" / "sla-p50.md").exists() and (out / "sensitivity.png").stat().st_size > 10_000
    assert "x0.8" in (out / "sensitivity.md").read_text()
