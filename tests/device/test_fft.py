"""FFTs (stdlib_kernels/fft/dft.py) and complex elementwise ops (stdlib_kernels/fft/complex_ops.py) on trn vs CPU.

Every ``torch.fft`` family (c2c, r2c, c2r, Hermitian) forward and backward, all normalizations, 1-D and
n-D, non-contiguous inputs, sizes 1 / prime / factored (Cooley-Tukey) / Bluestein, empty batches,
``stft``; ``complex_mul`` / ``conj_physical``; the twiddles' accuracy; no CPU fallbacks; a profile.
"""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.fft import complex_ops as FC
from stdlib_kernels.fft import dft as F
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
TOL = 1e-4


def _nofb(fn, *args, allow=()):
    trnlang.reset_fallback_stats()
    r = fn(*args)
    fb = {k: v for k, v in trnlang.fallback_stats().items() if k not in allow}
    assert fb == {}, fb
    return r


def _rand(shape, complex_=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    if complex_:
        return torch.randn(shape, dtype=torch.complex64, generator=g)
    return torch.randn(shape, generator=g)


def _cmp(fn, x, tol=TOL):
    assert_same(_nofb(fn, x.to("trn")), fn(x), rtol=tol, atol=tol)


ONE_D = {  # name -> (fn(x, n, norm), complex input?)
    "fft": (lambda x, n, norm: torch.fft.fft(x, n, norm=norm), True),
    "ifft": (lambda x, n, norm: torch.fft.ifft(x, n, norm=norm), True),
    "fft_real": (lambda x, n, norm: torch.fft.fft(x, n, norm=norm), False),
    "rfft": (lambda x, n, norm: torch.fft.rfft(x, n, norm=norm), False),
    "irfft": (lambda x, n, norm: torch.fft.irfft(x, n, norm=norm), True),
    "hfft": (lambda x, n, norm: torch.fft.hfft(x, n, norm=norm), True),
    "ihfft": (lambda x, n, norm: torch.fft.ihfft(x, n, norm=norm), False),
}


@pytest.mark.parametrize("name", sorted(ONE_D))
def test_fft_1d_sizes_and_norms(name):
    fn, cplx = ONE_D[name]
    for shape, n, norm in [((3, 8), None, None), ((2, 17), None, "ortho"), ((1,), 1, "forward"),
                           ((4, 6), 9, "backward"), ((130, 12), 7, "ortho")]:
        x = _rand(shape, cplx)
        _cmp(lambda t: fn(t, n, norm), x)
    # an empty batch: the CPU's MKL raises "Inconsistent configuration parameters"; trn gives the empty result
    e = _nofb(lambda t: fn(t, None, None), _rand((2, 0, 6), cplx).to("trn"))
    assert e.device.type == "trn" and e.shape == fn(_rand((2, 1, 6), cplx), None, None).shape[:1] + (0,) + e.shape[2:]


@pytest.mark.parametrize("n", [300, 1031])  # 300 = 12 * 25 (Cooley-Tukey), 1031: a prime above PRIME_MAX (Bluestein)
def test_fft_big_sizes(n):
    assert (F.plan(n) is None) == (n == 1031)
    z = _rand((3, n), True)
    _cmp(lambda t: torch.fft.fft(t), z, tol=2e-4)
    _cmp(lambda t: torch.fft.ifft(t, norm="forward"), z, tol=2e-4)
    _cmp(lambda t: torch.fft.rfft(t), z.real.contiguous(), tol=2e-4)
    _cmp(lambda t: torch.fft.irfft(t, n), z[:, : n // 2 + 1], tol=2e-4)


def test_fft_nd_and_noncontiguous():
    z = _rand((4, 6, 10), True)
    x = z.real.contiguous()
    _cmp(lambda t: torch.fft.fft2(t), z)
    _cmp(lambda t: torch.fft.ifftn(t.transpose(0, 2)[1:], dim=(0, 2), norm="ortho"), z)
    _cmp(lambda t: torch.fft.fftn(t[:, ::2], s=(3, 5, 4)), z)
    _cmp(lambda t: torch.fft.rfft2(t.transpose(1, 2)), x)
    _cmp(lambda t: torch.fft.rfftn(t, norm="forward"), x)
    _cmp(lambda t: torch.fft.irfftn(t, s=(6, 7)), z)
    _cmp(lambda t: torch.fft.irfft2(t.transpose(0, 1)), z)
    _cmp(lambda t: torch.fft.hfft2(t), z)
    _cmp(lambda t: torch.fft.ihfftn(t[1:, :, 3:]), x)
    _cmp(lambda t: torch.fft.fft(t.conj(), dim=0), z)  # a conj-bit input
    _cmp(lambda t: torch.fft.fft(t[..., 0]), torch.view_as_real(z))  # a stride-2 real view


@_SETTINGS
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple), data=st.data())
def test_fft_random_shapes(shape, data):
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    norm = data.draw(st.sampled_from([None, "ortho", "forward"]))
    z = _rand(shape, True, seed=3)
    _cmp(lambda t: torch.fft.fft(t, dim=d, norm=norm), z)
    _cmp(lambda t: torch.fft.rfft(t, dim=d, norm=norm), z.real.contiguous())
    _cmp(lambda t: torch.fft.irfft(t, shape[d], dim=d, norm=norm), z)


def test_stft():
    x = _rand((2, 100))
    w = torch.hann_window(16)
    assert_same(_nofb(lambda: torch.stft(x.to("trn"), 16, 4, window=w.to("trn"), return_complex=True)),
                torch.stft(x, 16, 4, window=w, return_complex=True), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("name", ["fft", "fft_real", "rfft", "irfft", "hfft", "ihfft", "fft2", "rfftn", "irfftn"])
def test_fft_backward(name):
    nd = {"fft2": lambda x, n, norm: torch.fft.fft2(x, norm=norm),
          "rfftn": lambda x, n, norm: torch.fft.rfftn(x, norm=norm),
          "irfftn": lambda x, n, norm: torch.fft.irfftn(x, norm=norm)}
    fn, cplx = ONE_D[name] if name in ONE_D else (nd[name], name != "rfftn")
    x = _rand((5, 7), cplx)
    xc = x.clone().requires_grad_()
    y = fn(xc, None, "ortho")
    g = _rand(y.shape, y.is_complex(), seed=1)
    y.backward(g)
    xt = x.to("trn").requires_grad_()
    _nofb(lambda: fn(xt, None, "ortho").backward(g.to("trn")))  # c2r backward's complex mul_(2) included
    assert_same(xt.grad, xc.grad, rtol=TOL, atol=TOL)


def test_complex_mul_and_conj():
    a, b = _rand((3, 4), True), _rand((4,), True, seed=1)
    r = _rand((3, 1))
    at, bt, rt = a.to("trn"), b.to("trn"), r.to("trn")
    for got, exp in [(FC.complex_mul(at, bt), a * b), (FC.complex_mul(at, rt), a * r), (FC.complex_mul(rt, 2j), r * 2j),
                     (FC.complex_mul(at, 2), a * 2), (FC.complex_mul(at, torch.tensor(1 - 1j)), a * (1 - 1j)),
                     (FC.complex_mul(at.t(), bt[:3]), a.t() * b[:3]), (FC.complex_mul(at, bt.conj()), a * b.conj()),
                     (FC.conj_physical(at), a.conj_physical()), (FC.conj_physical(at.conj()), a),
                     (FC.conj_physical(rt), r)]:
        assert_same(got, exp, rtol=1e-6, atol=1e-6)
    out = torch.empty(3, 4, dtype=torch.complex64, device="trn")
    assert FC.complex_mul(at, bt, out=out) is out
    assert_same(out, a * b, rtol=1e-6, atol=1e-6)
    c = at.clone()
    assert FC.complex_mul(c, bt, out=c) is c  # in place (mul_)
    assert_same(c, a * b, rtol=1e-6, atol=1e-6)
    assert FC.complex_mul(at, bt, out=at[:, :2]) is NotImplemented  # wrong shape: declined
    assert FC.complex_mul(rt, rt) is NotImplemented  # not a complex result
    assert_same(_nofb(lambda: torch.conj_physical(at)), a.conj_physical())
    c = at.clone()
    assert _nofb(lambda: c.conj_physical_()) is c
    assert_same(c, a.conj(), rtol=0, atol=0)
    assert_same(_nofb(lambda: at * bt), a * b, rtol=1e-6, atol=1e-6)


def test_complex_views_native():
    z = _rand((3, 4), True)
    zt = z.to("trn")

    def views():
        r = torch.view_as_real(zt)
        assert r.dtype == torch.float32 and r.shape == (3, 4, 2) and r.stride() == (8, 2, 1)
        c = torch.view_as_complex(r)
        assert c.data_ptr() == zt.data_ptr()
        j = torch._conj(zt)
        assert j.is_conj() and j.data_ptr() == zt.data_ptr()
        return r, j.resolve_conj(), zt.imag

    r, rc, im = _nofb(views)
    assert torch.equal(r.cpu(), torch.view_as_real(z))
    assert torch.equal(rc.cpu(), z.conj().resolve_conj()) and torch.equal(im.cpu(), z.imag)


def test_twiddles_accurate():
    for n, rows, cols in [(1000, 1000, 1000), (1 << 16, 256, 256), (12, 3, 4)]:
        c, s, ns = F.mats(n, rows, cols)
        ang = 2 * np.pi * ((np.arange(rows)[:, None] * np.arange(cols)[None, :]) % n) / n
        assert np.abs(c.cpu().numpy() - np.cos(ang)).max() < 2e-7
        assert np.abs(s.cpu().numpy() - np.sin(ang)).max() < 2e-7
        assert torch.equal(ns.cpu(), -s.cpu())
    c, s, _ = F.mats(8, 8, 8)
    assert s.cpu()[1, 4] == 0.0 and c.cpu()[1, 2] == 0.0  # exact at multiples of pi / 2


def test_errors_match_cpu():
    z = _rand((3, 4), True)
    for fn in (lambda t: torch.fft.fft(t, n=0), lambda t: torch.fft.fft(t, dim=2), lambda t: torch.fft.irfft(t, n=-1)):
        with pytest.raises((RuntimeError, IndexError)) as ec:
            fn(z)
        with pytest.raises(ec.type):
            fn(z.to("trn"))


def test_dft_profile():
    x = _rand((256, 128))
    c, s, ns = F.mats(128, 128, 128)
    yr = torch.empty(1, 256, 128, device="trn")
    yi = torch.empty(1, 256, 128, device="trn")
    prof = F.dft.profile(x.to("trn").view(1, 256, 128), None, c, s, ns, yr, yi, None, None, 1.0)
    assert prof.time_us > 0 and prof.engines["tensor"].instructions > 0 and 0 < prof.mfu <= 1
    assert all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    exp = torch.fft.fft(x)
    torch.testing.assert_close(torch.complex(yr[0].cpu(), yi[0].cpu()), exp, rtol=TOL, atol=TOL)
