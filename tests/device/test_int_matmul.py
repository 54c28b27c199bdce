"""Integer matrix products on trn (issue 22: int64 ``mm``/``bmm``/``dot``/``addmm``/``addmv`` fell back): the fp32
kernels run them when the operands' magnitudes (checked on the device) keep every partial sum exact in fp32 and
inside the dtype; the results equal the CPU's integers exactly. Larger magnitudes run on the CPU, also exactly.
Also ``where`` of int64 tensors, exact for every value, and integer ``hardtanh``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang

OPS = {
    "mm": lambda a, b, c, v: torch.mm(a, b),
    "matmul3d": lambda a, b, c, v: torch.matmul(a.unsqueeze(0).expand(2, -1, -1), b),
    "bmm": lambda a, b, c, v: torch.bmm(a.unsqueeze(0), b.unsqueeze(0)),
    "addmm": lambda a, b, c, v: torch.addmm(c, a, b, beta=2, alpha=-3),
    "mv": lambda a, b, c, v: torch.mv(a, v),
    "addmv": lambda a, b, c, v: torch.addmv(c[:1].expand(a.shape[0]).contiguous(), a, v, beta=-1, alpha=2),
    "dot": lambda a, b, c, v: torch.dot(v, v),
    "addr": lambda a, b, c, v: torch.addr(a, a[:, 0].contiguous(), v, alpha=2),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(OPS)), dtype=st.sampled_from([torch.int64, torch.int32, torch.int16]),
       m=st.sampled_from([0, 1, 5]), k=st.sampled_from([1, 7, 130]), n=st.sampled_from([1, 3]))
def test_small_integer_products_run_natively(op, dtype, m, k, n):
    g = torch.Generator().manual_seed(m * 100 + k * 10 + n)
    a = torch.randint(-9, 10, (m, k), generator=g, dtype=dtype)
    b = torch.randint(-9, 10, (k, n), generator=g, dtype=dtype)
    c = torch.randint(-9, 10, (n,), generator=g, dtype=dtype)
    v = torch.randint(-9, 10, (k,), generator=g, dtype=dtype)
    if op == "addr" and m == 0:
        return
    trnlang.reset_fallback_stats()
    got = OPS[op](*(t.to("trn") for t in (a, b, c, v)))
    want = OPS[op](a, b, c, v)
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_large_integer_products_stay_exact(dtype):
    """Sums fp32 cannot hold exactly run in exact chunks natively; single products past 2^24 (no exact chunk) take
    the CPU (counted as a fallback), with its exact result."""
    a = torch.full((4, 8), 5000, dtype=dtype)
    b = torch.full((8, 2), 3001, dtype=dtype)
    trnlang.reset_fallback_stats()
    got = torch.mm(a.to("trn"), b.to("trn"))
    assert torch.equal(got.cpu(), a @ b) and trnlang.fallback_stats() == {}
    b = torch.full((8, 2), 5001, dtype=dtype)  # 5000 * 5001 > 2^24: no chunk is exact in fp32
    got = torch.mm(a.to("trn"), b.to("trn"))
    assert torch.equal(got.cpu(), a @ b) and trnlang.fallback_stats() != {}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=st.sampled_from([((7,), (7,), (7,)), ((3, 7), (7,), (3, 1)), ((2, 3, 4), (1, 3, 1), (2, 3, 4)),
                               ((0, 5), (5,), (5,))]), transposed=st.booleans(), seed=st.integers(0, 99))
def test_where_of_int64_selects_every_value_exactly(shapes, transposed, seed):
    """``torch.where`` of two int64 tensors selects int32 word pairs: values beyond 2^31 (which int32 arithmetic
    would wrap, and which used to fall back) come through exactly, broadcast and strided operands included."""
    g = torch.Generator().manual_seed(seed)
    sc, sx, sy = shapes
    c = torch.rand(sc, generator=g) > 0.5
    x = torch.randint(-2**62, 2**62, sx, generator=g)
    y = torch.randint(-2**62, 2**62, sy, generator=g)
    if transposed and len(sy) == 2:
        y = y.t().contiguous().t()
    trnlang.reset_fallback_stats()
    got = torch.where(c.to("trn"), x.to("trn"), y.to("trn"))
    assert got.dtype == torch.int64 and torch.equal(got.cpu(), torch.where(c, x, y))
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_integer_hardtanh_is_the_integer_clamp(dtype):
    """``hardtanh`` / ``relu6`` of integer tensors natively (issue 22: int64 fell back), out= and in place; uint8
    with a negative limit raises torch's error."""
    x = torch.randint(0 if dtype == torch.uint8 else -50, 50, (4, 9), dtype=dtype)
    F = torch.nn.functional
    trnlang.reset_fallback_stats()
    assert torch.equal(F.hardtanh(x.to("trn"), 3, 7).cpu(), F.hardtanh(x, 3, 7))
    assert torch.equal(F.relu6(x.to("trn")).cpu(), F.relu6(x))
    y = x.to("trn")
    F.hardtanh(y, 2, 40, inplace=True)
    assert torch.equal(y.cpu(), F.hardtanh(x, 2, 40))
    if dtype == torch.uint8:
        with pytest.raises(RuntimeError, match="unsigned type with negative limits"):
            F.hardtanh(x.to("trn"))
    else:
        assert torch.equal(F.hardtanh(x.to("trn")).cpu(), F.hardtanh(x))
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
@pytest.mark.parametrize("mkn", [(5, 7, 3), (33, 100, 17), (1, 250, 1)])
def test_narrow_int_products_wrap_like_torch(monkeypatch, dtype, mkn):
    """int8/uint8/int16 products whose sums leave the dtype wrap modulo 2^bits as torch's do (exact in fp32 below
    2^24, then through int32; upstream test_corner_cases_of_cublasltmatmul int8/uint8/int16)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(0)
    lo, hi = (0, 255) if dtype == torch.uint8 else (-128, 127)
    m, k, n = mkn
    a, b, c = (torch.randint(lo, hi, s, generator=g).to(dtype) for s in ((m, k), (k, n), (m, n)))
    assert torch.equal(torch.mm(a.to("trn"), b.to("trn")).cpu(), torch.mm(a, b))
    assert torch.equal(torch.addmm(c.to("trn"), a.to("trn"), b.to("trn")).cpu(), torch.addmm(c, a, b))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_integer_products_past_2_24_in_exact_chunks(monkeypatch, dtype):
    """Integer products whose sums pass 2^24 (uint8 2400-long rows: upstream test_corner_cases_of_cublasltmatmul)
    cut the contraction into chunks whose fp32 sums are exact, summed in int64 and wrapped as torch's: bit-equal
    to the CPU (they were declined)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(18)
    m2 = (torch.randn(2400, 24, generator=g) * 100).to(dtype)
    m1 = (torch.randn(32, 2400, generator=g) * 100).to(dtype)
    bias = (torch.randn(24, generator=g) * 50).to(dtype)
    for alpha, beta in [(1, 1), (3, 2), (1, 0)]:
        got = torch.addmm(bias.to("trn"), m1.to("trn"), m2.to("trn"), alpha=alpha, beta=beta)
        assert torch.equal(got.cpu(), torch.addmm(bias, m1, m2, alpha=alpha, beta=beta))
    b, c = (torch.randn(3, 16, 500, generator=g) * 100).to(dtype), (torch.randn(3, 500, 8, generator=g) * 100).to(dtype)
    assert torch.equal(torch.bmm(b.to("trn"), c.to("trn")).cpu(), torch.bmm(b, c))
