"""Embedding, index_select and gather on ``trn`` reuse compiled variants across row counts (issue 15 item 4).

The indirect-DMA kernel's ``"pk"`` launches (the gathered rows ``K`` on partitions) go to
``indexing.gather_scatter_rt``: ``K`` is a runtime size and the host passes its row bucket
(``tiling.row_bucket``), so a new token count of the same bucket is not a new compilation. Results are checked
against torch's CPU kernels over 0, 1, ragged row tiles and every row bucket edge; the other sizes (the table's
rows, the row width) stay keyed exactly.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn
from stdlib_kernels import tiling as T
from stdlib_kernels.indexing import engine as I

ROWS = [0, 1, 2, 3, 4, 5, 63, 64, 65, 127, 128, 129, 255, 257]
WIDTHS = [1, 3, 64, 130, 513]


def loaded(name: str = "gather_scatter") -> int:
    """Variants of kernel ``name`` compiled or loaded from disk since the last reset."""
    k = trn.compile_stats()["kernels"].get(name, {})
    return k.get("compiles", 0) + k.get("disk_hits", 0)


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.one_of(st.sampled_from(ROWS), st.integers(0, 300)), c=st.sampled_from(WIDTHS),
       v=st.integers(1, 400), wide=st.booleans())
def test_embedding_index_select_and_gather_match_cpu(k: int, c: int, v: int, wide: bool) -> None:
    g = torch.Generator().manual_seed(k * 1009 + c * 7 + v)
    w = torch.randn(v, c, generator=g)
    ids = torch.randint(0, v, (k,), generator=g, dtype=torch.int64 if wide else torch.int32)
    wt, it = w.to("trn"), ids.to("trn")
    torch.testing.assert_close(torch.index_select(wt, 0, it).cpu(), torch.index_select(w, 0, ids))
    if wide:
        torch.testing.assert_close(F.embedding(it, wt).cpu(), F.embedding(ids, w))
    idx2 = torch.randint(0, v, (k, c), generator=g)
    torch.testing.assert_close(torch.gather(wt, 0, idx2.to("trn")).cpu(), torch.gather(w, 0, idx2))


def test_a_batch_of_sequences_embeds_like_cpu() -> None:
    w = torch.randn(50, 16)
    ids = torch.randint(0, 50, (3, 37))
    torch.testing.assert_close(F.embedding(ids.to("trn"), w.to("trn")).cpu(), F.embedding(ids, w))


def test_an_out_of_range_index_still_raises_torchs_error() -> None:
    w = torch.randn(10, 8).to("trn")
    for k in (5, 77):  # a bucket tail (5 -> 8 rows) and a ragged second tile: the bad index is not masked away
        ids = torch.arange(k) % 10
        ids[k - 1] = 10
        with pytest.raises(IndexError):
            torch.index_select(w, 0, ids.to("trn"))


def test_new_row_counts_reuse_the_variant_of_their_bucket() -> None:
    w = torch.randn(300, 24)
    wt = w.to("trn")
    trn.reset_compile_stats()
    buckets = set()
    for k in (2, 3, 5, 9, 17, 33, 65, 129, 300):
        ids = torch.randint(0, 300, (k,))
        torch.testing.assert_close(F.embedding(ids.to("trn"), wt).cpu(), F.embedding(ids, w))
        buckets.add(T.row_bucket(k))
    assert loaded() <= len(buckets) == 7, trn.compile_stats()["kernels"].get("gather_scatter")
    before = loaded()
    for k in range(130, 190):  # a prompt growing by one token per step
        ids = torch.randint(0, 300, (k,))
        torch.testing.assert_close(F.embedding(ids.to("trn"), wt).cpu(), F.embedding(ids, w))
    assert loaded() == before, "new row counts of a compiled bucket compiled again"
    stats = I.gather_scatter_rt.compile_stats()
    assert stats["dynamic"] and stats["fallback"] is None
    assert ("y", 1) not in stats["static_dims"], stats["static_reasons"]


def test_a_row_count_equal_to_the_table_size_does_not_make_rows_constant() -> None:
    # equal sizes at the same dim position share a symbol: K == rows of the table must not key K from then on
    w = torch.randn(40, 8)
    wt = w.to("trn")
    for k in (40, 41, 42):
        ids = torch.randint(0, 40, (k,))
        torch.testing.assert_close(torch.index_select(wt, 0, ids.to("trn")).cpu(), w[ids])
    assert ("y", 1) not in I.gather_scatter_rt.compile_stats()["static_dims"]
