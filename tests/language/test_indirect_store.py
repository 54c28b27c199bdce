"""Indirect (gathered) stores and accumulating DMA stores (``tl.store(..., accumulate=...)``).

Every kernel runs compiled and in the reference interpreter and is compared with torch (scatter /
index_add / scatter_reduce on CPU). Out-of-range indices must raise ``trn.BoundsError`` and leave the
tensor untouched outside its bounds.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.language as tl


@trn.kernel
def scatter_rows(idx, src, out, accumulate):
    """``out[idx[i], :] (op)= src[i, :]`` for 128-row tiles of ``src`` (``accumulate``: None or an op name)."""
    n = idx.shape[0]
    _, d = src.shape
    for i in tl.sequential_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        ids = tl.load(idx[rows, tl.arange(1)[None, :]], mask=rows < n)
        vals = tl.load(src[rows, cols], mask=rows < n)
        tl.store(out[ids, cols], vals, mask=rows < n, accumulate=accumulate)


_REDUCE = {"add": "sum", "multiply": "prod", "max": "amax", "min": "amin"}


def _ref(idx: torch.Tensor, src: torch.Tensor, out: torch.Tensor, op: str | None) -> torch.Tensor:
    index = idx[:, :1].long().expand(-1, src.shape[1])
    if op is None:
        return out.clone().index_copy_(0, idx[:, 0].long(), src) if idx[:, 0].unique().numel() == idx.shape[0] \
            else None
    return out.clone().scatter_reduce_(0, index, src.to(out.dtype), _REDUCE[op], include_self=True)


@pytest.mark.parametrize("interpret", [False, True])
@pytest.mark.parametrize("op", ["add", "multiply", "max", "min"])
def test_accumulate_with_repeated_indices(op, interpret):
    g = torch.Generator().manual_seed(0)
    n, v, d = 300, 7, 5  # many repeats of every row, a ragged last tile
    idx = torch.randint(0, v, (n, 1), generator=g)  # int64, as torch index tensors come
    src = torch.rand(n, d, generator=g) + 0.5
    out = torch.rand(v, d, generator=g) + 0.5
    ref = _ref(idx, src, out, op)
    k = trn.kernel(scatter_rows.fn, interpret=interpret) if interpret else scatter_rows
    k(idx, src, out, op)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("interpret", [False, True])
def test_plain_indirect_store(interpret):
    g = torch.Generator().manual_seed(1)
    idx = torch.randperm(200, generator=g)[:150].view(150, 1).int()
    src = torch.randn(150, 9, generator=g)
    out = torch.zeros(200, 9)
    ref = _ref(idx, src, out, None)
    k = trn.kernel(scatter_rows.fn, interpret=interpret) if interpret else scatter_rows
    k(idx, src, out, None)
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("interpret", [False, True])
def test_bf16_accumulate_rounds_each_step(interpret):
    """Each accumulation rounds to the tensor dtype (a sequential bf16 scatter-add, as torch's CPU kernel)."""
    g = torch.Generator().manual_seed(2)
    n, v, d = 130, 3, 4
    idx = torch.randint(0, v, (n, 1), generator=g)
    src = torch.randn(n, d, generator=g).bfloat16()
    out = torch.randn(v, d, generator=g).bfloat16()
    ref = out.clone()
    for i in range(n):  # sequential, each step computed in fp32 and rounded to bf16
        ref[idx[i, 0]] = (ref[idx[i, 0]].float() + src[i].float()).bfloat16()
    k = trn.kernel(scatter_rows.fn, interpret=interpret) if interpret else scatter_rows
    k(idx, src, out, "add")
    assert torch.equal(out, ref)


@pytest.mark.parametrize("interpret", [False, True])
@pytest.mark.parametrize("bad", [7, -1, 2**31 + 1])
def test_out_of_range_index_raises(bad, interpret):
    idx = torch.tensor([[0], [bad], [2]], dtype=torch.int64)
    src = torch.ones(3, 4)
    big = torch.zeros(14, 4)
    out = big[4:11]  # a view: neighbouring memory must stay untouched
    k = trn.kernel(scatter_rows.fn, interpret=interpret) if interpret else scatter_rows
    with pytest.raises(trn.BoundsError, match="out of bounds"):
        k(idx, src, out, "add")
    assert big[:4].abs().sum() == 0 and big[11:].abs().sum() == 0


@settings(max_examples=5, deadline=None)
@given(n=st.integers(1, 260), v=st.integers(1, 40), d=st.integers(1, 20), seed=st.integers(0, 2**16))
def test_scatter_add_random_shapes(n, v, d, seed):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, v, (n, 1), generator=g)
    src = torch.randn(n, d, generator=g)
    out = torch.randn(v, d, generator=g)
    ref = out.clone().index_add_(0, idx[:, 0], src)
    scatter_rows(idx, src, out, "add")
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_ir_round_trip_and_errors():
    idx = torch.zeros(4, 1, dtype=torch.int32)
    src = torch.ones(4, 3)
    out = torch.zeros(2, 3)
    text = scatter_rows.ir(idx, src, out, "add")
    assert "accumulate = add" in text
    from trnlang.ir.parser import parse_kernel
    from trnlang.ir.printer import print_kernel

    assert print_kernel(parse_kernel(text)) == text
    with pytest.raises(trn.TraceError, match="accumulate= must be one of"):
        scatter_rows(idx, src, out, "xor")


@trn.kernel
def load_accumulate(x, out):
    t = tl.load(x[0:2, 0:3])
    tl.store(out[0:2, 0:3], t, accumulate="add")
    tl.store(out[0:2, 0:3], t, accumulate="add")


def test_accumulate_on_affine_store():
    x = torch.randn(2, 3)
    out = torch.randn(2, 3)
    ref = out + 2 * x
    load_accumulate(x, out)
    torch.testing.assert_close(out, ref)


@trn.kernel
def grid_accumulate(src, out):
    """Every grid instance adds its rows into the same rows of ``out``."""
    n, d = src.shape
    rows = tl.arange(n)[:, None]
    cols = tl.arange(d)[None, :]
    tl.store(out[rows, cols], tl.load(src[rows, cols]), accumulate="add")


def test_grid_instances_accumulate_in_order():
    """Accumulating stores of concurrent grid instances to the same elements must all land (run in order)."""
    src = torch.ones(128, 512)
    for _ in range(4):  # later launches may run instances on the thread pool
        out = torch.zeros(128, 512)
        grid_accumulate[256](src, out)
        assert torch.equal(out, torch.full((128, 512), 256.0))
