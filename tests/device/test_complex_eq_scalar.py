"""eq/ne of a complex64 ``trn`` tensor and a number natively (issue 22: 56 complex64 ``eq.Scalar`` tests of
test_reductions declined by dtype): both real/imaginary planes compared with the number's pair, vs the CPU
under ``TRN_FALLBACK=error`` (NaN planes, zero, real and bool numbers, 0-dim CPU tensors, strided views)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang.config as config
import trnlang.device  # noqa: F401  (registers trn)

_PLANE = st.sampled_from([0.0, -0.0, 1.0, -2.5, 3.0, float("nan"), float("inf")])


@settings(max_examples=30, deadline=None)
@given(shape=st.sampled_from([(), (0,), (1,), (6,), (3, 4)]), data=st.data(), op=st.sampled_from(["eq", "ne"]),
       transpose=st.booleans())
def test_complex64_eq_ne_number_vs_cpu(shape, data, op, transpose):
    n = 1
    for s in shape:
        n *= s
    vals = [complex(data.draw(_PLANE), data.draw(_PLANE)) for _ in range(n)]
    a = torch.tensor(vals, dtype=torch.complex64).reshape(shape)
    if transpose and a.dim() == 2:
        a = a.t()
    number = data.draw(st.sampled_from([0, 1, True, 3.0, -2.5, 1 - 2.5j, complex(3.0, float("nan")),
                                        torch.tensor(1 + 0j), torch.tensor(3.0)]))
    f = getattr(torch, op)
    with config.override(TRN_FALLBACK="error"):
        assert torch.equal(f(a.to("trn"), number).cpu(), f(a, number))


@pytest.mark.parametrize("op", ["logical_and_", "logical_or_", "logical_xor_"])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.float32, torch.bool, torch.int64])
def test_logical_in_place_on_complex_self(op, dtype, monkeypatch):
    """``z.logical_and_(w)`` on a complex64 ``z``: the bool result stored as 0/1 complex numbers, as the CPU."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    z = torch.tensor([1 + 1j, 0, 2j, 0, 3, -0.0], dtype=torch.complex64)
    w = torch.tensor([0j, 1, 0, 1j, 0, 2]) if dtype == torch.complex64 else torch.tensor([1, 0, 0, 2, 5, 1]).to(dtype)
    exp = getattr(z.clone(), op)(w)
    got = z.to("trn")
    getattr(got, op)(w.to(dtype).to("trn"))
    assert torch.equal(got.cpu(), exp)
