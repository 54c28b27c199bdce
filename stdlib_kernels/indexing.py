"""Advanced indexing on ``trn``: gather / scatter / index / index_put / masked ops / nonzero / embedding.

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
bounds-checked DMA raises ``trn.BoundsError`` without touching memory. The lowering then declines
(``NotImplemented``) and the CPU fallback raises torch's own ``IndexError``/``RuntimeError``.

Ops that only move data (gather, ``x[idx]``, index_select, take, index_put/scatter without reduction,
masked_select/scatter) accept any dtype: 8-byte elements (int64, float64) move as two int32 words
(one more dense dim of size 2). Accumulating ops need a compute dtype (fp32/bf16/fp16/int32).

Groups of dims that do not merge into one strided dim are looped over on the host (one launch per
leading index), so any strides work without copies. Boolean masks go through :func:`nonzero`
(a count kernel, one host sync for the size, then a prefix-sum kernel that scatters the
coordinates: per-partition ``cumsum`` plus a cross-partition prefix done as a triangular matmul).

Example:
    >>> import torch, trnlang  # doctest: +SKIP
    >>> w = torch.randn(1000, 64, device="trn", requires_grad=True)
    >>> ids = torch.randint(0, 1000, (32, 16), device="trn")
    >>> torch.nn.functional.embedding(ids, w).sum().backward()   # index_select + embedding_dense_backward
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.pointwise import _at, _shape3
from trnlang.device import lowering

#: Dtypes of the data tensors moved by the gather/scatter kernels.
DATA_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)
#: Dtypes the pure data-movement ops (gather, index, index_select, take, index_put/scatter without reduction)
#: accept: 8-byte elements move as pairs of int32 words.
MOVE_DTYPES = DATA_DTYPES + (torch.int64, torch.float64, torch.bool, torch.uint8, torch.int8, torch.int16)
_SMALL_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16)
_CH = 512           # free-dim chunk of the gather/scatter tiles
_ACC = {"sum": "add", "prod": "multiply", "amax": "max", "amin": "min"}
_I32_LIMIT = 2**31 - 1


# ------------------------------------------------------------------------------------------ kernels


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
    """``sum_k wrap(idx_k) * stride_k`` for the index views (lo, hi) at ``at`` (a key builder)."""
    lin = None
    for k in range(len(sizes)):
        lo = tl.load(at(idx[2 * k]), mask=mask)
        hi = tl.load(at(idx[2 * k + 1]), mask=mask) if idx[2 * k + 1] is not None else None
        w = _wrap(lo, hi, sizes[k], wrap, bad)
        if strides[k] != 1:
            w = w * strides[k]
        lin = w if lin is None else lin + w
    return lin


@trn.kernel
def gather_scatter(x, y, alpha, i0, h0, i1, h1, i2, h2, dense, sizes, strides, wrap, mode, accumulate, layout,
                   idx_c):
    """Gather ``y[a, k, c] = x[a, lin, c]`` or scatter ``x[a, lin, c] (accumulate)= y[a, k, c] (* alpha)``.

    ``x``: ``[A, S, C]``; ``y``: ``[A, K, C]`` or a ``[1, 1]`` scalar (scatter of a value); ``i*``/``h*``:
    low/high int32 words of up to three index views ``[A, K, C]`` (``h`` None for int32 indices);
    ``dense``: ``(A, K, C)``; ``sizes``/``strides``: per index, the indexed size and the element
    stride of that dim along ``x``'s S axis; ``layout``: ``"pk"`` (loop over A, K on partitions, C
    free) or ``"pa"`` (A on partitions, K free, loop over C); ``idx_c``: the index does not vary
    along C (loaded once per row as a ``[P, 1]`` tile).
    """
    a_dim, k_dim, c_dim = dense
    s_dim = x.shape[1]
    idx = (i0, h0, i1, h1, i2, h2)
    scalar = y.ndim == 2
    v0 = tl.load(y[0:1, 0:1]) if scalar else None
    al = tl.load(alpha[0:1, 0:1]).astype(tl.float32) if alpha is not None else None
    if layout == "pk":
        p = min(128, k_dim)
        f = min(c_dim, _CH)
        for a in tl.affine_range(a_dim):
            for i in tl.affine_range(tl.cdiv(k_dim, p)):
                rows = i * p + tl.arange(p)[:, None]
                rmask = rows < k_dim if k_dim % p else None
                if idx_c:
                    one = tl.arange(1)[None, :]
                    lin_r = _lin(idx, sizes, strides, wrap, s_dim, lambda t: t[a, rows, one * 0], rmask)
                for j in tl.affine_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    m = ((rows < k_dim) & (cols < c_dim)) if (k_dim % p or c_dim % f) else None
                    lin = lin_r if idx_c else _lin(idx, sizes, strides, wrap, s_dim, lambda t: t[a, rows, cols], m)
                    if mode == "gather":
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
                    if mode == "gather":
                        tl.store(y[rows, ks, c], tl.load(x[rows, lin, c], mask=m), mask=m)
                    else:
                        v = v0 if scalar else tl.load(y[rows, ks, c], mask=m)
                        if al is not None:
                            v = v.astype(tl.float32) * al
                        tl.store(x[rows, lin, c], v, mask=m, accumulate=accumulate)


# ------------------------------------------------------------------------------------------ host side


class _Bounds(Exception):
    """An index was out of range (the kernel's bounds check fired): decline to the CPU for torch's error."""


def _words(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, list[int], int]:
    """(low-word base, high-word base or None, element strides, offset) of an index tensor in int32 units."""
    if t.dtype == torch.int32:
        return t, None, list(t.stride()), t.storage_offset()
    n = t.untyped_storage().nbytes() // 8
    base = torch.as_strided(t, (max(n, 1),), (1,), 0).view(torch.int32)
    return base, base, [2 * s for s in t.stride()], 2 * t.storage_offset()


_PAIR_DTYPES = (torch.int64, torch.float64)


def _alias32(t: torch.Tensor) -> torch.Tensor:
    """A 1-D int32 alias of the whole storage of an 8-byte tensor (offsets and strides double)."""
    n = t.untyped_storage().nbytes() // 8
    return torch.as_strided(t, (max(n, 1),), (1,), 0).view(torch.int32)


class _Operand:
    """A tensor (or int32 word base) with strides over the dense dims and a storage offset."""

    def __init__(self, base: torch.Tensor, strides: Sequence[int], offset: int) -> None:
        self.base, self.strides, self.offset = base, list(strides), offset


def _run(x: torch.Tensor, x_strides: Sequence[int], s_span: int, s_stride: int, y: torch.Tensor | None,
         y_strides: Sequence[int] | None, scalar: torch.Tensor | None, indices: Sequence[torch.Tensor],
         idx_strides: Sequence[Sequence[int]], sizes: Sequence[int], steps: Sequence[int], dense: Sequence[int],
         groups: tuple[int, int], mode: str, wrap: bool, accumulate: str | None = None,
         alpha: torch.Tensor | None = None) -> None:
    """Launch the gather/scatter kernel over ``dense`` (dims ``[:g0]`` -> A, ``[g0:g1]`` -> K, rest -> C).

    ``x_strides``: x's strides over the dense dims (0 on the K dims); ``s_span``/``s_stride``: length
    and stride of x's indexed axis; ``indices`` with their strides over the dense dims (in elements
    of the index tensor); ``sizes``/``steps``: per index, the indexed size and its step along S.
    """
    if any(n == 0 for n in dense):
        return
    xoff, yoff = x.storage_offset(), (y.storage_offset() if y is not None else 0)
    if x.dtype in _PAIR_DTYPES:  # 8-byte elements move as two int32 words: one more dense dim of 2
        if accumulate is not None or alpha is not None or y is None or y.dtype != x.dtype:
            raise _Bounds("8-byte data can only be moved, not accumulated or filled")
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
        layout = "pa" if cdim == 1 and adim > 1 else "pk"
        try:
            gather_scatter(xv, yv, alpha, *ivs, (adim, kdim, cdim), sizes_t, steps_t, wrap, mode, accumulate,
                           layout, idx_c)
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
         list(out.shape), (dim, dim + 1), "gather", wrap)


def _scatter_dim(dst: torch.Tensor, dim: int, index: torch.Tensor, dense: Sequence[int], src: torch.Tensor | None,
                 src_strides: Sequence[int] | None, scalar: torch.Tensor | None, accumulate: str | None, wrap: bool,
                 idx_strides: Sequence[int], alpha: torch.Tensor | None = None) -> None:
    """``dst[..., index[...], ...] (op)= src[...]`` along ``dim`` over the dense shape."""
    nd = len(dense)
    xs = [dst.stride(d) if d != dim else 0 for d in range(nd)]
    _run(dst, xs, dst.shape[dim], dst.stride(dim), src, src_strides, scalar, [index], [idx_strides],
         [dst.shape[dim]], [1], list(dense), (dim, dim + 1), "scatter", wrap, accumulate, alpha)


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
    if isinstance(v, float) or not -2**31 <= int(v) < 2**31:
        return None
    return U.scalar_tensor(int(v), dtype)


# ------------------------------------------------------------------------------- gather / scatter


def _gather_checks(self: torch.Tensor, dim: int, index: torch.Tensor) -> int | None:
    if not (_ok_data(self, move=True) and _ok_index(index)):
        return None
    nd = max(self.dim(), 1)
    d = _norm_dim(dim, self.dim())
    if d is None or max(index.dim(), 1) != nd:
        return None
    s, i = _as1(self), _as1(index)
    if any(i.shape[k] > s.shape[k] for k in range(nd) if k != d):
        return None
    if not _fits(self.numel(), index.numel()):
        return None
    return d


@lowering("aten::gather")
def gather(self: torch.Tensor, dim: int, index: torch.Tensor, *, sparse_grad: bool = False,
           out: torch.Tensor | None = None) -> Any:
    """``torch.gather(self, dim, index)`` by indirect DMA (rows of ``self`` named by ``index``).

    Example: ``torch.gather(x, 1, idx)`` with ``x`` and ``idx`` on ``trn``.
    """
    if U.is_trn(index) and index.numel() == 0 and _ok_data(self, move=True) and out is None:
        meta = torch.gather(torch.empty_like(self, device="meta"), dim, torch.empty_like(index, device="meta"))
        return torch.empty(meta.shape, dtype=self.dtype, device="trn")  # torch's own checks ran on meta
    d = _gather_checks(self, dim, index)
    if d is None:
        return NotImplemented
    res = torch.empty(index.shape, dtype=self.dtype, device="trn")
    if index.numel():
        if self.numel() == 0:
            return NotImplemented
        try:
            _gather_dim(_as1(self), d, _as1(index), _as1(res), wrap=False)
        except _Bounds:
            return NotImplemented
    if out is not None:
        if not U.is_trn(out) or out.dtype != self.dtype:
            return NotImplemented
        if out.shape != res.shape:
            out.resize_(res.shape)
        return out.copy_(res)
    return res


def _scatter_impl(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor | None, value: Any,
                  accumulate: str | None, out: torch.Tensor | None) -> Any:
    if src is not None and not _ok_data(src, move=True):
        return NotImplemented
    if U.is_trn(index) and index.numel() == 0 and _ok_data(self, move=True) and \
            (out is None or U.same_view(out, self)):
        mi = torch.empty_like(index, device="meta")
        ms = torch.empty_like(src, device="meta") if src is not None else None
        mself = torch.empty_like(self, device="meta")
        try:  # torch's own checks, on meta
            torch.scatter(mself, dim, mi, ms) if ms is not None else torch.scatter(mself, dim, mi, 0.0)
        except (RuntimeError, IndexError):
            return NotImplemented  # the CPU raises its error
        return out if out is not None else self.clone()
    d = _gather_checks(self, dim, index)
    if d is None:
        return NotImplemented
    if src is not None:
        if src.dtype != self.dtype or max(src.dim(), 1) != max(index.dim(), 1):
            return NotImplemented
        if any(_as1(index).shape[k] > _as1(src).shape[k] for k in range(max(index.dim(), 1))):
            return NotImplemented
    res = out if out is not None else torch.empty_like(self)
    if not U.is_trn(res) or res.shape != self.shape or res.dtype != self.dtype or U.has_internal_overlap(res):
        return NotImplemented
    if not U.same_view(res, self):
        if U.overlaps(res, self):
            return NotImplemented
        res.copy_(self)
    if src is not None and U.overlaps(src, res):
        src = src.clone()
    if index.numel() == 0:
        return res
    if self.numel() == 0:
        return NotImplemented
    scalar = None
    if src is None:
        scalar = _value_tensor(value, self.dtype)
        if scalar is None:
            return NotImplemented
    r1, i1 = _as1(res), _as1(index)
    try:
        _scatter_dim(r1, d, i1, list(i1.shape), _as1(src) if src is not None else None,
                     list(_as1(src).stride()) if src is not None else None, scalar, accumulate, False,
                     list(i1.stride()))
    except _Bounds:
        return NotImplemented
    return res


@lowering("aten::scatter.src")
def scatter_src(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *,
                out: torch.Tensor | None = None) -> Any:
    """``self.scatter(dim, index, src)`` (an indirect-DMA store)."""
    return _scatter_impl(self, dim, index, src, None, None, out)


@lowering("aten::scatter.value")
def scatter_value(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any, *,
                  out: torch.Tensor | None = None) -> Any:
    """``self.scatter(dim, index, value)``."""
    return _scatter_impl(self, dim, index, None, value, None, out)


_LEGACY_REDUCE = {"add": "add", "multiply": "multiply"}


@lowering("aten::scatter.reduce")
def scatter_src_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *, reduce: str,
                       out: torch.Tensor | None = None) -> Any:
    """``self.scatter(dim, index, src, reduce="add"|"multiply")`` (an accumulating DMA)."""
    if reduce not in _LEGACY_REDUCE:
        return NotImplemented
    return _scatter_impl(self, dim, index, src, None, _LEGACY_REDUCE[reduce], out)


@lowering("aten::scatter.value_reduce")
def scatter_value_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any, *, reduce: str,
                         out: torch.Tensor | None = None) -> Any:
    """``self.scatter(dim, index, value, reduce="add"|"multiply")``."""
    if reduce not in _LEGACY_REDUCE:
        return NotImplemented
    return _scatter_impl(self, dim, index, None, value, _LEGACY_REDUCE[reduce], out)


@lowering("aten::scatter_add")
def scatter_add(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *,
                out: torch.Tensor | None = None) -> Any:
    """``self.scatter_add(dim, index, src)``: an accumulating DMA (repeated indices all add)."""
    return _scatter_impl(self, dim, index, src, None, "add", out)


@trn.kernel
def mean_finish(total, count, orig, out):
    """``out = count > 0 ? total / count : orig`` over ``[n, d]`` views (scatter_reduce mean)."""
    n, d = out.shape
    p = min(128, n)
    f = min(d, 2048)
    for i in tl.affine_range(tl.cdiv(n, p)):
        rows = i * p + tl.arange(p)[:, None]
        for j in tl.affine_range(tl.cdiv(d, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = ((rows < n) & (cols < d)) if (n % p or d % f) else None
            t = tl.load(total[rows, cols], mask=m).astype(tl.float32)
            c = tl.load(count[rows, cols], mask=m).astype(tl.float32)
            o = tl.load(orig[rows, cols], mask=m).astype(tl.float32)
            tl.store(out[rows, cols], tl.where(c > 0, t / tl.maximum(c, 1.0), o), mask=m)


@lowering("aten::scatter_reduce.two")
def scatter_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *,
                   include_self: bool = True, out: torch.Tensor | None = None) -> Any:
    """``self.scatter_reduce(dim, index, src, reduce, include_self=...)`` for sum/prod/mean/amax/amin.

    sum/prod/amax/amin are accumulating DMAs (after scattering the identity where ``include_self``
    is False); mean scatter-adds the values and a count, then divides.
    """
    if reduce not in ("sum", "prod", "mean", "amax", "amin") or not self.dtype.is_floating_point:
        return NotImplemented
    if _gather_checks(self, dim, index) is None or not _ok_data(src) or src.dtype != self.dtype:
        return NotImplemented
    if out is not None and (not U.is_trn(out) or out.dtype != self.dtype):
        return NotImplemented
    if reduce != "mean":
        res = self.clone()
        if not include_self:
            ident = {"sum": 0.0, "prod": 1.0, "amax": float("-inf"), "amin": float("inf")}[reduce]
            if _scatter_impl(res, dim, index, None, ident, None, res) is NotImplemented:
                return NotImplemented
        r = _scatter_impl(res, dim, index, src, None, _ACC[reduce], res)
    else:
        total = self.to(torch.float32, copy=True)
        if not include_self:
            total = total.scatter(dim, index, 0.0)
        count = torch.ones(self.shape, dtype=torch.float32, device="trn")
        if not include_self:
            count = count.scatter(dim, index, 0.0)
        r = _scatter_impl(total, dim, index, src.float(), None, "add", total)
        if r is not NotImplemented:
            r = _scatter_impl(count, dim, index, None, 1.0, "add", count)
        if r is not NotImplemented:
            res = torch.empty(self.shape, dtype=self.dtype, device="trn")
            if res.numel():
                n = res.numel()
                cols = self.shape[-1] if self.dim() else 1
                views = [t.contiguous().view(n // cols, cols) for t in (total, count, self)]
                mean_finish(*views, res.view(n // cols, cols))
            r = res
    if r is NotImplemented:
        return NotImplemented
    if out is not None:
        if out.shape != r.shape:
            out.resize_(r.shape)
        return out.copy_(r)
    return r


# ------------------------------------------------------------------------------------ index_* ops


def _index_vec(index: torch.Tensor) -> torch.Tensor | None:
    if not _ok_index(index) or index.dim() > 1:
        return None
    return _as1(index)


@lowering("aten::index_select")
def index_select(self: torch.Tensor, dim: int, index: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``self.index_select(dim, index)``: whole rows/slices moved by indirect DMA (also embedding's forward)."""
    idx = _index_vec(index)
    d = _norm_dim(dim, self.dim())
    if idx is None or d is None or not _ok_data(self, move=True) or not _fits(self.numel(), idx.numel()):
        return NotImplemented
    s = _as1(self)
    shape = list(s.shape)
    shape[d] = idx.shape[0]
    res = torch.empty(shape if self.dim() else [], dtype=self.dtype, device="trn")
    if res.numel():
        if self.numel() == 0:
            return NotImplemented
        ist = [0] * len(shape)
        ist[d] = idx.stride(0)
        try:
            _gather_dim(s, d, idx, _as1(res).view(shape), wrap=False, idx_strides=ist)
        except _Bounds:
            return NotImplemented
    if out is not None:
        if not U.is_trn(out) or out.dtype != self.dtype:
            return NotImplemented
        if out.shape != res.shape:
            out.resize_(res.shape)
        return out.copy_(res)
    return res


