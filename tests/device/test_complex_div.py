"""complex64 division on trn (stdlib_kernels/elementwise/complex_arith.py) against the CPU, natively: complex and
real tensors and numbers in either position, broadcasting, 0-dim/empty, huge and tiny magnitudes (no overflow of
c^2 + d^2), division by zero, out=."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def _native(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _close(got, want):
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=2e-6, atol=1e-30)


@settings(max_examples=30, deadline=None)
@given(shape=st.sampled_from([(), (0,), (7,), (3, 5)]), kind=st.sampled_from(["cc", "cr", "rc", "cn", "nc"]),
       scale=st.sampled_from([1.0, 1e-30, 1e30]), seed=st.integers(0, 2**16))
def test_division_matches_cpu(shape, kind, scale, seed):
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(shape, dtype=torch.complex64, generator=g) * scale
    z2 = torch.randn(shape, dtype=torch.complex64, generator=g) * scale
    r = torch.randn(shape, generator=g)
    num = complex(1.5, -0.25)
    x, y = {"cc": (z1, z2), "cr": (z1, r), "rc": (r, z2), "cn": (z1, num), "nc": (z1, num)}[kind]
    if kind == "nc":
        x, y = num, z2
    dev = [v.to("trn") if isinstance(v, torch.Tensor) else v for v in (x, y)]
    _close(torch.div(*dev), torch.div(x, y))


def test_zero_and_infinite_divisors_and_out():
    x = torch.tensor([1 + 1j, 0j, 1 - 2j, 3 + 0j], dtype=torch.complex64)
    y = torch.tensor([0j, 0j, float("inf") + 0j, 2 + 0j], dtype=torch.complex64)
    _close(torch.div(x.to("trn"), y.to("trn")), torch.div(x, y))
    out = torch.empty(4, dtype=torch.complex64, device="trn")
    torch.div(x.to("trn"), torch.tensor([2.0, 4.0, 1.0, -1.0]).to("trn"), out=out)
    _close(out, torch.div(x, torch.tensor([2.0, 4.0, 1.0, -1.0])))


def test_division_of_transposed_complex_operands(monkeypatch):
    """Complex division of permuted operands (upstream test_many_promotions): the planes of the result took the
    operands' layout, so stacking them gave no stride-1 pair axis and view_as_complex raised."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(0)
    for dt2 in (torch.complex64, torch.float32, torch.int64):
        a = torch.randn(4, 4, 4, dtype=torch.complex64, generator=g).transpose(0, 2)
        b = (torch.randn(4, 4, 4, generator=g) * 3 + 0.5).to(dt2).transpose(2, 1)
        torch.testing.assert_close((a.to("trn") / b.to("trn")).cpu(), a / b, atol=1e-5, rtol=1e-5)
