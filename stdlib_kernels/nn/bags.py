"""``embedding_bag``: sums, means or maxima of gathered embedding rows per bag, forward and backward
(``aten::_embedding_bag`` / ``_embedding_bag_forward_only``, ``_embedding_bag_backward`` /
``_embedding_bag_dense_backward``, ``_embedding_bag_per_sample_weights_backward``). Registered through
:mod:`stdlib_kernels.nn.sampling`.

* ``bag_ids``: the bag of every index position (``#{offsets <= i} - 1``, offsets broadcast along the free axis),
  plus a device check of the indices (both int32 words of int64 ones) and of the offsets; a bad input declines,
  so torch's CPU kernel raises its own error.
* ``bag_reduce``: 128 index positions on the partitions; each tile gathers its weight rows by indirect DMA and
  accumulates them into an fp32 ``[B, D]`` scratch at the rows' bags (an accumulating ``add``, or ``max``, DMA),
  with the per-sample weights and the padding index applied; counts per bag likewise.
* mode max: ``bag_argmax`` finds, per bag and column, the first position holding the maximum (an accumulating
  ``min`` of candidate positions), and ``bag_finish`` turns it into the weight-row index (``max_indices``).
* backward: scatter-adds of gradient rows into the weight gradient (scaled by ``per_sample_weights``, ``1 / bag
  size`` for mean, ``1 / frequency`` for ``scale_grad_by_freq``), or, for max, of each gradient element to its
  ``max_indices`` row; the per-sample-weight gradient is a row dot product. torch's CPU kernel divides by the
  frequency of the index at the *unique-group rank* of the sorted indices (not the index's own frequency, as
  CUDA does); :func:`freq_rank_count` reproduces that with pairwise comparisons (up to 8192 positions).

The auxiliary outputs (``offset2bag``, ``bag_size``, ``max_indices``) are made as torch's CPU kernel makes them
(empty ``offset2bag`` on the plain sum path, zero bag sizes for sum), so either device's backward can consume them.

Example:
    >>> import torch, torch.nn.functional as F
    >>> w = torch.randn(10, 4, device="trn")                                                 # doctest: +SKIP
    >>> F.embedding_bag(torch.tensor([1, 2, 4, 5], device="trn"), w,
    ...                 offsets=torch.tensor([0, 2], device="trn"), mode="mean").shape       # doctest: +SKIP
    torch.Size([2, 4])
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.tiling import col_chunks, row_tiles
from trnlang.device import decline, lowering

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_CH = 512  # embedding columns per chunk


def _ok(*ts: Any) -> bool:
    return all(isinstance(t, torch.Tensor) and t.device.type == "trn" and t.dtype in DTYPES and not t.is_conj()
               and not t.is_neg() for t in ts) and len({t.dtype for t in ts}) == 1


_MAX_OFFSETS = 16384  # offsets checked in one SBUF row
_SUM, _MEAN, _MAX = 0, 1, 2


@trn.kernel
def bag_ids(offs, lo, hi, o2b, bad, n_bags, num_weights, last):
    """``o2b[i] = #{b < n_bags: offs[b] <= i} - 1`` (the bag of index position ``i``, ``o2b [L, 1]``) for offsets
    ``offs [1, n_off]``. ``bad [L + 1, 1]``: row ``i`` is 1.0 when index ``i`` (low/high int32 words ``lo``/``hi``
    ``[L, 1]``; ``hi`` None for int32 indices) is outside ``[0, num_weights)``; row ``L`` when the offsets are not a
    partition of ``[0, L)`` (first 0, non-decreasing, at most ``L``; ``last``: the last offset must be ``L``)."""
    n_off = offs.shape[1]
    l_dim = o2b.shape[0]
    one = tl.arange(1)[None, :]
    ot = tl.load(offs[0:1, tl.arange(n_off)[None, :]]).astype(tl.float32)
    flag = tl.maximum(tl.where(ot[:, 0:1] != 0.0, 1.0, 0.0),
                      tl.max(tl.where(ot > float(l_dim), 1.0, 0.0), axis=1, keepdims=True))
    if n_off > 1:
        flag = tl.maximum(flag, tl.max(tl.where(ot[:, 1:n_off] < ot[:, 0:n_off - 1], 1.0, 0.0), axis=1,
                                       keepdims=True))
    if last:
        flag = tl.maximum(flag, tl.where(ot[:, n_off - 1:n_off] != float(l_dim), 1.0, 0.0))
    tl.store(bad[l_dim:l_dim + 1, one], flag)
    if l_dim == 0:
        return
    obag = tl.broadcast_to(ot[:, 0:n_bags], (min(128, l_dim), n_bags))
    for rows, m in row_tiles(l_dim):
        cnt = tl.sum(tl.where(obag <= isa.iota(rows, tl.float32), 1.0, 0.0), axis=1, keepdims=True)
        tl.store(o2b[rows, one], (cnt - 1.0).astype(tl.int32), mask=m)
        li = tl.load(lo[rows, one], mask=m)
        ok = (li >= 0) & (li < num_weights)
        if hi is not None:
            ok = ok & (tl.load(hi[rows, one], mask=m) == 0)
        tl.store(bad[rows, one], tl.where(ok, 0.0, 1.0), mask=m)


def _positions(idx: Any, o2b: Any) -> Iterator[tuple[Any, Any, Any, Any]]:
    """Per tile of up to 128 index positions (a real loop): ``(rows, mask, index, bag)``, the last two the ``[P, 1]``
    tiles of ``idx[rows]`` and ``o2b[rows]`` (0 past the end)."""
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(idx.shape[0]):
        yield rows, m, tl.load(idx[rows, one], mask=m, other=0), tl.load(o2b[rows, one], mask=m, other=0)


@trn.kernel
def bag_reduce(w, idx, o2b, psw, acc, cnt, pad, mode):
    """Per index position ``i`` (partitions): row ``w[idx[i]]`` (times ``psw[i]``) accumulated into ``acc [B, D]``
    (fp32) at bag ``o2b[i]`` (``add``, or ``max`` for mode max); ``cnt [B, 1] += (idx[i] != pad)``. Positions of the
    padding index contribute nothing."""
    one = tl.arange(1)[None, :]
    for rows, m1, li, bi in _positions(idx, o2b):
        live = li != pad
        sc = tl.load(psw[rows, one], mask=m1).astype(tl.float32) if psw is not None else None
        tl.store(cnt[bi, one], tl.where(live, 1.0, 0.0), mask=m1, accumulate="add")
        for cols, m in col_chunks(w.shape[1], _CH, m1):
            v = tl.load(w[li, cols], mask=m).astype(tl.float32)
            if mode == _MAX:
                tl.store(acc[bi, cols], tl.where(live, v, -float("inf")), mask=m, accumulate="max")
            else:
                if sc is not None:
                    v = v * sc
                tl.store(acc[bi, cols], tl.where(live, v, 0.0), mask=m, accumulate="add")


@trn.kernel
def bag_argmax(w, idx, o2b, acc, first, pad):
    """Mode max: ``first[b, d] = min{i in bag b: w[idx[i], d] == acc[b, d]}`` (torch keeps the first maximum):
    an accumulating ``min`` store of candidate positions (``first`` starts at ``L``)."""
    l_dim = idx.shape[0]
    for rows, m1, li, bi in _positions(idx, o2b):
        pos = isa.iota(rows, tl.float32)
        for cols, m in col_chunks(w.shape[1], _CH, m1):
            v = tl.load(w[li, cols], mask=m).astype(tl.float32)
            best = tl.load(acc[bi, cols], mask=m)
            cand = tl.where((v == best) & (li != pad), pos, float(l_dim))
            tl.store(first[bi, cols], cand, mask=m, accumulate="min")


@trn.kernel
def bag_finish(acc, cnt, first, idx3, out, bag_size, max_idx, mode):
    """``out [B, D]`` from the fp32 accumulator: sum, mean (``/ count``; 0 for empty bags) or max (0 for empty
    bags); ``bag_size [B, 1]`` (counts; zeros for sum); ``max_idx``: ``[B, D]`` indices of the first maximum
    (``idx3``: the indices as ``[1, L, D]`` with stride 0 along D) or ``[B, 1]`` (a copy of ``bag_size``)."""
    b_dim, d_dim = acc.shape
    one = tl.arange(1)[None, :]
    low = out.dtype if out.dtype != tl.float32 else None
    for rows, m1 in row_tiles(b_dim):
        c = tl.load(cnt[rows, one], mask=m1)
        size = c if mode != _SUM else c * 0.0
        tl.store(bag_size[rows, one], size.astype(tl.int32), mask=m1)
        if mode != _MAX:
            tl.store(max_idx[rows, one], size.astype(tl.int32), mask=m1)
        for cols, m in col_chunks(d_dim, _CH, m1):
            s = tl.load(acc[rows, cols], mask=m)
            if mode == _MEAN:
                if low is not None:  # torch rounds the sum to the output dtype before dividing
                    s = s.astype(low).astype(tl.float32)
                s = tl.where(c > 0.0, s / tl.maximum(c, 1.0), 0.0)
            elif mode == _MAX:
                s = tl.where(c > 0.0, s, 0.0)
                fi = tl.load(first[rows, cols], mask=m)
                at = tl.where(c > 0.0, fi, 0.0).astype(tl.int32)
                mi = tl.load(idx3[0, at, cols], mask=m)
                tl.store(max_idx[rows, cols], tl.where(c > 0.0, mi, 0), mask=m)
            tl.store(out[rows, cols], s, mask=m)


@trn.kernel
def bag_backward(g, idx, o2b, psw, bsz, freq, gw, pad, mode):
    """Sum/mean gradient: ``gw[idx[i]] += g[o2b[i]] * psw[i] / bag_size[o2b[i]] * freq[i]`` (the factors that
    apply; ``freq [L, 1]``: per-position frequency scales), nothing for the padding index. ``gw [V, D]`` fp32,
    zeroed. Narrow dtypes round the scale to the dtype first, as torch's ``axpy`` call does."""
    one = tl.arange(1)[None, :]
    for rows, m1, li, bi in _positions(idx, o2b):
        sc = tl.where(li != pad, 1.0, 0.0)
        if freq is not None:  # per-position 1 / count (see :func:`freq_rank_count`)
            sc = sc * tl.load(freq[rows, one], mask=m1)
        if mode == _MEAN:
            sc = sc / tl.maximum(tl.load(bsz[bi, one], mask=m1).astype(tl.float32), 1.0)
        if psw is not None:
            sc = sc * tl.load(psw[rows, one], mask=m1).astype(tl.float32)
        if g.dtype != tl.float32:
            sc = sc.astype(g.dtype).astype(tl.float32)
        for cols, m in col_chunks(g.shape[1], _CH, m1):
            gv = tl.load(g[bi, cols], mask=m).astype(tl.float32)
            tl.store(gw[li, cols], gv * sc, mask=m, accumulate="add")


