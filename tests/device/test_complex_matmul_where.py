"""complex64 matrix products and ``where`` natively on trn (issue 22: ``mm``/``bmm``/``addmm``/``addmv``/``dot``/
``vdot``/``where`` declined complex64): products as four fp32 products of the real/imaginary planes, ``where`` as a
selection of the planes; results equal the CPU's (products within fp32 tolerance, ``where`` exactly)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang


def _c(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.complex(torch.randn(*shape, generator=g), torch.randn(*shape, generator=g))


OPS = {
    "mm": lambda a, b, c, v, m: torch.mm(a, b),
    "mm_conj": lambda a, b, c, v, m: torch.mm(a.conj(), b),
    "matmul3d": lambda a, b, c, v, m: torch.matmul(a.unsqueeze(0).expand(2, -1, -1), b),
    "bmm": lambda a, b, c, v, m: torch.bmm(a.unsqueeze(0), b.unsqueeze(0)),
    "addmm": lambda a, b, c, v, m: torch.addmm(c, a, b, beta=0.5, alpha=-2.0),
    "linear": lambda a, b, c, v, m: torch.nn.functional.linear(a, b.t(), c),
    "mv": lambda a, b, c, v, m: torch.mv(a, v),
    "addmv": lambda a, b, c, v, m: torch.addmv(m, a, v, alpha=3.0),
    "dot": lambda a, b, c, v, m: torch.dot(v, v.flip(0)),
    "vdot": lambda a, b, c, v, m: torch.vdot(v, v.flip(0)),
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(OPS)), m=st.sampled_from([1, 5]), k=st.sampled_from([1, 7, 130]),
       n=st.sampled_from([1, 3]))
def test_complex_products_match_cpu(op, m, k, n):
    a, b, c, v, mm = _c(m, k, seed=1), _c(k, n, seed=2), _c(n, seed=3), _c(k, seed=4), _c(m, seed=5)
    trnlang.reset_fallback_stats()
    got = OPS[op](*(t.to("trn") for t in (a, b, c, v, mm)))
    want = OPS[op](a, b, c, v, mm)
    assert got.dtype == torch.complex64
    torch.testing.assert_close(got.cpu(), want, rtol=2e-5, atol=2e-5 * max(1.0, k ** 0.5))
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("shapes", [((4, 5), (4, 5), (4, 5)), ((4, 5), (5,), (4, 1)), ((0, 5), (5,), (5,))])
def test_complex_where_matches_cpu(shapes):
    sc, sx, sy = shapes
    cond = torch.rand(sc, generator=torch.Generator().manual_seed(9)) > 0.5
    x, y = _c(*sx, seed=6), _c(*sy, seed=7)
    trnlang.reset_fallback_stats()
    got = torch.where(cond.to("trn"), x.to("trn"), y.to("trn"))
    assert got.dtype == torch.complex64 and torch.equal(got.cpu(), torch.where(cond, x, y))
    out = torch.empty(torch.where(cond, x, y).shape, dtype=torch.complex64, device="trn")
    assert torch.where(cond.to("trn"), x.to("trn"), y.to("trn"), out=out) is out
    assert torch.equal(out.cpu(), torch.where(cond, x, y))
    assert trnlang.fallback_stats() == {}


def test_where_complex_with_numbers_and_real_tensors(monkeypatch):
    """``torch.where`` whose result is complex64 with a number or a real tensor on one side (where.ScalarSelf /
    ScalarOther / self), natively, as the CPU."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    c = torch.tensor([True, False, True, False])
    z = torch.tensor([1 + 2j, 3 - 1j, -2j, 0.5], dtype=torch.complex64)
    r = torch.tensor([1.0, -2.0, 3.0, 0.0])
    for a, b in [(2.5, z), (z, -1), (1j, z), (z, 2 + 3j), (r, z), (z, r), (1j, r), (r, -0.5j)]:
        ta = a.to("trn") if isinstance(a, torch.Tensor) else a
        tb = b.to("trn") if isinstance(b, torch.Tensor) else b
        exp, got = torch.where(c, a, b), torch.where(c.to("trn"), ta, tb).cpu()
        assert got.dtype == exp.dtype and torch.equal(got, exp), (a, b)


@pytest.mark.parametrize("alpha,beta", [(2 + 1j, 0.5 - 2j), (1j, 0), (1, 0j), (0j, 1 + 1j)])
def test_addmv_takes_complex_coefficients(monkeypatch, alpha, beta):
    """addmv of complex64 takes complex alpha/beta natively, as addmm does (it declined them: upstream test_addmv,
    test_blas_alpha_beta_empty complex64); beta == 0 ignores self, NaN included."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(9)
    m, v, s = (torch.randn(*sh, dtype=torch.complex64, generator=g) for sh in ((4, 3), (3,), (4,)))
    if beta == 0:
        s = torch.full((4,), complex("nan+nanj"), dtype=torch.complex64)
    want = torch.addmv(s, m, v, alpha=alpha, beta=beta)
    got = torch.addmv(s.to("trn"), m.to("trn"), v.to("trn"), alpha=alpha, beta=beta)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    empty = torch.addmv(s[:0].to("trn"), m[:0].to("trn"), v.to("trn"), alpha=alpha, beta=beta)
    assert empty.shape == (0,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("cshape,dshape", [([1, 3], [2, 2]), ([5, 3], [30, 30]), ([3, 4], [3, 3, 3, 3]),
                                           ([0, 3], [2]), ([2, 2], [2])])
def test_compute_linear_combination(monkeypatch, dtype, cshape, dshape):
    """matrix_exp's linear combination natively; out= accumulates into out, as torch's kernel (upstream
    test_linalg_matrix_exp_utils)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(10)
    c = torch.rand(*cshape, generator=g)
    rows = cshape[1] + (1 if dshape == [2] and cshape == [2, 2] else 0)  # more input rows than summands
    x = torch.rand(rows, *dshape, generator=g).to(dtype)
    want = torch._compute_linear_combination(x, c)
    got = torch._compute_linear_combination(x.to("trn"), c.to("trn"))
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
    o = torch.ones(want.shape, dtype=dtype)
    ot = o.to("trn")
    torch._compute_linear_combination(x, c, out=o)
    torch._compute_linear_combination(x.to("trn"), c.to("trn"), out=ot)
    torch.testing.assert_close(ot.cpu(), o, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="Empty tensor not supported"):
        torch._compute_linear_combination(torch.rand([]).to("trn"), c.to("trn"))
