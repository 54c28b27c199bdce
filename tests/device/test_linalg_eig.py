"""Jacobi SVD / eigh and least squares on ``trn`` (stdlib_kernels/linalg/eig.py) against torch CPU.

Singular vectors and eigenvectors are defined up to sign (the Jacobi signs are not LAPACK's), so the tests
compare what torch's own OpInfo tests compare: values, ``|U|``, ``U Vh``, reconstructions, and gradients of
gauge-invariant functions. Shapes: tall, wide, square, batched, 1x1, empty, non-contiguous; every native call
asserts that nothing ran through the CPU fallback.
"""

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.linalg import eig as E
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _rand(*shape, seed=0):
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed))


def _distinct(batch, m, n, seed=0):
    """A matrix with well-separated singular values (vectors well defined up to sign)."""
    k = min(m, n)
    u = torch.linalg.qr(_rand(*batch, m, m, seed=seed)).Q[..., :k]
    v = torch.linalg.qr(_rand(*batch, n, n, seed=seed + 1)).Q[..., :k]
    s = torch.linspace(3.0, 1.0, k) if k else torch.zeros(0)
    return (u * s) @ v.mT


def _native(fn, *args):
    targs = [a.detach().to("trn").requires_grad_(a.requires_grad) for a in args]
    trnlang.reset_fallback_stats()
    out = fn(*targs)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return out, targs


def _grads_match(fn, *args, rtol=1e-3, atol=1e-3):
    """Forward and backward of a gauge-invariant ``fn`` on trn vs CPU, no fallback in either direction."""
    cargs = [a.clone().requires_grad_() for a in args]
    out, targs = _native(fn, *[a.clone().requires_grad_() for a in args])
    ref = fn(*cargs)
    assert_same(out.detach(), ref.detach(), rtol=1e-4, atol=1e-4)
    g = _rand(*ref.shape, seed=7)
    trnlang.reset_fallback_stats()
    out.backward(g.to("trn"))
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    ref.backward(g)
    for t, c in zip(targs, cargs):
        assert_same(t.grad, c.grad, rtol=rtol, atol=atol)


# --- SVD ------------------------------------------------------------------------------------------------------
shapes = st.sampled_from([(3, 3), (5, 3), (3, 5), (7, 7), (1, 4), (6, 1), (1, 1)])
batches = st.sampled_from([(), (2,), (2, 1)])


@_SETTINGS
@given(shape=shapes, batch=batches, full=st.booleans())
def test_svd_matches_lapack_up_to_sign(shape, batch, full):
    a = _distinct(batch, *shape, seed=sum(shape))
    (u, s, vh), _ = _native(lambda x: torch.linalg.svd(x, full_matrices=full), a)
    uc, sc, vhc = torch.linalg.svd(a, full_matrices=full)
    assert u.shape == uc.shape and s.shape == sc.shape and vh.shape == vhc.shape
    k = s.shape[-1]
    assert_same(s, sc, rtol=1e-4, atol=1e-4)
    assert_same(u[..., :k].abs(), uc[..., :k].abs(), rtol=1e-4, atol=1e-4)
    assert_same(vh[..., :k, :].abs(), vhc[..., :k, :].abs(), rtol=1e-4, atol=1e-4)
    assert_same(u[..., :k] @ vh[..., :k, :], uc[..., :k] @ vhc[..., :k, :], rtol=1e-4, atol=1e-4)
    ucpu, vcpu = u.cpu(), vh.cpu().mT  # orthonormal columns (completed bases included)
    for q in (ucpu, vcpu):
        torch.testing.assert_close(q.mT @ q, torch.eye(q.shape[-1]).expand(q.mT.shape[:-1] + (q.shape[-1],)),
                                   rtol=1e-5, atol=1e-5)


