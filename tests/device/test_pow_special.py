"""``pow`` with the number exponents CPU torch computes without exp/log (stdlib_kernels/elementwise/binops.py):
the same values as the CPU, bit for bit in float32 (signed zeros, infinities, NaN), natively, and gradients."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang.device  # noqa: F401  (registers the trn device)

_EXPONENTS = [1.0, 1, 0.0, 0, 0.5, -0.5, -1.0, -1, -2.0, -2, 2, 3, 1.5]
_EDGES = [0.0, -0.0, 1.0, -1.0, 4.0, -4.0, 1e-30, -1e-30, 1e30, float("inf"), float("-inf"), float("nan"), 3e-39]


@pytest.fixture(autouse=True)
def _native(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


@pytest.mark.parametrize("e", _EXPONENTS)
def test_edges_float32_bitwise(e):
    x = torch.tensor(_EDGES, dtype=torch.float32)
    got, want = x.to("trn").pow(e).cpu(), x.pow(e)
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    if e in (1.5,):  # exp(log): the vecmath tolerance, not bits
        torch.testing.assert_close(got, want, equal_nan=True)
    else:
        assert bool(same.all()), (e, got, want)


@settings(max_examples=20, deadline=None)
@given(shape=st.sampled_from([(), (1,), (0,), (7,), (3, 130)]), e=st.sampled_from(_EXPONENTS),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]), seed=st.integers(0, 2**16))
def test_shapes_and_dtypes(shape, e, dtype, seed):
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)
    got = x.to("trn").pow(e)
    assert got.dtype == x.pow(e).dtype and got.shape == x.shape
    torch.testing.assert_close(got.cpu(), x.pow(e), equal_nan=True)


def test_square_backward_uses_the_copy():
    x = torch.randn(4, 130, requires_grad=True)
    xd = x.detach().to("trn").requires_grad_()
    x.pow(2).sum().backward()
    xd.pow(2).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
