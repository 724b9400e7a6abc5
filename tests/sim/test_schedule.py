"""Algorithm 1 (method.md section 4): equals a literal brute-force reference; its early stop keeps
speculative sampling lossless on the paper's counterexample."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dspark_sim
from dspark_sim.sim.core.rules import survivals
from dspark_sim.sim.speculation.prefix_schedule import budget_batch, prefix_schedule, top_k_batch


def algorithm1(conf, sps, base=0, max_drafts=None, early_stop=True):
    """Literal transcription of Algorithm 1 (python loops, python floats)."""
    r_count, g = len(conf), len(conf[0])
    a = [[float(np.prod(conf[r][: j + 1])) for j in range(g)] for r in range(r_count)]
    batch, tau = base + r_count, float(r_count)
    l = [0] * r_count
    best, l_star = tau * sps(batch), list(l)
    candidates = sorted(((a[r][j], r, j) for r in range(r_count) for j in range(g)),
                        key=lambda c: -c[0])          # stable: ties keep (r, j) order
    for n, (p, r, j) in enumerate(candidates):
        if max_drafts is not None and n >= max_drafts:
            break
        l[r] = j + 1
        batch += 1
        tau += p
        if tau * sps(batch) > best:
            best, l_star = tau * sps(batch), list(l)
        elif early_stop:
            break
    return l_star


def table_sps(values):
    """SPS(B) from a table indexed by B (beyond the table: its last value)."""
    arr = np.asarray(values, dtype=float)
    return lambda b: arr[np.minimum(np.asarray(b), len(arr) - 1)]


confidence_value = st.one_of(st.sampled_from([0.0, 0.3, 0.5, 0.8, 0.9, 1.0]),
                             st.floats(0.0, 1.0, allow_nan=False))


@st.composite
def cases(draw):
    r = draw(st.integers(1, 6))
    g = draw(st.integers(1, 7))
    conf = draw(st.lists(st.lists(confidence_value, min_size=g, max_size=g), min_size=r, max_size=r))
    n = r * g + 40
    jagged = draw(st.booleans())
    steps = draw(st.lists(st.floats(0.001, 0.05), min_size=n, max_size=n))
    seconds = np.asarray(steps) if jagged else np.cumsum(steps)   # jagged or increasing step time
    base = draw(st.integers(0, 20))
    cap = draw(st.one_of(st.none(), st.integers(0, r * g)))
    return np.asarray(conf), 1.0 / seconds, base, cap


@settings(max_examples=300, deadline=None)
@given(cases())
def test_prefix_schedule_equals_brute_force(case):
    conf, sps_table, base, cap = case
    sps = table_sps(sps_table)
    got = prefix_schedule(conf, sps, base_tokens=base, max_drafts=cap)
    want = algorithm1(conf.tolist(), lambda b: float(sps(b)), base, cap)
    assert got.tolist() == want


@settings(max_examples=200, deadline=None)
@given(cases())
def test_unconstrained_search_is_the_global_maximum(case):
    conf, sps_table, base, cap = case
    sps = table_sps(sps_table)
    got = prefix_schedule(conf, sps, base_tokens=base, max_drafts=cap, early_stop=False)
    want = algorithm1(conf.tolist(), lambda b: float(sps(b)), base, cap, early_stop=False)
    assert got.tolist() == want
    # the lagged budget is the number of drafts that search admits; top-K re-admits them
    surv = survivals(conf)[None]
    active = np.ones((1, len(conf)), dtype=bool)
    k = budget_batch(surv, active, np.array([base]), np.array([conf.size if cap is None else cap]), sps)
    assert int(k[0]) == sum(want)
    assert top_k_batch(surv, active, k)[0].tolist() == want


def test_exported_at_top_level():
    assert dspark_sim.prefix_schedule is prefix_schedule
    out = dspark_sim.prefix_schedule([[0.9, 0.9], [0.2, 0.1]], lambda b: 1.0 / (0.01 + 0.001 * b))
    assert out.dtype.kind == "i" and out.shape == (2,)


def test_verify_lengths_are_prefixes_even_with_ties():
    conf = np.ones((3, 4))                      # every survival equal: stable order keeps prefixes
    sps = lambda b: 1.0 / (0.01 + 0.0025 * np.asarray(b))  # noqa: E731
    out = prefix_schedule(conf, sps)
    want = algorithm1(conf.tolist(), lambda b: float(sps(b)))
    assert out.tolist() == want


# --- The paper's counterexample: the early stop keeps speculative sampling lossless -------

SPS_123 = {1: 1.0, 2: 0.5, 3: 0.45}
P_TARGET = np.array([0.7, 0.3])     # target distribution at position 1 over tokens {A, B}
P_DRAFT = np.array([0.5, 0.5])      # draft distribution at position 1
C1 = 0.8                            # a_1 = c_1 = 0.8
C2_GIVEN_X1 = {0: 0.9, 1: 0.1}      # c_2 depends on the sampled x_1: high after A, low after B


def sps_123(b):
    return np.vectorize(lambda v: SPS_123[int(v)], otypes=[float])(b)


def first_token_distribution(early_stop: bool) -> np.ndarray:
    """Exact distribution of the first emitted token: draft x_1 ~ p_d, schedule with
    confidences (c_1, c_2(x_1)), then verify (speculative sampling) or decode plainly."""
    out = np.zeros(2)
    for x1 in (0, 1):
        l1 = prefix_schedule([[C1, C2_GIVEN_X1[x1]]], sps_123, early_stop=early_stop)[0]
        if l1 == 0:                                  # plain decoding: sample from the target
            out += P_DRAFT[x1] * P_TARGET
            continue
        accept = min(1.0, P_TARGET[x1] / P_DRAFT[x1])
        residual = np.maximum(P_TARGET - P_DRAFT, 0.0)
        out[x1] += P_DRAFT[x1] * accept
        out += P_DRAFT[x1] * (1 - accept) * residual / residual.sum()
    return out


def sampled_first_tokens(early_stop: bool, n: int, seed: int) -> np.ndarray:
    """The same experiment by sampling: frequencies of the first emitted token."""
    rng = np.random.default_rng(seed)
    x1 = (rng.random(n) < P_DRAFT[1]).astype(int)
    lengths = {v: prefix_schedule([[C1, C2_GIVEN_X1[v]]], sps_123, early_stop=early_stop)[0]
               for v in (0, 1)}
    verified = np.array([lengths[v] for v in (0, 1)])[x1] > 0
    plain = (rng.random(n) < P_TARGET[1]).astype(int)
    accept = rng.random(n) < np.minimum(1.0, P_TARGET[x1] / P_DRAFT[x1])
    residual = np.maximum(P_TARGET - P_DRAFT, 0.0)
    resample = (rng.random(n) < residual[1] / residual.sum()).astype(int)
    token = np.where(verified, np.where(accept, x1, resample), plain)
    return np.bincount(token, minlength=2) / n


def test_counterexample_schedules():
    # with the early stop: a_1 = 0.8 gives 1.8 * 0.5 = 0.9 < 1 * 1, so nothing is verified,
    # whatever x_1 is; without it, x_1 = A makes (1.8 + 0.72) * 0.45 > 1 and both drafts verify.
    assert prefix_schedule([[C1, 0.9]], sps_123).tolist() == [0]
    assert prefix_schedule([[C1, 0.1]], sps_123).tolist() == [0]
    assert prefix_schedule([[C1, 0.9]], sps_123, early_stop=False).tolist() == [2]
    assert prefix_schedule([[C1, 0.1]], sps_123, early_stop=False).tolist() == [0]


def test_counterexample_early_stop_is_lossless():
    np.testing.assert_allclose(first_token_distribution(early_stop=True), P_TARGET, atol=1e-12)
    np.testing.assert_allclose(sampled_first_tokens(True, 400_000, seed=1), P_TARGET, atol=0.004)


def test_counterexample_without_early_stop_is_biased():
    np.testing.assert_allclose(first_token_distribution(early_stop=False), [0.85, 0.15], atol=1e-12)
    np.testing.assert_allclose(sampled_first_tokens(False, 400_000, seed=1), [0.85, 0.15], atol=0.004)


def test_bad_confidence_shape():
    with pytest.raises(ValueError):
        prefix_schedule([0.5, 0.5], lambda b: 1.0)


@settings(max_examples=150, deadline=None)
@given(cases())
def test_ranked_batch_equals_schedule_batch(case):
    """The per-composition plan (numpy and pure python) gives Algorithm 1's lengths."""
    from dspark_sim.sim.speculation.prefix_schedule import RankedBatch, schedule_batch

    conf, sps_table, base, cap = case
    r, g = conf.shape
    cap = r * g if cap is None else cap
    surv = survivals(conf)
    want = schedule_batch(surv[None], np.ones((1, r), dtype=bool), np.array([base]), np.array([cap]),
                          table_sps(sps_table))[0]
    ranked = RankedBatch(surv, cap)
    table = np.concatenate([sps_table, np.full(base + ranked.max_batch + 1, sps_table[-1])])
    assert ranked.lengths(base, table).tolist() == want.tolist()
    assert ranked.lengths_py(base, table.tolist()) == want.tolist()


def test_ranked_batch_python_lengths_need_the_whole_table():
    """lengths_py reads the SPS table as far as the search goes: a table that ends before the
    early stop is an error (as an index past its end), one that ends after it is not."""
    from dspark_sim.sim.speculation.prefix_schedule import RankedBatch

    ranked = RankedBatch(survivals(np.full((2, 3), 0.9)), 6)
    rising = [1.0] * 20                    # flat SPS: every candidate adds value, no early stop
    assert ranked.lengths_py(0, rising) == [3, 3]
    with pytest.raises(IndexError):
        ranked.lengths_py(0, rising[:ranked.max_batch])
    falling = [1.0, 1.0, 1.0, 0.1]     # short, but the first draft already costs more than it adds
    assert ranked.lengths_py(0, falling) == ranked.lengths(0, np.array(falling + [0.1] * 10)).tolist()
    shared = ranked.lengths_py(0, rising)
    assert ranked.top_k_py(6) is shared     # one list per candidate count
