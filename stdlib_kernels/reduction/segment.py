"""``segment_reduce`` (sum / mean / max / min / prod over segments given by lengths or offsets) and its backward
(``aten::segment_reduce``, ``aten::_segment_reduce_backward``).

The data is seen as ``[O, A, I]`` (``O``: dims before ``axis``, ``A``: the segmented axis, ``I``: dims after it),
the output as ``[O, S, I]``; every outer row ``o`` has its own ``S`` segments (``lengths [*, S]`` or
``offsets [*, S + 1]``, int64 or int32, read on chip as int32 words).

* ``seg_plan`` (outer rows on partitions, segments along the free axis): segment lengths and ends (an fp32 scan
  of the lengths, with a carry across chunks), the histogram slot ``o * (A + 1) + end`` of every segment, and per
  row the first position, the end, and flags: a negative length; a segment outside ``[0, A]`` (or an int64 value
  that is not a 32-bit integer); lengths not summing to ``A``. One host read of the flags decides: bad input that
  torch checks (``unsafe=False`` lengths, negative lengths) is declined, so the CPU raises torch's own error;
  segments past the data (which torch's kernel would read out of bounds) raise a ``RuntimeError``.
* ``seg_hist`` + ``seg_ids``: a scatter-add of 1 at every segment end, then a running count along the axis gives
  each position its segment (``#{s: end_s <= j}``); positions outside ``[first, end)`` go to a trash row.
* ``seg_reduce``: 128 positions on the partitions, accumulating DMA stores (``add`` / ``multiply`` / ``max`` /
  ``min``) into ``[O * S + 1, I]`` rows seeded with ``initial`` (or the identity). The DMA applies the updates in
  position order and rounds each one to the data dtype, as torch's CPU loop does, so sums and products match it.
  ``seg_finish`` divides means (NaN for an empty segment without ``initial``).
* backward (torch's CPU rules): sum copies, mean divides by the length, max/min give the gradient to every element
  equal to the result (or NaN), divided by their count when there are several and the gradient is positive (torch
  divides only positive ones); prod divides ``grad * out`` by the element, and for a zero or NaN element multiplies
  by the product of the others (``seg_stats`` gathers the non-zero product and the zero/NaN counts per segment).

Example:
    >>> import torch
    >>> x = torch.arange(6.0, device="trn")                                            # doctest: +SKIP
    >>> torch.segment_reduce(x, "sum", lengths=torch.tensor([2, 0, 4], device="trn"))  # doctest: +SKIP
    tensor([ 1.,  0., 14.], device='trn:0')
"""

from __future__ import annotations

import math
from typing import Any

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.tiling import col_chunks, row_tiles
from trnlang.device import decline, lowering

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class Reduce(U.Mode):
    """A segment reduction (the value: torch's ``reduce=`` string, parsed once where the call arrives)."""

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    PROD = "prod"


_REDUCES = {r.value: r for r in Reduce}
#: the identity of each reduction (the accumulator's initial value without ``initial=``)
_IDENT = {Reduce.SUM: 0.0, Reduce.MEAN: 0.0, Reduce.MAX: -math.inf, Reduce.MIN: math.inf, Reduce.PROD: 1.0}
#: the accumulating DMA of each reduction (``tl.store(accumulate=...)``)
_ACC = {Reduce.SUM: "add", Reduce.MEAN: "add", Reduce.MAX: "max", Reduce.MIN: "min", Reduce.PROD: "multiply"}
_CH = 512            # inner columns per tile
_SCH = 2048          # segments / positions per chunk of the row kernels
_EXACT = 1 << 24     # counts and offsets are scanned in fp32: exact below 2^24


# ------------------------------------------------------------------------------------------ kernels


def _not_i32(hw: Any, lw: Any) -> Any:
    """Where the int64 words ``(lw, hw)`` (int32 tiles) are not a 32-bit integer: ``hw`` is not the sign of ``lw``."""
    return (hw + (lw < 0).astype(tl.int32)) != 0


