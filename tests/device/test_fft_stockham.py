"""The in-SBUF Stockham FFT (stdlib_kernels/fft/stockham.py): the kernel on its own (small powers of two: every stage
kind, real input, a cropped one-sided output, the real part alone, ragged row tiles) against torch and against the
interpreter, and the ``torch.fft`` lowerings that reach it (sizes in ``[MIN_N, MAX_N]``) against the CPU.
"""

import pytest
import torch

import trnlang as trn
from stdlib_kernels.fft import dft as F
from stdlib_kernels.fft import stockham as S
from stdlib_kernels.fft.complex_ops import planes
from tests.device.conftest import assert_same

TOL = 1e-4


def _rand(shape, complex_=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=torch.complex64 if complex_ else torch.float32, generator=g)


def _run(kern, z, n_out, inverse, real, real_out, scale):
    """fft_rows on the rows of ``z`` (complex64 CPU); returns the complex64 trn result [rows, n_out]."""
    zt = z.to("trn")
    xr, xi = planes(zt) if not real else (zt.real.contiguous(), None)
    out = torch.zeros(z.shape[0], n_out, dtype=torch.complex64).to("trn")
    yr, yi = planes(out)
    wr, wi = S.table(z.shape[-1], inverse)
    kern(xr[None], None if xi is None else xi[None], yr[None], None if real_out else yi[None], wr, wi, inverse, scale)
    return out


def _expected(z, n_out, inverse, real, real_out, scale):
    zz = (z.real if real else z).to(torch.complex128)
    n = z.shape[-1]
    y = torch.fft.ifft(zz) * n if inverse else torch.fft.fft(zz)
    y = y[:, :n_out] * scale
    if real_out:
        y = y.real.to(torch.complex128)
    return y.to(torch.complex64)


CASES = [  # (rows, n, n_out, inverse, real input, real part only, scale)
    (5, 8, 8, False, False, False, 1.0),       # radix-2 then radix-4 without twiddles; ragged row tile
    (4, 32, 32, True, False, False, 0.5),      # a twiddled radix-4 stage, inverse, scaled
    (7, 128, 65, False, True, False, 1.0),     # real input, one-sided crop
    (3, 64, 64, True, False, True, 1 / 64),    # the real part only (c2r)
]


@pytest.mark.parametrize("case", CASES)
def test_kernel_matches_torch_and_interpreter(case):
    rows, n, n_out, inverse, real, real_out, scale = case
    z = _rand((rows, n), seed=n)
    got = _run(S.fft_rows, z, n_out, inverse, real, real_out, scale)
    want = _expected(z, n_out, inverse, real, real_out, scale)
    assert_same(got, want, rtol=TOL, atol=TOL * n ** 0.5)
    interp = trn.kernel(interpret=True)(S.fft_rows.fn)
    ref = _run(interp, z, n_out, inverse, real, real_out, scale)
    torch.testing.assert_close(got.cpu(), ref.cpu(), rtol=1e-5, atol=1e-5 * n ** 0.5)


def test_plan_helpers():
    assert [S.fits(n) for n in (S.MIN_N, S.MAX_N, 2 * S.MAX_N, 3 * 256, S.MIN_N // 2)] == [True, True, False,
                                                                                              False, False]
    for n in (8, 32, 512, 2048, 4096):
        n1, n2 = S.factors(n)
        assert n1 * n2 == n and n1 <= n2
        for m in (n1, n2):
            ell = 1
            for radix, at in S.stages(m):
                assert at == ell
                ell *= radix
            assert ell == m


def _cmp(fn, x, tol=2e-4):
    trn.reset_fallback_stats()
    got = fn(x.to("trn"))
    assert trn.fallback_stats() == {}
    assert_same(got, fn(x), rtol=tol, atol=tol)


def test_torch_fft_through_stockham(monkeypatch):
    """The lowerings' route into the kernel (off by default: F.STOCKHAM), small sizes to keep compiles short."""
    calls = []
    orig = F.launch_rows
    monkeypatch.setattr(F, "STOCKHAM", True)
    monkeypatch.setattr(S, "MIN_N", 16)
    monkeypatch.setattr(F, "launch_rows", lambda *a: calls.append(a[0].shape[-1]) or orig(*a))
    z = _rand((6, 32))
    _cmp(lambda t: torch.fft.fft(t), z)
    _cmp(lambda t: torch.fft.rfft(t), z.real.contiguous())
    _cmp(lambda t: torch.fft.irfft(t, 32, norm="ortho"), z[:, :17])
    _cmp(lambda t: torch.fft.ifft(t, dim=0), _rand((16, 3), seed=1))  # the signal strided, rows contiguous
    assert set(calls) == {16, 32}