def _index_scatter(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor | None, value: Any,
                   accumulate: str | None, alpha: Any, out: torch.Tensor | None) -> Any:
    idx = _index_vec(index)
    d = _norm_dim(dim, self.dim())
    if idx is None or d is None or not _ok_data(self, move=True) or not _fits(self.numel(), idx.numel()):
        return NotImplemented
    s = _as1(self)
    dense = list(s.shape)
    dense[d] = idx.shape[0]
    if source is not None:
        if not _ok_data(source, move=True) or source.dtype != self.dtype:
            return NotImplemented
        src = _as1(source)
        if list(src.shape) != dense and not (source.dim() == 0 and U.prod(dense) == 1):
            return NotImplemented
        src = src.reshape(dense) if list(src.shape) != dense else src
    res = out if out is not None else torch.empty_like(self)
    if not U.is_trn(res) or res.shape != self.shape or res.dtype != self.dtype or U.has_internal_overlap(res):
        return NotImplemented
    if not U.same_view(res, self):
        if U.overlaps(res, self):
            return NotImplemented
        res.copy_(self)
    if idx.shape[0] == 0 or U.prod(dense) == 0:
        return res
    if self.numel() == 0:
        return NotImplemented
    if source is not None and U.overlaps(src, res):
        src = src.clone()
    scalar = None
    if source is None:
        scalar = _value_tensor(value, self.dtype)
        if scalar is None:
            return NotImplemented
    a_t = None
    if alpha is not None and alpha != 1:
        if not self.dtype.is_floating_point or isinstance(alpha, complex):
            return NotImplemented
        a_t = U.scalar_tensor(float(alpha), torch.float32)
    ist = [0] * len(dense)
    ist[d] = idx.stride(0)
    try:
        _scatter_dim(_as1(res), d, idx, dense, src if source is not None else None,
                     list(src.stride()) if source is not None else None, scalar, accumulate, False, ist, a_t)
    except _Bounds:
        return NotImplemented
    return res