@trn.kernel
def seg_plan(lo, hi, lens, hidx, info, a_dim, offs):
    """Segment lengths ``[O, S]`` (fp32), histogram slots ``hidx [O, S]`` (int32) and per-row ``info
    [O, 5]``: first position, end, negative-length flag, out-of-range flag, lengths-do-not-sum-to-A flag.

    ``lo``/``hi``: low/high int32 words of the lengths ``[O, S]`` or offsets ``[O, S + 1]`` (``hi`` None for
    int32 input); ``offs``: offsets mode."""
    o_dim, s_dim = lens.shape
    one = tl.arange(1)[None, :]
    for rows, mr in row_tiles(o_dim):
        p = rows.shape[0]
        carry = tl.zeros((p, 1), tl.float32)
        fneg = tl.zeros((p, 1), tl.float32)
        foob = tl.zeros((p, 1), tl.float32)
        hbase = isa.iota(rows * (a_dim + 1), tl.int32)
        for cols, m in col_chunks(s_dim, _SCH, mr, loop=tl.sequential_range):
            la = tl.load(lo[rows, cols], mask=m)
            a = la.astype(tl.float32)
            if offs:
                lb = tl.load(lo[rows, cols + 1], mask=m)
                b = lb.astype(tl.float32)
                ln, en = b - a, b
                bad = (a < 0.0) | (a > float(a_dim)) | (b < 0.0) | (b > float(a_dim))
                if hi is not None:
                    bad = bad | _not_i32(tl.load(hi[rows, cols], mask=m), la)
                    bad = bad | _not_i32(tl.load(hi[rows, cols + 1], mask=m), lb)
            else:
                en = isa.tensor_tensor_scan(1.0, a, carry, "multiply", "add")
                ln = a
                bad = (en > float(a_dim)) | (en - a < 0.0)
                if hi is not None:
                    bad = bad | _not_i32(tl.load(hi[rows, cols], mask=m), la)
                f = cols.shape[1]
                carry[...] = en[:, f - 1:f]
            fneg[...] = tl.maximum(fneg, tl.max(tl.where(ln < 0.0, 1.0, 0.0), axis=1, keepdims=True))
            foob[...] = tl.maximum(foob, tl.max(tl.where(bad, 1.0, 0.0), axis=1, keepdims=True))
            tl.store(lens[rows, cols], ln, mask=m)
            slot = tl.minimum(tl.maximum(en, 0.0), float(a_dim)).astype(tl.int32)
            tl.store(hidx[rows, cols], hbase + slot, mask=m)
        row = tl.ndarray((p, 5), tl.float32)
        if offs:
            row[:, 0:1] = tl.load(lo[rows, one], mask=mr).astype(tl.float32)
            row[:, 1:2] = tl.load(lo[rows, one + s_dim], mask=mr).astype(tl.float32)
            row[:, 4:5] = tl.zeros((p, 1), tl.float32)
        else:
            row[:, 0:1] = tl.zeros((p, 1), tl.float32)
            row[:, 1:2] = carry
            row[:, 4:5] = tl.where(carry != float(a_dim), 1.0, 0.0)
        row[:, 2:3] = fneg
        row[:, 3:4] = foob
        tl.store(info[rows, tl.arange(5)[None, :]], row, mask=mr)


@trn.kernel
def seg_hist(hidx, hist):
    """``hist[hidx[n]] += 1`` for every segment ``n`` (``hidx [N, 1]`` int32, ``hist [H, 1]`` fp32 zeros)."""
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(hidx.shape[0]):
        h = tl.load(hidx[rows, one], mask=m, other=0)
        tl.store(hist[h, one], 1.0, mask=m, accumulate="add")


@trn.kernel
def seg_ids(hist, info, tgt, s_dim):
    """``tgt[o, j] = o * S + #{s: end_s <= j}`` for positions in ``[first_o, end_o)``, else ``O * S`` (the trash
    row): a running sum of the end histogram ``hist [O, A + 1]`` along the axis."""
    o_dim, a_dim = tgt.shape
    trash = o_dim * s_dim
    for rows, mr in row_tiles(o_dim):
        first = tl.load(info[rows, tl.arange(1)[None, :]], mask=mr)
        end = tl.load(info[rows, tl.arange(1)[None, :] + 1], mask=mr)
        obase = isa.iota(rows * s_dim, tl.int32)
        carry = tl.zeros((rows.shape[0], 1), tl.float32)
        for cols, m in col_chunks(a_dim, _SCH, mr, loop=tl.sequential_range):
            h = tl.load(hist[rows, cols], mask=m)
            c = isa.tensor_tensor_scan(1.0, h, carry, "multiply", "add")
            pos = isa.iota(cols + 0 * rows, tl.float32)
            valid = (pos >= first) & (pos < end)
            tl.store(tgt[rows, cols], tl.where(valid, obase + c.astype(tl.int32), trash), mask=m)
            f = cols.shape[1]
            carry[...] = c[:, f - 1:f]


