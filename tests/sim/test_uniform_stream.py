"""The lazily drawn uniform stream equals one big draw, wherever and however it is read."""
import numpy as np
import pytest

from dspark_sim.sim.acceptance.uniforms import BLOCK, UniformStream


@pytest.mark.parametrize("total", [1, BLOCK - 1, 3 * BLOCK + 17])
def test_lazy_stream_matches_one_draw(total):
    whole = np.random.default_rng([5, 0xACC]).random(total + 7)
    lazy = UniformStream([5, 0xACC], total, whole_limit=0, cache_blocks=2)
    assert lazy.whole is None
    rng = np.random.default_rng(1)
    for _ in range(20):
        idx = rng.integers(0, total, size=(rng.integers(1, 5), rng.integers(1, 9)))
        assert np.array_equal(lazy[idx], whole[idx])
        lo = int(rng.integers(0, total))
        hi = int(rng.integers(lo, total + 1))
        assert np.array_equal(lazy[lo:hi], whole[lo:hi])
    # the draws after the stream continue the same generator
    assert np.array_equal(lazy.generator_after().random(7), whole[total:])
    with pytest.raises(IndexError):
        lazy[np.array([total])]


def test_small_stream_is_made_whole():
    stream = UniformStream([1, 2], 100)
    assert stream.whole is not None and np.array_equal(stream.whole,
                                                       np.random.default_rng([1, 2]).random(100))
