"""Reductions along free axes: ``sum`` and ``mean`` over any set of dims.

The reduced dims are moved last (a view) and merged into one free axis ``C``; the kept dims
become rows ``R`` (tiled by 128 partitions). Each row tile accumulates fp32 partial sums over
column chunks. A full reduction of a long contiguous tensor first spreads it over all 128
partitions, then reduces the 128 partial sums.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import lowering


@trn.kernel
def row_sum(x, out, divisor):
    """``out[r, 0] = sum(x[r, :]) / divisor`` (fp32 accumulation; ``divisor`` 1.0 for a sum)."""
    r_dim, c_dim = x.shape
    p = min(128, r_dim)
    f = min(c_dim, U.FREE_CHUNK)
    rows_ragged = r_dim % p != 0
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        if c_dim <= f:
            cols = tl.arange(c_dim)[None, :]
            t = tl.load(x[rows, cols], mask=(rows < r_dim) if rows_ragged else None).astype(tl.float32)
            acc = tl.sum(t, axis=1, keepdims=True)
        else:
            acc = tl.zeros((p, 1), tl.float32)
            for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                cols = j * f + tl.arange(f)[None, :]
                t = tl.load(x[rows, cols], mask=(rows < r_dim) & (cols < c_dim)).astype(tl.float32)
                acc[...] = acc + tl.sum(t, axis=1, keepdims=True)
        res = acc / divisor if divisor != 1.0 else acc
        tl.store(out[rows, tl.arange(1)[None, :]], res, mask=(rows < r_dim) if rows_ragged else None)


_SPREAD = 16384


def _as_rows(x: torch.Tensor, red: list[int]) -> torch.Tensor:
    """``x`` with the reduced dims last, merged: a ``[R, C]`` view (or a contiguous copy's view)."""
    kept = [d for d in range(x.dim()) if d not in red]
    xp = x.permute(kept + red)
    r_sh = [x.shape[d] for d in kept]
    c_sh = [x.shape[d] for d in red]
    kr, ks = U.coalesce(r_sh, [[x.stride(d) for d in kept]])
    cr, cs = U.coalesce(c_sh, [[x.stride(d) for d in red]])
    if len(kr) > 1 or len(cr) > 1:
        xp = xp.contiguous()
        return xp.view(U.prod(r_sh), U.prod(c_sh))
    r, c = U.prod(r_sh), U.prod(c_sh)
    rs = ks[0][0] if kr else 0
    cst = cs[0][0] if cr else 1
    return U.view(x, (r, c), (rs, cst), x.storage_offset())


def _reduce(self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool, dtype: torch.dtype | None,
            mean: bool) -> Any:
    if not U.is_trn(self) or self.dtype not in U.FLOAT_DTYPES:
        return NotImplemented
    odt = dtype or self.dtype
    if odt not in U.FLOAT_DTYPES or self.is_conj() or self.is_neg():
        return NotImplemented
    if self.dim() == 0:  # a scalar: dim may be 0, -1 or empty; the result is the value itself
        if dim and any(d not in (0, -1) for d in dim):
            return NotImplemented
        out = torch.empty((), dtype=odt, device="trn")
        return out.copy_(self)
    nd = self.dim()
    dims = list(range(nd)) if not dim else [d if d >= 0 else d + nd for d in dim]
    if any(not 0 <= d < nd for d in dims) or len(set(dims)) != len(dims):
        return NotImplemented
    red = sorted(dims)
    out_shape = [1 if d in red else n for d, n in enumerate(self.shape)] if keepdim else \
        [n for d, n in enumerate(self.shape) if d not in red]
    out = torch.empty(out_shape, dtype=odt, device="trn")
    r = U.prod(self.shape[d] for d in range(nd) if d not in red)
    c = U.prod(self.shape[d] for d in red)
    if r == 0:
        return out
    if c == 0:
        return out.fill_(math.nan if mean else 0.0)
    divisor = float(c) if mean else 1.0
    x2 = _as_rows(self, red)
    o2 = out.view(r, 1)
    if r == 1 and c >= _SPREAD and c % 128 == 0 and x2.stride(1) == 1:
        part = torch.empty((128, 1), dtype=torch.float32, device="trn")
        row_sum(U.view(x2, (128, c // 128), (c // 128, 1), x2.storage_offset()), part, 1.0)
        row_sum(part.view(1, 128), o2, divisor)
    else:
        row_sum(x2, o2, divisor)
    return out


@lowering("aten::sum.dim_IntList", dtypes=U.FLOAT_DTYPES)
def sum_dim(self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *,
            dtype: torch.dtype | None = None) -> Any:
    """Sum over ``dim`` (all dims for None or [])."""
    return _reduce(self, dim, keepdim, dtype, mean=False)


@lowering("aten::mean.dim", dtypes=U.FLOAT_DTYPES)
def mean_dim(self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *,
             dtype: torch.dtype | None = None) -> Any:
    """Mean over ``dim`` (all dims for None or [])."""
    return _reduce(self, dim, keepdim, dtype, mean=True)


@lowering("aten::sum", dtypes=U.FLOAT_DTYPES)
def sum_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> Any:
    """Sum of all elements."""
    return _reduce(self, None, False, dtype, mean=False)


@lowering("aten::mean", dtypes=U.FLOAT_DTYPES)
def mean_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> Any:
    """Mean of all elements."""
    return _reduce(self, None, False, dtype, mean=True)