@trn.kernel
def seg_reduce(x, tgt, acc, op):
    """``acc[tgt[r]] (op)= x[r]`` row by row (``x [N, I]``, ``tgt [N, 1]``, ``acc [O * S + 1, I]``), an
    accumulating DMA applied in position order."""
    n_dim, i_dim = x.shape
    one = tl.arange(1)[None, :]
    for rows, m1 in row_tiles(n_dim):
        t = tl.load(tgt[rows, one], mask=m1, other=0)
        for cols, m in col_chunks(i_dim, _CH, m1):
            tl.store(acc[t, cols], tl.load(x[rows, cols], mask=m), mask=m, accumulate=op)


def _low(v: Any, dt: Any) -> Any:
    """``v`` rounded to the data dtype ``dt`` (torch's reduced-precision scalar arithmetic), back in fp32."""
    return v if dt == tl.float32 else v.astype(dt).astype(tl.float32)


@trn.kernel
def seg_finish(acc, lens, out, mean, has_init):
    """``out [O * S, I]`` from the accumulators: a copy, or for means ``acc / length`` (the length rounded to the
    data dtype, as torch's ``scalar_t / int64``), ``initial`` or NaN for empty segments."""
    n_dim, i_dim = out.shape
    one = tl.arange(1)[None, :]
    for rows, m1 in row_tiles(n_dim):
        ln = _low(tl.load(lens[rows, one], mask=m1), out.dtype) if mean else None
        for cols, m in col_chunks(i_dim, _CH, m1):
            a = tl.load(acc[rows, cols], mask=m).astype(tl.float32)
            if mean:
                a = tl.where(ln > 0.0, a / tl.maximum(ln, 1.0), a if has_init else math.nan)
            tl.store(out[rows, cols], a, mask=m)


@trn.kernel
def seg_stats(x, tgt, res, cnt, pnz, zc, nc, mode):
    """Per segment and column, for the backward: max/min: ``cnt`` = how many elements equal the result (or are
    NaN); prod: ``pnz`` = ``initial`` times the product of the non-zero, non-NaN elements (in order, rounded as
    torch does), ``zc``/``nc`` = zero and NaN counts. ``res``: the forward result ``[O * S, I]``."""
    n_dim, i_dim = x.shape
    last = res.shape[0] - 1
    one = tl.arange(1)[None, :]
    for rows, m1 in row_tiles(n_dim):
        t = tl.load(tgt[rows, one], mask=m1, other=0)
        tc = tl.minimum(t, last)
        for cols, m in col_chunks(i_dim, _CH, m1):
            xv = tl.load(x[rows, cols], mask=m).astype(tl.float32)
            nan = xv != xv
            if mode is Reduce.PROD:
                zero = xv == 0.0
                tl.store(pnz[t, cols], tl.where(zero | nan, 1.0, xv), mask=m, accumulate="multiply")
                tl.store(zc[t, cols], tl.where(zero, 1.0, 0.0), mask=m, accumulate="add")
                tl.store(nc[t, cols], tl.where(nan, 1.0, 0.0), mask=m, accumulate="add")
            else:
                rv = tl.load(res[tc, cols], mask=m).astype(tl.float32)
                tl.store(cnt[t, cols], tl.where(nan | (xv == rv), 1.0, 0.0), mask=m, accumulate="add")


@trn.kernel
def seg_grad(x, tgt, g, res, lens, cnt, pnz, zc, nc, gi, mode):
    """``gi [N, I]``: the gradient of every position (0 outside the segments) by torch's CPU rules (module doc)."""
    n_dim, i_dim = x.shape
    last = g.shape[0] - 1
    dt = gi.dtype
    one = tl.arange(1)[None, :]
    for rows, m1 in row_tiles(n_dim):
        t = tl.load(tgt[rows, one], mask=m1, other=0)
        valid = t <= last
        tc = tl.minimum(t, last)
        ln = _low(tl.load(lens[tc, one], mask=m1), dt) if mode is Reduce.MEAN else None
        for cols, m in col_chunks(i_dim, _CH, m1):
            gv = tl.load(g[tc, cols], mask=m).astype(tl.float32)
            if mode is Reduce.SUM:
                r = gv
            elif mode is Reduce.MEAN:
                r = gv / tl.maximum(ln, 1.0)
            else:
                xv = tl.load(x[rows, cols], mask=m).astype(tl.float32)
                rv = tl.load(res[tc, cols], mask=m).astype(tl.float32)
                nan = xv != xv
                if mode is Reduce.PROD:
                    zero = xv == 0.0
                    pz = tl.load(pnz[tc, cols], mask=m).astype(tl.float32)
                    others_nan = tl.load(nc[tc, cols], mask=m) - tl.where(nan, 1.0, 0.0)
                    others_zero = tl.load(zc[tc, cols], mask=m) - tl.where(zero, 1.0, 0.0)
                    excl = tl.where(others_nan > 0.0, math.nan, tl.where(others_zero > 0.0, pz * 0.0, pz))
                    r = tl.where(zero | nan, gv * excl, _low(gv * rv, dt) / xv)
                else:
                    c = _low(tl.load(cnt[tc, cols], mask=m), dt)
                    hit = nan | (xv == rv)
                    r = tl.where(hit, tl.where((c >= 2.0) & (gv > 0.0), gv / tl.maximum(c, 1.0), gv), 0.0)
            tl.store(gi[rows, cols], tl.where(valid, r, 0.0), mask=m)


