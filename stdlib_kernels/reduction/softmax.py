"""Softmax and log-softmax along one dim, forward (``aten::_softmax``, ``aten::_log_softmax``) and
backward (``_softmax_backward_data``, ``_log_softmax_backward_data``).

``torch.softmax`` / ``torch.log_softmax`` are composite ops that reach the backend as ``_softmax`` /
``_log_softmax``, which have their own autograd formulas (the ``*_backward_data`` ops), so lowering
both keeps training native. A softmax over a leading dim is a strided view whose softmax dim is the
free axis (no transpose).

Rows (all other dims) are tiled by 128 partitions; the softmax dim is the free axis. Rows that
fit one chunk are done in one pass on chip; longer rows take three passes (max, sum of exp,
normalise) over column chunks.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels import tiling as T
from trnlang.device import decline, lowering

CHUNK = 4096


def _at(t: Any, b: Any, rows: Any, cols: Any) -> Any:
    return t[b, rows, cols] if t.ndim == 3 else t[rows, cols]


def _tiling(x: Any, tile: tuple[int, int, bool]) -> tuple[Any, Any, Any, int, int, bool, bool]:
    """(batch, rows, cols, partitions per tile, column chunk, ragged last row tile, one pass) of ``x [(A,) R, C]``.

    ``tile``: the host's ``(row bucket, column bucket, C <= CHUNK)`` (:func:`_tile`), used for the sizes that are
    runtime values (shape-polymorphic launches); compile-time sizes tile exactly, as they always did.
    """
    r_dim, c_dim = x.shape[-2], x.shape[-1]
    p = T.extent(r_dim, 128, tile[0])
    f = T.extent(c_dim, CHUNK, tile[1])
    return (x.shape[0] if x.ndim == 3 else 1), r_dim, c_dim, p, f, T.ragged(r_dim, p), T.fits(c_dim, f, tile[2])


def _mask(rows: Any, cols: Any, r_dim: Any, c_dim: Any, rr: bool, f: int) -> Any:
    """The mask of a one-pass tile: ragged rows, and the columns past ``C`` of a bucketed tile."""
    m = (rows < r_dim) if rr else None
    if T.ragged(c_dim, f):
        m = (cols < c_dim) if m is None else m & (cols < c_dim)
    return m


def _tile(x: Any) -> tuple[int, int, bool]:
    """The host's tile buckets for rows and columns of ``x [(A,) R, C]`` (a compile-time argument)."""
    r, c = x.shape[-2], x.shape[-1]
    return T.row_bucket(r), T.free_bucket(c, CHUNK), c <= CHUNK


@T.polymorphic
def softmax_fwd(x, out, log, tile):
    """Softmax (``log``: log-softmax) of ``x [(A,) R, C]`` along C (fp32 on chip); ``tile``: see :func:`_tiling`."""
    a, r_dim, c_dim, p, f, rr, one_pass = _tiling(x, tile)
    for b in tl.affine_range(a):
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            if one_pass:
                cols = tl.arange(f)[None, :]
                m = _mask(rows, cols, r_dim, c_dim, rr, f)
                other = -math.inf if T.ragged(c_dim, f) else 0  # a bucket's masked tail must not count
                t = tl.load(_at(x, b, rows, cols), mask=m, other=other).astype(tl.float32)
                sh = t - tl.max(t, axis=1, keepdims=True)
                e = tl.exp(sh)
                if log:
                    tl.store(_at(out, b, rows, cols), sh - tl.log(tl.sum(e, axis=1, keepdims=True)), mask=m)
                else:
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
                if log:
                    s = mx + tl.log(s)
                for j in tl.affine_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    m = (rows < r_dim) & (cols < c_dim)
                    t = tl.load(_at(x, b, rows, cols), mask=m).astype(tl.float32)
                    tl.store(_at(out, b, rows, cols), (t - s) if log else tl.exp(t - mx) / s, mask=m)


