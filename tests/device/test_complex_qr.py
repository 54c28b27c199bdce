"""complex64 Householder QR (stdlib_kernels/linalg/complex_qr.py), least squares, matrix_exp, the adjoint and
right-hand LU solves, cat of conj views and logcumsumexp: native, and within float32 round-off of the CPU's
LAPACK (QR's signs and reflectors included, not only the products)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.test_complex_linalg import _c, _close, _native


@settings(max_examples=20, deadline=None, derandomize=True)
@given(batch=st.sampled_from([(), (3,), (2, 2), (0,)]), m=st.integers(0, 7), n=st.integers(0, 7),
       mode=st.sampled_from(["reduced", "complete", "r"]), seed=st.integers(0, 999))
def test_qr_matches_lapack(batch, m, n, mode, seed):
    a = _c((*batch, m, n), seed)
    q, r = _native(lambda: torch.linalg.qr(a.to("trn"), mode=mode))
    wq, wr = torch.linalg.qr(a, mode=mode)
    _close(r, wr)
    _close(q, wq)


def test_qr_of_a_column_already_reduced():
    """A column that is zero below a real diagonal makes no reflector (tau 0), as zlarfg; a complex diagonal
    still does (its phase is moved into Q)."""
    a = torch.tensor([[2.0, 1j], [0.0, 3.0], [0.0, 1 + 1j]], dtype=torch.complex64)
    b = a.clone()
    b[0, 0] = 2j
    for x in (a, b):
        packed, tau = _native(lambda: torch.geqrf(x.to("trn")))
        wp, wt = torch.geqrf(x)
        _close(packed, wp)
        _close(tau, wt)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(batch=st.sampled_from([(), (2,)]), m=st.integers(1, 7), n=st.integers(1, 7), seed=st.integers(0, 999))
def test_geqrf_householder_product_and_ormqr(batch, m, n, seed):
    a = _c((*batch, m, n), seed)
    packed, tau = _native(lambda: torch.geqrf(a.to("trn")))
    wp, wt = torch.geqrf(a)
    _close(packed, wp)
    _close(tau, wt)
    if m >= n:
        _close(_native(lambda: torch.linalg.householder_product(wp.to("trn"), wt.to("trn"))),
               torch.linalg.householder_product(wp, wt))
    for left in (True, False):
        for transpose in (False, True):
            c = _c((*batch, m, 3) if left else (*batch, 3, m), seed + 1)
            got = _native(lambda: torch.ormqr(wp.to("trn"), wt.to("trn"), c.to("trn"), left, transpose))
            _close(got, torch.ormqr(wp, wt, c, left, transpose))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(batch=st.sampled_from([(), (2,)]), m=st.integers(1, 6), n=st.integers(1, 6), k=st.integers(1, 3),
       driver=st.sampled_from([None, "gels", "gelsd", "gelss"]), seed=st.integers(0, 999))
def test_lstsq(batch, m, n, k, driver, seed):
    a = _c((*batch, m, n), seed) + torch.eye(m, n) * 4  # well conditioned, full rank
    b = _c((*batch, m, k), seed + 1)
    got = _native(lambda: torch.linalg.lstsq(a.to("trn"), b.to("trn"), driver=driver))
    want = torch.linalg.lstsq(a, b, driver=driver)
    _close(got.solution, want.solution, 1e-3)
    assert got.residuals.shape == want.residuals.shape
    if want.residuals.numel():
        _close(got.residuals, want.residuals, 1e-3)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(batch=st.sampled_from([(), (3,)]), n=st.integers(0, 6), scale=st.sampled_from([0.01, 0.1, 0.3, 4.0]),
       seed=st.integers(0, 999))
def test_matrix_exp(batch, n, scale, seed):
    """Every Taylor degree (1-norms up to 3.01), and scaling and squaring above (native for complex64, see
    MAX_SQUARINGS_COMPLEX): no further from the complex128 result than the CPU's, plus float32 round-off."""
    a = _c((*batch, n, n), seed, scale)
    if a.numel() and scale < 1:
        a = a / max(1.0, float(a.abs().sum(-2).amax()) / 3.0)
    got = _native(lambda: torch.linalg.matrix_exp(a.to("trn"))).cpu()
    want, ref = torch.linalg.matrix_exp(a), torch.linalg.matrix_exp(a.to(torch.complex128))
    assert ((got - ref).abs() <= (want - ref).abs() + 1e-4 * (1 + ref.abs())).all()


