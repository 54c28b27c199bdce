"""Gather / scatter indices must not wrap through int32 into a valid row (trnlang.ir.index_range).

Every kernel runs compiled and in the reference interpreter; both must raise the same
``BoundsError`` at the same user line (the load that narrows an int64 index, the arithmetic that
overflows), and write nothing where the failing instruction would have.
"""

from __future__ import annotations

import pytest
import torch

import trnlang as trn
import trnlang.language as tl


def _both(fn):  # noqa: ANN001, ANN202 - a kernel function -> {mode: kernel}
    return {"jit": trn.kernel(fn, interpret=False), "interp": trn.kernel(fn, interpret=True)}


def gather_rows(idx, table, out, n):
    """out[i, :] = table[idx[i], :] for the first n rows of idx."""
    d = table.shape[1]
    rows = tl.arange(idx.shape[0])[:, None]
    ids = tl.load(idx[rows], mask=rows < n)  # LOAD-IDS
    vals = tl.load(table[ids, tl.arange(d)[None, :]], mask=rows < n)  # GATHER
    tl.store(out[rows, tl.arange(d)[None, :]], vals, mask=rows < n)


def gather_affine(idx, table, out):
    """out[i, :] = table[idx[i] * 4 + 1, :]."""
    d = table.shape[1]
    rows = tl.arange(idx.shape[0])[:, None]
    ids = tl.load(idx[rows])
    pos = ids * 4 + 1  # ARITH
    tl.store(out[rows, tl.arange(d)[None, :]], tl.load(table[pos, tl.arange(d)[None, :]]))


def gather_elementwise(idx, x, out, off):
    """out[r, c] = x[r, idx[r, c] - off] (the index arithmetic is inlined into the gather by the JIT)."""
    p, k = idx.shape
    r = tl.arange(p)[:, None]
    c = tl.arange(k)[None, :]
    col = tl.load(idx[r, c]) - off  # ELEM-ARITH
    tl.store(out[r, c], tl.load(x[r, col]))


def scatter_shifted(idx, src, out, shift):
    """out[idx[i] + shift, :] = src[i, :] (the index arithmetic feeds a store)."""
    d = src.shape[1]
    rows = tl.arange(idx.shape[0])[:, None]
    cols = tl.arange(d)[None, :]
    ids = tl.load(idx[rows]) + shift  # SCATTER-ARITH
    tl.store(out[ids, cols], tl.load(src[rows, cols]))


def wrap_not_index(idx, table, out, vals):
    """vals[i] = idx[i] * 4 + 1 (plain data: wraps as int32); out[i, :] = table[(idx[i] * 40503) & 7, :]."""
    d = table.shape[1]
    rows = tl.arange(idx.shape[0])[:, None]
    ids = tl.load(idx[rows])
    tl.store(vals[rows], ids * 4 + 1)
    h = (ids * 40503) & 7  # a hash: wraps on purpose, then masked into range
    tl.store(out[rows, tl.arange(d)[None, :]], tl.load(table[h, tl.arange(d)[None, :]]))


GATHER = _both(gather_rows)
AFFINE = _both(gather_affine)
ELEMENTWISE = _both(gather_elementwise)
SCATTER = _both(scatter_shifted)
WRAP = _both(wrap_not_index)
MODES = ["jit", "interp"]


def _line(marker: str) -> str:
    """The source text of the kernel line tagged ``# marker``."""
    with open(__file__) as f:
        line = next(s for s in f if s.rstrip().endswith(f"# {marker}"))
    return line.split("#")[0].strip()


TABLE = torch.arange(50 * 4, dtype=torch.float32).reshape(50, 4)


