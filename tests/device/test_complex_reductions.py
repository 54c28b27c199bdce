"""complex64 sum/mean/var/std/var_mean/std_mean/vector_norm run natively on real/imaginary planes (issue 22,
test_reductions strict: complex64 reductions were declined by dtype). Compared with CPU torch under
``TRN_FALLBACK=error``."""

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _z(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g))


def _close(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


_OPS = {
    "sum": lambda t, d, k: t.sum(d, keepdim=k) if d is not None else t.sum(),
    "mean": lambda t, d, k: t.mean(d, keepdim=k) if d is not None else t.mean(),
    "var": lambda t, d, k: t.var(d, keepdim=k),
    "std0": lambda t, d, k: t.std(d, correction=0, keepdim=k),
    "var_mean": lambda t, d, k: torch.var_mean(t, d, keepdim=k)[0],
    "var_mean_m": lambda t, d, k: torch.var_mean(t, d, keepdim=k)[1],
    "std_mean": lambda t, d, k: torch.std_mean(t, d, correction=2, keepdim=k)[0],
    "norm2": lambda t, d, k: torch.linalg.vector_norm(t, 2, d, k),
    "norm1": lambda t, d, k: torch.linalg.vector_norm(t, 1, d, k),
    "norminf": lambda t, d, k: torch.linalg.vector_norm(t, float("inf"), d, k),
    "norm3": lambda t, d, k: torch.linalg.vector_norm(t, 3, d, k, dtype=torch.complex64),
}


@settings(max_examples=30, deadline=None)
@given(op=st.sampled_from(sorted(_OPS)), shape=st.lists(st.integers(0, 6), min_size=0, max_size=3),
       dim=st.sampled_from([None, 0, -1, (0, 1), ()]), keepdim=st.booleans(), seed=st.integers(0, 2**16),
       strided=st.booleans())
def test_complex64_reductions_vs_cpu(op, shape, dim, keepdim, seed, strided):
    z = _z(shape, seed)
    if isinstance(dim, int) and z.dim() == 0:
        dim = None if op in ("sum", "mean") else dim
    t = z.to("trn")
    if strided and z.dim() >= 2:
        z = z.transpose(0, 1)
        t = t.transpose(0, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # var's degrees-of-freedom warning on both devices
        try:
            want = _OPS[op](z, dim, keepdim)
        except (RuntimeError, IndexError):
            return  # not a valid call on the CPU either
        got = _OPS[op](t, dim, keepdim)
    _close(got, want)


def test_complex64_sum_into_out_and_empty():
    z = _z((3, 4), 1)
    out = torch.empty(3, dtype=torch.complex64, device="trn")
    torch.sum(z.to("trn"), 1, out=out)
    _close(out, z.sum(1))
    e = torch.empty(0, 3, dtype=torch.complex64)
    _close(e.to("trn").sum(0), e.sum(0))
    _close(e.to("trn").mean(0), e.mean(0))  # NaN + NaN j


def test_complex64_sum_with_other_dtype_declines(monkeypatch):
    import trnlang.device as td

    z = _z((3,), 2).to("trn")
    with pytest.raises(td.FallbackError, match="complex64"):
        torch.sum(z, dtype=torch.float32)


@pytest.mark.parametrize("op", ["all", "any"])
@pytest.mark.parametrize("dim", [None, 0, 1, (0, 2), ()])
def test_complex64_all_any_vs_cpu(op, dim):
    z = _z((3, 4, 2), 5)
    z[0, 1, 0] = 0  # a zero
    z[1, :, 1] = torch.complex(torch.zeros(4), torch.ones(4))  # real part zero, still nonzero
    z[2] = 0
    fn = getattr(torch, op)
    t = z.to("trn")
    for a, b in ((t, z), (t.transpose(0, 2), z.transpose(0, 2))):
        got = fn(a) if dim is None else fn(a, dim)
        want = fn(b) if dim is None else fn(b, dim)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dim", [0, 1, (0, 1), -1])  # dim=() raises on the CPU for complex
@pytest.mark.parametrize("keepdim", [False, True])
def test_complex64_logsumexp_vs_cpu(dim, keepdim):
    z = _z((4, 6), 9) * 3
    z[1, 2] = complex(float("-inf"), 0.0)  # a zero term
    got = torch.logsumexp(z.to("trn"), dim, keepdim=keepdim)
    _close(got, torch.logsumexp(z, dim, keepdim=keepdim))
    _close(torch.logsumexp(z[0, 0].to("trn"), 0), torch.logsumexp(z[0, 0], 0))  # 0-dim


def test_complex64_mean_spreads_inf_and_nan_like_cpu():
    # torch divides the complex sum by complex(n): an infinite real part makes the imaginary part NaN (and back)
    inf, nan = float("inf"), float("nan")
    for vals in ([1 + 2j, 3 - 1j, complex(inf, 0), 2, -1 + 1j], [1 + 2j, complex(0, inf), 3j],
                 [1 + 2j, complex(nan, 1), 3j], [complex(-0.0, -0.0)] * 2):
        z = torch.tensor(vals, dtype=torch.complex64)
        got, want = z.to("trn").mean().cpu(), z.mean()
        torch.testing.assert_close(got, want, equal_nan=True)
        assert str(got) == str(want)  # signs of zeros and NaN placement too
    z = torch.tensor([[1 + 1j, complex(inf, 2)], [2 - 1j, 3j]], dtype=torch.complex64)
    torch.testing.assert_close(z.to("trn").mean(1).cpu(), z.mean(1), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.int64, torch.float32, torch.bfloat16])
def test_sum_into_complex64_dtype(monkeypatch, dtype):
    """sum(x, dtype=torch.complex64) of a real tensor converts it first, as torch does, natively (linalg.matrix_rank
    sums its bool mask into a complex out=: upstream test_matrix_rank_out_errors_and_warnings complex64)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    x = (torch.randn(3, 5, generator=torch.Generator().manual_seed(8)) * 3).to(dtype)
    for dim in (1, None):
        want = torch.sum(x, dtype=torch.complex64) if dim is None else torch.sum(x, dim, dtype=torch.complex64)
        got = torch.sum(x.to("trn"), dtype=torch.complex64) if dim is None else \
            torch.sum(x.to("trn"), dim, dtype=torch.complex64)
        assert got.dtype == torch.complex64
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
    out = torch.empty(0, dtype=torch.complex64, device="trn")
    torch.sum(x.to("trn"), 1, dtype=torch.complex64, out=out)
    torch.testing.assert_close(out.cpu(), torch.sum(x, 1, dtype=torch.complex64), atol=1e-4, rtol=1e-4)
