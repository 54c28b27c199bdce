"""Masked ops on ``trn``: ``masked_fill`` (scalar and 0-dim tensor values), ``masked_select`` and
``masked_scatter``.

``masked_fill`` is one select kernel (``out = mask ? value : x``) over 1- to 3-D views, the mask
broadcast by strides (dims that do not merge are looped over on the host). ``masked_select`` is
``x[mask]`` and ``masked_scatter`` an ``index_put`` at the mask's ``nonzero`` coordinates (both from
:mod:`stdlib_kernels.indexing.advanced_index`, moved by indirect DMA); masks with more than 3 dims go through
one flat index.

Example:
    >>> import torch, trnlang  # doctest: +SKIP
    >>> x = torch.randn(4, 6, device="trn")
    >>> m = x > 0
    >>> x.masked_fill(m, 0.0).max() <= 0, x.masked_select(m).shape[0] == int(m.sum())
    (tensor(True, device='trn:0'), True)
    >>> x.masked_scatter(m, torch.zeros(24, device="trn")).shape
    torch.Size([4, 6])
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels._util import shape3 as _shape3
from stdlib_kernels.elementwise.pointwise import at as _at
from stdlib_kernels.indexing.advanced_index import _index_put, index, nonzero
from stdlib_kernels.indexing.engine import _ok_data, _value_tensor
from trnlang.device import decline, lowering

_SMALL_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16)  # masked_fill also takes these


# ----------------------------------------------------------------------------------------- masked_fill


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


def _pair_values(self: torch.Tensor, value: Any) -> tuple[Any, Any] | None:
    """The fill value of an int64 or complex64 ``self`` split like its storage: (low, high) int32 words, or
    (real, imaginary) float32 parts; None when it is not a number of that kind."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.is_complex() != self.is_complex():
            return None
        value = value.item()
    if self.dtype == torch.int64:
        if isinstance(value, float) and math.isfinite(value):
            value = math.trunc(value)  # torch casts a float toward zero (NaN, inf and overflow raise there)
        if not isinstance(value, int) or not -2**63 <= value < 2**63:
            return None
        value = int(value)  # a bool is 0 / 1
        lo = value & 0xFFFFFFFF
        return lo - 2**32 if lo >= 2**31 else lo, value >> 32
    if not isinstance(value, (int, float, complex)) or isinstance(value, bool):
        return None
    return float(complex(value).real), float(complex(value).imag)


def _masked_fill_pairs(self: torch.Tensor, mask: torch.Tensor, value: Any, out: torch.Tensor | None) -> Any:
    """``masked_fill`` of int64 (on its int32 words) and complex64 (on its float32 planes) tensors: each half
    filled by the 4-byte kernel with its half of the value (exact for every int64)."""
    vals = _pair_values(self, value)
    if vals is None:
        return decline("a value that is not a number of self's kind (int64: an int, complex64: a number)")
    try:
        bshape = torch.broadcast_shapes(self.shape, mask.shape)
    except RuntimeError:
        return decline("mask does not broadcast with self: torch raises")
    if bshape != self.shape and out is not None:
        return decline("out= with a mask that broadcasts self to a larger shape")
    src = self.expand(bshape)
    res = out if out is not None else torch.empty(bshape, dtype=self.dtype, device="trn")
    if not U.is_trn(res) or res.shape != bshape or res.dtype != self.dtype or U.has_internal_overlap(res):
        return decline("out= not a trn tensor of the result's shape and dtype, or with overlapping elements")
    if res.numel() == 0:
        return res
    if U.overlaps(mask, res):
        mask = mask.clone()
    halves = (U.int32_words(src), U.int32_words(res)) if self.dtype == torch.int64 else \
        (torch.view_as_real(src), torch.view_as_real(res))
    for k in (0, 1):
        if _masked_fill(halves[0][..., k], mask, vals[k], halves[1][..., k]) is NotImplemented:
            return NotImplemented
    return res


def _fill(self: torch.Tensor, mask: torch.Tensor, value: Any, out: torch.Tensor | None) -> Any:
    """``masked_fill`` of any dtype the kernels take: 8-byte int64/complex64 by halves, others directly."""
    if U.is_trn(self) and self.dtype in (torch.int64, torch.complex64) and U.is_trn(mask) and \
            mask.dtype == torch.bool and not self.is_conj() and not self.is_neg():
        return _masked_fill_pairs(self, mask, value, out)
    return _masked_fill(self, mask, value, out)


