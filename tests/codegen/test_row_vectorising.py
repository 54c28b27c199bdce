"""Short tile rows are copied with whole-vector loads and stores (per-tensor alias scopes, outer tile loops not
vectorised across rows), and kernels whose tensors overlap still compute what the interpreter does."""

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.language as tl


@trn.kernel
def copy_rows(x, out):
    n, d = x.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        tl.store(out[rows, cols], tl.load(x[rows, cols], mask=rows < n) * 2.0, mask=rows < n)


def _body(text: str) -> str:
    return text[text.index("define"):]


@pytest.mark.parametrize("width", [16, 32, 64])
def test_short_rows_are_vector_moves_not_gathers(width: int) -> None:
    x = np.random.default_rng(0).standard_normal((256, width), dtype=np.float32)
    wide = np.zeros((256, 2 * width), np.float32)
    for out in (np.zeros_like(x), wide[:, :width]):  # contiguous, and a strided (narrowed) destination
        text = _body(copy_rows.llvm_ir(x, out, optimized=True))
        assert "gather" not in text and "scatter" not in text
        assert re.search(r"store <(8|16) x float>", text), "the row is not stored as vectors"


def test_written_tensor_overlapping_a_read_one_keeps_its_order() -> None:
    """``out`` is ``x`` shifted by one row: the variant compiled for overlapping tensors (one alias scope) must
    give the interpreter's result, row after row."""
    base = np.arange(300 * 32, dtype=np.float32).reshape(300, 32)
    got, ref = torch.from_numpy(base.copy()), torch.from_numpy(base.copy())
    copy_rows(got[:-1], got[1:])
    trn.kernel(copy_rows.fn, interpret=True)(ref[:-1], ref[1:])
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


@settings(max_examples=15, deadline=None)
@given(n=st.sampled_from([0, 1, 127, 128, 129, 300]), d=st.sampled_from([1, 7, 8, 16, 33, 64]))
def test_row_copies_match_torch(n: int, d: int) -> None:
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(n * 100 + d))
    wide = torch.full((n, 2 * d + 1), float("nan"))
    out = wide[:, 1:d + 1]
    copy_rows(x, out)
    torch.testing.assert_close(out, x * 2.0, rtol=0, atol=0)
    assert torch.isnan(wide[:, 0]).all() and torch.isnan(wide[:, d + 1:]).all()
