"""Gather / scatter along one dim on ``trn``: gather, scatter (src / value / reduce), scatter_add,
scatter_reduce, index_select, index_add / index_copy / index_fill / index_reduce, take, put_, and
embedding's backward and renorm.

All of them launch the indirect-DMA ``gather_scatter`` kernel of :mod:`stdlib_kernels.indexing.engine`
(rows of the indexed tensor named by an index tile): gathers read rows, scatters store them (plain,
or an accumulating DMA for scatter_add / index_add / put_(accumulate) / scatter_reduce / embedding
backward, where repeated indices all accumulate). ``take`` / ``put_`` index the flattened tensor
(negative indices wrap). scatter_reduce / index_reduce ``mean`` scatter-add the values and a count,
then divide (``mean_finish``). ``embedding``'s forward is ``index_select``; its backward scatter-adds
gradient rows into a zeroed ``[num_weights, D]`` (``zero_rows``), and ``embedding_renorm_`` gathers,
rescales (``renorm_rows``) and stores back the looked-up rows.

An out-of-range index makes the bounds-checked DMA fail before touching memory; the lowering then
declines and the CPU fallback raises torch's own error.

Example:
    >>> import torch, trnlang  # doctest: +SKIP
    >>> w = torch.randn(1000, 64, device="trn", requires_grad=True)
    >>> ids = torch.randint(0, 1000, (32, 16), device="trn")
    >>> torch.nn.functional.embedding(ids, w).sum().backward()   # index_select + embedding_dense_backward
    >>> torch.gather(w.detach(), 1, ids[:, :8] % 64).shape
    torch.Size([32, 8])
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.indexing.engine import (
    Move,
    _as1,
    _Bounds,
    _fits,
    _gather_dim,
    _norm_dim,
    _ok_data,
    _ok_index,
    _run,
    _scatter_dim,
    _to_out,
    _value_tensor,
    bounds_reason,
)
from trnlang.device import Accepts, decline, lowering

_ACC = {"sum": "add", "prod": "multiply", "amax": "max", "amin": "min"}

#: decline reasons shared by the lowerings below
_OUT_OF_RANGE = "an index out of range (the bounds-checked DMA fired): the CPU raises torch's error"
_EMPTY_SELF = "indices into an empty tensor: torch raises"
_BAD_DEST = "out= not a trn tensor of self's shape and dtype, with internal overlap, or partly overlapping self"
_NOT_DATA = "not trn tensors of a dtype the kernels move or compute on, or a conj/neg bit"
_BAD_VALUE = "a value that is not a real number fitting the dtype"


# ------------------------------------------------------------------------------- gather / scatter


def _gather_checks(self: torch.Tensor, dim: int, index: torch.Tensor) -> int | str:
    """The normalised ``dim`` of a gather/scatter along one dim, or why the kernels cannot run it."""
    if not _ok_data(self, move=True):
        return "self not a trn tensor of a dtype the kernels move, or a conj/neg bit"
    if not _ok_index(index):
        return "index not an int64/int32 trn tensor"
    nd = max(self.dim(), 1)
    d = _norm_dim(dim, self.dim())
    if d is None or max(index.dim(), 1) != nd:
        return "dim out of range, or index of another rank than self: torch raises"
    s, i = _as1(self), _as1(index)
    if any(i.shape[k] > s.shape[k] for k in range(nd) if k != d):
        return "index larger than self outside dim: torch raises"
    if not _fits(self.numel(), index.numel()):
        return "2^30 or more elements (int32 offsets)"
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
    if isinstance(d, str):
        return decline(d)
    res = torch.empty(index.shape, dtype=self.dtype, device="trn")
    if index.numel():
        if self.numel() == 0:
            return decline(_EMPTY_SELF)
        try:
            _gather_dim(_as1(self), d, _as1(index), _as1(res), wrap=False)
        except _Bounds as e:
            return decline(bounds_reason(e, _OUT_OF_RANGE))
    return _to_out(res, out)


def _dest(self: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor | None:
    """Where a scatter writes: ``out`` (or a new tensor) holding a copy of ``self`` (None if ``out`` is unusable)."""
    res = out if out is not None else torch.empty_like(self)
    if not U.is_trn(res) or res.shape != self.shape or res.dtype != self.dtype or U.has_internal_overlap(res):
        return None
    if not U.same_view(res, self):
        if U.overlaps(res, self):
            return None
        res.copy_(self)
    return res


def _scatter_impl(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor | None, value: Any,
                  accumulate: str | None, out: torch.Tensor | None) -> Any:
    if src is not None and not _ok_data(src, move=True):
        return decline("src not a trn tensor of a dtype the kernels move, or a conj/neg bit")
    if U.is_trn(index) and index.numel() == 0 and _ok_data(self, move=True) and \
            (out is None or U.same_view(out, self)):
        mi = torch.empty_like(index, device="meta")
        ms = torch.empty_like(src, device="meta") if src is not None else None
        mself = torch.empty_like(self, device="meta")
        try:  # torch's own checks, on meta
            torch.scatter(mself, dim, mi, ms) if ms is not None else torch.scatter(mself, dim, mi, 0.0)
        except (RuntimeError, IndexError):
            return decline("torch's checks (run on meta) fail: the CPU raises its error")
        return out if out is not None else self.clone()
    d = _gather_checks(self, dim, index)
    if isinstance(d, str):
        return decline(d)
    if src is not None:
        if src.dtype != self.dtype or max(src.dim(), 1) != max(index.dim(), 1):
            return decline("src of another dtype or rank than self/index: torch raises")
        if any(_as1(index).shape[k] > _as1(src).shape[k] for k in range(max(index.dim(), 1))):
            return decline("index larger than src: torch raises")
    res = _dest(self, out)
    if res is None:
        return decline(_BAD_DEST)
    if src is not None and U.overlaps(src, res):
        src = src.clone()
    if index.numel() == 0:
        return res
    if self.numel() == 0:
        return decline(_EMPTY_SELF)
    scalar = None
    if src is None:
        scalar = _value_tensor(value, self.dtype)
        if scalar is None:
            return decline(_BAD_VALUE)
    r1, i1 = _as1(res), _as1(index)
    try:
        _scatter_dim(r1, d, i1, list(i1.shape), _as1(src) if src is not None else None,
                     list(_as1(src).stride()) if src is not None else None, scalar, accumulate, False,
                     list(i1.stride()))
    except _Bounds as e:
        return decline(bounds_reason(e, _OUT_OF_RANGE))
    return res


def _number(value: Any) -> Any:
    """A Python number from a number or a one-element tensor (one host sync), else None."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 and not value.is_complex() else None
    return U.scalar_value(value)