def _masked_fill(self: torch.Tensor, mask: torch.Tensor, value: Any, out: torch.Tensor | None) -> Any:
    small = U.is_trn(self) and self.dtype in _SMALL_DTYPES
    if not (_ok_data(self) or small) or not U.is_trn(mask) or mask.dtype != torch.bool:
        return decline("self not a trn tensor of a supported dtype, or mask not a trn bool tensor")
    try:
        bshape = torch.broadcast_shapes(self.shape, mask.shape)
    except RuntimeError:
        return decline("mask does not broadcast with self: torch raises")
    if bshape != self.shape:  # out of place only: the result takes the broadcast shape
        if out is not None:
            return decline("out= with a mask that broadcasts self to a larger shape")
        self = self.expand(bshape)
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        return decline("a value tensor that is not 0-dim: torch raises")
    if U.is_trn(value) and value.dtype != self.dtype:
        value = value.to(self.dtype)
    vt = _value_tensor(value, self.dtype)
    if vt is None:
        return decline("a value that is not a real number fitting the dtype (complex, NaN/inf or overflow into ints, "
                       "beyond int32)")
    res = out if out is not None else torch.empty(self.shape, dtype=self.dtype, device="trn")
    if not U.is_trn(res) or res.shape != self.shape or res.dtype != self.dtype or U.has_internal_overlap(res):
        return decline("out= not a trn tensor of the result's shape and dtype, or with overlapping elements")
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
    return _fill(self, mask, value, out)


@lowering("aten::masked_fill.Tensor")
def masked_fill_t(self: torch.Tensor, mask: torch.Tensor, value: torch.Tensor, *,
                  out: torch.Tensor | None = None) -> Any:
    """``self.masked_fill(mask, value_tensor)`` (a 0-dim value)."""
    return _fill(self, mask, value, out)


# ------------------------------------------------------------------ masked_select / masked_scatter


@lowering("aten::masked_select")
def masked_select(self: torch.Tensor, mask: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``torch.masked_select(self, mask)``: ``self`` (broadcast) at the mask's nonzeros, in order."""
    if not _ok_data(self, move=True) or not U.is_trn(mask) or mask.dtype != torch.bool:
        return decline("self not a trn tensor of a supported dtype, or mask not a trn bool tensor")
    try:
        shape = torch.broadcast_shapes(self.shape, mask.shape)
    except RuntimeError:
        return decline("mask does not broadcast with self: torch raises")
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
            return decline("out= not a trn tensor of self's dtype")
        out.resize_(res.shape)
        return out.copy_(res)
    return res


@lowering("aten::masked_scatter")
def masked_scatter(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor, *,
                   out: torch.Tensor | None = None) -> Any:
    """``self.masked_scatter(mask, source)``: consecutive ``source`` elements at the mask's nonzeros."""
    if not _ok_data(self, source, move=True) or source.dtype != self.dtype:
        return decline("self or source not a trn tensor of a supported dtype, or source's dtype differs from self's")
    if not U.is_trn(mask) or mask.dtype != torch.bool:
        return decline("mask not a trn bool tensor")
    try:
        bshape = torch.broadcast_shapes(self.shape, mask.shape)
    except RuntimeError:
        return decline("mask does not broadcast with self: torch raises")
    if out is not None and (not U.same_view(out, self) or bshape != self.shape):
        return decline("out= that is not self, or a mask that broadcasts self to a larger shape")
    res = out if out is not None else self.expand(bshape).clone(memory_format=torch.contiguous_format)
    self = res if res.dim() else res.view(1)
    if self.dim() > 3:  # one flat index instead of more than 3 index tensors
        if not res.is_contiguous():
            return decline("more than 3 dims with a non-contiguous result")
        self = res.view(-1)
    mk = mask.expand(res.shape).reshape(self.shape)
    nz = nonzero(mk)
    if nz is NotImplemented:
        return NotImplemented
    count = nz.shape[0]
    if count > source.numel():
        return decline("fewer source elements than mask nonzeros: torch raises")  # the CPU raises torch's error
    if count == 0:
        return res
    vals = source.reshape(-1)[:count]
    if U.has_internal_overlap(vals):  # an expanded source (a broadcast gradient)
        vals = vals.contiguous()
    r = _index_put(self, [nz.select(1, j) for j in range(self.dim())], vals, False)
    return NotImplemented if r is NotImplemented else res