@trn.kernel
def bag_backward_max(g, mi, bsz, gw):
    """Max gradient: ``gw[mi[b, d], d] += g[b, d]`` for non-empty bags (``gw [1, V, D]`` view, fp32, zeroed)."""
    b_dim, d_dim = g.shape
    one = tl.arange(1)[None, :]
    for rows, m1 in row_tiles(b_dim):
        ne = tl.load(bsz[rows, one], mask=m1) > 0
        for cols, m in col_chunks(d_dim, _CH, m1):
            at = tl.where(ne, tl.load(mi[rows, cols], mask=m), 0)
            gv = tl.where(ne, tl.load(g[rows, cols], mask=m).astype(tl.float32), 0.0)
            tl.store(gw[0, at, cols], gv, mask=m, accumulate="add")


@trn.kernel
def bag_psw_backward(g, w, idx, o2b, out, pad):
    """``out[i] = <g[o2b[i]], w[idx[i]]>`` (0 for the padding index): the per-sample-weight gradient."""
    one = tl.arange(1)[None, :]
    for rows, m1, li, bi in _positions(idx, o2b):
        acc = tl.zeros((rows.shape[0], 1), tl.float32)
        for cols, m in col_chunks(w.shape[1], _CH, m1, loop=tl.sequential_range):
            gv = tl.load(g[bi, cols], mask=m).astype(tl.float32)
            wv = tl.load(w[li, cols], mask=m).astype(tl.float32)
            acc[...] = acc + tl.sum(gv * wv, axis=1, keepdims=True)
        tl.store(out[rows, one], tl.where(li != pad, acc, 0.0), mask=m1)


