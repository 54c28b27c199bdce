"""complex64 inverse, Hermitian eigenvalues and singular values through the real embedding [[X, -Y], [Y, X]]
(stdlib_kernels/linalg/complex_embed.py): native, and within float32 round-off of the CPU's LAPACK."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang


def _c(shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g)) * scale


def _native(fn):
    trnlang.reset_fallback_stats()
    r = fn()
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return r


def _close(got, want, tol=1e-4):
    assert got.device.type == "trn" and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(batch=st.sampled_from([(), (3,), (2, 2), (0,)]), n=st.integers(0, 7), seed=st.integers(0, 999))
def test_inverse(batch, n, seed):
    a = _c((*batch, n, n), seed) + 3 * torch.eye(n)  # well conditioned
    _close(_native(lambda: torch.linalg.inv(a.to("trn"))), torch.linalg.inv(a))
    inv, info = _native(lambda: torch.linalg.inv_ex(a.to("trn")))
    _close(inv, torch.linalg.inv(a))
    assert info.dtype == torch.int32 and info.shape == batch and not bool(info.cpu().any())


@settings(max_examples=15, deadline=None, derandomize=True)
@given(batch=st.sampled_from([(), (3,)]), n=st.integers(1, 7), uplo=st.sampled_from(["L", "U"]),
       seed=st.integers(0, 999))
def test_hermitian_eigenvalues_read_one_triangle(batch, n, uplo, seed):
    a = _c((*batch, n, n), seed)  # not Hermitian: only the UPLO triangle (and the diagonal's real part) counts
    _close(_native(lambda: torch.linalg.eigvalsh(a.to("trn"), UPLO=uplo)), torch.linalg.eigvalsh(a, UPLO=uplo))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(batch=st.sampled_from([(), (2,)]), m=st.integers(0, 6), n=st.integers(0, 6), seed=st.integers(0, 999))
def test_singular_values_and_norms(batch, m, n, seed):
    a = _c((*batch, m, n), seed)
    _close(_native(lambda: torch.linalg.svdvals(a.to("trn"))), torch.linalg.svdvals(a))
    if m and n:
        for ord_ in ("nuc", 2, -2):
            _close(_native(lambda: torch.linalg.matrix_norm(a.to("trn"), ord=ord_)),
                   torch.linalg.matrix_norm(a, ord=ord_))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), alpha=st.sampled_from([1, 0.5, 2 - 1j, 1j]), beta=st.sampled_from([1, 0, 0j, -1 + 2j]))
def test_products_with_complex_coefficients(seed, alpha, beta):
    """addmm / baddbmm / addbmm / addr of complex64 operands with complex alpha and beta (beta 0 ignores self)."""
    m1, m2, s = _c((3, 4), seed), _c((4, 5), seed + 1), _c((3, 5), seed + 2)
    b1, b2, sb = _c((2, 3, 4), seed + 3), _c((2, 4, 5), seed + 4), _c((2, 3, 5), seed + 5)
    v1, v2 = _c((3,), seed + 6), _c((5,), seed + 7)
    t = lambda x: x.to("trn")  # noqa: E731
    kw = dict(alpha=alpha, beta=beta)
    _close(_native(lambda: torch.addmm(t(s), t(m1), t(m2), **kw)), torch.addmm(s, m1, m2, **kw))
    _close(_native(lambda: torch.baddbmm(t(sb), t(b1), t(b2), **kw)), torch.baddbmm(sb, b1, b2, **kw))
    _close(_native(lambda: torch.addbmm(t(s), t(b1), t(b2), **kw)), torch.addbmm(s, b1, b2, **kw))
    _close(_native(lambda: torch.addr(t(s), t(v1), t(v2), **kw)), torch.addr(s, v1, v2, **kw))


@settings(max_examples=10, deadline=None, derandomize=True)
@given(n=st.integers(0, 6), m=st.integers(0, 6), k=st.integers(-2, 4), seed=st.integers(0, 99))
def test_eye_and_matrix_power(n, m, k, seed):
    _close(_native(lambda: torch.eye(n, m, dtype=torch.complex64, device="trn")), torch.eye(n, m,
                                                                                            dtype=torch.complex64))
    a = _c((n, n), seed) * 0.5 + 2 * torch.eye(n)
    _close(_native(lambda: torch.linalg.matrix_power(a.to("trn"), k)), torch.linalg.matrix_power(a, k), tol=1e-3)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), upper=st.booleans(), left=st.booleans(), unit=st.booleans(),
       batch=st.sampled_from([(), (2,)]), n=st.integers(0, 6))
def test_triangular_and_cholesky_solves(seed, upper, left, unit, batch, n):
    """Only the triangle is read (unit: not the diagonal either); left and right solves; cholesky_solve with a lower
    or upper factor; triangular_solve returns a clone of A."""
    a = _c((*batch, n, n), seed) + 3 * torch.eye(n)
    b = _c((*batch, n, 3) if left else (*batch, 3, n), seed + 1)
    t = lambda x: x.to("trn")  # noqa: E731
    _close(_native(lambda: torch.linalg.solve_triangular(t(a), t(b), upper=upper, left=left, unitriangular=unit)),
           torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit))
    if left:
        x, a2 = _native(lambda: torch.triangular_solve(t(b), t(a), upper=upper, unitriangular=unit))
        _close(x, torch.triangular_solve(b, a, upper=upper, unitriangular=unit)[0])
        _close(a2, a)
        f = torch.linalg.cholesky(a @ a.mH)
        f = f.mH if upper else f
        _close(_native(lambda: torch.cholesky_solve(t(b), t(f), upper=upper)), torch.cholesky_solve(b, f, upper=upper),
               tol=1e-3)
        _close(_native(lambda: torch.cholesky_inverse(t(f), upper=upper)), torch.cholesky_inverse(f, upper=upper),
               tol=1e-3)


@pytest.mark.parametrize("conj_a,conj_b,left", [(True, False, True), (False, True, False), (True, True, True)])
def test_triangular_solve_of_lazy_conjugates(conj_a, conj_b, left):
    """Operands (and out=) carrying torch's lazy conjugate bit (upstream test_linalg_solve_triangular)."""
    a = (_c((2, 5, 5), 1) + 3 * torch.eye(5)).triu()
    b = _c((2, 5, 3) if left else (2, 3, 5), 2)
    ca, cb = (a.conj() if conj_a else a), (b.conj() if conj_b else b)
    want = torch.linalg.solve_triangular(ca, cb, upper=True, left=left)
    ta, tb = a.to("trn"), b.to("trn")
    ta, tb = (ta.conj() if conj_a else ta), (tb.conj() if conj_b else tb)
    _close(_native(lambda: torch.linalg.solve_triangular(ta, tb, upper=True, left=left)), want)
    out = torch.empty_like(b).to("trn").conj()  # writes through the conjugate view
    _native(lambda: torch.linalg.solve_triangular(ta, tb, upper=True, left=left, out=out))
    assert out.is_conj()
    torch.testing.assert_close(out.cpu().resolve_conj(), want, rtol=1e-4, atol=1e-4)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), batch=st.sampled_from([(), (3,), (0,)]), m=st.integers(0, 6), n=st.integers(0, 6),
       singular=st.booleans())