@T.polymorphic
def softmax_bwd(g, y, out, log, tile):
    """``out = y * (g - sum(g * y))`` along C: the gradient of softmax given its output ``y``.

    ``log``: the gradient of log-softmax, ``out = g - exp(y) * sum(g)``.
    """
    a, r_dim, c_dim, p, f, rr, one_pass = _tiling(g, tile)
    for b in tl.affine_range(a):
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            if one_pass:
                cols = tl.arange(f)[None, :]
                m = _mask(rows, cols, r_dim, c_dim, rr, f)
                gt = tl.load(_at(g, b, rows, cols), mask=m).astype(tl.float32)
                yt = tl.load(_at(y, b, rows, cols), mask=m).astype(tl.float32)
                if log:
                    s = tl.sum(gt, axis=1, keepdims=True)
                    tl.store(_at(out, b, rows, cols), gt - tl.exp(yt) * s, mask=m)
                else:
                    s = tl.sum(gt * yt, axis=1, keepdims=True)
                    tl.store(_at(out, b, rows, cols), yt * (gt - s), mask=m)
            else:
                s = tl.zeros((p, 1), tl.float32)
                for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    m = (rows < r_dim) & (cols < c_dim)
                    gt = tl.load(_at(g, b, rows, cols), mask=m).astype(tl.float32)
                    yt = tl.load(_at(y, b, rows, cols), mask=m).astype(tl.float32)
                    s[...] = s + tl.sum(gt if log else gt * yt, axis=1, keepdims=True)
                for j in tl.affine_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    m = (rows < r_dim) & (cols < c_dim)
                    gt = tl.load(_at(g, b, rows, cols), mask=m).astype(tl.float32)
                    yt = tl.load(_at(y, b, rows, cols), mask=m).astype(tl.float32)
                    tl.store(_at(out, b, rows, cols), (gt - tl.exp(yt) * s) if log else yt * (gt - s), mask=m)


def _last(t: torch.Tensor, dim: int) -> torch.Tensor:
    return t.movedim(dim, -1) if dim != t.dim() - 1 else t


def _forward(self: torch.Tensor, dim: int, half_to_float: bool, log: bool) -> Any:
    if half_to_float or self.is_conj() or self.is_neg():
        return decline("half_to_float, or a conj/neg bit")
    nd = max(self.dim(), 1)
    if not -nd <= dim < nd:
        return decline("dim out of range: torch raises")
    dim = dim % nd
    out = U.new_output(tuple(self.shape), self.dtype)
    if self.numel() == 0:
        return out
    xs = self if self.dim() else U.view(self, (1,), (1,), self.storage_offset())
    os_ = out if out.dim() else U.view(out, (1,), (1,), 0)
    for x, o in U.row_views([_last(xs, dim), _last(os_, dim)]):
        U.split_rows(softmax_fwd, [x, o], log, _tile(x))
    return out


@lowering("aten::_softmax", dtypes=U.FLOAT_DTYPES)
def softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> Any:
    """Softmax along ``dim`` (``half_to_float`` is CUDA-only, as on the CPU).

    Example: ``torch.softmax(torch.randn(4, 8).to("trn"), 0)`` runs ``softmax_fwd`` on a strided view.
    """
    return _forward(self, dim, half_to_float, False)


@lowering("aten::_log_softmax", dtypes=U.FLOAT_DTYPES)
def log_softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> Any:
    """Log-softmax along ``dim``: ``x - max - log(sum(exp(x - max)))``.

    Example: ``torch.log_softmax(torch.randn(4, 8).to("trn"), -1)``.
    """
    return _forward(self, dim, half_to_float, True)


def _backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype, log: bool) -> Any:
    if grad_output.shape != output.shape or input_dtype not in U.FLOAT_DTYPES:
        return decline("grad_output and output of different shapes, or a non-float input dtype")
    nd = max(output.dim(), 1)
    dim = dim % nd
    out = U.new_output(tuple(output.shape), input_dtype)
    if output.numel() == 0:
        return out
    if output.dim() == 0:
        return out.zero_()
    for g, y, o in U.row_views([_last(grad_output, dim), _last(output, dim), _last(out, dim)]):
        U.split_rows(softmax_bwd, [g, y, o], log, _tile(g))
    return out


@lowering("aten::_softmax_backward_data", dtypes=U.FLOAT_DTYPES)
def softmax_backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype) -> Any:
    """Gradient of softmax with respect to its input."""
    return _backward(grad_output, output, dim, input_dtype, False)


@lowering("aten::_log_softmax_backward_data", dtypes=U.FLOAT_DTYPES)
def log_softmax_backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                         input_dtype: torch.dtype) -> Any:
    """Gradient of log-softmax: ``g - exp(y) * sum(g)``."""
    return _backward(grad_output, output, dim, input_dtype, True)