def _words(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A 1-D index tensor as ``[L, 1]`` int32 views of its low and high words (high: None for int32)."""
    n = t.shape[0]
    if t.dtype == torch.int32:
        return torch.as_strided(t, (n, 1), (t.stride(0), 1), t.storage_offset()), None
    base = torch.as_strided(t, (max(1, t.untyped_storage().nbytes() // 8),), (1,), 0).view(torch.int32)
    st, off = 2 * t.stride(0), 2 * t.storage_offset()
    return torch.as_strided(base, (n, 1), (st, 1), off), torch.as_strided(base, (n, 1), (st, 1), off + 1)


def _col(t: torch.Tensor) -> torch.Tensor:
    """A 1-D tensor as an ``[n, 1]`` view."""
    return torch.as_strided(t, (t.shape[0], 1), (t.stride(0), 1), t.storage_offset())


def _bag_plan(weight: Any, indices: Any, offsets: Any, include_last_offset: bool) -> Any:
    """``(B, offset2bag [L] int64)`` after validating on the device, or a string: why declined (bad input: the CPU
    raises torch's error; unusual layouts: the CPU runs them)."""
    if not (_ok(weight) and weight.dim() == 2 and isinstance(indices, torch.Tensor) and U.is_trn(indices)
            and isinstance(offsets, torch.Tensor) and U.is_trn(offsets) and indices.dim() == 1 and offsets.dim() == 1
            and indices.dtype in (torch.int64, torch.int32) and offsets.dtype in (torch.int64, torch.int32)):
        return "weight not a 2-D float32/bfloat16/float16 trn tensor, or indices/offsets not 1-D int trn tensors"
    n_off = offsets.shape[0]
    n_bags = n_off - 1 if include_last_offset else n_off
    if n_off == 0 or n_bags <= 0:
        return "no bags (empty offsets)"
    if n_off > _MAX_OFFSETS or weight.shape[0] >= 2 ** 31:
        return "more than 16384 offsets, or 2^31 or more weight rows"
    l_dim = indices.shape[0]
    o2b = torch.empty((l_dim,), dtype=torch.int64, device="trn")
    bad = torch.empty((l_dim + 1, 1), dtype=torch.float32, device="trn")
    lo, hi = _words(indices)
    bag_ids(offsets.view(1, n_off) if offsets.is_contiguous() else offsets.contiguous().view(1, n_off), lo, hi,
            _col(o2b), bad, n_bags, int(weight.shape[0]), bool(include_last_offset))
    if bad.sum().item() > 0:
        return "an index outside the weight rows, or offsets that do not partition the indices"
    return n_bags, o2b


def _embedding_bag_impl(weight: Any, indices: Any, offsets: Any, scale_grad_by_freq: bool, mode: int, sparse: bool,
                        per_sample_weights: Any, include_last_offset: bool, padding_idx: int) -> Any:
    if mode not in (_SUM, _MEAN, _MAX) or (per_sample_weights is not None and mode != _SUM):
        return decline("an unknown mode, or per_sample_weights with a mode other than sum")
    if per_sample_weights is not None and (not _ok(weight, per_sample_weights) or per_sample_weights.dim() != 1
                                           or per_sample_weights.shape[0] != indices.shape[0]):
        return decline("per_sample_weights not a 1-D float trn tensor of the indices' length")
    plan = _bag_plan(weight, indices, offsets, include_last_offset)
    if isinstance(plan, str):
        return decline(plan)
    n_bags, o2b = plan
    v, d = weight.shape
    l_dim = indices.shape[0]
    pad = int(padding_idx) if padding_idx is not None and 0 <= padding_idx < v else -1
    acc = torch.full((n_bags, d), -float("inf") if mode == _MAX else 0.0, dtype=torch.float32, device="trn")
    cnt = torch.zeros((n_bags, 1), dtype=torch.float32, device="trn")
    out = torch.empty((n_bags, d), dtype=weight.dtype, device="trn")
    bag_size = torch.empty((n_bags,), dtype=torch.int64, device="trn")
    max_idx = torch.empty((n_bags, d) if mode == _MAX else (n_bags,), dtype=torch.int64, device="trn")
    idx_c = _col(indices)
    first = None
    if l_dim and d:
        bag_reduce(weight, idx_c, _col(o2b), _col(per_sample_weights) if per_sample_weights is not None else None,
                   acc, cnt, pad, mode)
        if mode == _MAX:
            first = torch.full((n_bags, d), float(l_dim), dtype=torch.float32, device="trn")
            bag_argmax(weight, idx_c, _col(o2b), acc, first, pad)
    if d:
        idx3 = torch.as_strided(indices, (1, max(l_dim, 1), d), (0, indices.stride(0), 0), indices.storage_offset())
        bag_finish(acc, cnt, first if first is not None else acc, idx3, out, _col(bag_size),
                   max_idx if mode == _MAX else _col(max_idx), mode)
    else:
        bag_size.zero_()
        max_idx.zero_()
    if mode == _SUM and pad < 0:  # torch's fast sum path returns no offset2bag
        o2b = torch.empty((0,), dtype=torch.int64, device="trn")
    return out, o2b, bag_size, max_idx


@lowering("aten::_embedding_bag", dtypes=None)
def embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, scale_grad_by_freq: bool = False,
                  mode: int = 0, sparse: bool = False, per_sample_weights: torch.Tensor | None = None,
                  include_last_offset: bool = False, padding_idx: int = -1) -> Any:
    """``F.embedding_bag``: sum / mean / max of gathered weight rows per bag -> (output, offset2bag, bag_size,
    max_indices), the auxiliary outputs as torch's CPU kernel makes them."""
    return _embedding_bag_impl(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                               include_last_offset, padding_idx)


@lowering("aten::_embedding_bag_forward_only", dtypes=None)
def embedding_bag_forward_only(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                               scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                               per_sample_weights: torch.Tensor | None = None, include_last_offset: bool = False,
                               padding_idx: int = -1) -> Any:
    """``F.embedding_bag`` without autograd (the same kernels)."""
    return _embedding_bag_impl(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                               include_last_offset, padding_idx)


def _dense_backward(grad: Any, indices: Any, offsets: Any, offset2bag: Any, bag_size: Any, maximum_indices: Any,
                    num_weights: int, scale_grad_by_freq: bool, mode: int, per_sample_weights: Any,
                    padding_idx: int) -> Any:
    if not (_ok(grad) and grad.dim() == 2 and U.is_trn(indices) and indices.dim() == 1
            and indices.dtype in (torch.int64, torch.int32) and U.is_trn(bag_size)) or mode not in (0, 1, 2):
        return decline("grad not 2-D float on trn, indices not 1-D int on trn, bag_size not on trn, or an unknown mode")
    b, d = grad.shape
    v = int(num_weights)
    l_dim = indices.shape[0]
    gw = torch.zeros((v, d), dtype=torch.float32, device="trn")
    pad = int(padding_idx) if padding_idx is not None and 0 <= padding_idx < v else -1
    if mode == _MAX:
        if not (U.is_trn(maximum_indices) and maximum_indices.shape == grad.shape and bag_size.shape[0] == b):
            return decline("max mode with maximum_indices not on trn or of the wrong shape, or a bag_size mismatch")
        if b and d:
            try:
                bag_backward_max(grad, maximum_indices, _col(bag_size), gw.view(1, v, d))
            except trn.BoundsError:
                return decline("a maximum index out of range")
        return gw.to(grad.dtype)
    if offset2bag is None or offset2bag.numel() != l_dim:  # torch's fast sum path left it empty: recompute
        if offsets is None:
            return decline("no offset2bag and no offsets to rebuild it")
        plan = _bag_plan(grad.new_empty((v, 1)), indices, offsets, offsets.shape[0] == b + 1)
        if isinstance(plan, str):
            return decline(plan)
        offset2bag = plan[1]
    if per_sample_weights is not None and (not _ok(grad, per_sample_weights) or per_sample_weights.numel() != l_dim):
        return decline("per_sample_weights not a float trn tensor of the indices' length")
    freq = None
    idx_c = _col(indices)
    if scale_grad_by_freq and l_dim:
        try:
            freq = _freq_scale(indices, v)
        except trn.BoundsError:
            return decline("an index out of range")
        if freq is None:
            return decline("scale_grad_by_freq with more than 8192 indices or 2^24 or more weights")
    if l_dim and d:
        try:
            bag_backward(grad, idx_c, _col(offset2bag), _col(per_sample_weights) if per_sample_weights is not None
                         else None, _col(bag_size), freq, gw, pad, mode)
        except trn.BoundsError:
            return decline("an index out of range")
    return gw.to(grad.dtype)


_MAX_FREQ = 8192  # index positions the quadratic frequency-rank kernels take


def _replicated(row: Any, cols: Any, mc: Any, rows: Any, other: Any = 0, cast: bool = True) -> Any:
    """The chunk ``row[0, cols]`` of a ``[1, L]`` tensor (masked by ``mc``; fp32 when ``cast``) replicated across the
    partitions of ``rows``."""
    v = tl.load(row[0:1, cols], mask=mc, other=other)
    return tl.broadcast_to(v.astype(tl.float32) if cast else v, (rows.shape[0], cols.shape[1]))


@trn.kernel
def freq_counts(ucol, urow, freq, cnt, le):
    """Per position ``i``: ``cnt[i] = freq[u[i]]`` (how often its index occurs) and ``le[i] = #{j: u[j] <= u[i]}``
    (its rank in the sorted indices, counting ties), for indices ``u`` seen as a column ``[L, 1]`` and a row
    ``[1, L]``."""
    l_dim = ucol.shape[0]
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(l_dim):
        ui = tl.load(ucol[rows, one], mask=m, other=0)
        tl.store(cnt[rows, one], tl.load(freq[ui, one], mask=m), mask=m)
        uf = ui.astype(tl.float32)
        acc = tl.zeros((rows.shape[0], 1), tl.float32)
        for cols, mc in col_chunks(l_dim, _CH, loop=tl.sequential_range):
            uj = _replicated(urow, cols, mc, rows, -1)
            acc[...] = acc + tl.sum(tl.where((uj <= uf) & mc, 1.0, 0.0), axis=1, keepdims=True)
        tl.store(le[rows, one], acc, mask=m)


@trn.kernel
def freq_rank_count(ucol, urow, crow, lerow, freq, scale):
    """torch's CPU ``scale_grad_by_freq`` factor per position ``i``: ``1 / counts[sorted[r]]`` where ``r`` is the
    rank of ``u[i]`` among the distinct indices (``sum_{j: u[j] < u[i]} 1 / cnt[j]``) and ``sorted[r]`` the r-th
    smallest index (the smallest ``u[j]`` with ``le[j] > r``). (torch indexes the counts by the unique-group
    counter, not by the index itself; CUDA uses the index's own count. This reproduces the CPU.)"""
    l_dim = ucol.shape[0]
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(l_dim):
        uf = tl.load(ucol[rows, one], mask=m, other=0).astype(tl.float32)
        rank = tl.zeros((rows.shape[0], 1), tl.float32)
        for cols, mc in col_chunks(l_dim, _CH, loop=tl.sequential_range):
            uj = _replicated(urow, cols, mc, rows)
            cj = _replicated(crow, cols, mc, rows, 1.0, cast=False)
            rank[...] = rank + tl.sum(tl.where((uj < uf) & mc, 1.0 / cj, 0.0), axis=1, keepdims=True)
        r = tl.floor(rank + 0.5)
        best = tl.full((rows.shape[0], 1), float(2 ** 24), tl.float32)
        for cols, mc in col_chunks(l_dim, _CH, loop=tl.sequential_range):
            uj = _replicated(urow, cols, mc, rows)
            lj = _replicated(lerow, cols, mc, rows, cast=False)
            best[...] = tl.minimum(best, tl.min(tl.where((lj > r) & mc, uj, float(2 ** 24)), axis=1, keepdims=True))
        tl.store(scale[rows, one], 1.0 / tl.load(freq[best.astype(tl.int32), one], mask=m), mask=m)


def _freq_scale(indices: torch.Tensor, num_weights: int) -> torch.Tensor | None:
    """Per-position ``scale_grad_by_freq`` factors as torch's CPU kernel computes them (``[L, 1]`` fp32)."""
    l_dim = indices.shape[0]
    if l_dim > _MAX_FREQ or num_weights >= 2 ** 24:
        return None
    idx_c = _col(indices)
    idx_r = torch.as_strided(indices, (1, l_dim), (l_dim * indices.stride(0), indices.stride(0)),
                             indices.storage_offset())
    freq = torch.zeros((num_weights, 1), dtype=torch.float32, device="trn")
    _count_rows(idx_c, torch.ones((l_dim, 1), dtype=torch.float32, device="trn"), freq)
    cnt = torch.empty((l_dim, 1), dtype=torch.float32, device="trn")
    le = torch.empty((l_dim, 1), dtype=torch.float32, device="trn")
    freq_counts(idx_c, idx_r, freq, cnt, le)
    scale = torch.empty((l_dim, 1), dtype=torch.float32, device="trn")
    freq_rank_count(idx_c, idx_r, cnt.view(1, l_dim), le.view(1, l_dim), freq, scale)
    return scale


@trn.kernel
def _count_rows(idx, ones, freq):
    """``freq[idx[i]] += 1`` (how often each weight row is looked up: ``scale_grad_by_freq``)."""
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(idx.shape[0]):
        li = tl.load(idx[rows, one], mask=m, other=0)
        tl.store(freq[li, one], tl.load(ones[rows, one], mask=m), mask=m, accumulate="add")


@lowering("aten::_embedding_bag_backward", dtypes=None)
def embedding_bag_backward(grad: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                           offset2bag: torch.Tensor, bag_size: torch.Tensor, maximum_indices: torch.Tensor,
                           num_weights: int, scale_grad_by_freq: bool, mode: int, sparse: bool,
                           per_sample_weights: torch.Tensor | None, padding_idx: int = -1) -> Any:
    """Gradient of ``embedding_bag`` with respect to the weight (dense; a sparse gradient cannot live on trn)."""
    if sparse:
        return decline("sparse=True: a sparse gradient cannot live on trn")
    return _dense_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@lowering("aten::_embedding_bag_dense_backward", dtypes=None)
def embedding_bag_dense_backward(grad: torch.Tensor, indices: torch.Tensor, offset2bag: torch.Tensor,
                                 bag_size: torch.Tensor, maximum_indices: torch.Tensor, num_weights: int,
                                 scale_grad_by_freq: bool, mode: int, per_sample_weights: torch.Tensor | None,
                                 padding_idx: int = -1) -> Any:
    """The dense weight gradient of ``embedding_bag`` (scatter-adds of gradient rows)."""
    return _dense_backward(grad, indices, None, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@lowering("aten::_embedding_bag_per_sample_weights_backward", dtypes=None)
def embedding_bag_per_sample_weights_backward(grad: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor,
                                              offsets: torch.Tensor, offset2bag: torch.Tensor, mode: int,
                                              padding_idx: int = -1) -> Any:
    """Gradient of ``embedding_bag`` with respect to ``per_sample_weights``: ``<grad[bag], weight[index]>``."""
    if mode != _SUM or not _ok(grad, weight) or grad.dim() != 2 or weight.dim() != 2 or not U.is_trn(indices) \
            or indices.dim() != 1 or grad.shape[1] != weight.shape[1]:
        return decline("not sum mode, grad/weight not 2-D float trn tensors of one width, or indices not 1-D on trn")
    l_dim = indices.shape[0]
    if offset2bag is None or offset2bag.numel() != l_dim:
        plan = _bag_plan(weight, indices, offsets, offsets.shape[0] == grad.shape[0] + 1)
        if isinstance(plan, str):
            return decline(plan)
        offset2bag = plan[1]
    out = torch.empty((l_dim,), dtype=grad.dtype, device="trn")
    if l_dim:
        pad = int(padding_idx) if padding_idx is not None and 0 <= padding_idx < weight.shape[0] else -1
        try:
            bag_psw_backward(grad, weight, _col(indices), _col(offset2bag), _col(out), pad)
        except trn.BoundsError:
            return decline("an index out of range")
    return out