def _gather(mode: str, v: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    idx = torch.tensor([[1], [v], [2]], dtype=dtype)
    out = torch.full((3, 4), -7.0)
    GATHER[mode](idx, TABLE, out, 3)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_int64_gather_index_at_and_past_the_boundary(mode):
    assert torch.equal(_gather(mode, 49), TABLE[[1, 49, 2]])  # the last row is fine
    assert torch.equal(_gather(mode, 0), TABLE[[1, 0, 2]])
    for v, shown in [(50, "index [50, 0]"), (-1, "index [-1, 0]"), (2**31 - 1, "index [2147483647, 0]")]:
        with pytest.raises(trn.BoundsError, match="out of bounds for tensor table") as e:
            _gather(mode, v)
        assert shown in str(e.value) and _line("GATHER") in str(e.value)
    for v in [2**31, 2**32 + 3, 2**32 + 49, -2**31 - 1, -2**32 + 3, 2**63 - 1, -2**63]:
        with pytest.raises(trn.BoundsError, match="gather index out of bounds: a value loaded from int64 tensor idx "
                                                  "does not fit int32") as e:
            _gather(mode, v)
        assert _line("LOAD-IDS") in str(e.value), str(e.value)
        if mode == "interp":
            assert f"value {v} at tile element [1, 0]" in str(e.value)


@pytest.mark.parametrize("mode", MODES)
def test_out_of_int32_values_in_masked_off_lanes_are_not_loaded(mode):
    idx = torch.tensor([[1], [2], [2**32 + 3], [-2**40]], dtype=torch.int64)
    out = torch.full((4, 4), -7.0)
    GATHER[mode](idx, TABLE, out, 2)  # rows 2, 3 are masked off: never loaded, never used
    assert torch.equal(out[:2], TABLE[[1, 2]]) and torch.equal(out[2:], torch.full((2, 4), -7.0))
    with pytest.raises(trn.BoundsError, match="does not fit int32"):
        GATHER[mode](idx, TABLE, out, 3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_index_arithmetic_overflow_raises(mode, dtype):
    out = torch.full((3, 4), -7.0)
    AFFINE[mode](torch.tensor([[0], [12], [3]], dtype=dtype), TABLE, out)  # 12 * 4 + 1 = 49: the last row
    assert torch.equal(out, TABLE[[1, 49, 13]])
    for v in [2**30, 2**29, -2**29 - 1, 2**31 - 1]:  # i * 4 overflows int32 (2**30 * 4 + 1 would read row 1)
        out = torch.full((3, 4), -7.0)
        with pytest.raises(trn.BoundsError, match=r"gather index out of bounds: integer multiply overflows "
                                                  r"int32") as e:
            AFFINE[mode](torch.tensor([[0], [v], [3]], dtype=dtype), TABLE, out)
        assert _line("ARITH") in str(e.value)
        assert torch.equal(out, torch.full((3, 4), -7.0))
        if mode == "interp":
            assert f"value {v * 4} at tile element [1, 0]" in str(e.value)
    with pytest.raises(trn.BoundsError, match=r"index \[2147483645, 0\] is out of bounds"):  # fits: 536870911*4+1
        AFFINE[mode](torch.tensor([[0], [2**29 - 1], [3]], dtype=dtype), TABLE, torch.zeros(3, 4))


@pytest.mark.parametrize("mode", MODES)
def test_inlined_index_arithmetic_overflow_raises(mode):
    x = torch.arange(4 * 6, dtype=torch.float32).reshape(4, 6)
    idx = torch.tensor([[3, 4, 5]] * 4, dtype=torch.int32)
    out = torch.zeros(4, 3)
    ELEMENTWISE[mode](idx, x, out, 3)
    assert torch.equal(out, x[:, :3])
    idx[2, 1] = -2**31 + 2  # -2**31 + 2 - 3 wraps to 2**31 - 1
    with pytest.raises(trn.BoundsError, match="integer subtract overflows int32") as e:
        ELEMENTWISE[mode](idx, x, out, 3)
    assert _line("ELEM-ARITH") in str(e.value)
    idx[2, 1] = 2**31 - 1
    with pytest.raises(trn.BoundsError, match="integer subtract overflows int32"):
        ELEMENTWISE[mode](idx, x, out, -2**31 + 6)  # (2**31 - 1) - (-2**31 + 6) = 2**32 - 7 would read column 5


@pytest.mark.parametrize("mode", MODES)
def test_scatter_index_overflow_raises_and_writes_nothing(mode):
    src = torch.ones(3, 4)
    out = torch.zeros(10, 4)
    SCATTER[mode](torch.tensor([[0], [9 - 5], [2]]), src, out, 5)  # the last row, 9
    assert out[[5, 9, 7]].eq(1).all() and out.sum() == 12
    for v in [2**32 + 4, 2**31 - 3]:  # wraps to row 4 + 5 = 9 / overflows in the add
        out = torch.zeros(10, 4)
        with pytest.raises(trn.BoundsError, match="gather index out of bounds") as e:
            SCATTER[mode](torch.tensor([[0], [v], [2]]), src, out, 5)
        assert torch.equal(out, torch.zeros(10, 4))
        assert _line("SCATTER-ARITH") in str(e.value)


@pytest.mark.parametrize("mode", MODES)
def test_only_index_producers_are_checked(mode):
    idx = torch.tensor([[0], [2**30], [3]], dtype=torch.int32)
    vals = torch.zeros(3, 1, dtype=torch.int32)
    out = torch.zeros(3, 4)
    WRAP[mode](idx, TABLE, out, vals)  # a stored value and a hashed index wrap as int32, no error
    wrapped = ((idx.long() * 4 + 1 + 2**31) % 2**32 - 2**31).int()
    assert torch.equal(vals, wrapped)
    h = (((idx.long() * 40503 + 2**31) % 2**32 - 2**31) & 7)[:, 0]
    assert torch.equal(out, TABLE[h])
    with pytest.raises(trn.BoundsError, match="overflows int32"):  # the same arithmetic as an index raises
        AFFINE[mode](idx, TABLE, torch.zeros(3, 4))