def _wide_value(value: Any, dtype: torch.dtype) -> bool:
    """``value`` is a real number ``torch.full`` stores exactly in the 8-byte ``dtype`` (an int64 needs an integer)."""
    v = _number(value)
    if v is None or isinstance(v, complex) or isinstance(v, bool):
        return False
    if dtype == torch.int64:  # torch casts a float value toward zero
        return isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and -(2**63) <= math.trunc(v) < 2**63)
    return True


def _filled(value: Any, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
    """A trn tensor of ``shape`` filled with ``value`` as torch casts it to ``dtype`` (toward zero for int64)."""
    v = _number(value)
    return torch.full(tuple(shape), math.trunc(v) if dtype == torch.int64 else v, dtype=dtype, device="trn")


@lowering("aten::scatter.src")
def scatter_src(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *,
                out: torch.Tensor | None = None) -> Any:
    """``self.scatter(dim, index, src)`` (an indirect-DMA store)."""
    return _scatter_impl(self, dim, index, src, None, None, out)


@lowering("aten::scatter.value")
def scatter_value(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any, *,
                  out: torch.Tensor | None = None) -> Any:
    """``self.scatter(dim, index, value)`` (8-byte data, which the kernels only move: a filled source scattered)."""
    if U.is_trn(self) and self.dtype in _WIDE and U.is_trn(index) and _wide_value(value, self.dtype):
        return _scatter_impl(self, dim, index, _filled(value, self.dtype, index.shape), None, None, out)
    return _scatter_impl(self, dim, index, None, value, None, out)


_LEGACY_REDUCE = {"add": "add", "multiply": "multiply"}
_INT_LEGACY = {"add": "sum", "multiply": "prod"}


@lowering("aten::scatter.reduce")
def scatter_src_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *, reduce: str,
                       out: torch.Tensor | None = None) -> Any:
    """``self.scatter(dim, index, src, reduce="add"|"multiply")`` (an accumulating DMA)."""
    if reduce not in _LEGACY_REDUCE:
        return decline("a reduce other than 'add' or 'multiply': torch raises")
    if U.is_trn(self) and self.dtype == torch.int64:  # the integer scatter_reduce (through fp32, when exact)
        return scatter_reduce(self, dim, index, src, _INT_LEGACY[reduce], include_self=True, out=out)
    return _scatter_impl(self, dim, index, src, None, _LEGACY_REDUCE[reduce], out)


