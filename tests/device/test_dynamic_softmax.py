"""Softmax / log-softmax on ``trn`` reuse compiled variants across sizes (issue 15 item 4).

``softmax_fwd`` / ``softmax_bwd`` are shape-polymorphic: rows and columns are runtime sizes and the host passes
the tile buckets (``stdlib_kernels.tiling``), so every size of a bucket shares one variant. Results are checked
against torch's CPU kernels over sizes 0, 1, ragged row tiles, and every column bucket edge (powers of two below
512, multiples of 512 above, the one-pass limit ``CHUNK``).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn
from stdlib_kernels import tiling as T
from stdlib_kernels.reduction.softmax import CHUNK

ROWS = [0, 1, 2, 3, 5, 127, 128, 129, 257]
COLS = [1, 2, 3, 63, 64, 65, 511, 512, 513, 1023, 1025, CHUNK, CHUNK + 1]


def loaded(name: str) -> int:
    """Variants of kernel ``name`` compiled or loaded from disk since the last reset."""
    k = trn.compile_stats()["kernels"].get(name, {})
    return k.get("compiles", 0) + k.get("disk_hits", 0)


def size_class(n: int, bucket: int) -> int:
    """What a variant is keyed on for a size: 0 and 1 exactly, any other size by its bucket."""
    return n if n <= 1 else bucket


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(r=st.one_of(st.sampled_from(ROWS), st.integers(0, 300)), c=st.one_of(st.sampled_from(COLS), st.integers(1, 700)),
       log=st.booleans())
def test_softmax_forward_and_backward_match_cpu(r: int, c: int, log: bool) -> None:
    x = torch.randn(r, c) * 3
    g = torch.randn(r, c)
    f = torch.log_softmax if log else torch.softmax
    xt = x.to("trn").requires_grad_()
    xc = x.clone().requires_grad_()
    yt, yc = f(xt, -1), f(xc, -1)
    torch.testing.assert_close(yt.detach().cpu(), yc.detach(), rtol=1e-5, atol=1e-5)
    yt.backward(g.to("trn"))
    yc.backward(g)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)


def test_softmax_masks_the_bucket_tail_with_infinities() -> None:
    # -inf everywhere but one column, and a column count just past a bucket edge: the masked tail must not count
    x = torch.full((5, 513), -float("inf"))
    x[:, 7] = 0.0
    torch.testing.assert_close(torch.softmax(x.to("trn"), 1).cpu(), torch.softmax(x, 1))
    torch.testing.assert_close(torch.log_softmax(x.to("trn"), 1).cpu(), torch.log_softmax(x, 1))


def test_new_sizes_reuse_the_variant_of_their_bucket() -> None:
    trn.reset_compile_stats()
    seen = set()
    for r, c in [(1, 1), (2, 2), (3, 70), (4, 100), (129, 65), (200, 120), (300, 128), (130, 600), (250, 1000),
                 (7, CHUNK + 1), (9, CHUNK + 300), (131, 5), (140, 7), (160, 8)]:
        x = torch.randn(r, c)
        torch.testing.assert_close(torch.softmax(x.to("trn"), -1).cpu(), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
        seen.add((size_class(r, T.row_bucket(r)), size_class(c, T.free_bucket(c, CHUNK)), c <= CHUNK))
    # 14 shapes, 8 buckets crossed: at most one variant per bucket (fewer if an earlier test compiled some)
    assert loaded("softmax_fwd") <= len(seen) == 8, trn.compile_stats()["kernels"].get("softmax_fwd")
    before = loaded("softmax_fwd")
    for r in range(130, 150):                     # 20 new row counts x 3 new column counts of seen buckets
        for c in (66, 90, 127):
            x = torch.randn(r, c)
            torch.testing.assert_close(torch.softmax(x.to("trn"), -1).cpu(), torch.softmax(x, -1), rtol=1e-5,
                                       atol=1e-6)
    assert loaded("softmax_fwd") == before, "new sizes of a compiled bucket compiled again"


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_of_a_3d_tensor_along_each_dim(dim: int) -> None:
    x = torch.randn(3, 130, 70)
    torch.testing.assert_close(torch.softmax(x.to("trn"), dim).cpu(), torch.softmax(x, dim), rtol=1e-5, atol=1e-6)
