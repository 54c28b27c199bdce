"""Gather / scatter along one dim on ``trn``: gather, scatter (src / value / reduce), scatter_add and
scatter_reduce (the ``index_*`` family, ``take``/``put_`` and embedding's backward are in
:mod:`stdlib_kernels.indexing.index_dim`, on the same engine).

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
    _as1,
    _Bounds,
    _fits,
    _gather_dim,
    _norm_dim,
    _ok_data,
    _ok_index,
    _scatter_dim,
    _to_out,
    _value_tensor,
    bounds_reason,
)
from trnlang.device import decline, lowering

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
    if _plain_complex(self) and U.is_trn(index) and isinstance(value, (bool, int, float, complex)):
        src = torch.full(tuple(index.shape), complex(value), dtype=torch.complex64, device="trn")
        return _scatter_impl(self, dim, index, src, None, None, out)  # 8-byte elements: moved, as a filled source
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
    if reduce == "add" and _plain_complex(self, src):  # complex64: scatter_add's planes
        return scatter_add(self, dim, index, src, out=out)
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
    if reduce == "add" and _plain_complex(self) and U.is_trn(index) and isinstance(value, (bool, int, float, complex)):
        src = torch.full(tuple(index.shape), complex(value), dtype=torch.complex64, device="trn")
        return scatter_add(self, dim, index, src, out=out)
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
