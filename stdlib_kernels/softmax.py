"""Softmax along one dim, forward (``aten::_softmax``) and backward (``_softmax_backward_data``).

``torch.softmax`` is a composite op that reaches the backend as ``_softmax``, which has its own
autograd formula (``_softmax_backward_data``), so lowering both keeps training native.

Rows (all other dims) are tiled by 128 partitions; the softmax dim is the free axis. Rows that
fit one chunk are done in one pass on chip; longer rows take three passes (max, sum of exp,
normalise) over column chunks.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import lowering

CHUNK = 4096


def _at(t: Any, b: Any, rows: Any, cols: Any) -> Any:
    return t[b, rows, cols] if t.ndim == 3 else t[rows, cols]


def _tiling(x: Any) -> tuple[int, int, int, int, int, bool]:
    """(batch, rows, cols, partitions per tile, column chunk, ragged last row tile) of ``x [(A,) R, C]``."""
    r_dim, c_dim = x.shape[-2], x.shape[-1]
    p = min(128, r_dim)
    return (x.shape[0] if x.ndim == 3 else 1), r_dim, c_dim, p, min(c_dim, CHUNK), r_dim % p != 0


@trn.kernel
def softmax_fwd(x, out):
    """Softmax of ``x [(A,) R, C]`` along C (fp32 on chip)."""
    a, r_dim, c_dim, p, f, rr = _tiling(x)
    for b in tl.affine_range(a):
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            if c_dim <= f:
                cols = tl.arange(c_dim)[None, :]
                m = (rows < r_dim) if rr else None
                t = tl.load(_at(x, b, rows, cols), mask=m).astype(tl.float32)
                e = tl.exp(t - tl.max(t, axis=1, keepdims=True))
                tl.store(_at(out, b, rows, cols), e / tl.sum(e, axis=1, keepdims=True), mask=m)
            else:
                mx = tl.full((p, 1), -math.inf, tl.float32)
                for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    t = tl.load(_at(x, b, rows, cols), mask=(rows < r_dim) & (cols < c_dim), other=-math.inf)
                    mx[...] = tl.maximum(mx, tl.max(t.astype(tl.float32), axis=1, keepdims=True))
                s = tl.zeros((p, 1), tl.float32)
                for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    t = tl.load(_at(x, b, rows, cols), mask=(rows < r_dim) & (cols < c_dim), other=-math.inf)
                    s[...] = s + tl.sum(tl.exp(t.astype(tl.float32) - mx), axis=1, keepdims=True)
                for j in tl.affine_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    m = (rows < r_dim) & (cols < c_dim)
                    t = tl.load(_at(x, b, rows, cols), mask=m).astype(tl.float32)
                    tl.store(_at(out, b, rows, cols), tl.exp(t - mx) / s, mask=m)


@trn.kernel
def softmax_bwd(g, y, out):
    """``out = y * (g - sum(g * y))`` along C: the gradient of softmax given its output ``y``."""
    a, r_dim, c_dim, p, f, rr = _tiling(g)
    for b in tl.affine_range(a):
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            if c_dim <= f:
                cols = tl.arange(c_dim)[None, :]
                m = (rows < r_dim) if rr else None
                gt = tl.load(_at(g, b, rows, cols), mask=m).astype(tl.float32)
                yt = tl.load(_at(y, b, rows, cols), mask=m).astype(tl.float32)
                s = tl.sum(gt * yt, axis=1, keepdims=True)
                tl.store(_at(out, b, rows, cols), yt * (gt - s), mask=m)
            else:
                s = tl.zeros((p, 1), tl.float32)
                for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    m = (rows < r_dim) & (cols < c_dim)
                    gt = tl.load(_at(g, b, rows, cols), mask=m).astype(tl.float32)
                    yt = tl.load(_at(y, b, rows, cols), mask=m).astype(tl.float32)
                    s[...] = s + tl.sum(gt * yt, axis=1, keepdims=True)
                for j in tl.affine_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    m = (rows < r_dim) & (cols < c_dim)
                    gt = tl.load(_at(g, b, rows, cols), mask=m).astype(tl.float32)
                    yt = tl.load(_at(y, b, rows, cols), mask=m).astype(tl.float32)
                    tl.store(_at(out, b, rows, cols), yt * (gt - s), mask=m)


def _last(t: torch.Tensor, dim: int) -> torch.Tensor:
    return t.movedim(dim, -1) if dim != t.dim() - 1 else t


@lowering("aten::_softmax", dtypes=U.FLOAT_DTYPES)
def softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> Any:
    """Softmax along ``dim`` (``half_to_float`` is CUDA-only, as on the CPU)."""
    if half_to_float or self.is_conj() or self.is_neg():
        return NotImplemented
    nd = max(self.dim(), 1)
    if not -nd <= dim < nd:
        return NotImplemented
    dim = dim % nd
    out = torch.empty(self.shape, dtype=self.dtype, device="trn")
    if self.numel() == 0:
        return out
    if self.dim() == 0:
        return out.fill_(1.0)
    for x, o in U.row_views([_last(self, dim), _last(out, dim)]):
        softmax_fwd(x, o)
    return out


@lowering("aten::_softmax_backward_data", dtypes=U.FLOAT_DTYPES)
def softmax_backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype) -> Any:
    """Gradient of softmax with respect to its input."""
    if grad_output.shape != output.shape or input_dtype not in U.FLOAT_DTYPES:
        return NotImplemented
    nd = max(output.dim(), 1)
    dim = dim % nd
    out = torch.empty(output.shape, dtype=input_dtype, device="trn")
    if output.numel() == 0:
        return out
    if output.dim() == 0:
        return out.zero_()
    for g, y, o in U.row_views([_last(grad_output, dim), _last(output, dim), _last(out, dim)]):
        softmax_bwd(g, y, o)
    return out