@settings(max_examples=12, deadline=None, derandomize=True)
@given(batch=st.sampled_from([(), (2,)]), n=st.integers(1, 6), left=st.booleans(), adjoint=st.booleans(),
       seed=st.integers(0, 999))
def test_lu_solve_every_side(batch, n, left, adjoint, seed):
    a = _c((*batch, n, n), seed) + 3 * torch.eye(n)
    b = _c((*batch, n, 2) if left else (*batch, 2, n), seed + 1)
    lu, piv = torch.linalg.lu_factor(a)
    got = _native(lambda: torch.linalg.lu_solve(lu.to("trn"), piv.to("trn"), b.to("trn"), left=left,
                                                adjoint=adjoint))
    _close(got, torch.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint))


def test_cat_of_conj_and_neg_views():
    x, y = _c((2, 3), 1), _c((4, 3), 2)
    got = _native(lambda: torch.cat((x.to("trn").conj(), y.to("trn"), x.to("trn")._neg_view()), 0))
    _close(got, torch.cat((x.conj(), y, -x), 0))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(shape=st.sampled_from([(0,), (1,), (5,), (3, 9), (17, 2)]), scale=st.sampled_from([1.0, 30.0]),
       seed=st.integers(0, 999))
def test_logcumsumexp(shape, scale, seed):
    """Real parts spread over +-100 (scale 30): the scan's pairwise log-add-exp neither overflows nor loses the
    small early terms."""
    x = _c(shape, seed, scale)
    for dim in range(len(shape)):
        _close(_native(lambda: torch.logcumsumexp(x.to("trn"), dim)), torch.logcumsumexp(x, dim), 2e-4)


def test_logcumsumexp_non_finite_goes_to_the_cpu():
    x = torch.tensor([1 + 1j, complex("inf"), 2j], dtype=torch.complex64)
    trnlang.reset_fallback_stats()
    got = torch.logcumsumexp(x.to("trn"), 0).cpu()
    torch.testing.assert_close(got, torch.logcumsumexp(x, 0), equal_nan=True)


def test_qr_backward():
    a = _c((4, 3), 7).requires_grad_()
    at = a.detach().to("trn").requires_grad_()
    q, r = torch.linalg.qr(a, mode="reduced")
    (q.abs().sum() + r.abs().sum()).backward()
    qt, rt = torch.linalg.qr(at, mode="reduced")
    (qt.abs().sum() + rt.abs().sum()).backward()
    torch.testing.assert_close(at.grad.cpu(), a.grad, rtol=1e-3, atol=1e-3)


def test_cat_of_empty_vectors():
    e = torch.empty(0, dtype=torch.complex64)
    got = _native(lambda: torch.cat((e.to("trn"), e.to("trn")), 0))
    _close(got, torch.cat((e, e), 0))


@pytest.mark.parametrize("value", [2.5, 1 - 2j, 3])
def test_scatter_and_index_fill_with_complex_values(value):
    x = _c((4, 3), 3)
    idx = torch.tensor([[0, 2, 1], [3, 0, 2]])
    src = _c((2, 3), 4)
    xt, it, st = x.to("trn"), idx.to("trn"), src.to("trn")
    _close(_native(lambda: xt.scatter(0, it, value)), x.scatter(0, idx, value))
    _close(_native(lambda: xt.scatter(0, it, value, reduce="add")), x.scatter(0, idx, value, reduce="add"))
    _close(_native(lambda: xt.scatter(1, it % 3, st, reduce="add")), x.scatter(1, idx % 3, src, reduce="add"))
    s0 = _c((), 5)
    _close(_native(lambda: s0.to("trn").index_fill(0, torch.tensor([0], device="trn"), value)),
           s0.index_fill(0, torch.tensor([0]), value))
    v = torch.tensor(value, dtype=torch.complex64)
    _close(_native(lambda: s0.to("trn").index_fill(0, torch.tensor([0], device="trn"), v.to("trn"))),
           s0.index_fill(0, torch.tensor([0]), v))
