"""hardware/packed_linear.py (what benchmarks/verify_kernels.py times): the oneDNN-packed Linear
computes the same product as torch's Linear (to fp32 rounding) at every row count and input rank,
and keeps 1-row inputs on the default kernel, bit for bit (and every row when switched off)."""
import pytest
import torch
from torch import nn

from dspark_sim.hardware.packed_linear import PackedLinear, swap_linears, use_packed

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch")


@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_matches_linear_at_every_width(bias):
    torch.manual_seed(0)
    lin = nn.Linear(96, 320, bias=bias).requires_grad_(False)
    packed = PackedLinear(lin)
    for rows in range(1, 10):
        x = torch.randn(1, rows, 96)
        got, want = packed(x), lin(x)
        assert got.shape == want.shape == (1, rows, 320)
        if rows == 1:
            assert torch.equal(got, want)          # one row: the default kernel itself
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_swap_linears_replaces_every_nested_linear():
    model = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.ReLU(), nn.Linear(8, 4)))
    x = torch.randn(3, 8)
    want = model(x)
    assert swap_linears(model, PackedLinear) == 2
    assert isinstance(model[0], PackedLinear) and isinstance(model[1][1], PackedLinear)
    torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)


def test_use_packed_switches_every_layer_back_to_the_default_kernel():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(64, 128), nn.Sequential(nn.Linear(128, 32)))
    x = torch.randn(2, 5, 64)
    want = model(x)
    swap_linears(model, PackedLinear)
    use_packed(model, False)
    assert torch.equal(model(x), want)                # the default kernel itself, bit for bit
    use_packed(model, True)
    assert all(m.packed_on for m in model.modules() if isinstance(m, PackedLinear))
    torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
