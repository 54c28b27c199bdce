"""``searchsorted`` / ``bucketize`` with boundaries and values of different dtypes (issue 22: declined), and
``bucketize`` of integer tensors: both operands are converted to their common dtype first, as the CPU's kernel
does; results equal the CPU's, natively. Integers beyond +-2^24 (the kernel compares in fp32) still decline."""

from __future__ import annotations

import pytest
import torch

import trnlang

_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16, torch.uint8]


@pytest.mark.parametrize("bd_dtype", _DTYPES)
@pytest.mark.parametrize("val_dtype", _DTYPES)
def test_mixed_dtype_search_matches_cpu(bd_dtype, val_dtype):
    g = torch.Generator().manual_seed(1)
    bd = torch.sort(torch.randint(0, 120, (3, 17), generator=g)).values.to(bd_dtype)
    vals = (torch.rand(3, 9, generator=g) * 130).to(val_dtype)
    trnlang.reset_fallback_stats()
    for right in (False, True):
        got = torch.searchsorted(bd.to("trn"), vals.to("trn"), right=right)
        assert torch.equal(got.cpu(), torch.searchsorted(bd, vals, right=right))
        got = torch.bucketize(vals.to("trn"), bd[0].to("trn"), right=right, out_int32=True)
        want = torch.bucketize(vals, bd[0], right=right, out_int32=True)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    assert trnlang.fallback_stats() == {}


def test_wide_integers_still_decline():
    """int64 boundaries and values beyond +-2^24 run on the CPU (correct, counted as a fallback); an int64/float32
    pair is searched in float32 on both devices."""
    bd = torch.tensor([1, 2**30, 2**31 + 1])
    trnlang.reset_fallback_stats()
    vals = torch.tensor([5, 2**31])
    got = torch.searchsorted(bd.to("trn"), vals.to("trn"))
    assert torch.equal(got.cpu(), torch.searchsorted(bd, vals)) and trnlang.fallback_stats() != {}
    trnlang.reset_fallback_stats()
    fvals = torch.tensor([5.0, 2.0**30])
    got = torch.searchsorted(bd.to("trn"), fvals.to("trn"))
    assert torch.equal(got.cpu(), torch.searchsorted(bd, fvals)) and trnlang.fallback_stats() == {}


def test_non_contiguous_operands_warn_once_as_torch():
    """torch warns once per program about non-contiguous values / boundaries; trn gives the same warnings once
    (its own flags: after a CPU search, whose once-flags a CPU fallback would share, they still appear)."""
    import warnings

    from stdlib_kernels.reduction import search

    search._WARNED.clear()
    g = torch.Generator().manual_seed(0)
    bd = torch.sort(torch.randn(3, 2, 5, generator=g), -1).values.mT.contiguous().mT  # sorted rows, not contiguous
    x = torch.randn(3, 4, 2, generator=g).mT
    torch.searchsorted(bd, x)  # the CPU's own once-flags are spent here
    for _ in range(2):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = torch.searchsorted(bd.to("trn"), x.to("trn"))
        msgs = [str(m.message) for m in w if "searchsorted" in str(m.message)]
        if _ == 0:
            assert any("input value tensor is non-contiguous" in m for m in msgs), msgs
            assert any("boundary tensor is non-contiguous" in m for m in msgs), msgs
        else:
            assert not msgs
        assert torch.equal(got.cpu(), torch.searchsorted(bd, x))


def test_out_dtype_rule_and_out_writes():
    """out= must be int64 (int32 with out_int32), as torch; a right out= receives the result natively."""
    bd, v = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([[2.5, 0.0], [3.0, 9.0]])
    for dt, i32 in ((torch.float32, False), (torch.int32, False), (torch.int64, True)):
        with pytest.raises(RuntimeError, match="output tensor's dtype is wrong"):
            torch.searchsorted(bd.to("trn"), v.to("trn"), out=torch.empty(4, dtype=dt, device="trn"), out_int32=i32)
        with pytest.raises(RuntimeError, match="output tensor's dtype is wrong"):
            torch.bucketize(v.to("trn"), bd.to("trn"), out=torch.empty(4, dtype=dt, device="trn"), out_int32=i32)
    for i32 in (False, True):
        out = torch.empty(0, dtype=torch.int32 if i32 else torch.int64, device="trn")
        trnlang.reset_fallback_stats()
        r = torch.searchsorted(bd.to("trn"), v.to("trn"), out=out, out_int32=i32, right=True)
        assert r is out and trnlang.fallback_stats() == {}
        assert torch.equal(out.cpu(), torch.searchsorted(bd, v, out_int32=i32, right=True))


@pytest.mark.parametrize("wdt", [torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool])
def test_bincount_integer_weights_give_float64_sums_natively(wdt):
    x = torch.tensor([0, 1, 1, 1, 4, 2])
    w = torch.tensor([1, 2, 3, 4, 5, 1]).to(wdt)
    trnlang.reset_fallback_stats()
    got = torch.bincount(x.to("trn"), w.to("trn"), minlength=7)
    assert trnlang.fallback_stats() == {}
    want = torch.bincount(x, w, minlength=7)
    assert got.dtype == want.dtype == torch.float64 and torch.equal(got.cpu(), want)
