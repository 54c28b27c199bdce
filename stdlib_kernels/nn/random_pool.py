"""Fractional max pooling on ``trn`` (``F.fractional_max_pool2d/3d``), forward and backward.

The pooling windows come from ``random_samples`` (``[N, C, 2|3]``, one uniform per pooled dim and plane, drawn
by ``uniform_`` in ``F.fractional_max_pool*``, i.e. by :mod:`stdlib_kernels.tensor.random`) through torch's
``generate_intervals``: ``start(i) = trunc((i + s) * alpha) - trunc(s * alpha)`` with ``alpha = (in - pool) /
(out - 1)``, the last window at ``in - pool``; bf16/fp16 round every step as torch's ``scalar_t`` math does. The
starts are computed on chip per plane (partition); each window tap is one gather (indirect DMA) of the input plane,
scanned in torch's (t, h, w) order keeping the first maximum (a later NaN always wins). Given the same samples,
values and indices equal the CPU's. The backward scatter-adds the gradient at the recorded indices (an accumulating
DMA into an fp32 buffer). A window outside the input (torch's CPU kernel asserts) is found by a small check kernel
and declined; loads are clamped to the plane, so no sample can make a kernel read outside its tensor.

Example:
    >>> import torch, torch.nn.functional as F
    >>> x = torch.randn(2, 3, 16, 16, device="trn")                                          # doctest: +SKIP
    >>> y, idx = F.fractional_max_pool2d(x, 3, output_ratio=(0.5, 0.5), return_indices=True)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.tiling import col_chunks, row_tiles
from trnlang.device import decline, lowering

FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _frac_seq(s: Any, i: Any, alpha: float, last: int, osz: int, r: Any) -> Any:
    """Window starts of torch's ``generate_intervals``: ``trunc((i + s) * alpha) - trunc(s * alpha)``, the last
    output at ``last = in - pool`` (fp32 tiles; ``r`` rounds each step to bf16/fp16 as torch's scalar_t math)."""
    if osz == 1:
        return tl.zeros_like(i) + float(last)
    a = tl.trunc(r(r(r(i) + s) * alpha)) - tl.trunc(r(s * alpha))
    return tl.where(i < float(osz - 1), a, float(last))


@trn.kernel
def frac_check(samples, bad, geo, alphas, rnd):
    """``bad[p, 0]`` = 1 where a window start of plane ``p`` falls outside ``[0, in - pool]`` (torch's CPU kernel
    asserts then; samples outside ``[0, 1)`` may still give valid windows, which torch accepts)."""
    p_dim = samples.shape[0]
    dims = _frac_geo(geo)
    r = (lambda v: v.astype(rnd).astype(tl.float32)) if rnd is not None else (lambda v: v)
    one = tl.arange(1)[None, :]
    for rows, rm in row_tiles(p_dim):
        flag = tl.zeros((rows.shape[0], 1), tl.float32)
        for d in tl.static_range(3):
            i_d, o_d, k_d, c_d = dims[d], dims[3 + d], dims[6 + d], dims[9 + d]
            if o_d > 1:
                sd = tl.load(samples[rows, one + c_d], mask=rm).astype(tl.float32)
                st = _frac_seq(sd, isa.iota(rows * 0 + tl.arange(o_d)[None, :], tl.float32), alphas[d], i_d - k_d,
                               o_d, r)
                v = ((st < 0.0) | (st > float(i_d - k_d))).astype(tl.float32)
                flag = tl.maximum(flag, tl.max(v, axis=1, keepdims=True))
        tl.store(bad[rows, one], flag, mask=rm)


@trn.kernel
def frac_max_pool(x, samples, out, idx, geo, alphas, rnd):
    """Fractional max pooling of ``x [P, T*H*W, 1]`` into ``out``/``idx`` ``[P, OT*OH, OW]`` (idx: flat input index).

    ``samples [P, D]``: one uniform per pooled dim and plane; ``geo = "T,H,W,OT,OH,OW,KT,KH,KW,cT,cH,cW"``
    (``c*``: the sample column of each dim); ``alphas``: ``(in - pool) / (out - 1)`` per dim. Each window is
    scanned in torch's order (t, h, w) by gathers of the input (one per tap), keeping the first maximum (a later
    NaN always wins), as the CPU kernel does.
    """
    p_dim = x.shape[0]
    t_dim, h_dim, w_dim, ot_dim, oh_dim, ow_dim, kt, kh, kw, c_t, c_h, c_w = _frac_geo(geo)
    a_t, a_h, a_w = alphas
    r = (lambda v: v.astype(rnd).astype(tl.float32)) if rnd is not None else (lambda v: v)
    s_dim = t_dim * h_dim * w_dim
    one = tl.arange(1)[None, :]
    for rows, rm in row_tiles(p_dim):
        s_t = tl.load(samples[rows, one + c_t], mask=rm).astype(tl.float32) if ot_dim > 1 else None
        s_h = tl.load(samples[rows, one + c_h], mask=rm).astype(tl.float32)
        s_w = tl.load(samples[rows, one + c_w], mask=rm).astype(tl.float32)
        for ot in tl.affine_range(ot_dim):
            st_t = _frac_seq(s_t, isa.iota(rows * 0 + ot, tl.float32), a_t, t_dim - kt, ot_dim, r) \
                if ot_dim > 1 else float(t_dim - kt)
            for oh in tl.affine_range(oh_dim):
                st_h = _frac_seq(s_h, isa.iota(rows * 0 + oh, tl.float32), a_h, h_dim - kh, oh_dim, r)
                for cols, m in col_chunks(ow_dim, 512, rm):
                    st_w = _frac_seq(s_w, isa.iota(rows * 0 + cols, tl.float32), a_w, w_dim - kw, ow_dim, r)
                    lin0 = st_t * float(h_dim * w_dim) + st_h * float(w_dim) + st_w
                    best = None
                    for a in tl.static_range(kt):
                        for b in tl.static_range(kh):
                            for c in tl.static_range(kw):
                                # clamped: a malformed window never reads outside the plane (samples are checked)
                                li = tl.minimum(tl.maximum(lin0 + float(a * h_dim * w_dim + b * w_dim + c), 0.0),
                                                float(s_dim - 1))
                                li = li.astype(tl.int32)
                                v = tl.load(x[rows, li, 0], mask=m).astype(tl.float32)
                                if best is None:
                                    best, bidx = v, li
                                else:
                                    upd = (v > best) | (v != v)
                                    best = tl.where(upd, v, best)
                                    bidx = tl.where(upd, li, bidx)
                    tl.store(out[rows, ot * oh_dim + oh, cols], best, mask=m)
                    tl.store(idx[rows, ot * oh_dim + oh, cols], bidx, mask=m)


@trn.kernel
def frac_max_pool_bwd(g, idx, gin):
    """``gin[p, idx[p, o], 0] += g[p, o]`` (``g``/``idx`` ``[P, O]``, ``gin [P, S, 1]`` fp32, zeroed): a scatter-add
    by accumulating DMA (overlapping windows that pick the same input add up)."""
    p_dim, o_dim = g.shape
    for rows, rm in row_tiles(p_dim):
        for cols, m in col_chunks(o_dim, U.FREE_CHUNK, rm):
            it = tl.load(idx[rows, cols], mask=m)
            gt = tl.load(g[rows, cols], mask=m).astype(tl.float32)
            tl.store(gin[rows, it, 0], gt, mask=m, accumulate="add")


def _frac_geo(geo: str) -> list[int]:
    return [int(v) for v in geo.split(",")]


def _frac_alpha(i: int, k: int, o: int, dt: torch.dtype) -> float:
    """torch's ``alpha = scalar_t(in - pool) / scalar_t(out - 1)`` (each operand and the quotient rounded to dt)."""
    if o <= 1:
        return 0.0
    r = (lambda v: float(torch.tensor(v, dtype=torch.float32).to(dt).float())) if dt != torch.float32 else \
        (lambda v: float(np.float32(v)))
    return r(np.float32(r(i - k)) / np.float32(r(o - 1)))


def _frac_pool(self: Any, kernel_size: Any, output_size: Any, samples: Any, nd: int) -> Any:
    """Fractional max pooling over the last ``nd`` dims (2 or 3); declined (torch raises) on bad arguments."""
    from stdlib_kernels.nn.pool import _meta

    if not (U.is_trn(self) and U.is_trn(samples)) or self.dtype not in FLOATS or samples.dtype != self.dtype \
            or self.dim() not in (nd + 1, nd + 2):
        return decline("self/samples not float trn tensors of one dtype, or self of the wrong rank")
    op = torch.ops.aten.fractional_max_pool2d.default if nd == 2 else torch.ops.aten.fractional_max_pool3d.default
    meta = _meta(op, self, kernel_size, output_size, samples)
    if meta is None:
        return decline("invalid arguments: torch raises")
    isz, osz, ksz = list(self.shape[-nd:]), [int(v) for v in output_size], [int(v) for v in kernel_size]
    planes = U.prod(self.shape[:-nd])
    if samples.numel() != planes * nd or U.prod(isz) >= 1 << 24:
        return decline("samples of the wrong size, or a plane of 2^24 or more elements")
    out = torch.empty(meta[0].shape, dtype=self.dtype, device="trn")
    idx = torch.empty(meta[1].shape, dtype=torch.int64, device="trn")
    if out.numel() == 0:
        return out, idx
    if nd == 2:  # torch: sample 0 for W, 1 for H
        isz, osz, ksz, cols = [1, *isz], [1, *osz], [1, *ksz], (0, 1, 0)
    else:  # sample 0 for T, 1 for H, 2 for W
        cols = (0, 1, 2)
    geo = ",".join(str(v) for v in (*isz, *osz, *ksz, *cols))
    alphas = tuple(_frac_alpha(i, k, o, self.dtype) for i, k, o in zip(isz, ksz, osz))
    rnd = None if self.dtype == torch.float32 else self.dtype
    s2 = samples.contiguous().view(planes, nd)
    bad = torch.empty((planes, 1), dtype=torch.float32, device="trn")
    frac_check(s2, bad, geo, alphas, rnd)
    if float(bad.amax().item()) != 0.0:
        return decline("a pooling window outside the input: torch raises")
    x = self.contiguous().view(planes, U.prod(isz), 1)
    frac_max_pool(x, s2, out.view(planes, osz[0] * osz[1], osz[2]), idx.view(planes, osz[0] * osz[1], osz[2]), geo,
                  alphas, rnd)
    return out, idx


def _frac_pool_bwd(grad_output: Any, self: Any, indices: Any, nd: int) -> Any:
    """Gradient of fractional max pooling: each output's gradient added at its recorded input index."""
    if not all(U.is_trn(t) for t in (grad_output, self, indices)) or self.dtype not in FLOATS \
            or grad_output.dtype != self.dtype or indices.dtype != torch.int64 \
            or tuple(indices.shape) != tuple(grad_output.shape) or grad_output.shape[:-nd] != self.shape[:-nd] \
            or self.dim() not in (nd + 1, nd + 2):
        return decline("tensors not on trn, of mismatched dtypes/shapes, indices not int64, or self of the wrong rank")
    planes, s = U.prod(self.shape[:-nd]), U.prod(self.shape[-nd:])
    o = U.prod(grad_output.shape[-nd:])
    acc = torch.zeros((planes, s, 1), dtype=torch.float32, device="trn")
    if planes and o:
        try:
            frac_max_pool_bwd(grad_output.contiguous().view(planes, o), indices.contiguous().view(planes, o), acc)
        except trn.BoundsError:
            return decline("an index outside the plane: torch raises")
    gin = acc.view(self.shape)
    return gin if self.dtype == torch.float32 else gin.to(self.dtype)


@lowering("aten::fractional_max_pool2d", dtypes=FLOATS + (torch.int64,))
def fractional_max_pool2d(self: torch.Tensor, kernel_size: Any, output_size: Any, random_samples: torch.Tensor) -> Any:
    """``F.fractional_max_pool2d``: ``(output, int64 indices)`` from the given ``random_samples [N, C, 2]``."""
    return _frac_pool(self, kernel_size, output_size, random_samples, 2)


@lowering("aten::fractional_max_pool3d", dtypes=FLOATS + (torch.int64,))
def fractional_max_pool3d(self: torch.Tensor, kernel_size: Any, output_size: Any, random_samples: torch.Tensor) -> Any:
    """``F.fractional_max_pool3d``: ``(output, int64 indices)`` from ``random_samples [N, C, 3]``."""
    return _frac_pool(self, kernel_size, output_size, random_samples, 3)


@lowering("aten::fractional_max_pool2d_backward", dtypes=FLOATS + (torch.int64,))
def fractional_max_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, output_size: Any,
                                   indices: torch.Tensor) -> Any:
    """Gradient of 2-D fractional max pooling (a scatter-add by the indices)."""
    return _frac_pool_bwd(grad_output, self, indices, 2)


@lowering("aten::fractional_max_pool3d_backward", dtypes=FLOATS + (torch.int64,))
def fractional_max_pool3d_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, output_size: Any,
                                   indices: torch.Tensor) -> Any:
    """Gradient of 3-D fractional max pooling."""
    return _frac_pool_bwd(grad_output, self, indices, 3)