@lowering("aten::index_add")
def index_add(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, alpha: Any = 1,
              out: torch.Tensor | None = None) -> Any:
    """``self.index_add(dim, index, source, alpha=...)``: accumulating DMA of ``alpha * source``."""
    return _index_scatter(self, dim, index, source, None, "add", alpha, out)


@lowering("aten::index_copy")
def index_copy(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *,
               out: torch.Tensor | None = None) -> Any:
    """``self.index_copy(dim, index, source)``."""
    return _index_scatter(self, dim, index, source, None, None, None, out)


@lowering("aten::index_reduce")
def index_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, reduce: str, *,
                 include_self: bool = True, out: torch.Tensor | None = None) -> Any:
    """``self.index_reduce(dim, index, source, reduce, include_self=...)`` for prod/mean/amax/amin.

    Like scatter_reduce with whole slices: accumulating DMAs (after filling the identity where
    ``include_self`` is False); mean adds values and counts, then divides.
    """
    if reduce not in ("prod", "mean", "amax", "amin") or not _ok_data(self, source):
        return NotImplemented
    if not self.dtype.is_floating_point or source.dtype != self.dtype or _index_vec(index) is None:
        return NotImplemented
    if out is not None and (not U.is_trn(out) or out.dtype != self.dtype):
        return NotImplemented
    if reduce != "mean":
        res = self.clone()
        if not include_self:
            ident = {"prod": 1.0, "amax": float("-inf"), "amin": float("inf")}[reduce]
            if _index_scatter(res, dim, index, None, ident, None, None, res) is NotImplemented:
                return NotImplemented
        r = _index_scatter(res, dim, index, source, None, _ACC[reduce], None, res)
    else:
        total = self.to(torch.float32, copy=True)
        count = torch.ones(self.shape, dtype=torch.float32, device="trn")
        res = torch.empty(self.shape, dtype=self.dtype, device="trn")
        r = res
        steps = [] if include_self else [(total, 0.0, None), (count, 0.0, None)]
        steps += [(total, None, source.float()), (count, 1.0, None)]
        for t, v, src in steps:
            acc = None if v == 0.0 else "add"
            if _index_scatter(t, dim, index, src, v, acc, None, t) is NotImplemented:
                return NotImplemented
        if res.numel():
            n = res.numel()
            cols = self.shape[-1] if self.dim() else 1
            views = [t.contiguous().view(n // cols, cols) for t in (total, count, self)]
            mean_finish(*views, res.view(n // cols, cols))
    if r is NotImplemented:
        return NotImplemented
    if out is not None:
        if out.shape != r.shape:
            out.resize_(r.shape)
        return out.copy_(r)
    return r


@lowering("aten::index_fill.int_Scalar")
def index_fill(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any) -> Any:
    """``self.index_fill(dim, index, value)``."""
    if index.dim() > 1:
        return NotImplemented
    return _index_scatter(self, dim, index, None, value, None, None, None)


@lowering("aten::index_fill.int_Tensor")
def index_fill_t(self: torch.Tensor, dim: int, index: torch.Tensor, value: torch.Tensor) -> Any:
    """``self.index_fill(dim, index, value_tensor)`` (a 0-dim value)."""
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        return NotImplemented
    if U.is_trn(value):
        value = value.to(self.dtype)
    return _index_scatter(self, dim, index, None, value, None, None, None)


@lowering("aten::take")
def take(self: torch.Tensor, index: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``torch.take(self, index)``: elements of the flattened ``self`` (negative indices wrap)."""
    if not (_ok_data(self, move=True) and _ok_index(index)) or not _fits(self.numel(), index.numel()):
        return NotImplemented
    flat = self.contiguous().view(-1)
    res = torch.empty(index.shape, dtype=self.dtype, device="trn")
    if index.numel():
        if self.numel() == 0:
            return NotImplemented
        i1 = _as1(index)
        r1 = _as1(res)
        nd = i1.dim()
        try:
            _run(flat, [0] * nd, flat.shape[0], 1, r1, list(r1.stride()), None, [i1], [list(i1.stride())],
                 [flat.shape[0]], [1], list(i1.shape), (0, nd), "gather", True)
        except _Bounds:
            return NotImplemented
    if out is not None:
        if not U.is_trn(out) or out.dtype != self.dtype:
            return NotImplemented
        if out.shape != res.shape:
            out.resize_(res.shape)
        return out.copy_(res)
    return res


@lowering("aten::put_")
def put_(self: torch.Tensor, index: torch.Tensor, source: torch.Tensor, accumulate: bool = False) -> Any:
    """``self.put_(index, source, accumulate)``: elements of the flattened ``self`` (negative indices wrap)."""
    if not (_ok_data(self, source, move=True) and _ok_index(index)) or source.dtype != self.dtype:
        return NotImplemented
    if index.numel() != source.numel() or not self.is_contiguous() or not _fits(self.numel(), index.numel()):
        return NotImplemented
    if index.numel() == 0:
        return self
    if self.numel() == 0:
        return NotImplemented
    flat = self.view(-1)
    i1 = index.reshape(-1)
    s1 = source.reshape(-1)
    if U.overlaps(s1, flat):
        s1 = s1.clone()
    try:
        _run(flat, [0], flat.shape[0], 1, s1, list(s1.stride()), None, [i1], [list(i1.stride())], [flat.shape[0]],
             [1], [i1.shape[0]], (0, 1), "scatter", True, "add" if accumulate else None)
    except _Bounds:
        return NotImplemented
    return self


# ------------------------------------------------------------------------------ advanced indexing


def _expand_indices(self: torch.Tensor, indices: Sequence[Any]) -> list[torch.Tensor | None] | None:
    """Boolean masks -> their nonzero coordinates (one long index per masked dim); None where unusable."""
    res: list[torch.Tensor | None] = []
    for t in indices:
        if t is None:
            res.append(None)
            continue
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            t = t.to("trn")  # CPU index tensors are allowed (as on CUDA): one host -> device copy
        if not U.is_trn(t):
            return None
        if t.dtype in (torch.bool, torch.uint8):
            k = len(res)
            if t.dim() == 0 or k + t.dim() > self.dim():
                return None
            if list(t.shape) != list(self.shape[k:k + t.dim()]):
                return None
            nz = nonzero(t)
            if nz is NotImplemented:
                return None
            res.extend(nz.select(1, j) for j in range(t.dim()))
        elif t.dtype in (torch.int64, torch.int32):
            res.append(t)
        else:
            return None
    return res


def _plan(self: torch.Tensor, indices: Sequence[Any]) -> Any:
    """Indexed dims, broadcast index views and the result shape of ``self[indices]`` (None to decline)."""
    idx = _expand_indices(self, indices)
    if idx is None or len(idx) > self.dim():
        return None
    idx = idx + [None] * (self.dim() - len(idx))
    dims = [d for d, t in enumerate(idx) if t is not None]
    if not dims or len(dims) > 3:
        return None
    try:
        bshape = list(torch.broadcast_shapes(*[idx[d].shape for d in dims]))
    except RuntimeError:
        return None
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    if not adjacent:  # torch puts the broadcast dims first: permute the indexed dims to the front
        perm = dims + [d for d in range(self.dim()) if d not in dims]
        self = self.permute(perm)
        idx = [idx[d] for d in perm]
        dims = list(range(len(dims)))
    before = list(self.shape[:dims[0]])
    after = list(self.shape[dims[-1] + 1:])
    dense = before + bshape + after
    nb = len(bshape)
    ivs = []
    for d in dims:
        t = idx[d]
        st = U.broadcast_strides(t, bshape) if bshape else []
        ivs.append((t, [0] * len(before) + st + [0] * len(after)))
    sizes = [self.shape[d] for d in dims]
    steps = [self.stride(d) for d in dims]
    span = sum((n - 1) * s for n, s in zip(sizes, steps)) + 1
    if any(n == 0 for n in sizes):
        span = 0
    xs = [self.stride(d) for d in range(dims[0])] + [0] * nb + [self.stride(d) for d in range(dims[-1] + 1,
                                                                                                self.dim())]
    reach = sizes[0] if len(dims) == 1 else span * max(steps)  # largest on-chip linear index (the sentinel)
    if not _fits(reach, U.prod(dense), self.numel()):
        return None
    return self, dims, ivs, sizes, steps, span, xs, dense, (len(before), len(before) + nb)


def _x_view(self: torch.Tensor, steps: Sequence[int]) -> tuple[int, list[int]]:
    if len(steps) == 1:
        return steps[0], [1]
    return 1, list(steps)


@lowering("aten::index.Tensor")
def index(self: torch.Tensor, indices: Sequence[Any], *, out: torch.Tensor | None = None) -> Any:
    """``self[idx0, idx1, ...]`` (integer tensors with broadcasting, boolean masks via nonzero).

    Negative indices wrap; up to three indexed dims (adjacent or not, as torch orders the result).
    """
    if not _ok_data(self, move=True) or self.dim() == 0:
        return NotImplemented
    plan = _plan(self, indices)
    if plan is None:
        return NotImplemented
    x, dims, ivs, sizes, steps, span, xs, dense, groups = plan
    res = torch.empty(dense, dtype=self.dtype, device="trn")
    if res.numel():
        if span == 0:
            return NotImplemented
        s_stride, st = _x_view(x, steps)
        try:
            _run(x, xs, span if len(steps) > 1 else sizes[0], s_stride, res, list(res.stride()), None,
                 [t for t, _ in ivs], [s for _, s in ivs], sizes, st, dense, groups, "gather", True)
        except _Bounds:
            return NotImplemented
    if out is not None:
        if not U.is_trn(out) or out.dtype != self.dtype:
            return NotImplemented
        if out.shape != res.shape:
            out.resize_(res.shape)
        return out.copy_(res)
    return res


@lowering("aten::_unsafe_index.Tensor")
def unsafe_index(self: torch.Tensor, indices: Sequence[Any]) -> Any:
    """``aten::_unsafe_index`` (what decompositions emit): the same kernel as ``index`` (still bounds-checked)."""
    return index(self, indices)


def _index_put(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor, accumulate: bool) -> Any:
    """In-place ``self[indices] = values`` (``+=`` with accumulate, repeated indices all add)."""
    if not _ok_data(self, values, move=True) or values.dtype != self.dtype or self.dim() == 0:
        return NotImplemented
    if U.has_internal_overlap(self):
        return NotImplemented
    plan = _plan(self, indices)
    if plan is None:
        return NotImplemented
    x, dims, ivs, sizes, steps, span, xs, dense, groups = plan
    try:
        vst = U.broadcast_strides(values, dense) if values.dim() <= len(dense) else None
        if vst is None or torch.broadcast_shapes(values.shape, dense) != torch.Size(dense):
            return NotImplemented
    except RuntimeError:
        return NotImplemented
    if U.prod(dense) == 0:
        return self
    if span == 0:
        return NotImplemented
    if U.overlaps(values, self):
        values = values.clone()
        vst = U.broadcast_strides(values, dense)
    s_stride, st = _x_view(x, steps)
    try:
        _run(x, xs, span if len(steps) > 1 else sizes[0], s_stride, values, vst, None,
             [t for t, _ in ivs], [s for _, s in ivs], sizes, st, dense, groups, "scatter", True,
             "add" if accumulate else None)
    except _Bounds:
        return NotImplemented
    return self


@lowering("aten::index_put_")
def index_put_(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor, accumulate: bool = False) -> Any:
    """``self.index_put_(indices, values, accumulate)``."""
    return _index_put(self, indices, values, accumulate)


@lowering("aten::_index_put_impl_")
def _index_put_impl_(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor, accumulate: bool = False,
                     unsafe: bool = False) -> Any:
    """``self[indices] = values`` as autograd (index backward) and ``__setitem__`` call it."""
    return _index_put(self, indices, values, accumulate)


@lowering("aten::index_put")
def index_put(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor, accumulate: bool = False) -> Any:
    """Out-of-place ``index_put``."""
    if not _ok_data(self, move=True):
        return NotImplemented
    res = self.clone()
    r = _index_put(res, indices, values, accumulate)
    return NotImplemented if r is NotImplemented else res


@lowering("aten::_unsafe_index_put")
def unsafe_index_put(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor,
                     accumulate: bool = False) -> Any:
    """``aten::_unsafe_index_put``: out-of-place ``index_put`` (still bounds-checked)."""
    return index_put(self, indices, values, accumulate)


# ------------------------------------------------------------------------------------------ embedding


@trn.kernel
def zero_rows(out):
    """``out[...] = 0`` for a ``[n, d]`` tensor (memset tiles stored by DMA)."""
    n, d = out.shape
    p = min(128, n)
    f = min(d, 2048)
    z = tl.zeros((p, f), out.dtype)
    for i in tl.affine_range(tl.cdiv(n, p)):
        rows = i * p + tl.arange(p)[:, None]
        for j in tl.affine_range(tl.cdiv(d, f)):
            cols = j * f + tl.arange(f)[None, :]
            tl.store(out[rows, cols], z, mask=((rows < n) & (cols < d)) if (n % p or d % f) else None)


@lowering("aten::embedding_dense_backward")
def embedding_dense_backward(grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int,
                             padding_idx: int, scale_grad_by_freq: bool) -> Any:
    """Gradient of ``embedding``: a scatter-add of ``grad_output`` rows into ``[num_weights, D]``.

    Rows of the padding index get no gradient (their row is zeroed after the scatter-add: only
    padding positions write to it). ``scale_grad_by_freq`` first scatter-adds ones into per-row
    counts and divides each token's gradient row by its index's count.
    """
    if not _ok_data(grad_output) or not _ok_index(indices):
        return NotImplemented
    if not grad_output.dtype.is_floating_point:
        return NotImplemented
    d = grad_output.shape[-1] if grad_output.dim() else 1
    n = indices.numel()
    gw = torch.empty((num_weights, d), dtype=grad_output.dtype, device="trn")
    if gw.numel():
        zero_rows(gw)
    if n == 0 or d == 0:
        return gw
    g2 = grad_output.reshape(n, d)
    idx = indices.reshape(n)
    if not _fits(num_weights * d, n * d):
        return NotImplemented
    if scale_grad_by_freq:
        counts = torch.empty((num_weights, 1), dtype=torch.float32, device="trn")
        zero_rows(counts)
        if _index_scatter(counts, 0, idx, None, 1.0, "add", None, counts) is NotImplemented:
            return NotImplemented
        per_token = index_select(counts, 0, idx)
        if per_token is NotImplemented:
            return NotImplemented
        g2 = (g2.float() / per_token).to(grad_output.dtype)
    r = _index_scatter(gw, 0, idx, g2, None, "add", None, gw)
    if r is NotImplemented:
        return NotImplemented
    if 0 <= padding_idx < num_weights:
        gw[padding_idx].zero_()
    return gw


@trn.kernel
def renorm_rows(rows, out, max_norm, norm_type):
    """``out[r] = rows[r] * (max_norm / (norm + 1e-7) if norm > max_norm else 1)`` with ``norm = ||rows[r]||_p``
    (``norm_type`` 1 or 2) for a ``[n, d]`` tensor (``d`` on the free axis, one chunk)."""
    n, d = rows.shape
    p = min(128, n)
    for i in tl.affine_range(tl.cdiv(n, p)):
        r = i * p + tl.arange(p)[:, None]
        cols = tl.arange(d)[None, :]
        m = (r < n) if n % p else None
        t = tl.load(rows[r, cols], mask=m).astype(tl.float32)
        if norm_type == 1:
            norm = tl.sum(tl.abs(t), axis=1, keepdims=True)
        else:
            norm = tl.sqrt(tl.sum(t * t, axis=1, keepdims=True))
        scale = tl.where(norm > max_norm, max_norm / (norm + 1e-7), 1.0)
        tl.store(out[r, cols], t * scale, mask=m)


@lowering("aten::embedding_renorm_")
def embedding_renorm_(self: torch.Tensor, indices: torch.Tensor, max_norm: float, norm_type: float) -> Any:
    """``embedding(..., max_norm=)``'s in-place renorm of the looked-up rows (L1/L2 norms).

    Gathers the rows, rescales them in one kernel, and stores them back by indirect DMA: a repeated
    index writes the same rescaled row each time, so no deduplication is needed.
    """
    if norm_type not in (1.0, 2.0) or not _ok_data(self) or not self.dtype.is_floating_point or self.dim() != 2:
        return NotImplemented
    if not _ok_index(indices) or self.shape[1] > 4096 or U.has_internal_overlap(self):
        return NotImplemented
    idx = indices.reshape(-1)
    if idx.numel() == 0 or self.shape[1] == 0:
        return self
    rows = index_select(self, 0, idx)
    if rows is NotImplemented:
        return NotImplemented
    scaled = torch.empty_like(rows)
    renorm_rows(rows, scaled, float(max_norm), int(norm_type))
    r = _index_scatter(self, 0, idx, scaled, None, None, None, self)
    return NotImplemented if r is NotImplemented else self


# --------------------------------------------------------------------------------------- masks


@trn.kernel
def masked_fill_kernel(x, mask, value, out):
    """``out = mask ? value : x`` over 1- to 3-D views (``mask`` broadcast by strides, ``value`` ``[1, 1]``)."""
    a, n, d = _shape3(out)
    p = min(128, n)
    f = min(d, 2048)
    v0 = tl.load(value[0:1, 0:1])
    for b in tl.affine_range(a):
        for i in tl.affine_range(tl.cdiv(n, p)):
            rows = i * p + tl.arange(p)[:, None]
            for j in tl.affine_range(tl.cdiv(d, f)):
                cols = j * f + tl.arange(f)[None, :]
                m = ((rows < n) & (cols < d)) if (n % p or d % f) else None
                t = tl.load(_at(x, b, rows, cols), mask=m)
                mk = tl.load(_at(mask, b, rows, cols), mask=m)
                tl.store(_at(out, b, rows, cols), tl.where(mk != 0, v0, t), mask=m)


def _masked_fill(self: torch.Tensor, mask: torch.Tensor, value: Any, out: torch.Tensor | None) -> Any:
    small = U.is_trn(self) and self.dtype in _SMALL_DTYPES
    if not (_ok_data(self) or small) or not U.is_trn(mask) or mask.dtype != torch.bool:
        return NotImplemented
    try:
        bshape = torch.broadcast_shapes(self.shape, mask.shape)
    except RuntimeError:
        return NotImplemented
    if bshape != self.shape:  # out of place only: the result takes the broadcast shape
        if out is not None:
            return NotImplemented
        self = self.expand(bshape)
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        return NotImplemented
    if U.is_trn(value) and value.dtype != self.dtype:
        value = value.to(self.dtype)
    vt = _value_tensor(value, self.dtype)
    if vt is None:
        return NotImplemented
    res = out if out is not None else torch.empty(self.shape, dtype=self.dtype, device="trn")
    if not U.is_trn(res) or res.shape != self.shape or res.dtype != self.dtype or U.has_internal_overlap(res):
        return NotImplemented
    if self.numel() == 0:
        return res
    if U.overlaps(mask, res):
        mask = mask.clone()
    shape = tuple(self.shape)
    strides = [list(self.stride()) + [], U.broadcast_strides(mask, shape), list(res.stride())]
    if not shape:
        strides = [[], [], []]
    sh, sts = U.coalesce(shape, strides)
    if not sh:
        sh, sts = [1], [[1], [0], [1]]
    lead, inner = sh[:-3], sh[-3:]
    for it in itertools.product(*[range(n) for n in lead]):
        vs = []
        for k, t in enumerate((self, mask, res)):
            off = t.storage_offset() + sum(i * sts[k][q] for q, i in enumerate(it))
            vs.append(U.view(t, inner, sts[k][len(lead):], off))
        masked_fill_kernel(vs[0], vs[1], vt, vs[2])
    return res


@lowering("aten::masked_fill.Scalar")
def masked_fill(self: torch.Tensor, mask: torch.Tensor, value: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self.masked_fill(mask, value)`` (a select kernel; the mask broadcast by strides)."""
    return _masked_fill(self, mask, value, out)


@lowering("aten::masked_fill.Tensor")
def masked_fill_t(self: torch.Tensor, mask: torch.Tensor, value: torch.Tensor, *,
                  out: torch.Tensor | None = None) -> Any:
    """``self.masked_fill(mask, value_tensor)`` (a 0-dim value)."""
    return _masked_fill(self, mask, value, out)


@trn.kernel
def count_nonzero_rows(m, out):
    """``out[p, 0] = #nonzero in m[p, :]`` for a ``[P, L]`` view (masked past ``n`` by the caller's zero pad)."""
    p_dim, l_dim = m.shape
    f = min(l_dim, 2048)
    acc = tl.zeros((p_dim, 1), tl.float32)
    rows = tl.arange(p_dim)[:, None]
    for j in tl.sequential_range(tl.cdiv(l_dim, f)):
        cols = j * f + tl.arange(f)[None, :]
        t = tl.load(m[rows, cols], mask=cols < l_dim) if l_dim % f else tl.load(m[rows, cols])
        acc[...] = acc + tl.sum((t != 0).astype(tl.float32), axis=1, keepdims=True)
    tl.store(out[rows, tl.arange(1)[None, :]], acc)


@trn.kernel
def nonzero_scatter(m, counts, out, n, shape):
    """Coordinates of the nonzeros of a flat mask viewed as ``[P, L]`` (element ``p * L + l``, valid below
    ``n``) into rows of ``out`` (``[count + 1, ndim]`` int64; row ``count`` takes the zeros' writes).

    Each partition's start is the exclusive prefix sum of ``counts`` over partitions (a matmul with a
    strictly-triangular ones matrix); inside a partition positions come from ``cumsum``.
    """
    p_dim, l_dim = m.shape
    rows = tl.arange(p_dim)[:, None]
    f = min(l_dim, 2048)
    cnt = tl.load(counts[rows, tl.arange(1)[None, :]])
    tri = tl.ndarray((p_dim, p_dim), tl.float32)
    tri[...] = (tl.arange(p_dim)[:, None] < tl.arange(p_dim)[None, :])
    base = tl.ndarray((p_dim, 1), tl.float32)
    base[...] = tl.copy(tl.matmul(tri, cnt, transpose_x=True))
    total = out.shape[0] - 1
    nd = len(shape)
    for j in tl.sequential_range(tl.cdiv(l_dim, f)):
        cols = j * f + tl.arange(f)[None, :]
        lin = rows * l_dim + cols
        valid = (cols < l_dim) & (lin < n)
        t = tl.load(m[rows, cols], mask=cols < l_dim) if l_dim % f else tl.load(m[rows, cols])
        nz = (t != 0).astype(tl.float32)
        cs = tl.cumsum(nz, axis=1)
        pos = tl.where(nz > 0, base + cs - 1.0, float(total)).astype(tl.int32)
        base[...] = base + tl.sum(nz, axis=1, keepdims=True)
        k = tl.ndarray((p_dim, f), tl.float32)
        k[...] = lin
        for dd in tl.static_range(nd):
            stride = U.prod(shape[dd + 1:])
            q = tl.floor((k + 0.5) / float(stride))
            if dd > 0:
                q = q - tl.floor((q + 0.5) / float(shape[dd])) * float(shape[dd])
            tl.store(out[pos, dd], q.astype(tl.int32), mask=valid)


_NZ_LIMIT = 2**24  # positions are exact in fp32 below this


@lowering("aten::nonzero")
def nonzero(self: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``torch.nonzero(self)``: ``[count, ndim]`` int64 coordinates in row-major order (one host sync)."""
    if not U.is_trn(self) or self.dtype not in (torch.bool, torch.float32, torch.bfloat16, torch.int32,
                                                  torch.uint8, torch.float16):
        return NotImplemented
    n = self.numel()
    if n >= _NZ_LIMIT or self.is_conj() or self.is_neg():
        return NotImplemented
    nd = self.dim()
    if n == 0:
        res = torch.empty((0, nd), dtype=torch.int64, device="trn")
    else:
        flat = self.contiguous().view(-1)
        p = min(128, n)
        ln = -(-n // p)
        if p * ln != n:  # zero-pad to [P, L]
            pad = torch.zeros(p * ln, dtype=self.dtype, device="trn")
            pad[:n].copy_(flat)
            flat = pad
        m2 = flat.view(p, ln)
        counts = torch.empty((p, 1), dtype=torch.float32, device="trn")
        count_nonzero_rows(m2, counts)
        total = int(counts.sum().item())
        buf = torch.empty((total + 1, max(nd, 1)), dtype=torch.int64, device="trn")
        nonzero_scatter(m2, counts, buf, n, tuple(self.shape) if nd else (1,))
        res = buf[:total, :nd]
    if out is not None:
        if not U.is_trn(out) or out.dtype != torch.int64:
            return NotImplemented
        out.resize_(res.shape)
        return out.copy_(res)
    return res


@lowering("aten::masked_select")
def masked_select(self: torch.Tensor, mask: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``torch.masked_select(self, mask)``: ``self`` (broadcast) at the mask's nonzeros, in order."""
    if not _ok_data(self, move=True) or not U.is_trn(mask) or mask.dtype != torch.bool:
        return NotImplemented
    try:
        shape = torch.broadcast_shapes(self.shape, mask.shape)
    except RuntimeError:
        return NotImplemented
    s = self.expand(shape)
    mk = mask.expand(shape)
    if len(shape) == 0 or len(shape) > 3:  # more than 3 mask dims would need more than 3 index tensors
        s, mk = s.reshape(-1), mk.reshape(-1)
    res = index(s, [mk])
    if res is NotImplemented:
        return NotImplemented
    res = res.reshape(-1)
    if out is not None:
        if not U.is_trn(out) or out.dtype != self.dtype:
            return NotImplemented
        out.resize_(res.shape)
        return out.copy_(res)
    return res


@lowering("aten::masked_scatter")
def masked_scatter(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor, *,
                   out: torch.Tensor | None = None) -> Any:
    """``self.masked_scatter(mask, source)``: consecutive ``source`` elements at the mask's nonzeros."""
    if not _ok_data(self, source, move=True) or source.dtype != self.dtype:
        return NotImplemented
    if not U.is_trn(mask) or mask.dtype != torch.bool:
        return NotImplemented
    try:
        bshape = torch.broadcast_shapes(self.shape, mask.shape)
    except RuntimeError:
        return NotImplemented
    if out is not None and (not U.same_view(out, self) or bshape != self.shape):
        return NotImplemented
    res = out if out is not None else self.expand(bshape).clone(memory_format=torch.contiguous_format)
    self = res if res.dim() else res.view(1)
    if self.dim() > 3:  # one flat index instead of more than 3 index tensors
        if not res.is_contiguous():
            return NotImplemented
        self = res.view(-1)
    mk = mask.expand(res.shape).reshape(self.shape)
    nz = nonzero(mk)
    if nz is NotImplemented:
        return NotImplemented
    count = nz.shape[0]
    if count > source.numel():
        return NotImplemented  # the CPU raises torch's error
    if count == 0:
        return res
    vals = source.reshape(-1)[:count]
    if U.has_internal_overlap(vals):  # an expanded source (a broadcast gradient)
        vals = vals.contiguous()
    r = _index_put(self, [nz.select(1, j) for j in range(self.dim())], vals, False)
    return NotImplemented if r is NotImplemented else res