@lowering("aten::scatter.value_reduce")
def scatter_value_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any, *, reduce: str,
                         out: torch.Tensor | None = None) -> Any:
    """``self.scatter(dim, index, value, reduce="add"|"multiply")``."""
    if reduce not in _LEGACY_REDUCE:
        return decline("a reduce other than 'add' or 'multiply': torch raises")
    if U.is_trn(self) and self.dtype == torch.int64 and U.is_trn(index) and _wide_value(value, self.dtype):
        return scatter_reduce(self, dim, index, _filled(value, self.dtype, index.shape), _INT_LEGACY[reduce],
                              include_self=True, out=out)
    return _scatter_impl(self, dim, index, None, value, _LEGACY_REDUCE[reduce], out)


def _plain_complex(*ts: Any) -> bool:
    """Every one of ``ts`` is a complex64 trn tensor without conj/neg bits."""
    return all(U.is_trn(t) and t.dtype == torch.complex64 and not (t.is_conj() or t.is_neg()) for t in ts)


def _complex_out(out: Any) -> Any:
    """The planes view of a complex64 ``out=`` (None stays None)."""
    return torch.view_as_real(out) if out is not None and _plain_complex(out) else out


@lowering("aten::scatter_add")
def scatter_add(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *,
                out: torch.Tensor | None = None) -> Any:
    """``self.scatter_add(dim, index, src)``: an accumulating DMA (repeated indices all add; int64 through the
    integer ``scatter_reduce``, exact when bounded)."""
    if U.is_trn(self) and self.dtype == torch.int64:
        return scatter_reduce(self, dim, index, src, "sum", include_self=True, out=out)
    if _plain_complex(self, src) and U.is_trn(index) and self.dim() == index.dim() == src.dim() == 0 \
            and dim in (0, -1):  # 0-dim: as one-element vectors
        r = scatter_add(self.reshape(1), 0, index.reshape(1), src.reshape(1),
                        out=out.reshape(1) if out is not None else None)
        return r if r is NotImplemented else (out if out is not None else r.reshape(()))
    if _plain_complex(self, src) and U.is_trn(index) and -max(self.dim(), 1) <= dim < max(self.dim(), 1) \
            and self.dim() == index.dim() == src.dim() and self.dim() > 0:
        # complex64 adds per plane: the planes view, the index repeated along the trailing plane dim
        ip = index.unsqueeze(-1).expand(*index.shape, 2)
        planes = _complex_out(out)
        r = scatter_add(torch.view_as_real(self), dim % self.dim(), ip, torch.view_as_real(src), out=planes)
        return r if r is NotImplemented or out is not None else torch.view_as_complex(r)
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