def test_lu_family(seed, batch, m, n, singular):
    """LU with LAPACK's pivots (|Re| + |Im|) and info, unpacked P/L/U, det/slogdet/logdet, solve and lu_solve."""
    a = _c((*batch, m, n), seed)
    if singular and m and n:
        a[..., 0, :] = 0  # a zero row: info > 0 for square inputs
    t = lambda x: x.to("trn")  # noqa: E731
    lu, piv, info = _native(lambda: torch.linalg.lu_factor_ex(t(a)))
    lu_c, piv_c, info_c = torch.linalg.lu_factor_ex(a)
    _close(lu, lu_c)
    assert torch.equal(piv.cpu(), piv_c) and torch.equal(info.cpu(), info_c)
    for got, want in zip(_native(lambda: torch.linalg.lu(t(a))), torch.linalg.lu(a)):
        _close(got, want)
    if m != n:
        return
    sq = a + (0 if singular else 3) * torch.eye(n)
    _close(_native(lambda: torch.linalg.det(t(sq))), torch.linalg.det(sq), tol=1e-3)
    sign, logabs = _native(lambda: torch.linalg.slogdet(t(sq)))
    sign_c, logabs_c = torch.linalg.slogdet(sq)
    _close(sign, sign_c, tol=1e-3)
    _close(logabs, logabs_c, tol=1e-3)
    if not singular:
        b = _c((*batch, n, 2), seed + 1)
        _close(_native(lambda: torch.linalg.solve(t(sq), t(b))), torch.linalg.solve(sq, b), tol=1e-3)
        lu2, piv2 = torch.linalg.lu_factor(sq)
        _close(_native(lambda: torch.linalg.lu_solve(t(lu2), t(piv2), t(b))), torch.linalg.lu_solve(lu2, piv2, b),
               tol=1e-3)


