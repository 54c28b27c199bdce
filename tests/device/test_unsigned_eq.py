"""eq/ne of uint16/uint32/uint64 natively (issue 22: test_reductions' hash_tensor tests compare uint64 results).

Equality is equality of bits: uint16/32 compare their signed views, uint64 its two int32 words (int64
arithmetic is exact only within int32). Checked against the CPU under ``TRN_FALLBACK=error``, over values
across the whole range (the top bit set, 0, the maximum), broadcasting, strided views, 0-dim and empty
tensors, and numbers.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang.config as config
import trnlang.device  # noqa: F401  (registers trn)
from trnlang.device.fallback import FallbackError

_DT = {16: torch.uint16, 32: torch.uint32, 64: torch.uint64}


def _tensor(vals: list[int], bits: int, shape: tuple[int, ...]) -> torch.Tensor:
    signed = {16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]
    raw = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in vals]
    return torch.tensor(raw, dtype=signed).reshape(shape).view(_DT[bits])


@settings(max_examples=40, deadline=None)
@given(bits=st.sampled_from([16, 32, 64]), shape=st.sampled_from([(), (0,), (1,), (5,), (3, 4), (2, 3, 2)]),
       data=st.data(), op=st.sampled_from(["eq", "ne"]), transpose=st.booleans(), bcast=st.booleans())
def test_unsigned_eq_ne_vs_cpu(bits, shape, data, op, transpose, bcast):
    n = 1
    for s in shape:
        n *= s
    top = (1 << bits) - 1
    pool = st.sampled_from([0, 1, top, 1 << (bits - 1), (1 << (bits - 1)) - 1, 12345 % top])
    a_vals = data.draw(st.lists(pool | st.integers(0, top), min_size=n, max_size=n))
    b_vals = [v if data.draw(st.booleans()) else data.draw(pool) for v in a_vals]
    a, b = _tensor(a_vals, bits, shape), _tensor(b_vals, bits, shape)
    if transpose and a.dim() >= 2:
        a, b = a.transpose(0, 1), b.transpose(0, 1)
    if bcast and a.dim() >= 1 and a.numel():
        b = b[..., :1]
    f = getattr(torch, op)
    with config.override(TRN_FALLBACK="error"):
        got = f(a.to("trn"), b.to("trn")).cpu()
        assert torch.equal(got, f(a, b))
        s = data.draw(pool)
        assert torch.equal(f(a.to("trn"), s).cpu(), f(a, s))


def test_mixed_dtypes_are_torchs_to_decide():
    a = torch.tensor([1, 2], dtype=torch.uint64)
    with pytest.raises(RuntimeError, match="Promotion for uint16, uint32, uint64 types is not supported") as want:
        torch.eq(a, torch.tensor([1, 2]))
    with config.override(TRN_FALLBACK="error"):  # torch's own error, not the policy's FallbackError
        with pytest.raises(RuntimeError) as got:
            torch.eq(a.to("trn"), torch.tensor([1, 2]).to("trn"))
    assert not isinstance(got.value, FallbackError) and str(got.value) == str(want.value)


@settings(max_examples=25, deadline=None)
@given(shape=st.sampled_from([(), (0,), (1,), (5,), (3, 4)]), data=st.data(), op=st.sampled_from(["eq", "ne"]),
       bcast=st.booleans())
def test_int64_eq_ne_beyond_int32_vs_cpu(shape, data, op, bcast):
    """int64 values beyond int32 (declined by the int32 arithmetic before) compare on their words."""
    n = 1
    for s in shape:
        n *= s
    pool = st.sampled_from([0, 1, -1, 2**31, -(2**31) - 1, 2**40 + 5, -(2**62), 2**63 - 1, -(2**63)])
    a_vals = data.draw(st.lists(pool | st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n))
    b_vals = [v if data.draw(st.booleans()) else data.draw(pool) for v in a_vals]
    a = torch.tensor(a_vals, dtype=torch.int64).reshape(shape)
    b = torch.tensor(b_vals, dtype=torch.int64).reshape(shape)
    if bcast and a.dim() >= 1 and a.numel():
        b = b[..., :1]
    f = getattr(torch, op)
    with config.override(TRN_FALLBACK="error"):
        assert torch.equal(f(a.to("trn"), b.to("trn")).cpu(), f(a, b))
        s = data.draw(pool)
        assert torch.equal(f(a.to("trn"), s).cpu(), f(a, s))


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_wide_unsigned_binary_ops_the_cpu_has(dtype, monkeypatch):
    """mul and bitwise and/or/xor on the signed view of the same bits (equal modulo 2^bits; uint64 products within
    int64's checked range), true division / xlogy / atan2 through float32 casts: natively, as the CPU; ops the CPU
    has no uint kernel for (add, maximum) still raise its error."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    top = {torch.uint16: 2**16 - 1, torch.uint32: 2**32 - 1, torch.uint64: 2**64 - 1}[dtype]
    a = torch.tensor([0, 1, 2, 300, 9, top, top - 5], dtype=dtype)
    b = torch.tensor([3, 7, 2, 250, 1, 2, top], dtype=dtype)
    small = torch.tensor([0, 1, 2, 300, 9, 16000, 77], dtype=dtype)
    cases = [(torch.bitwise_and, a, b), (torch.bitwise_or, a, b), (torch.bitwise_xor, a, 5), (torch.bitwise_and, a, -1),
             (torch.mul, small, small), (torch.mul, small, 3), (torch.div, a, b), (torch.true_divide, a, 3),
             (torch.xlogy, a, b), (torch.atan2, a, b)]
    if dtype != torch.uint64:
        cases.append((torch.mul, a, b))  # wraps modulo 2^bits
    for fn, p, q in cases:
        exp = fn(p, q)
        got = fn(p.to("trn"), q.to("trn") if isinstance(q, torch.Tensor) else q).cpu()
        assert got.dtype == exp.dtype, fn
        torch.testing.assert_close(got, exp, rtol=1e-6, atol=0, equal_nan=True)
    for fn in (torch.add, torch.maximum):
        with pytest.raises(NotImplementedError):
            fn(a.to("trn"), b.to("trn"))
