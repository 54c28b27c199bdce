"""4-D windows of the movement kernel (``move3`` with an outer loop): permuted views made contiguous, flipped,
concatenated and rolled, in 4 to 6 dims, equal the CPU's results bit for bit and run natively (one launch per
4-D window: the KV-cache ``cat`` of transposed attention heads takes this path)."""

from __future__ import annotations

import itertools

import pytest
import torch

import trnlang

SHAPES = [(4, 8, 16, 64), (2, 3, 5, 7), (3, 1, 4, 130), (2, 2, 2, 2, 3), (5, 4, 3, 2, 2, 3)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_permuted_moves_match_cpu(shape, dtype):
    torch.manual_seed(len(shape))
    x = (torch.randn(shape) * 100).to(dtype)
    trnlang.reset_fallback_stats()
    for perm in list(itertools.permutations(range(len(shape))))[::7][:5]:
        xp, xt = x.permute(perm), x.to("trn").permute(perm)
        assert torch.equal(xt.contiguous().cpu(), xp.contiguous())
        for dims in [(0,), (1, 3), tuple(range(len(shape)))]:
            assert torch.equal(xt.flip(dims).cpu(), xp.flip(dims)), (perm, dims)
        for d in range(len(shape)):
            assert torch.equal(torch.cat([xt, xt.flip(0)], dim=d).cpu(), torch.cat([xp, xp.flip(0)], dim=d))
        assert torch.equal(xt.roll(1, len(shape) - 1).cpu(), xp.roll(1, len(shape) - 1))
    assert trnlang.fallback_stats() == {}


def test_kv_cache_cat_of_transposed_heads():
    qkv = torch.randn(4, 128, 1536)
    k = qkv.split(512, dim=2)[1].view(4, 128, 8, 64).transpose(1, 2)
    kt = qkv.to("trn").split(512, dim=2)[1].view(4, 128, 8, 64).transpose(1, 2)
    empty = torch.tensor([])
    for _ in range(3):
        got = torch.cat([empty.to("trn"), kt], dim=-2)
        assert got.is_contiguous() and torch.equal(got.cpu(), torch.cat([empty, k], dim=-2))


@pytest.mark.parametrize("src_dtype,dst_dtype", [(torch.float32, torch.float32), (torch.float32, torch.bfloat16),
                                                 (torch.bfloat16, torch.float32), (torch.int64, torch.int64),
                                                 (torch.int32, torch.float32), (torch.bool, torch.float16)])
def test_copy_of_four_and_more_dims_runs_the_move_kernel(src_dtype, dst_dtype):
    """``dst.copy_(src)`` of >3-D layouts that do not coalesce (permuted, broadcast) casts like the CPU's copy,
    natively (no host copy: its OpenMP threads would spin on the cores the next kernels use)."""
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(3, 4, 5, 6, 2, generator=g) * 50).to(src_dtype)
    xt = x.to("trn")
    trnlang.reset_fallback_stats()
    for perm in [(1, 0, 3, 2, 4), (4, 3, 2, 1, 0), (0, 2, 1, 4, 3)]:
        dst = torch.empty(x.permute(perm).shape, dtype=dst_dtype)
        dt = dst.to("trn")
        dt.copy_(xt.permute(perm))
        assert torch.equal(dt.cpu(), dst.copy_(x.permute(perm)))
    b = x[:, :1, :, :1, :]  # broadcast along two dims into a permuted destination
    dst = torch.empty(6, 3, 4, 5, 2, dtype=dst_dtype).permute(1, 2, 3, 0, 4)
    dt = torch.empty(6, 3, 4, 5, 2, dtype=dst_dtype, device="trn").permute(1, 2, 3, 0, 4)
    dt.copy_(b.to("trn"))
    assert torch.equal(dt.cpu(), dst.copy_(b))
    assert trnlang.fallback_stats() == {}