def test_lu_above_64_and_right_solves(monkeypatch):
    """complex64 LU natively past n = 64 (upstream test_linalg_lu_solve's 2 x 128 x 128; every column's step shares
    one set of compiled kernels) and solve(left=False) (upstream test_linalg_lu_family)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    a = _c((2, 128, 128), 5)
    lu, piv, info = torch.linalg.lu_factor_ex(a.to("trn"))
    lu_c, piv_c, info_c = torch.linalg.lu_factor_ex(a)
    assert torch.equal(piv.cpu(), piv_c) and torch.equal(info.cpu(), info_c)
    torch.testing.assert_close(lu.cpu(), lu_c, rtol=1e-4, atol=1e-4)
    b = _c((2, 3, 128), 6)
    for adjoint in (False, True):
        x = torch.linalg.lu_solve(lu, piv, b.to("trn"), left=False, adjoint=adjoint).cpu()
        xc = torch.linalg.lu_solve(lu_c, piv_c, b, left=False, adjoint=adjoint)
        op = a.mH if adjoint else a
        assert (x @ op - b).abs().max() < 10 * (xc @ op - b).abs().max()  # the residual of the CPU's float32
        assert ((x - xc).abs().max() / xc.abs().max()) < 1e-3
    sq = _c((3, 5, 5), 7) + 3 * torch.eye(5)
    rhs = _c((3, 2, 5), 8)
    _close(torch.linalg.solve(sq.to("trn"), rhs.to("trn"), left=False), torch.linalg.solve(sq, rhs, left=False))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), batch=st.sampled_from([(), (3,), (0,)]), n=st.integers(0, 6), upper=st.booleans(),
       indefinite=st.booleans())
def test_cholesky(seed, batch, n, upper, indefinite):
    """A = L L^H (or U^H U reading the upper triangle); a matrix that is not positive definite gives potrf's info."""
    a = _c((*batch, n, n), seed)
    h = a @ a.mH + n * torch.eye(n)
    if indefinite and n:
        h[..., n - 1, n - 1] = -1.0
    t = lambda x: x.to("trn")  # noqa: E731
    fac, info = _native(lambda: torch.linalg.cholesky_ex(t(h), upper=upper))
    fac_c, info_c = torch.linalg.cholesky_ex(h, upper=upper)
    assert torch.equal(info.cpu(), info_c)
    if not indefinite:
        _close(fac, fac_c, tol=1e-3)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), batch=st.sampled_from([(), (2,), (0,)]), m=st.integers(0, 6), n=st.integers(0, 6),
       full=st.booleans())
