"""Indexing along one dim by a vector of positions on ``trn``: index_select, index_add / index_copy /
index_fill / index_reduce, take, put_, and embedding's backward and renorm, on the indirect-DMA engine of
:mod:`stdlib_kernels.indexing.engine` with the checks and helpers of :mod:`stdlib_kernels.indexing.gather_scatter`
(see its docstring for how gathers and accumulating scatters run).

Example:
    >>> import torch, trnlang  # doctest: +SKIP
    >>> x = torch.arange(6.0, device="trn").reshape(3, 2)
    >>> x.index_select(0, torch.tensor([2, 0], device="trn")).cpu()
    tensor([[4., 5.],
            [0., 1.]])
"""

from __future__ import annotations

import math
from typing import Any

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
from stdlib_kernels.indexing.gather_scatter import (
    _ACC,
    _BAD_DEST,
    _BAD_VALUE,
    _EMPTY_SELF,
    _INTS,
    _NOT_DATA,
    _OUT_OF_RANGE,
    _WIDE,
    _complex_out,
    _dest,
    _int_reduce,
    _number,
    _plain_complex,
    _wide_value,
    mean_finish,
)
from trnlang.device import Accepts, decline, lowering


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
    if _plain_complex(self) and isinstance(value, (bool, int, float, complex)) and self.dim() == 0 \
            and dim in (0, -1):  # a 0-dim self: as one element of a vector
        r = index_fill(self.reshape(1), 0, moved.reshape(-1), value)
        return r if r is NotImplemented else r.reshape(())
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