def _scatter_reduce_checks(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str,
                           out: torch.Tensor | None, boolean: bool) -> str | None:
    """Why ``scatter_reduce`` declines these arguments, or None."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        return "an unknown reduce: torch raises"
    if not self.dtype.is_floating_point and not boolean:
        return "an integer self (accumulating DMAs are float)"
    d = _gather_checks(self, dim, index)
    if isinstance(d, str):
        return d
    if not _ok_data(src, move=boolean) or src.dtype != self.dtype:
        return "src not a trn tensor of self's dtype"
    if out is not None and (not U.is_trn(out) or out.dtype != self.dtype):
        return "out= not a trn tensor of self's dtype"
    return None


_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
#: 8-byte dtypes: the kernels move them (as int32 word pairs) but neither fill nor accumulate them
_WIDE = (torch.int64, torch.float64)


def _int_reduce(self: torch.Tensor, src: torch.Tensor, reduce: str, include_self: bool, out: Any,
                counts: Any, run: Any) -> Any:
    """An integer ``scatter_reduce`` / ``index_reduce`` through the fp32 one, when every result is exact there.

    ``counts()``: the number of contributions to each element (fp32, on the device); ``run(self, src)`` the float
    op. Bounds from the operands' magnitudes and the largest count (device reductions): sums below 2^24 (2^22 for
    mean, whose floor division then cannot round across an integer), products below 2^24, and within the dtype.
    """
    from stdlib_kernels.elementwise.pointwise import int_maxabs

    if not (U.is_trn(src) and src.dtype == self.dtype) or (out is not None and (not U.is_trn(out)
                                                                               or out.dtype != self.dtype)):
        return decline("src (source) or out= not trn tensors of self's integer dtype")
    cap = min(1 << (22 if reduce == "mean" else 24), torch.iinfo(self.dtype).max + 1)
    c = int(counts().max()) if self.numel() and src.numel() else 0
    ms, mv = max(int_maxabs(self), 1), max(int_maxabs(src), 1)
    if reduce == "prod":
        bound = ms * mv ** c
    elif reduce in ("amax", "amin"):
        bound = max(ms, mv)
    else:
        bound = ms + c * mv
    if bound >= cap:
        return decline("integer results that may reach 2^24 or the dtype's range (inexact in fp32, or wrapping)")
    r = run(self.float(), src.float())
    if r is NotImplemented:
        return r
    r = (torch.floor(r) if reduce == "mean" else r).to(self.dtype)  # torch divides integer means with floor
    return _to_out(r, out)


@lowering("aten::scatter_reduce.two")
def scatter_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *,
                   include_self: bool = True, out: torch.Tensor | None = None) -> Any:
    """``self.scatter_reduce(dim, index, src, reduce, include_self=...)`` for sum/prod/mean/amax/amin.

    sum/prod/amax/amin are accumulating DMAs (after scattering the identity where ``include_self``
    is False); mean scatter-adds the values and a count, then divides.
    """
    if U.is_trn(self) and self.dtype in _INTS and reduce in ("sum", "prod", "mean", "amax", "amin") \
            and isinstance(_gather_checks(self, dim, index), int):
        def counts() -> torch.Tensor:
            ones = torch.ones(index.shape, device="trn")
            return torch.zeros(self.shape, device="trn").scatter_add(dim, index, ones) + (1 if include_self else 0)

        return _int_reduce(self, src, reduce, include_self, out, counts,
                           lambda s_, v_: scatter_reduce(s_, dim, index, v_, reduce, include_self=include_self))
    boolean = self.dtype == torch.bool and reduce != "mean"  # OR (sum, amax) / AND (prod, amin) on the bytes
    why = _scatter_reduce_checks(self, dim, index, src, reduce, out, boolean)
    if why is not None:
        return decline(why)
    if reduce != "mean":
        res = self.clone()
        if not include_self:
            ident = {"sum": 0.0, "prod": 1.0, "amax": float("-inf"), "amin": float("inf")}[reduce]
            if boolean:
                ident = reduce in ("prod", "amin")
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
    return _to_out(r, out)


# ------------------------------------------------------------------------------------ index_* ops


def _index_vec(index: torch.Tensor) -> torch.Tensor | None:
    if not _ok_index(index) or index.dim() > 1:
        return None
    return _as1(index)


def _index_plan(self: torch.Tensor, dim: int, index: torch.Tensor) -> Any:
    """(1-D index, dim, ``self`` as >= 1-D, the dense shape: ``self``'s with ``dim`` as long as the index, the
    index's strides over it) for the index_* ops; a string (why) to decline."""
    idx = _index_vec(index)
    d = _norm_dim(dim, self.dim())
    if idx is None:
        return "index not a 0-/1-D int64/int32 trn tensor"
    if d is None:
        return "dim out of range: torch raises"
    if not _ok_data(self, move=True):
        return "self not a trn tensor of a dtype the kernels move, or a conj/neg bit"
    if not _fits(self.numel(), idx.numel()):
        return "2^30 or more elements (int32 offsets)"
    s = _as1(self)
    dense = list(s.shape)
    dense[d] = idx.shape[0]
    ist = [0] * len(dense)
    ist[d] = idx.stride(0)
    return idx, d, s, dense, ist


@lowering("aten::index_select")
def index_select(self: torch.Tensor, dim: int, index: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``self.index_select(dim, index)``: whole rows/slices moved by indirect DMA (also embedding's forward)."""
    plan = _index_plan(self, dim, index)
    if isinstance(plan, str):
        return decline(plan)
    idx, d, s, shape, ist = plan
    res = torch.empty(shape if self.dim() else [], dtype=self.dtype, device="trn")
    if res.numel():
        if self.numel() == 0:
            return decline(_EMPTY_SELF)
        try:
            _gather_dim(s, d, idx, _as1(res).view(shape), wrap=False, idx_strides=ist)
        except _Bounds as e:
            return decline(bounds_reason(e, _OUT_OF_RANGE))
    return _to_out(res, out)


def _index_scatter(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor | None, value: Any,
                   accumulate: str | None, alpha: Any, out: torch.Tensor | None) -> Any:
    plan = _index_plan(self, dim, index)
    if isinstance(plan, str):
        return decline(plan)
    idx, d, s, dense, ist = plan
    if source is None and accumulate is None and self.dtype in _WIDE and _wide_value(value, self.dtype):
        source = torch.full(dense, _number(value), dtype=self.dtype, device="trn")  # 8-byte data only moves
    if source is not None:
        if not _ok_data(source, move=True) or source.dtype != self.dtype:
            return decline("source not a trn tensor of self's dtype, or a conj/neg bit")
        src = _as1(source)
        if list(src.shape) != dense and not (source.dim() == 0 and U.prod(dense) == 1):
            return decline("source not shaped like self with dim as long as the index: torch raises")
        src = src.reshape(dense) if list(src.shape) != dense else src
    res = _dest(self, out)
    if res is None:
        return decline(_BAD_DEST)
    if idx.shape[0] == 0 or U.prod(dense) == 0:
        return res
    if self.numel() == 0:
        return decline(_EMPTY_SELF)
    if source is not None and U.overlaps(src, res):
        src = src.clone()
    scalar = None
    if source is None:
        scalar = _value_tensor(value, self.dtype)
        if scalar is None:
            return decline(_BAD_VALUE)
    a_t = None
    if alpha is not None and alpha != 1:
        if not self.dtype.is_floating_point or isinstance(alpha, complex):
            return decline("alpha != 1 with an integer self, or a complex alpha")
        a_t = U.scalar_tensor(float(alpha), torch.float32)
    try:
        _scatter_dim(_as1(res), d, idx, dense, src if source is not None else None,
                     list(src.stride()) if source is not None else None, scalar, accumulate, False, ist, a_t)
    except _Bounds as e:
        return decline(bounds_reason(e, _OUT_OF_RANGE))
    return res


@lowering("aten::index_add")
def index_add(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, alpha: Any = 1,
              out: torch.Tensor | None = None) -> Any:
    """``self.index_add(dim, index, source, alpha=...)``: accumulating DMA of ``alpha * source`` (an integer
    ``self``: ``source`` times ``alpha`` cast toward zero, as torch casts it, by a native integer product)."""
    if _plain_complex(self, source) and self.dim() == 0 and dim in (0, -1) and U.is_trn(index):
        r = index_add(self.reshape(1), 0, index.reshape(-1), source.reshape(1), alpha=alpha,
                      out=out.reshape(1) if out is not None else None)
        return r if r is NotImplemented else (out if out is not None else r.reshape(()))
    if _plain_complex(self, source) and U.is_trn(index) and index.dim() <= 1 and self.dim() > 0 \
            and -self.dim() <= dim < self.dim() and isinstance(alpha, (bool, int, float, complex)):
        src = source * alpha if alpha != 1 else source
        r = index_add(torch.view_as_real(self), dim % self.dim(), index, torch.view_as_real(src),
                      out=_complex_out(out))
        return r if r is NotImplemented or out is not None else torch.view_as_complex(r)
    if U.is_trn(self) and self.dtype in _INTS and U.is_trn(source) and source.dtype == self.dtype \
            and isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha != 1:
        source, alpha = torch.mul(source, math.trunc(alpha)), 1
    if U.is_trn(self) and self.dtype == torch.int64 and _index_vec(index) is not None and alpha == 1:
        def counts() -> torch.Tensor:
            ones = torch.ones(source.shape, device="trn")
            return torch.zeros(self.shape, device="trn").index_add(dim, index, ones) + 1

        return _int_reduce(self, source, "sum", True, out, counts, lambda s_, v_: index_add(s_, dim, index, v_))
    return _index_scatter(self, dim, index, source, None, "add", alpha, out)


@lowering("aten::index_copy")
def index_copy(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *,
               out: torch.Tensor | None = None) -> Any:
    """``self.index_copy(dim, index, source)`` (in place / ``out=``: no overlap of the result with the operands)."""
    if out is not None:  # CPU checks these first, whatever the dtypes or the device
        U.assert_no_internal_overlap(out)
        U.assert_no_overlap(out, index)
        U.assert_no_overlap(out, source)
    return _index_scatter(self, dim, index, source, None, None, None, out)


@lowering("aten::index_reduce")
def index_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, reduce: str, *,
                 include_self: bool = True, out: torch.Tensor | None = None) -> Any:
    """``self.index_reduce(dim, index, source, reduce, include_self=...)`` for prod/mean/amax/amin.

    Like scatter_reduce with whole slices: accumulating DMAs (after filling the identity where
    ``include_self`` is False); mean adds values and counts, then divides.
    """
    if reduce not in ("prod", "mean", "amax", "amin"):
        return decline("an unknown reduce: torch raises")
    if U.is_trn(self) and self.dtype in _INTS and _index_vec(index) is not None and _ok_data(self, source, move=True):
        def counts() -> torch.Tensor:
            ones = torch.ones(source.shape, device="trn")
            return torch.zeros(self.shape, device="trn").index_add(dim, index, ones) + (1 if include_self else 0)

        return _int_reduce(self, source, reduce, include_self, out, counts,
                           lambda s_, v_: index_reduce(s_, dim, index, v_, reduce, include_self=include_self))
    if not _ok_data(self, source) or not self.dtype.is_floating_point or source.dtype != self.dtype:
        return decline("self and source not float trn tensors of one dtype, or a conj/neg bit")
    if _index_vec(index) is None:
        return decline("index not a 0-/1-D int64/int32 trn tensor")
    if out is not None and (not U.is_trn(out) or out.dtype != self.dtype):
        return decline("out= not a trn tensor of self's dtype")
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
    return _to_out(r, out)


def _index_on_trn(self: Any, index: Any) -> Any:
    """``index_fill`` takes a CPU index with a ``trn`` self, as CUDA's does (the device checks are off for it)."""
    if isinstance(index, torch.Tensor) and index.dim() > 1:
        raise RuntimeError("Index has to be a vector/scalar")  # torch's check, before any device rule
    if U.is_trn(self) and isinstance(index, torch.Tensor) and index.is_cpu:
        return index.to("trn")
    return index


@lowering("aten::index_fill.int_Scalar", device_check=False)
def index_fill(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any) -> Any:
    """``self.index_fill(dim, index, value)`` (complex64: each plane filled with its part of the value)."""
    moved = _index_on_trn(self, index)
    if _plain_complex(self) and isinstance(value, (bool, int, float, complex)) and self.dim() > 0 \
            and -self.dim() <= dim < self.dim():
        res = self.clone()
        planes = torch.view_as_real(res)
        for k, part in enumerate((complex(value).real, complex(value).imag)):
            r = index_fill(planes[..., k], dim % self.dim(), moved, part)
            if r is NotImplemented:
                return r
            planes[..., k].copy_(r)
        return res
    r = _index_scatter(self, dim, moved, None, value, None, None, None)
    if r is NotImplemented and moved is not index:  # declined: the CPU fallback must see the trn index
        return torch.ops.aten.index_fill.int_Scalar(self, dim, moved, value)
    return r


@lowering("aten::index_fill.int_Tensor", device_check=False)
def index_fill_t(self: torch.Tensor, dim: int, index: torch.Tensor, value: torch.Tensor) -> Any:
    """``self.index_fill(dim, index, value_tensor)`` (a 0-dim value)."""
    moved = _index_on_trn(self, index)
    if _plain_complex(self) and isinstance(value, torch.Tensor) and value.dim() == 0:
        return index_fill(self, dim, moved, complex(value.item()))  # the number (one host read), as planes
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        r = _index_scatter(self, dim, moved, None, value.to(self.dtype) if U.is_trn(value) else value, None, None,
                           None)
    else:
        r = decline("a value that is not a 0-dim tensor: torch raises")
    if r is NotImplemented and moved is not index:  # declined: the CPU fallback must see the trn index
        return torch.ops.aten.index_fill.int_Tensor(self, dim, moved, value)
    return r


def _long_index(op: str, index: Any) -> None:
    """CPU's check: ``take`` and ``put_`` take int64 indices only (the kernels could read int32 ones)."""
    if isinstance(index, torch.Tensor) and index.dtype != torch.int64:
        name = _DTYPE_NAMES.get(index.dtype, index.dtype)
        raise RuntimeError(f"{op}(): Expected a long tensor for index, but got {name}")


#: torch's ScalarType names, as its error messages print them
_DTYPE_NAMES = {torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool",
                torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16"}


@lowering("aten::take")
def take(self: torch.Tensor, index: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``torch.take(self, index)``: elements of the flattened ``self`` (negative indices wrap)."""
    _long_index("take", index)
    if not (_ok_data(self, move=True) and _ok_index(index)):
        return decline(_NOT_DATA)
    if not _fits(self.numel(), index.numel()):
        return decline("2^30 or more elements (int32 offsets)")
    flat = self.contiguous().view(-1)
    res = torch.empty(index.shape, dtype=self.dtype, device="trn")
    if index.numel():
        if self.numel() == 0:
            return decline(_EMPTY_SELF)
        i1 = _as1(index)
        r1 = _as1(res)
        nd = i1.dim()
        try:
            _run(flat, [0] * nd, flat.shape[0], 1, r1, list(r1.stride()), None, [i1], [list(i1.stride())],
                 [flat.shape[0]], [1], list(i1.shape), (0, nd), Move.GATHER, True)
        except _Bounds as e:
            return decline(bounds_reason(e, _OUT_OF_RANGE))
    return _to_out(res, out)


@lowering("aten::put_")
def put_(self: torch.Tensor, index: torch.Tensor, source: torch.Tensor, accumulate: bool = False) -> Any:
    """``self.put_(index, source, accumulate)``: elements of the flattened ``self`` (negative indices wrap)."""
    _long_index("put_", index)
    if not (_ok_data(self, source, move=True) and _ok_index(index)) or source.dtype != self.dtype:
        return decline(_NOT_DATA + ", or source of another dtype than self")
    if index.numel() != source.numel():
        return decline("index and source of different sizes: torch raises")
    if not self.is_contiguous() or not _fits(self.numel(), index.numel()):
        return decline("a non-contiguous self, or 2^30 or more elements")
    if index.numel() == 0:
        return self
    if self.numel() == 0:
        return decline(_EMPTY_SELF)
    if accumulate and _plain_complex(self, source):  # complex64 adds per plane: rows of (real, imaginary)
        torch.view_as_real(self).view(-1, 2).index_put_((index.reshape(-1),), torch.view_as_real(source).reshape(-1, 2),
                                                        accumulate=True)
        return self
    if accumulate and self.dtype == torch.int64:  # through fp32 when every sum is exact there
        def counts() -> torch.Tensor:
            return torch.zeros(self.shape, device="trn").put_(index, torch.ones(index.shape, device="trn"), True)

        return _int_reduce(self, source, "sum", True, self, counts, lambda s_, v_: put_(s_, index, v_, True))
    flat = self.view(-1)
    i1 = index.reshape(-1)
    s1 = source.reshape(-1)
    if U.overlaps(s1, flat):
        s1 = s1.clone()
    try:
        _run(flat, [0], flat.shape[0], 1, s1, list(s1.stride()), None, [i1], [list(i1.stride())], [flat.shape[0]],
             [1], [i1.shape[0]], (0, 1), Move.SCATTER, True, "add" if accumulate else None)
    except _Bounds as e:
        return decline(bounds_reason(e, _OUT_OF_RANGE))
    return self


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
    if not _ok_data(grad_output) or not grad_output.dtype.is_floating_point or not _ok_index(indices):
        return decline("grad_output not a float trn tensor, or indices not int64/int32 trn tensors")
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
        return decline("2^30 or more elements (int32 offsets)")
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


@lowering("aten::embedding_renorm_", accepts=Accepts(tensors=("self", "indices")))
def embedding_renorm_(self: torch.Tensor, indices: torch.Tensor, max_norm: float, norm_type: float) -> Any:
    """``embedding(..., max_norm=)``'s in-place renorm of the looked-up rows (L1/L2 norms).

    Gathers the rows, rescales them in one kernel, and stores them back by indirect DMA: a repeated
    index writes the same rescaled row each time, so no deduplication is needed.
    """
    if norm_type not in (1.0, 2.0):
        return decline("a norm_type other than 1 or 2")
    if not _ok_data(self) or not self.dtype.is_floating_point or self.dim() != 2 or not _ok_index(indices):
        return decline("self not a 2-D float trn tensor, or indices not int64/int32")
    if self.shape[1] > 4096 or U.has_internal_overlap(self):
        return decline("rows longer than 4096 elements, or an expanded self")
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