def test_eigenvectors_and_singular_vectors(seed, batch, m, n, full):
    """eigh / svd with vectors: values as the CPU's, vectors equal up to phase (as torch's own tests compare
    them), unitary, and reconstructing the input; full_matrices completes the bases."""
    eye = lambda k: torch.eye(k, dtype=torch.complex64)  # noqa: E731
    a = _c((*batch, n, n), seed)
    h = a + a.mH
    w, v = _native(lambda: torch.linalg.eigh(h.to("trn")))
    wc, vc = torch.linalg.eigh(h)
    _close(w, wc)
    _close(v.abs(), vc.abs(), tol=1e-3)
    torch.testing.assert_close((v.cpu().mH @ h @ v.cpu()), torch.diag_embed(wc).to(torch.complex64), atol=1e-3,
                               rtol=1e-3)
    b = _c((*batch, m, n), seed + 1)
    u, s, vh = _native(lambda: torch.linalg.svd(b.to("trn"), full_matrices=full))
    uc, sc, vhc = torch.linalg.svd(b, full_matrices=full)
    assert u.shape == uc.shape and vh.shape == vhc.shape
    _close(s, sc)
    k = min(m, n)
    u, vh = u.cpu(), vh.cpu()
    torch.testing.assert_close((u[..., :k] * s.cpu().to(torch.complex64)[..., None, :]) @ vh[..., :k, :], b,
                               atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(u.mH @ u, eye(u.shape[-1]).expand_as(u.mH @ u), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(vh @ vh.mH, eye(vh.shape[-2]).expand_as(vh @ vh.mH), atol=1e-4, rtol=1e-4)


def test_repeated_eigenvalues_go_to_the_cpu():
    h = torch.diag(torch.tensor([1.0, 1.0, 2.0])).to(torch.complex64)
    trnlang.reset_fallback_stats()
    w, v = torch.linalg.eigh(h.to("trn"))
    assert "aten::_linalg_eigh" in trnlang.fallback_stats()
    torch.testing.assert_close(w.cpu(), torch.linalg.eigh(h)[0])


@pytest.mark.parametrize("shape,gap", [((2, 2), 8e-4), ((5, 3), 2e-3), ((3, 6), 1e-3), ((4, 4, 4), 5e-3)])
def test_svd_with_close_singular_values_stays_consistent(monkeypatch, shape, gap):
    """Singular values a relative 1e-3 apart mix the embedding's vectors at eps / gap: U was unitary to 1e-4 and
    U S V^H missed A (and pinv / lstsq against it, upstream test_linalg_lstsq_batch_broadcasting) by as much. The
    factors are made consistent: unitary and reconstructing A to round-off, as LAPACK's."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(11)
    *batch, m, n = shape
    k = min(m, n)
    qa, _ = torch.linalg.qr(torch.randn(*batch, m, k, dtype=torch.complex128, generator=g))
    qb, _ = torch.linalg.qr(torch.randn(*batch, n, k, dtype=torch.complex128, generator=g))
    s = 1.0 - gap * torch.arange(k, dtype=torch.float64)
    a = ((qa * s.to(qa.dtype)) @ qb.mH).to(torch.complex64)
    u, sv, vh = torch.linalg.svd(a.to("trn"), full_matrices=False)
    u, sv, vh = u.cpu(), sv.cpu(), vh.cpu()
    eye = torch.eye(k, dtype=torch.complex64)
    assert (u.mH @ u - eye).abs().max() < 1e-6 and (vh @ vh.mH - eye).abs().max() < 1e-6
    assert ((u * sv.to(u.dtype).unsqueeze(-2)) @ vh - a).abs().max() < 1e-6
    torch.testing.assert_close(sv, torch.linalg.svdvals(a), atol=1e-6, rtol=1e-6)
    ref = torch.linalg.pinv(a.to(torch.complex128))
    monkeypatch.setenv("TRN_FALLBACK", "f64only")  # pinv's composite compares in float64 (0-dim tolerances)
    assert (torch.linalg.pinv(a.to("trn")).cpu().to(ref.dtype) - ref).abs().max() < 1e-5


def test_complex_cholesky_up_to_128(monkeypatch):
    """complex64 Cholesky natively up to n = 128 (it was 64: upstream test_cholesky's 100 x 100 batch of 5)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(17)
    x = torch.randn(2, 100, 100, dtype=torch.complex64, generator=g)
    a = x @ x.mH + 100 * torch.eye(100)
    low = torch.linalg.cholesky(a.to("trn")).cpu()
    want = torch.linalg.cholesky(a)
    assert ((low - want).abs().max() / want.abs().max()) < 1e-5


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), batch=st.sampled_from([(), (3,), (2, 2), (0,)]), n=st.integers(0, 9),
       kind=st.sampled_from(["random", "small_diagonal", "singular", "hermitian_pd"]))
def test_complex_symmetric_ldl(seed, batch, n, kind):
    """csytrf/csytrs step for step: LAPACK's pivots (1x1 and 2x2 blocks) and info, LD, and the solve."""
    a = _c((*batch, n, n), seed)
    if kind == "small_diagonal":  # forces interchanges and 2x2 blocks
        a = a - torch.diag_embed(torch.diagonal(a, dim1=-2, dim2=-1)) * 0.99
    elif kind == "singular" and n > 1:
        a[..., :, 1] = 0
        a[..., 1, :] = 0
    elif kind == "hermitian_pd":
        a = a @ a.mH + torch.eye(n)
    t = lambda x: x.to("trn")  # noqa: E731
    ld, piv, info = _native(lambda: torch.linalg.ldl_factor_ex(t(a)))
    ld_c, piv_c, info_c = torch.linalg.ldl_factor_ex(a)
    assert torch.equal(piv.cpu(), piv_c) and torch.equal(info.cpu(), info_c)
    _close(ld, ld_c, tol=1e-4)
    if kind != "singular":
        b = _c((*batch, n, 3), seed + 1)
        _close(_native(lambda: torch.linalg.ldl_solve(t(ld_c), t(piv_c), t(b))), torch.linalg.ldl_solve(ld_c, piv_c, b),
               tol=1e-3)


def test_complex_hermitian_ldl_goes_to_the_cpu():
    a = _c((4, 4), 3)
    a = a @ a.mH + torch.eye(4)
    trnlang.reset_fallback_stats()
    ld, piv = torch.linalg.ldl_factor(a.to("trn"), hermitian=True)
    assert "aten::linalg_ldl_factor_ex" in trnlang.fallback_stats()
    assert torch.equal(piv.cpu(), torch.linalg.ldl_factor(a, hermitian=True).pivots)


@pytest.mark.parametrize("kind", ["cluster", "repeated", "rank_deficient"])
def test_svd_with_repeated_singular_values(monkeypatch, kind):
    """A value repeated (or clustered within 1e-4) in A mixes the embedding's vectors; the singular space's basis is
    rebuilt from them natively (upstream test_linalg_lstsq's pinverse of random_well_conditioned_matrix)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(21)
    batch, m, n = (2,), 8, 6
    qa, _ = torch.linalg.qr(torch.randn(*batch, m, n, dtype=torch.complex128, generator=g))
    qb, _ = torch.linalg.qr(torch.randn(*batch, n, n, dtype=torch.complex128, generator=g))
    s = {"cluster": 1.0 + 1e-3 * torch.randn(*batch, n, dtype=torch.float64, generator=g),
         "repeated": torch.tensor([3.0, 2.0, 2.0, 2.0, 1.0, 1.0], dtype=torch.float64).expand(*batch, n),
         "rank_deficient": torch.tensor([3.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64).expand(*batch, n)}[kind]
    a = ((qa * s.to(qa.dtype).unsqueeze(-2)) @ qb.mH).to(torch.complex64)
    u, sv, vh = (x.cpu() for x in torch.linalg.svd(a.to("trn"), full_matrices=False))
    eye = torch.eye(n, dtype=torch.complex64)
    assert (u.mH @ u - eye).abs().max() < 1e-5 and (vh @ vh.mH - eye).abs().max() < 1e-5
    assert ((u * sv.to(u.dtype).unsqueeze(-2)) @ vh - a).abs().max() < 1e-5
    torch.testing.assert_close(sv, torch.linalg.svdvals(a), atol=1e-5, rtol=1e-5)
    if kind != "rank_deficient":
        ref = torch.linalg.pinv(a.to(torch.complex128))
        monkeypatch.setenv("TRN_FALLBACK", "f64only")  # pinv's composite compares in float64
        assert (torch.linalg.pinv(a.to("trn")).cpu().to(ref.dtype) - ref).abs().max() < 1e-5
