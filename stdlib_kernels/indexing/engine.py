"""The indirect-DMA engine of the indexing families: one ``gather_scatter`` kernel and its host-side launcher.

The families built on it: :mod:`stdlib_kernels.indexing.gather_scatter` (gather / scatter / scatter_reduce /
index_select / index_* / take / put / embedding), :mod:`stdlib_kernels.indexing.advanced_index` (``x[idx]``,
index_put, nonzero) and :mod:`stdlib_kernels.indexing.masked` (masked_fill / masked_select / masked_scatter).
This module registers no lowering.

Every op is one of two patterns over a canonical 3-D problem:

* **gather**  ``Y[a, k, c] = X[a, lin(a, k, c), c]``
* **scatter** ``X[a, lin(a, k, c), c] (op)= Y[a, k, c]`` (plain store, or an accumulating DMA
  ``tl.store(..., accumulate="add"|"multiply"|"max"|"min")`` for scatter-add / index_put(accumulate) /
  embedding backward / scatter_reduce)

where ``X`` is the indexed tensor seen as ``[A, S, C]`` (``A``: dims before the indexed one, ``S``: the
indexed axis, ``C``: dims after it), ``Y`` the dense side (output of a gather, source of a scatter,
or a ``[1, 1]`` scalar for fills) and ``lin`` is computed on chip from up to three int64 index
tensors: ``lin = sum_k wrap(idx_k) * stride_k``. Rows of ``X`` are moved by *indirect DMA* (the
DMA reads/writes the rows named by an index tile), so nothing is gathered on the host.

int64 index tensors are read as two int32 words (an int32 alias of their storage): the low word is
the index, the high word must be its sign extension. Negative indices wrap (``idx + size``) where
torch allows them (``x[idx]``, ``index_put_``, ``take``); any index that is still out of range (or
does not fit in 32 bits) is replaced by a sentinel past the end of the tensor, so the kernel's
bounds-checked DMA raises ``trn.BoundsError`` without touching memory. The launcher turns that into
:class:`_Bounds`; the lowering then declines (``NotImplemented``) and the CPU fallback raises torch's
own ``IndexError``/``RuntimeError``.

Ops that only move data (gather, ``x[idx]``, index_select, take, index_put/scatter without reduction,
masked_select/scatter) accept any dtype: 8-byte elements (int64, float64) move as two int32 words
(one more dense dim of size 2). Accumulating ops need a compute dtype (fp32/bf16/fp16/int32).

Groups of dims that do not merge into one strided dim are looped over on the host (one launch per
leading index), so any strides work without copies.

Example:
    >>> import torch, trnlang  # doctest: +SKIP
    >>> from stdlib_kernels.indexing.engine import Layout, Move, Spec, gather_scatter
    >>> w = torch.randn(100, 8, device="trn")
    >>> ids = torch.randint(0, 100, (16,), dtype=torch.int32, device="trn")
    >>> out = torch.empty(16, 8, device="trn")
    >>> iv = torch.as_strided(ids, (1, 16, 8), (0, 1, 0))   # the index view over [A, K, C]
    >>> spec = Spec((1, 16, 8), (100,), (1,), wrap=False, move=Move.GATHER, layout=Layout.PK, idx_c=True)
    >>> gather_scatter(w.view(1, 100, 8), out.view(1, 16, 8), None, iv, None, None, None, None, None, spec)  # w[ids]
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels import tiling as T
from trnlang.device import decline

#: Dtypes of the data tensors moved by the gather/scatter kernels.
DATA_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)
#: Dtypes the pure data-movement ops (gather, index, index_select, take, index_put/scatter without reduction)
#: accept: 8-byte elements move as pairs of int32 words.
MOVE_DTYPES = DATA_DTYPES + (torch.int64, torch.float64, torch.complex64, torch.bool, torch.uint8, torch.int8,
                             torch.int16)
_CH = 512           # free-dim chunk of the gather/scatter tiles


# ------------------------------------------------------------------------------------------ kernels


class Move(enum.Enum):
    """Which way one launch moves rows."""

    GATHER = "gather"    #: ``y[a, k, c] = x[a, lin, c]``
    SCATTER = "scatter"  #: ``x[a, lin, c] (accumulate)= y[a, k, c]``


class Layout(enum.Enum):
    """How the ``[A, K, C]`` problem maps onto tiles."""

    PK = "pk"  #: loop over ``A``; ``K`` on the partitions, ``C`` on the free axis
    PA = "pa"  #: ``A`` on the partitions, ``K`` on the free axis; loop over ``C``


@dataclass(frozen=True)
class Spec:
    """What one :func:`gather_scatter` launch does (a compile-time spec: equal specs share a variant).

    Attributes:
        dense: ``(A, K, C)``; ``K`` None for the shape-polymorphic kernel (the index views' axis 1, at run time).
        sizes / strides: per index, the indexed size and the element stride of that dim along ``x``'s ``S`` axis.
        wrap: negative indices wrap (``idx + size``).
        move: :class:`Move`.
        layout: :class:`Layout`.
        idx_c: the index does not vary along ``C`` (loaded once per row as a ``[P, 1]`` tile).
        accumulate: a scatter's ``tl.store(accumulate=...)`` (``"add"``, ``"multiply"``, ``"max"``, ``"min"``), or
            None for a plain store.
        kb: the row bucket of ``K`` (``tiling.row_bucket``) of a shape-polymorphic ``PK`` launch, else None.
    """

    dense: tuple[int | None, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    wrap: bool
    move: Move
    layout: Layout
    idx_c: bool
    accumulate: str | None = None
    kb: int | None = None


def _wrap(lo: Any, hi: Any, size: int, wrap: bool, bad: int) -> Any:
    """An index tile -> the in-range index, or ``bad`` (past the end) where it is out of range."""
    if wrap:
        neg = (lo < 0).astype(tl.int32)
        w = lo + neg * size
    else:
        w = lo
    ok = (w >= 0) & (w < size)
    if hi is not None:  # the high word of an int64 index must be the sign extension of the low word
        hw = hi + (lo < 0).astype(tl.int32)
        ok = ok & (hw == 0)
    return tl.where(ok, w, bad)


def _lin(idx: Sequence[Any], sizes: tuple[int, ...], strides: tuple[int, ...], wrap: bool, bad: int,
         at: Any, mask: Any) -> Any:
    """``sum_k wrap(idx_k) * stride_k`` for the index views (lo, hi) at ``at`` (a key builder). An out-of-range
    index becomes the smallest value whose product with its stride reaches ``bad`` (past the end), so ``lin`` stays
    below ``len(sizes) * (bad + max stride)`` and fits in 32 bits for any tensor the launch accepts."""
    lin = None
    for k in range(len(sizes)):
        lo = tl.load(at(idx[2 * k]), mask=mask)
        hi = tl.load(at(idx[2 * k + 1]), mask=mask) if idx[2 * k + 1] is not None else None
        w = _wrap(lo, hi, sizes[k], wrap, -(-bad // strides[k]) if strides[k] > 1 else bad)
        if strides[k] != 1:
            w = w * strides[k]
        lin = w if lin is None else lin + w
    return lin


def gather_scatter(x, y, alpha, i0, h0, i1, h1, i2, h2, spec):
    """Gather ``y[a, k, c] = x[a, lin, c]`` or scatter ``x[a, lin, c] (accumulate)= y[a, k, c] (* alpha)``.

    ``x``: ``[A, S, C]``; ``y``: ``[A, K, C]`` or a ``[1, 1]`` scalar (scatter of a value); ``i*``/``h*``:
    low/high int32 words of up to three index views ``[A, K, C]`` (``h`` None for int32 indices); ``spec``: a
    :class:`Spec`. For a shape-polymorphic launch (:data:`gather_scatter_rt`, ``spec.dense`` ``(A, None, C)``),
    ``K`` is the runtime size of the index views' axis 1 and the tail of its row bucket ``spec.kb`` is masked.
    """
    a_dim, k_dim, c_dim = spec.dense
    sizes, strides, wrap, accumulate, idx_c = spec.sizes, spec.strides, spec.wrap, spec.accumulate, spec.idx_c
    kb = spec.kb
    gather = spec.move is Move.GATHER
    if k_dim is None:
        k_dim = i0.shape[1]
    s_dim = x.shape[1]
    idx = (i0, h0, i1, h1, i2, h2)
    scalar = y.ndim == 2
    v0 = tl.load(y[0:1, 0:1]) if scalar else None
    al = tl.load(alpha[0:1, 0:1]).astype(tl.float32) if alpha is not None else None
    if spec.layout is Layout.PK:
        p = T.extent(k_dim, 128, kb)
        f = min(c_dim, _CH)
        for a in tl.affine_range(a_dim):
            for i in tl.affine_range(tl.cdiv(k_dim, p)):
                rows = i * p + tl.arange(p)[:, None]
                rmask = rows < k_dim if T.ragged(k_dim, p) else None
                if idx_c:
                    one = tl.arange(1)[None, :]
                    lin_r = _lin(idx, sizes, strides, wrap, s_dim, lambda t: t[a, rows, one * 0], rmask)
                for j in tl.affine_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    m = ((rows < k_dim) & (cols < c_dim)) if c_dim % f else rmask  # a [P, 1] row mask is cheaper
                    lin = lin_r if idx_c else _lin(idx, sizes, strides, wrap, s_dim, lambda t: t[a, rows, cols], m)
                    if gather:
                        tl.store(y[a, rows, cols], tl.load(x[a, lin, cols], mask=m), mask=m)
                    else:
                        v = v0 if scalar else tl.load(y[a, rows, cols], mask=m)
                        if al is not None:
                            v = v.astype(tl.float32) * al
                        tl.store(x[a, lin, cols], v, mask=m, accumulate=accumulate)
    else:
        p = min(128, a_dim)
        f = min(k_dim, _CH)
        for i in tl.affine_range(tl.cdiv(a_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            for j in tl.affine_range(tl.cdiv(k_dim, f)):
                ks = j * f + tl.arange(f)[None, :]
                m = ((rows < a_dim) & (ks < k_dim)) if (a_dim % p or k_dim % f) else None
                for c in tl.affine_range(c_dim):
                    lin = _lin(idx, sizes, strides, wrap, s_dim, lambda t: t[rows, ks, c], m)
                    if gather:
                        tl.store(y[rows, ks, c], tl.load(x[rows, lin, c], mask=m), mask=m)
                    else:
                        v = v0 if scalar else tl.load(y[rows, ks, c], mask=m)
                        if al is not None:
                            v = v.astype(tl.float32) * al
                        tl.store(x[rows, lin, c], v, mask=m, accumulate=accumulate)


#: The kernel with the ``K`` axis a runtime size (``Layout.PK`` launches of ``K >= 2``: embedding and index_select rows,
#: gathers along a dim whose length changes per step): a variant per row bucket of ``K``, not per ``K``.
#: Only ``K`` (axis 1 of ``y`` and of the index views) is a runtime size. ``A`` and ``C`` are keyed through
#: ``dense`` anyway, and constant row strides and lengths keep the DMAs as fast as the exact kernel's (with
#: ``C`` a runtime size too, a 512 x 128 gather ran 1.7x slower); ``x``'s indexed axis is keyed through
#: ``sizes``, and the sentinel past its end is a tile value.
_KEYED = (("x", 0), ("x", 1), ("x", 2), ("y", 0), ("y", 2)) + tuple(
    (i, d) for i in ("i0", "h0", "i1", "h1", "i2", "h2") for d in (0, 2))
gather_scatter_rt = T.polymorphic(gather_scatter, static=_KEYED)
#: The same kernel keyed on exact sizes (every other launch).
gather_scatter = trn.kernel(gather_scatter)


#: One :class:`Spec` per distinct launch description: a warm launch then builds no new one, and its launch key
#: compares equal by identity.
_spec = functools.lru_cache(maxsize=4096)(Spec)


def _polymorphic(layout: Layout, kdim: int) -> bool:
    """Whether a launch goes to :data:`gather_scatter_rt` (``K`` on partitions, more than one row)."""
    return layout is Layout.PK and kdim >= 2


# ------------------------------------------------------------------------------------------ host side


class _Bounds(Exception):
    """An index was out of range (the kernel's bounds check fired): decline to the CPU for torch's error."""


class _Unsupported(_Bounds):
    """Arguments the kernel does not take (no index is out of range): decline with this reason."""


def bounds_reason(e: _Bounds, out_of_range: str) -> str:
    """The decline reason for ``e``: its own for arguments the kernel does not take, else ``out_of_range``."""
    return str(e) if isinstance(e, _Unsupported) else out_of_range


def _words(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, list[int], int]:
    """(low-word base, high-word base or None, element strides, offset) of an index tensor in int32 units."""
    if t.dtype == torch.int32:
        return t, None, list(t.stride()), t.storage_offset()
    n = t.untyped_storage().nbytes() // 8
    base = torch.as_strided(t, (max(n, 1),), (1,), 0).view(torch.int32)
    return base, base, [2 * s for s in t.stride()], 2 * t.storage_offset()


_PAIR_DTYPES = (torch.int64, torch.float64, torch.complex64)  # 8-byte: moved as int32 word pairs


def _alias32(t: torch.Tensor) -> torch.Tensor:
    """A 1-D int32 alias of the whole storage of an 8-byte tensor (offsets and strides double)."""
    n = t.untyped_storage().nbytes() // 8
    return torch.as_strided(t, (max(n, 1),), (1,), 0).view(torch.int32)


class _Operand:
    """A tensor (or int32 word base) with strides over the dense dims and a storage offset."""

    def __init__(self, base: torch.Tensor, strides: Sequence[int], offset: int) -> None:
        self.base, self.strides, self.offset = base, list(strides), offset


def _coalesced_parts(dense: Sequence[int], ops: list[_Operand], groups: tuple[int, int]
                     ) -> list[tuple[list[int], list[list[int]]]]:
    """The A, K and C groups of the dense dims (``[:g0]``, ``[g0:g1]``, the rest), each coalesced over all
    operands' strides: ``(sizes, strides per operand)``, a group without dims as one dim of size 1."""
    g0, g1 = groups
    spans = [(0, g0), (g0, g1), (g1, len(dense))]
    parts = []
    for lo_d, hi_d in spans:
        sh = [dense[d] for d in range(lo_d, hi_d)]
        sts = [[o.strides[d] for d in range(lo_d, hi_d)] for o in ops]
        csh, csts = U.coalesce(sh, sts)
        if not csh:
            csh, csts = [1], [[0] for _ in ops]
        parts.append((csh, csts))
    return parts


def _bool_accumulate(x: torch.Tensor, y: torch.Tensor | None, accumulate: str | None,
                     alpha: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None, str | None]:
    """A bool scatter's operands and DMA reduction: torch's bool sum is OR and its product AND, i.e. the max
    and min of the 0/1 bytes seen as uint8 (a uint8 add would wrap after 255 duplicates). Other scatters
    are returned unchanged."""
    if x.dtype != torch.bool or accumulate is None:
        return x, y, accumulate
    if alpha is not None or y is None or y.dtype != torch.bool:
        raise _Unsupported("a bool accumulation with alpha or from another dtype")
    return x.view(torch.uint8), y.view(torch.uint8), "min" if accumulate in ("multiply", "min") else "max"


def _run(x: torch.Tensor, x_strides: Sequence[int], s_span: int, s_stride: int, y: torch.Tensor | None,
         y_strides: Sequence[int] | None, scalar: torch.Tensor | None, indices: Sequence[torch.Tensor],
         idx_strides: Sequence[Sequence[int]], sizes: Sequence[int], steps: Sequence[int], dense: Sequence[int],
         groups: tuple[int, int], move: Move, wrap: bool, accumulate: str | None = None,
         alpha: torch.Tensor | None = None) -> None:
    """Launch the gather/scatter kernel over ``dense`` (dims ``[:g0]`` -> A, ``[g0:g1]`` -> K, rest -> C).

    ``x_strides``: x's strides over the dense dims (0 on the K dims); ``s_span``/``s_stride``: length
    and stride of x's indexed axis; ``indices`` with their strides over the dense dims (in elements
    of the index tensor); ``sizes``/``steps``: per index, the indexed size and its step along S.
    """
    if any(n == 0 for n in dense):
        return
    xoff, yoff = x.storage_offset(), (y.storage_offset() if y is not None else 0)
    x, y, accumulate = _bool_accumulate(x, y, accumulate, alpha)
    if x.dtype in _PAIR_DTYPES:  # 8-byte elements move as two int32 words: one more dense dim of 2
        if accumulate is not None or alpha is not None or y is None or y.dtype != x.dtype:
            raise _Unsupported("8-byte data can only be moved, not accumulated or filled")
        x, xoff, y, yoff = _alias32(x), 2 * xoff, _alias32(y), 2 * yoff
        x_strides = [2 * st for st in x_strides] + [1]
        y_strides = [2 * st for st in y_strides] + [1]
        s_stride *= 2
        idx_strides = [list(st) + [0] for st in idx_strides]
        dense = list(dense) + [2]
    ops: list[_Operand] = [_Operand(x, x_strides, xoff)]
    if y is not None:
        ops.append(_Operand(y, y_strides, yoff))
    widx = []
    for t, st in zip(indices, idx_strides):
        lo, hi, _, off = _words(t)
        mult = 1 if t.dtype == torch.int32 else 2
        ops.append(_Operand(lo, [mult * s for s in st], off))
        widx.append(hi is not None)
    parts = _coalesced_parts(dense, ops, groups)
    loops = [range(n) for part in parts for n in part[0][:-1]]
    sizes_t = tuple(int(s) for s in sizes)
    steps_t = tuple(int(s) for s in steps)
    adim, kdim, cdim = parts[0][0][-1], parts[1][0][-1], parts[2][0][-1]
    for it in itertools.product(*loops):
        offs = [o.offset for o in ops]
        pos = 0
        for csh, csts in parts:
            for d in range(len(csh) - 1):
                for q in range(len(ops)):
                    offs[q] += it[pos] * csts[q][d]
                pos += 1
        last = [[csts[q][-1] for csh, csts in parts] for q in range(len(ops))]
        xv = U.view(x, (adim, s_span, cdim), (last[0][0], s_stride, last[0][2]), offs[0])
        q = 1
        if y is not None:
            yv = U.view(y, (adim, kdim, cdim), tuple(last[1]), offs[1])
            q = 2
        else:
            yv = scalar
        ivs: list[Any] = []
        for k, has_hi in enumerate(widx):
            o = ops[q + k]
            shape = (adim, kdim, cdim)
            ivs.append(U.view(o.base, shape, tuple(last[q + k]), offs[q + k]))
            ivs.append(U.view(o.base, shape, tuple(last[q + k]), offs[q + k] + 1) if has_hi else None)
        while len(ivs) < 6:
            ivs.append(None)
        idx_c = cdim == 1 or all(last[q + k][2] == 0 for k in range(len(widx)))
        layout = Layout.PA if cdim == 1 and adim > 1 else Layout.PK
        try:
            if _polymorphic(layout, kdim):
                gather_scatter_rt(xv, yv, alpha, *ivs, _spec((adim, None, cdim), sizes_t, steps_t, wrap, move, layout,
                                                             idx_c, accumulate, T.row_bucket(kdim)))
            else:
                gather_scatter(xv, yv, alpha, *ivs, _spec((adim, kdim, cdim), sizes_t, steps_t, wrap, move, layout,
                                                          idx_c, accumulate))
        except trn.BoundsError as e:
            raise _Bounds(str(e)) from None


def _fits(*ns: int) -> bool:
    return all(0 <= n < 2**30 for n in ns)


def _gather_dim(src: torch.Tensor, dim: int, index: torch.Tensor, out: torch.Tensor, wrap: bool,
                idx_strides: Sequence[int] | None = None) -> None:
    """``out[..., k, ...] = src[..., index[..., k, ...], ...]`` along ``dim`` (out has the dense shape)."""
    nd = out.dim()
    xs = [src.stride(d) if d != dim else 0 for d in range(nd)]
    _run(src, xs, src.shape[dim], src.stride(dim), out, list(out.stride()), None, [index],
         [idx_strides if idx_strides is not None else list(index.stride())], [src.shape[dim]], [1],
         list(out.shape), (dim, dim + 1), Move.GATHER, wrap)


def _scatter_dim(dst: torch.Tensor, dim: int, index: torch.Tensor, dense: Sequence[int], src: torch.Tensor | None,
                 src_strides: Sequence[int] | None, scalar: torch.Tensor | None, accumulate: str | None, wrap: bool,
                 idx_strides: Sequence[int], alpha: torch.Tensor | None = None) -> None:
    """``dst[..., index[...], ...] (op)= src[...]`` along ``dim`` over the dense shape."""
    nd = len(dense)
    xs = [dst.stride(d) if d != dim else 0 for d in range(nd)]
    _run(dst, xs, dst.shape[dim], dst.stride(dim), src, src_strides, scalar, [index], [idx_strides],
         [dst.shape[dim]], [1], list(dense), (dim, dim + 1), Move.SCATTER, wrap, accumulate, alpha)


def _norm_dim(dim: int, nd: int) -> int | None:
    n = max(nd, 1)
    if not -n <= dim < n:
        return None
    return dim % n


def _ok_data(*ts: Any, move: bool = False) -> bool:
    """trn tensors of a dtype the kernels compute on (``move``: or only move: 8-byte, bool and small ints)."""
    ok = MOVE_DTYPES if move else DATA_DTYPES
    return all(U.is_trn(t) and t.dtype in ok and not t.is_conj() and not t.is_neg() for t in ts)


def _ok_index(t: Any) -> bool:
    return U.is_trn(t) and t.dtype in (torch.int64, torch.int32)


def _as1(t: torch.Tensor) -> torch.Tensor:
    """A 0-dim tensor as a 1-D view (gather/scatter treat scalars as 1-element vectors)."""
    return U.view(t, (1,), (1,), t.storage_offset()) if t.dim() == 0 else t


def _value_tensor(value: Any, dtype: torch.dtype) -> torch.Tensor | None:
    if U.is_trn(value) and value.numel() == 1:
        if value.dtype != dtype:
            value = value.to(dtype)
        return U.as_1x1(value.reshape(1, 1) if value.dim() != 2 else value)
    v = U.scalar_value(value)
    if v is None or isinstance(v, complex):
        return None
    if dtype.is_floating_point:
        return U.scalar_tensor(float(v), dtype)
    if dtype == torch.bool:
        return U.scalar_tensor(int(bool(v)), dtype)  # torch's conversion: any nonzero (NaN too) is True
    if dtype.is_complex:
        return None if isinstance(v, float) else U.scalar_tensor(int(v), dtype)
    if dtype == torch.uint8 and isinstance(v, int) and -255 <= v < 0:
        v %= 256  # torch's checked cast takes a negative int down to -255, wrapped
    info = torch.iinfo(dtype)  # torch raises (on the CPU) for NaN, inf and values outside the dtype's range ...
    if (isinstance(v, float) and not math.isfinite(v)) or not max(info.min, -2**31) <= v <= min(info.max, 2**31 - 1):
        return None
    return U.scalar_tensor(math.trunc(v), dtype)  # ... and casts a float toward zero


def _to_out(res: torch.Tensor, out: torch.Tensor | None) -> Any:
    """``res``, or (an ``out=`` call) ``res`` copied into ``out``, resized to ``res``'s shape if it differs;
    NotImplemented for an ``out`` that is not a ``trn`` tensor of ``res``'s dtype."""
    if out is None:
        return res
    if not U.is_trn(out) or out.dtype != res.dtype:
        return decline("out= not a trn tensor of the result's dtype")
    if out.shape != res.shape:
        out.resize_(res.shape)
    return out.copy_(res)