# ------------------------------------------------------------------------------------------ host side


def _words(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A contiguous ``[O, K]`` int64/int32 tensor as int32 views of its low and high words (high None for int32)."""
    if t.dtype == torch.int32:
        return t, None
    w = t.view(torch.int32)
    return w[:, 0::2], w[:, 1::2]


class _Plan:
    """Segment ids of every position (``tgt [O * A, 1]`` int32; ``O * S`` outside the segments) and the segment
    lengths (``lens [O * S, 1]`` fp32)."""

    def __init__(self, tgt: torch.Tensor, lens: torch.Tensor) -> None:
        self.tgt, self.lens = tgt, lens


def _plan(idx: torch.Tensor, offs: bool, o_dim: int, a_dim: int, s_dim: int, strict: bool) -> Any:
    """:class:`_Plan`, or NotImplemented when the CPU must run this call (``strict``: torch's ``unsafe=False``
    length checks apply). Raises for segments outside the data."""
    lo, hi = _words(idx.contiguous().view(o_dim, s_dim + 1 if offs else s_dim))
    lens = torch.empty((o_dim, s_dim), dtype=torch.float32, device="trn")
    hidx = torch.empty((o_dim, s_dim), dtype=torch.int32, device="trn")
    info = torch.empty((o_dim, 5), dtype=torch.float32, device="trn")
    seg_plan(lo, hi, lens, hidx, info, a_dim, offs)
    neg, oob, sum_ne = info[:, 2:5].amax(0).tolist()
    if strict and (neg or sum_ne or oob):
        return decline("negative, out-of-range or mis-summed lengths: torch raises")
    if oob:
        raise RuntimeError(f"segment_reduce(): segments must lie within [0, data.size(axis)) = [0, {a_dim}) "
                           f"(torch's CPU kernel would read outside the data)")
    if neg:
        return decline("a negative segment length")
    hist = torch.zeros((o_dim * (a_dim + 1), 1), dtype=torch.float32, device="trn")
    seg_hist(hidx.view(o_dim * s_dim, 1), hist)
    tgt = torch.empty((o_dim, a_dim), dtype=torch.int32, device="trn")
    if a_dim:
        seg_ids(hist.view(o_dim, a_dim + 1), info, tgt, s_dim)
    return _Plan(tgt.view(o_dim * a_dim, 1), lens.view(o_dim * s_dim, 1))


def _shape(data: torch.Tensor, idx: Any, offs: bool, axis: int) -> Any:
    """``(axis, O, A, I, S)`` of a call this module runs, else None."""
    if not (U.is_trn(data) and data.dtype in DTYPES and not data.is_conj() and not data.is_neg()):
        return None
    if not (U.is_trn(idx) and idx.dtype in (torch.int64, torch.int32)):
        return None
    nd = data.dim()
    if nd == 0 or not -nd <= axis < nd:
        return None
    axis %= nd
    if idx.dim() != axis + 1 or tuple(idx.shape[:axis]) != tuple(data.shape[:axis]):
        return None
    s_dim = idx.shape[axis] - (1 if offs else 0)
    o_dim, a_dim, i_dim = U.prod(data.shape[:axis]), data.shape[axis], U.prod(data.shape[axis + 1:])
    if s_dim < 0 or a_dim >= _EXACT or s_dim >= _EXACT or o_dim * (a_dim + 1) >= 2**31 or o_dim * s_dim >= 2**31:
        return None
    return axis, o_dim, a_dim, i_dim, s_dim


def _initial(reduce: Reduce, initial: Any) -> Any:
    if initial is None:
        return _IDENT[reduce]
    if isinstance(initial, torch.Tensor):
        initial = initial.item()
    if isinstance(initial, complex):
        return None
    return float(initial)


@lowering("aten::segment_reduce", dtypes=None)
def segment_reduce(data: torch.Tensor, reduce: str, *, lengths: torch.Tensor | None = None,
                   indices: torch.Tensor | None = None, offsets: torch.Tensor | None = None, axis: int = 0,
                   unsafe: bool = False, initial: Any = None) -> Any:
    """``torch.segment_reduce``: sum / mean / max / min / prod of each segment along ``axis``."""
    kind = _REDUCES.get(reduce)
    if indices is not None or kind is None or (lengths is None and offsets is None):
        return decline("indices=, an unknown reduce, or neither lengths nor offsets: torch raises")
    offs = offsets is not None
    idx = offsets if offs else lengths
    sh = _shape(data, idx, offs, axis)
    init = _initial(kind, initial)
    if sh is None or init is None:
        return decline("data or lengths not supported trn tensors, a bad axis/shape, sizes past 2^24, complex initial")
    axis, o_dim, a_dim, i_dim, s_dim = sh
    strict = not offs and not unsafe
    out_shape = (*data.shape[:axis], s_dim, *data.shape[axis + 1:])
    if o_dim * s_dim == 0:
        if strict:
            return decline("empty lengths: torch raises")  # torch's lengths.min() of an empty tensor raises
        return torch.empty(out_shape, dtype=data.dtype, device="trn")
    plan = _plan(idx, offs, o_dim, a_dim, s_dim, strict)
    if plan is NotImplemented:
        return plan
    out = torch.empty(out_shape, dtype=data.dtype, device="trn")
    if i_dim == 0:
        return out
    ns = o_dim * s_dim
    acc = torch.full((ns + 1, i_dim), init, dtype=data.dtype, device="trn")
    if o_dim * a_dim:
        seg_reduce(data.contiguous().view(o_dim * a_dim, i_dim), plan.tgt, acc, _ACC[kind])
    seg_finish(acc, plan.lens, out.view(ns, i_dim), kind is Reduce.MEAN, initial is not None)
    return out


@lowering("aten::_segment_reduce_backward", dtypes=None)
def segment_reduce_backward(grad: torch.Tensor, output: torch.Tensor, data: torch.Tensor, reduce: str, *,
                            lengths: torch.Tensor | None = None, offsets: torch.Tensor | None = None, axis: int = 0,
                            initial: Any = None) -> Any:
    """Gradient of :func:`segment_reduce` with respect to ``data`` (torch's CPU rules, see the module doc)."""
    kind = _REDUCES.get(reduce)
    if kind is None or (lengths is None and offsets is None):
        return decline("an unknown reduce, or neither lengths nor offsets")
    offs = offsets is not None
    idx = offsets if offs else lengths
    sh = _shape(data, idx, offs, axis)
    init = _initial(kind, initial)
    if sh is None or init is None or not (U.is_trn(grad) and U.is_trn(output)):
        return decline("data or lengths not supported trn tensors, a bad axis/shape, sizes past 2^24, complex initial")
    axis, o_dim, a_dim, i_dim, s_dim = sh
    out_shape = (*data.shape[:axis], s_dim, *data.shape[axis + 1:])
    if tuple(grad.shape) != out_shape or tuple(output.shape) != out_shape or not (
            grad.dtype == output.dtype == data.dtype):
        return decline("grad/output of the wrong shape or dtype")
    gi = torch.zeros(data.shape, dtype=data.dtype, device="trn")
    n, ns = o_dim * a_dim, o_dim * s_dim
    if n * i_dim == 0 or ns == 0:
        return gi
    plan = _plan(idx, offs, o_dim, a_dim, s_dim, False)
    if plan is NotImplemented:
        return plan
    x = data.contiguous().view(n, i_dim)
    g = grad.contiguous().view(ns, i_dim)
    res = output.contiguous().view(ns, i_dim)
    cnt = pnz = zc = nc = None
    if kind in (Reduce.MAX, Reduce.MIN):
        cnt = torch.zeros((ns + 1, i_dim), dtype=torch.float32, device="trn")
    elif kind is Reduce.PROD:
        pnz = torch.full((ns + 1, i_dim), init, dtype=data.dtype, device="trn")
        zc = torch.zeros((ns + 1, i_dim), dtype=torch.float32, device="trn")
        nc = torch.zeros((ns + 1, i_dim), dtype=torch.float32, device="trn")
    if cnt is not None or pnz is not None:
        seg_stats(x, plan.tgt, res, cnt, pnz, zc, nc, kind)
    seg_grad(x, plan.tgt, g, res, plan.lens, cnt, pnz, zc, nc, gi.view(n, i_dim), kind)
    return gi
