"""``torch.cat`` / ``torch.stack`` of mixed dtypes and of complex64 natively (issue 22: both fell back): casts the
move kernels do not do (int64 into float, narrower integers into int64) go through the device's ``copy_``;
complex64 tensors concatenate as their real/imaginary planes. Results equal the CPU's exactly."""

from __future__ import annotations

import pytest
import torch

import trnlang

_PAIRS = [(torch.int64, torch.float32), (torch.float32, torch.int64), (torch.int64, torch.bfloat16),
          (torch.int64, torch.int32), (torch.int32, torch.int64), (torch.bool, torch.int64), (torch.uint8, torch.int64),
          (torch.bool, torch.float32), (torch.int32, torch.float16), (torch.int64, torch.int64)]


def _make(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    lo, hi = (0, 255) if dtype == torch.uint8 else (-(2**20), 2**20)
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("da,db", _PAIRS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_of_mixed_dtypes_matches_cpu(da, db, dim):
    a, b = _make(da, (3, 5), 1), _make(db, (3, 5), 2)
    trnlang.reset_fallback_stats()
    got = torch.cat([a.to("trn"), b.t().contiguous().t().to("trn")], dim)  # one input strided
    want = torch.cat([a, b.t().contiguous().t()], dim)
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    s = torch.stack([a.to("trn"), b.to("trn")], dim)
    assert torch.equal(s.cpu(), torch.stack([a, b], dim))
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat_of_complex64_matches_cpu(dim):
    g = torch.Generator().manual_seed(5)
    a = torch.randn(2, 3, 4, dtype=torch.complex64, generator=g)
    b = torch.randn(2, 3, 4, dtype=torch.complex64, generator=g).transpose(0, 1).contiguous().transpose(0, 1)
    trnlang.reset_fallback_stats()
    got = torch.cat([a.to("trn"), b.to("trn"), a.to("trn")], dim)
    assert got.dtype == torch.complex64 and torch.equal(got.cpu(), torch.cat([a, b, a], dim))
    shape = list(a.shape)
    shape[dim] *= 2
    out = torch.empty(shape, dtype=torch.complex64, device="trn")
    assert torch.cat([a.to("trn"), b.to("trn")], dim, out=out) is out
    assert torch.equal(out.cpu(), torch.cat([a, b], dim))
    assert torch.equal(torch.stack([a.to("trn"), b.to("trn")], dim).cpu(), torch.stack([a, b], dim))
    legacy = torch.tensor([], dtype=torch.complex64)
    assert torch.equal(torch.cat([legacy.to("trn"), a.to("trn")], dim).cpu(), torch.cat([legacy, a], dim))
    assert trnlang.fallback_stats() == {}