@_SETTINGS
@given(shape=st.sampled_from([(4, 4), (5, 3), (3, 5)]), batch=st.sampled_from([(), (2,)]))
def test_svd_backward_gauge_invariant(shape, batch):
    a = _distinct(batch, *shape, seed=3)
    _grads_match(lambda x: torch.linalg.svdvals(x), a)
    _grads_match(lambda x: (lambda u, s, vh: (u * s.unsqueeze(-2)) @ vh + u @ vh)(*torch.linalg.svd(x, False)), a)
    _grads_match(lambda x: torch.linalg.matrix_norm(x, "nuc") + torch.linalg.matrix_norm(x, 2), a)


def test_svd_noncontiguous_empty_and_rank_deficient():
    a = _rand(6, 8, seed=1)[:, ::2]  # strided columns
    s, _ = _native(torch.linalg.svdvals, a)
    assert_same(s, torch.linalg.svdvals(a), rtol=1e-4, atol=1e-4)
    s, _ = _native(torch.linalg.svdvals, a.mT)
    assert_same(s, torch.linalg.svdvals(a.mT), rtol=1e-4, atol=1e-4)
    for shape in ((0, 3, 3), (3, 0), (0, 4), (2, 0, 0)):
        for full in (True, False):
            out, _ = _native(lambda x: torch.linalg.svd(x, full_matrices=full), torch.zeros(shape))
            ref = torch.linalg.svd(torch.zeros(shape), full_matrices=full)
            for o, r in zip(out, ref):
                assert o.shape == r.shape
                assert_same(o, r)
    low = _rand(6, 2, seed=2) @ _rand(2, 5, seed=3)  # rank 2, exact zeros among the singular values
    low[:, 4] = 0.0
    (u, s, vh), _ = _native(lambda x: torch.linalg.svd(x, full_matrices=False), low)
    assert_same(s, torch.linalg.svdvals(low), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(u.cpu().mT @ u.cpu(), torch.eye(5), rtol=1e-5, atol=1e-5)  # completed U
    assert_same(u @ torch.diag_embed(s) @ vh, low, rtol=1e-4, atol=1e-4)


def test_svd_scaling_and_declines():
    a = _distinct((), 4, 3, seed=5)
    for scale in (1e30, 1e-30):  # rescaled by an exact power of two before the sweeps
        s, _ = _native(torch.linalg.svdvals, a * scale)
        assert_same(s, torch.linalg.svdvals(a * scale), rtol=1e-4, atol=0)
    bad = a.clone()
    bad[1, 1] = float("nan")
    trnlang.reset_fallback_stats()
    with pytest.raises(torch.linalg.LinAlgError, match="non-finite"):  # the CPU's error, via the fallback
        torch.linalg.svdvals(bad.to("trn"))
    assert "aten::_linalg_svd" in trnlang.fallback_stats()
    big = _rand(E.MAX_K + 1, E.MAX_K + 1, seed=1)  # above the Jacobi limit
    trnlang.reset_fallback_stats()
    assert_same(torch.linalg.svdvals(big.to("trn")), torch.linalg.svdvals(big), rtol=1e-4, atol=1e-4)
    assert "aten::_linalg_svd" in trnlang.fallback_stats()


def test_svd_large_matches():
    a = _rand(130, 70, seed=4)  # more than one row tile of the state; U needs no completion (70 < 130)
    (u, s, vh), _ = _native(lambda x: torch.linalg.svd(x, full_matrices=False), a)
    sc = torch.linalg.svdvals(a)
    assert_same(s, sc, rtol=1e-4, atol=1e-4 * sc[0].item())
    torch.testing.assert_close((u.cpu() * s.cpu()) @ vh.cpu(), a, rtol=1e-4, atol=1e-4)


@settings(_SETTINGS, max_examples=3)
@given(shape=st.sampled_from([(3, 20000), (9000, 4), (5, 9000)]), batch=st.sampled_from([(), (2,)]),
       spread=st.sampled_from([1.0, 1e3]))
def test_svd_long_vectors_by_gram_rotations(shape, batch, spread):
    # longer than the sweep kernel's SBUF state (E.MAX_LEN): Gram-matrix rotations in HBM
    m, n = shape
    k = min(m, n)
    u0 = torch.linalg.qr(_rand(*batch, m, k, seed=m)).Q
    v0 = torch.linalg.qr(_rand(*batch, n, k, seed=n)).Q
    a = (u0 * torch.logspace(0, -torch.log10(torch.tensor(spread)).item(), k)) @ v0.mT  # condition = spread
    (u, s, vh), _ = _native(lambda x: torch.linalg.svd(x, full_matrices=False), a)
    s2, _ = _native(torch.linalg.svdvals, a)
    ref = torch.linalg.svdvals(a.double())
    torch.testing.assert_close(s.cpu().double(), ref, rtol=1e-4, atol=0)  # relative, even for the smallest
    torch.testing.assert_close(s2.cpu(), s.cpu())
    uc, _, vhc = torch.linalg.svd(a.double(), full_matrices=False)
    assert_same(u.double() @ vh.double(), uc @ vhc, rtol=1e-4, atol=1e-4)  # the gauge-invariant product
    for q in (u.cpu().double(), vh.cpu().double().mT):
        torch.testing.assert_close(q.mT @ q, torch.eye(k).double().expand(*batch, k, k), rtol=0, atol=1e-5)


def test_complex_svd_long_vectors():
    g = torch.Generator().manual_seed(3)
    a = torch.complex(torch.randn(2, 3, 10000, generator=g), torch.randn(2, 3, 10000, generator=g))
    (u, s, vh), _ = _native(lambda x: torch.linalg.svd(x, full_matrices=False), a)
    sv, _ = _native(torch.linalg.svdvals, a)
    ref = torch.linalg.svdvals(a.to(torch.complex128))
    torch.testing.assert_close(s.cpu().double(), ref, rtol=1e-5, atol=0)
    torch.testing.assert_close(sv.cpu().double(), ref, rtol=1e-5, atol=0)
    rec = (u.cpu() * s.cpu().to(torch.complex64).unsqueeze(-2)) @ vh.cpu()
    torch.testing.assert_close(rec, a, rtol=1e-4, atol=1e-4)


# --- eigh -----------------------------------------------------------------------------------------------------
@_SETTINGS
@given(n=st.sampled_from([1, 2, 5, 8, 33]), batch=batches, uplo=st.sampled_from(["L", "U"]))
def test_eigh_matches_lapack(n, batch, uplo):
    a = _rand(*batch, n, n, seed=n)
    (w, v), _ = _native(lambda x: torch.linalg.eigh(x, UPLO=uplo), a)
    wc, vc = torch.linalg.eigh(a, UPLO=uplo)
    assert_same(w, wc, rtol=1e-4, atol=1e-4 * max(1.0, wc.abs().max().item()))
    sym = a.tril() + a.tril(-1).mT if uplo == "L" else a.triu() + a.triu(1).mT
    torch.testing.assert_close(sym @ v.cpu(), v.cpu() * w.cpu().unsqueeze(-2), rtol=1e-4, atol=1e-4 * n)
    if n <= 8:  # distinct eigenvalues of these small samples: vectors agree up to sign
        assert_same(v.abs(), vc.abs(), rtol=1e-3, atol=1e-3)


def test_eigh_backward_and_eigvalsh():
    a = _rand(2, 5, 5, seed=9)
    a = a + a.mT
    _grads_match(torch.linalg.eigvalsh, a)
    _grads_match(lambda x: (lambda w, v: (v * w.unsqueeze(-2)) @ v.mT)(*torch.linalg.eigh(x)), a)
    x = _rand(7, 7, seed=2).mT[1:6, 1:6]  # a strided view
    w, _ = _native(torch.linalg.eigvalsh, x)
    assert_same(w, torch.linalg.eigvalsh(x), rtol=1e-4, atol=1e-4)
    w, _ = _native(torch.linalg.eigvalsh, torch.zeros(0, 3, 3))
    assert w.shape == (0, 3)


def test_eigh_above_a_tile():
    a = _rand(130, 130, seed=6)  # padded to two 128-row tiles
    (w, v), _ = _native(torch.linalg.eigh, a)
    wc = torch.linalg.eigvalsh(a)
    assert_same(w, wc, rtol=1e-4, atol=1e-5 * wc.abs().max().item())
    sym = a.tril() + a.tril(-1).mT
    torch.testing.assert_close(sym @ v.cpu(), v.cpu() * w.cpu(), rtol=1e-3, atol=1e-3)


# --- least squares and the composite ops built on SVD/eigh --------------------------------------------------
@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
def test_lstsq_drivers(driver):
    for batch, m, n, vec in (((), 4, 3, False), ((3,), 2, 3, False), ((2,), 4, 3, True)):
        a = _distinct(batch, m, n, seed=m)
        b = _rand(*batch, m, seed=1) if vec else _rand(*batch, m, 2, seed=1)
        out, _ = _native(lambda x, y: torch.linalg.lstsq(x, y, driver=driver), a, b)
        ref = torch.linalg.lstsq(a, b, driver=driver)
        for o, r in zip(out, ref):
            assert o.shape == r.shape and o.dtype == r.dtype
            if r.numel():
                assert_same(o, r, rtol=1e-4, atol=1e-4)
    sing = torch.zeros(3, 3)  # rank deficient: declined (the drivers disagree on rank), CPU results
    trnlang.reset_fallback_stats()
    out = torch.linalg.lstsq(sing.to("trn"), torch.ones(3, 1, device="trn"), driver=driver)
    assert "aten::linalg_lstsq" in trnlang.fallback_stats()
    assert_same(out.solution, torch.linalg.lstsq(sing, torch.ones(3, 1), driver=driver).solution)


def test_composites_native():
    a = _distinct((2,), 4, 4, seed=11)
    for fn in (torch.linalg.cond, lambda x: torch.linalg.matrix_norm(x, "nuc"), lambda x: torch.linalg.norm(x[0], -2),
               lambda x: torch.svd(x).S, lambda x: torch.linalg.eigvalsh(x @ x.mT)):
        out, _ = _native(fn, a)
        assert_same(out, fn(a), rtol=1e-4, atol=1e-4)


def test_profile_svd_sweep():
    a = _rand(1, 16, 8, seed=1).to("trn")
    state = torch.empty((1, 16 + 8, 8), device="trn")
    off = torch.empty((1, 1), device="trn")
    prof = E.svd_sweep_kernel.profile(a, torch.ones(1, 1, device="trn"), state, off, 1e-6)
    assert prof.time_us > 0 and prof.cycles > 0
    assert prof.engines["tensor"].instructions > 0  # column dot products are ones-vector matmuls
    assert prof.engines["vector"].instructions > 0  # rotations
    for stat in prof.engines.values():
        assert 0.0 <= stat.utilization <= 1.0 + 1e-9
    assert 0.0 < off.item() < 1.0  # random columns are far from orthogonal after one sweep's first pass


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("shape", [(5, 5), (3, 5, 5), (0, 0), (2, 0, 0)])
def test_complex_eigvalsh_into_out(monkeypatch, uplo, shape):
    """eigvalsh of a complex64 matrix into a float32 out= (upstream test_eigvalsh): the unused eigenvectors were
    returned as float32, which the (values, vectors) out= check refused."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    m = torch.randn(*shape, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    m = m + m.mH
    out = torch.empty(0, device="trn")
    torch.linalg.eigvalsh(m.to("trn"), UPLO=uplo, out=out)
    torch.testing.assert_close(out.cpu(), torch.linalg.eigvalsh(m, UPLO=uplo), atol=1e-4, rtol=1e-4)
