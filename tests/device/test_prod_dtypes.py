"""``prod`` of integer, bool and complex64 tensors runs natively (issue 22, test_reductions strict: ~110 integer
and ~30 complex64 prod tests were declined by dtype). Integer products below 2^24 in magnitude are exact (fp32
products of integers, checked on the device); larger ones are declined with a reason. Compared with CPU torch
under ``TRN_FALLBACK=error``."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang.device as td

_INTS = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _ints(shape, dtype, seed, lo=-4, hi=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(lo, hi, shape, generator=g)
    return (x > 0) if dtype == torch.bool else x.to(dtype)


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from(_INTS), shape=st.lists(st.integers(0, 4), min_size=0, max_size=3),
       dim=st.integers(-3, 2), keepdim=st.booleans(), seed=st.integers(0, 2**16), transpose=st.booleans())
def test_int_prod_vs_cpu(dtype, shape, dim, keepdim, seed, transpose):
    lo = 0 if dtype == torch.uint8 else -4
    x = _ints(shape, dtype, seed, lo)
    if transpose and x.dim() >= 2:
        x = x.transpose(0, -1)
    _same_or_declined_as_too_large(x, lambda v: torch.prod(v))
    if x.dim() == 0 and dim not in (0, -1) or x.dim() and not -x.dim() <= dim < x.dim():
        return
    _same_or_declined_as_too_large(x, lambda v: torch.prod(v, dim, keepdim=keepdim))


def _same_or_declined_as_too_large(x, fn):
    """The CPU's result exactly, or (only for products whose magnitude passes 2^24, beyond fp32's exact integers)
    the documented decline, which TRN_FALLBACK=error turns into a FallbackError naming it."""
    t = x.to("trn") if x.is_contiguous() else x.transpose(0, -1).contiguous().to("trn").transpose(0, -1)
    want = fn(x)
    try:
        got = fn(t).cpu()
    except td.FallbackError as e:
        assert "2^52" in str(e) and float(fn(x.double().abs()).max()) >= 2**24, str(e)
        return
    assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("src", _INTS)
@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.float32, torch.bfloat16])
def test_int_prod_with_dtype_vs_cpu(src, dtype):
    x = _ints((3, 4), src, 7, 0 if src == torch.uint8 else -3, 4)
    for got, want in ((torch.prod(x.to("trn"), 1, dtype=dtype), torch.prod(x, 1, dtype=dtype)),
                      (torch.prod(x.to("trn"), dtype=dtype), torch.prod(x, dtype=dtype))):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, rtol=0 if not dtype.is_floating_point else 1e-2, atol=0)


def test_int8_dtype_wraps_like_torch():
    x = torch.tensor([[100, 3, 1], [300, 2, -1]])  # the int8 conversion wraps 300, the product wraps modulo 256
    torch.testing.assert_close(torch.prod(x.to("trn"), 1, dtype=torch.int8).cpu(), torch.prod(x, 1, dtype=torch.int8))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_int64_products_beyond_2_24_are_exact(dtype):
    # the high word comes from the fp32 product, the low one from int32 multiplies; negative low words borrow
    x = torch.tensor([[3] * 28, [-3] * 27 + [1]])  # 3^28 ~ 2^45
    x = x.to(dtype)
    assert torch.equal(torch.prod(x.to("trn"), 1).cpu(), torch.prod(x, 1))
    y = torch.tensor([[7, 11, 13, -2**20, 2**10, 0], [2**20 + 1, 2**19 - 3, 5, -1, 1, 1], [-(2**30) - 7, 3, 3, 1, 1, 1],
                      [2**40, 0, 2**33, 1, 1, 1], [-65537, 65539, 255, 1, 1, -1]]).to(dtype)
    assert torch.equal(torch.prod(y.to("trn"), 1).cpu(), torch.prod(y, 1))
    assert torch.equal(torch.prod(y.to("trn"), 1, dtype=torch.int32).cpu(), torch.prod(y, 1, dtype=torch.int32))


def test_huge_int64_products_decline_with_a_reason(monkeypatch):
    x = torch.full((2, 40), 3, dtype=torch.int64)  # 3^40 > 2^52 / 40: torch's value wraps modulo 2^64
    with pytest.raises(td.FallbackError, match="modulo 2\\^64"):
        torch.prod(x.to("trn"), 1)
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    assert torch.equal(torch.prod(x.to("trn"), 1).cpu(), torch.prod(x, 1))
    monkeypatch.setenv("TRN_FALLBACK", "error")  # an int32 result only needs the product modulo 2^32
    assert torch.equal(torch.prod(x.to("trn"), 1, dtype=torch.int32).cpu(), torch.prod(x, 1, dtype=torch.int32))


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(0, 7), min_size=0, max_size=3), dim=st.integers(-3, 2), keepdim=st.booleans(),
       seed=st.integers(0, 2**16))
def test_complex64_prod_vs_cpu(shape, dim, keepdim, seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.complex(torch.rand(shape, generator=g) + 0.5, torch.rand(shape, generator=g) - 0.5)  # |z| ~ 1
    want = torch.prod(z)
    got = torch.prod(z.to("trn")).cpu()
    assert got.dtype == torch.complex64
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    if z.dim() == 0 and dim not in (0, -1) or z.dim() and not -z.dim() <= dim < z.dim():
        return
    got = torch.prod(z.to("trn"), dim, keepdim=keepdim).cpu()
    torch.testing.assert_close(got, torch.prod(z, dim, keepdim=keepdim), rtol=1e-5, atol=1e-6)


def test_float_prod_unchanged():
    x = 1 + 0.01 * torch.randn(6, 50)
    torch.testing.assert_close(torch.prod(x.to("trn"), 1).cpu(), torch.prod(x, 1), rtol=1e-4, atol=1e-6)
    # torch converts to float16 first; its CPU product then rounds every step, ours accumulates in fp32 (closer to
    # the exact product of the converted values)
    want = torch.prod(x.to(torch.float16).double()).to(torch.float16)
    got = torch.prod(x.to("trn"), dtype=torch.float16).cpu()
    assert got.dtype == torch.float16
    torch.testing.assert_close(got, want, rtol=2e-3, atol=0)
