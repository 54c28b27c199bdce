"""Pooling: max / average / adaptive average / adaptive max pooling (1-D and 2-D), forward and backward.

``F.max_pool1d/2d``, ``F.avg_pool1d/2d`` and the adaptive forms reach the backend as their 2-D ATen ops
(``max_pool2d_with_indices``, ``avg_pool2d``, ``_adaptive_avg_pool2d``, ``adaptive_max_pool2d`` and their
backwards); 1-D pooling arrives as the 2-D op with a unit height.

Layout: the ``N * C`` planes are the partition dimension (tiles of 128), a tile of output pixels
``[rows, cols]`` the free dimensions. Every kernel tap is one strided, masked DMA of the shifted input
(padding is the mask), so a window never needs an im2col buffer:

* max pooling scans the taps in torch's order keeping the running maximum and its flat index
  (``ih * W + iw``, an ``isa.iota`` tile), replicating the CPU kernel's tie, NaN and all-``-inf`` rules;
  the indices are stored as int64 (HBM-only dtype) from int32 tiles.
* average pooling sums the taps and divides by a host-computed divisor map (``count_include_pad``,
  ``ceil_mode``, ``divisor_override`` as torch computes them).
* the backward passes gather instead of scatter: input positions are split into ``stride`` phases
  (``i = s * q + r``), where the outputs whose window holds ``i`` at tap ``k`` are ``o = q + c(k)``,
  affine in ``q``. Max pooling adds ``g[o]`` where ``indices[o] == i``; average pooling adds
  ``g[o] / divisor[o]``. No atomics, no zero-initialised scatter target.
* adaptive average pooling (2-D and 3-D) is separable: ``P_h @ x @ P_w^T`` with averaging matrices, on the Tensor
  engine (shared with :mod:`stdlib_kernels.upsample`); its gradient is the transposed product.
* adaptive max pooling uses the max-pooling kernels when the sizes divide; otherwise the windows are
  unrolled (small outputs only): a separable scan (rows, then columns) for the forward and an SBUF plane
  accumulator for the backward.

Example:
    >>> import torch, torch.nn.functional as F
    >>> x = torch.randn(2, 3, 8, 8, device="trn")          # doctest: +SKIP
    >>> F.max_pool2d(x, 2).shape                          # doctest: +SKIP
    torch.Size([2, 3, 4, 4])
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import upsample as UP
from stdlib_kernels.conv import _phases
from trnlang.device import lowering

DTYPES = (torch.float32, torch.bfloat16)
_IDX_DTYPES = (torch.float32, torch.bfloat16, torch.int64)
_OUT_FREE = 2048


def _tiles(oh_dim: int, ow_dim: int) -> tuple[int, int]:
    wt = min(ow_dim, 512)
    return max(1, min(oh_dim, _OUT_FREE // wt)), wt


def _geo(geo: str) -> list[int]:
    return [int(v) for v in geo.split(",")]


@trn.kernel
def max_pool_fwd(x, out, idx, geo):
    """``out, idx`` of max pooling ``x [P, H, W]``; ``geo = "kh,kw,sh,sw,ph,pw,dh,dw"``."""
    p_dim, ih_dim, iw_dim = x.shape
    oh_dim, ow_dim = out.shape[1], out.shape[2]
    kh_dim, kw_dim, sh, sw, ph, pw, dh, dw = _geo(geo)
    pp = min(128, p_dim)
    rt, wt = _tiles(oh_dim, ow_dim)
    for pt in tl.affine_range(tl.cdiv(p_dim, pp)):
        pi = pt * pp + tl.arange(pp)[:, None, None]
        for oht in tl.affine_range(tl.cdiv(oh_dim, rt)):
            for owt in tl.affine_range(tl.cdiv(ow_dim, wt)):
                oh = oht * rt + tl.arange(rt)[None, :, None]
                ow = owt * wt + tl.arange(wt)[None, None, :]
                mo = (pi < p_dim) & (oh < oh_dim) & (ow < ow_dim)
                best = tl.full((pp, rt, wt), -math.inf, tl.float32)
                bidx = tl.full((pp, rt, wt), -1, tl.int32)
                for kh in tl.sequential_range(kh_dim):
                    for kw in tl.sequential_range(kw_dim):
                        hh = oh * sh + kh * dh - ph
                        ww = ow * sw + kw * dw - pw
                        valid = (hh >= 0) & (hh < ih_dim) & (ww >= 0) & (ww < iw_dim)
                        v = tl.load(x[pi, hh, ww], mask=mo & valid, other=-math.inf).astype(tl.float32)
                        here = isa.iota(pi * 0 + hh * iw_dim + ww, tl.int32)
                        unset = tl.where(valid, bidx, 0) < 0  # no index yet, at a real input position
                        upd = (v > best) | (v != v) | unset
                        best[...] = tl.where(upd, v, best)
                        bidx[...] = tl.where(upd, here, bidx)
                tl.store(out[pi, oh, ow], best, mask=mo)
                tl.store(idx[pi, oh, ow], bidx, mask=mo)


@trn.kernel
def max_pool_bwd(g, idx, gin, geo):
    """``gin[p, i] = sum_{o: idx[p, o] == i} g[p, o]`` over the windows holding ``i`` (phase gather)."""
    p_dim, oh_dim, ow_dim = g.shape
    ih_dim, iw_dim = gin.shape[1], gin.shape[2]
    kh_dim, kw_dim, sh, sw, ph, pw, dh, dw = _geo(geo)
    pp = min(128, p_dim)
    for rh, qh_dim, kh0, kh_st, kh_n, ch0, dch in _phases(ih_dim, kh_dim, 1, sh, dh, (kh_dim - 1) * dh - ph, True):
        for rw, qw_dim, kw0, kw_st, kw_n, cw0, dcw in _phases(iw_dim, kw_dim, 1, sw, dw, (kw_dim - 1) * dw - pw,
                                                               True):
            if qh_dim == 0 or qw_dim == 0:
                continue
            rt, wt = _tiles(qh_dim, qw_dim)
            for pt in tl.affine_range(tl.cdiv(p_dim, pp)):
                pi = pt * pp + tl.arange(pp)[:, None, None]
                for qht in tl.affine_range(tl.cdiv(qh_dim, rt)):
                    for qwt in tl.affine_range(tl.cdiv(qw_dim, wt)):
                        qh = qht * rt + tl.arange(rt)[None, :, None]
                        qw = qwt * wt + tl.arange(wt)[None, None, :]
                        mq = (pi < p_dim) & (qh < qh_dim) & (qw < qw_dim)
                        acc = tl.zeros((pp, rt, wt), tl.float32)
                        if kh_n and kw_n:
                            target = isa.iota(pi * 0 + (qh * sh + rh) * iw_dim + qw * sw + rw, tl.int32)
                            for jh in tl.sequential_range(kh_n):
                                for jw in tl.sequential_range(kw_n):
                                    oh = qh + ch0 + jh * dch
                                    ow = qw + cw0 + jw * dcw
                                    m = mq & (oh >= 0) & (oh < oh_dim) & (ow >= 0) & (ow < ow_dim)
                                    gt = tl.load(g[pi, oh, ow], mask=m).astype(tl.float32)
                                    it = tl.load(idx[pi, oh, ow], mask=m, other=-1)
                                    acc[...] = acc + tl.where(it == target, gt, 0.0)
                        tl.store(gin[pi, qh * sh + rh, qw * sw + rw], acc, mask=mq)


@trn.kernel
def avg_pool_fwd(x, div, out, geo):
    """``out = sum(window) / div`` for ``x [P, H, W]``; ``div [P(stride 0), OH, OW]``; ``geo = "kh,kw,sh,sw,ph,pw"``."""
    p_dim, ih_dim, iw_dim = x.shape
    oh_dim, ow_dim = out.shape[1], out.shape[2]
    kh_dim, kw_dim, sh, sw, ph, pw = _geo(geo)
    pp = min(128, p_dim)
    rt, wt = _tiles(oh_dim, ow_dim)
    for pt in tl.affine_range(tl.cdiv(p_dim, pp)):
        pi = pt * pp + tl.arange(pp)[:, None, None]
        for oht in tl.affine_range(tl.cdiv(oh_dim, rt)):
            for owt in tl.affine_range(tl.cdiv(ow_dim, wt)):
                oh = oht * rt + tl.arange(rt)[None, :, None]
                ow = owt * wt + tl.arange(wt)[None, None, :]
                mo = (pi < p_dim) & (oh < oh_dim) & (ow < ow_dim)
                acc = tl.zeros((pp, rt, wt), tl.float32)
                for kh in tl.sequential_range(kh_dim):
                    for kw in tl.sequential_range(kw_dim):
                        hh = oh * sh + kh - ph
                        ww = ow * sw + kw - pw
                        m = mo & (hh >= 0) & (hh < ih_dim) & (ww >= 0) & (ww < iw_dim)
                        acc[...] = acc + tl.load(x[pi, hh, ww], mask=m).astype(tl.float32)
                dt = tl.load(div[pi, oh, ow], mask=mo, other=1.0)
                tl.store(out[pi, oh, ow], acc / dt, mask=mo)


@trn.kernel
def avg_pool_bwd(g, div, gin, geo):
    """``gin[p, i] = sum_{o: i in window(o)} g[p, o] / div[o]`` (phase gather)."""
    p_dim, oh_dim, ow_dim = g.shape
    ih_dim, iw_dim = gin.shape[1], gin.shape[2]
    kh_dim, kw_dim, sh, sw, ph, pw = _geo(geo)
    pp = min(128, p_dim)
    for rh, qh_dim, kh0, kh_st, kh_n, ch0, dch in _phases(ih_dim, kh_dim, 1, sh, 1, kh_dim - 1 - ph, True):
        for rw, qw_dim, kw0, kw_st, kw_n, cw0, dcw in _phases(iw_dim, kw_dim, 1, sw, 1, kw_dim - 1 - pw, True):
            if qh_dim == 0 or qw_dim == 0:
                continue
            rt, wt = _tiles(qh_dim, qw_dim)
            for pt in tl.affine_range(tl.cdiv(p_dim, pp)):
                pi = pt * pp + tl.arange(pp)[:, None, None]
                for qht in tl.affine_range(tl.cdiv(qh_dim, rt)):
                    for qwt in tl.affine_range(tl.cdiv(qw_dim, wt)):
                        qh = qht * rt + tl.arange(rt)[None, :, None]
                        qw = qwt * wt + tl.arange(wt)[None, None, :]
                        mq = (pi < p_dim) & (qh < qh_dim) & (qw < qw_dim)
                        acc = tl.zeros((pp, rt, wt), tl.float32)
                        if kh_n and kw_n:
                            for jh in tl.sequential_range(kh_n):
                                for jw in tl.sequential_range(kw_n):
                                    oh = qh + ch0 + jh * dch
                                    ow = qw + cw0 + jw * dcw
                                    m = mq & (oh >= 0) & (oh < oh_dim) & (ow >= 0) & (ow < ow_dim)
                                    gt = tl.load(g[pi, oh, ow], mask=m).astype(tl.float32)
                                    dt = tl.load(div[pi, oh, ow], mask=m, other=1.0)
                                    acc[...] = acc + gt / dt
                        tl.store(gin[pi, qh * sh + rh, qw * sw + rw], acc, mask=mq)


@trn.kernel
def window_max(x, xi, out, oi, windows, inner):
    """Max (and first-max index) along the middle axis of ``x [R, L, C]`` over static windows.

    ``windows = "s0:e0,s1:e1,..."`` (one per output along L). The index of tap ``l`` is ``l`` when ``xi`` is
    None, else ``l * inner + xi[r, l, c]`` (composing a row scan with a column scan).
    """
    r_dim, l_dim, c_dim = x.shape
    rp = min(128, r_dim)
    cf = min(c_dim, _OUT_FREE)
    wins = [tuple(int(v) for v in w.split(":")) for w in windows.split(",")]
    for rt in tl.affine_range(tl.cdiv(r_dim, rp)):
        ri = rt * rp + tl.arange(rp)[:, None]
        for ct in tl.affine_range(tl.cdiv(c_dim, cf)):
            ci = ct * cf + tl.arange(cf)[None, :]
            m = (ri < r_dim) & (ci < c_dim)
            for o, (s, e) in enumerate(wins):
                best = tl.full((rp, cf), -math.inf, tl.float32)
                bidx = tl.full((rp, cf), s, tl.int32)
                for tap in tl.static_range(s, e):
                    v = tl.load(x[ri, tap, ci], mask=m).astype(tl.float32)
                    if xi is None:
                        here = tl.full((rp, cf), tap, tl.int32)
                    else:
                        here = tl.load(xi[ri, tap, ci], mask=m) + tap * inner
                    if tap == s and xi is not None:
                        bidx = here
                    upd = (v > best) | (v != v)
                    best = tl.where(upd, v, best)
                    bidx = tl.where(upd, here, bidx)
                tl.store(out[ri, o, ci], best, mask=m)
                tl.store(oi[ri, o, ci], bidx, mask=m)


@trn.kernel
def window_max_bwd(g, idx, gin, windows_h, windows_w):
    """``gin[p, i] += g[p, o]`` where ``idx[p, o] == i``, over static adaptive windows (SBUF plane accumulator)."""
    p_dim, oh_dim, ow_dim = g.shape
    ih_dim, iw_dim = gin.shape[1], gin.shape[2]
    wh = [tuple(int(v) for v in w.split(":")) for w in windows_h.split(",")]
    ww = [tuple(int(v) for v in w.split(":")) for w in windows_w.split(",")]
    pp = min(128, p_dim)
    for pt in tl.affine_range(tl.cdiv(p_dim, pp)):
        pi = pt * pp + tl.arange(pp)[:, None, None]
        mp = pi < p_dim
        acc = tl.zeros((pp, ih_dim, iw_dim), tl.float32)
        gt = tl.load(g[pi, tl.arange(oh_dim)[None, :, None], tl.arange(ow_dim)[None, None, :]],
                     mask=mp).astype(tl.float32)
        it = tl.load(idx[pi, tl.arange(oh_dim)[None, :, None], tl.arange(ow_dim)[None, None, :]], mask=mp, other=-1)
        for o_h, (hs, he) in enumerate(wh):
            for o_w, (ws, we) in enumerate(ww):
                here = isa.iota(pi * 0 + (hs + tl.arange(he - hs)[None, :, None]) * iw_dim + ws
                                + tl.arange(we - ws)[None, None, :], tl.int32)
                hit = here == it[:, o_h:o_h + 1, o_w:o_w + 1]
                acc[:, hs:he, ws:we] = acc[:, hs:he, ws:we] + tl.where(hit, gt[:, o_h:o_h + 1, o_w:o_w + 1], 0.0)
        tl.store(gin[pi, tl.arange(ih_dim)[None, :, None], tl.arange(iw_dim)[None, None, :]], acc, mask=mp)


# --- host side -----------------------------------------------------------------------------------------------------
def _ok(x: Any, nds: Sequence[int] = (3, 4)) -> bool:
    return (isinstance(x, torch.Tensor) and x.device.type == "trn" and x.dtype in DTYPES and x.dim() in nds
            and not x.is_conj() and not x.is_neg())


def _meta(fn: Any, *args: Any) -> Any:
    """Run the op on meta tensors: torch's own shape checks; None when they raise (the CPU will raise them)."""
    try:
        return fn(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
    except Exception:  # noqa: BLE001 - declined: the CPU fallback raises torch's error
        return None


def _planes(t: torch.Tensor) -> torch.Tensor:
    """``[N, C, H, W]`` / ``[C, H, W]`` as ``[P, H, W]`` (a view of a contiguous tensor)."""
    tc = t if t.is_contiguous() else t.contiguous()
    return tc.view(-1, t.shape[-2], t.shape[-1])


def _pair(v: Any, default: Sequence[int]) -> list[int] | None:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if not v:
        v = list(default)
    if len(v) == 1:
        v = v * 2
    return [int(e) for e in v] if len(v) == 2 else None


def _pool_params(kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> tuple[list[int], ...] | None:
    k = _pair(kernel_size, [])
    if k is None:
        return None
    s, p, d = _pair(stride, k), _pair(padding, [0]), _pair(dilation, [1])
    if s is None or p is None or d is None or min(k) < 1 or min(s) < 1 or min(d) < 1 or min(p) < 0:
        return None
    return k, s, p, d


@lowering("aten::max_pool2d_with_indices", dtypes=_IDX_DTYPES)
def max_pool2d_with_indices(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False) -> Any:
    """Max pooling with int64 flat indices (``F.max_pool1d/2d``)."""
    if not _ok(self):
        return NotImplemented
    prm = _pool_params(kernel_size, stride, padding, dilation)
    meta = _meta(torch.ops.aten.max_pool2d_with_indices.default, self, kernel_size, stride, padding, dilation,
                 ceil_mode)
    if prm is None or meta is None:
        return NotImplemented
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = prm
    out = torch.empty(meta[0].shape, dtype=self.dtype, device="trn")
    idx = torch.empty(meta[1].shape, dtype=torch.int64, device="trn")
    if out.numel() == 0:
        return out, idx
    oh, ow = out.shape[-2], out.shape[-1]
    max_pool_fwd(_planes(self), out.view(-1, oh, ow), idx.view(-1, oh, ow), f"{kh},{kw},{sh},{sw},{ph},{pw},{dh},{dw}")
    return out, idx


@lowering("aten::max_pool2d_with_indices_backward", dtypes=_IDX_DTYPES)
def max_pool2d_with_indices_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any,
                                     padding: Any, dilation: Any, ceil_mode: bool, indices: torch.Tensor) -> Any:
    """Gradient of max pooling: each output's gradient goes to its recorded input index."""
    if not _ok(self) or not _ok(grad_output) or grad_output.dtype != self.dtype or \
            not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64 or indices.device.type != "trn":
        return NotImplemented
    prm = _pool_params(kernel_size, stride, padding, dilation)
    if prm is None or _meta(torch.ops.aten.max_pool2d_with_indices_backward.default, grad_output, self, kernel_size,
                            stride, padding, dilation, ceil_mode, indices) is None:
        return NotImplemented
    if indices.shape != grad_output.shape:
        return NotImplemented
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = prm
    gin = torch.empty(self.shape, dtype=self.dtype, device="trn")
    if gin.numel() == 0:
        return gin
    if grad_output.numel() == 0:
        return gin.zero_()
    max_pool_bwd(_planes(grad_output), _planes(indices), _planes(gin), f"{kh},{kw},{sh},{sw},{ph},{pw},{dh},{dw}")
    return gin


def _avg_divisor(ih: int, iw: int, oh: int, ow: int, k: Sequence[int], s: Sequence[int], p: Sequence[int],
                 count_include_pad: bool, divisor_override: int | None) -> torch.Tensor:
    """Torch's per-output divisor of average pooling, ``[OH, OW]`` fp32 on ``trn`` (1 for empty windows)."""
    def axis(i_dim: int, o_dim: int, kk: int, ss: int, pp: int) -> tuple[np.ndarray, np.ndarray]:
        size, cnt = np.zeros(o_dim), np.zeros(o_dim)
        for o in range(o_dim):
            a0 = o * ss - pp
            a1 = min(a0 + kk, i_dim + pp)
            size[o] = a1 - a0
            cnt[o] = max(0, min(a1, i_dim) - max(a0, 0))
        return size, cnt

    hs, hc = axis(ih, oh, k[0], s[0], p[0])
    ws, wc = axis(iw, ow, k[1], s[1], p[1])
    empty = np.outer(hc, wc) == 0
    if divisor_override:
        d = np.full((oh, ow), float(divisor_override))
    elif count_include_pad:
        d = np.outer(hs, ws)
    else:
        d = np.outer(hc, wc)
    d = np.where(empty, 1.0, d).astype(np.float32)
    return torch.from_numpy(d).to("trn")


def _bcast(t: torch.Tensor, planes: int) -> torch.Tensor:
    """``[OH, OW]`` seen as ``[planes, OH, OW]`` (stride 0 along planes)."""
    return torch.as_strided(t, (planes, t.shape[0], t.shape[1]), (0, t.shape[1], 1), t.storage_offset())


@lowering("aten::avg_pool2d", dtypes=DTYPES)
def avg_pool2d(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Any:
    """Average pooling (``F.avg_pool1d/2d``): ``count_include_pad``, ``ceil_mode``, ``divisor_override``."""
    if not _ok(self):
        return NotImplemented
    prm = _pool_params(kernel_size, stride, padding, 1)
    meta = _meta(torch.ops.aten.avg_pool2d.default, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                 divisor_override)
    if prm is None or meta is None:
        return NotImplemented
    k, s, p, _ = prm
    out = torch.empty(meta.shape, dtype=self.dtype, device="trn")
    if out.numel() == 0:
        return out
    oh, ow = out.shape[-2], out.shape[-1]
    x3 = _planes(self)
    div = _avg_divisor(x3.shape[1], x3.shape[2], oh, ow, k, s, p, count_include_pad, divisor_override)
    avg_pool_fwd(x3, _bcast(div, x3.shape[0]), out.view(-1, oh, ow), f"{k[0]},{k[1]},{s[0]},{s[1]},{p[0]},{p[1]}")
    return out


@lowering("aten::avg_pool2d_backward", dtypes=DTYPES)
def avg_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any, padding: Any,
                        ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> Any:
    """Gradient of average pooling."""
    if not _ok(self) or not _ok(grad_output) or grad_output.dtype != self.dtype:
        return NotImplemented
    prm = _pool_params(kernel_size, stride, padding, 1)
    meta = _meta(torch.ops.aten.avg_pool2d.default, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                 divisor_override)
    if prm is None or meta is None or meta.shape != grad_output.shape:
        return NotImplemented
    k, s, p, _ = prm
    gin = torch.empty(self.shape, dtype=self.dtype, device="trn")
    if gin.numel() == 0:
        return gin
    if grad_output.numel() == 0:
        return gin.zero_()
    oh, ow = grad_output.shape[-2], grad_output.shape[-1]
    g3 = _planes(grad_output)
    div = _avg_divisor(self.shape[-2], self.shape[-1], oh, ow, k, s, p, count_include_pad, divisor_override)
    avg_pool_bwd(g3, _bcast(div, g3.shape[0]), _planes(gin), f"{k[0]},{k[1]},{s[0]},{s[1]},{p[0]},{p[1]}")
    return gin


def _adaptive_mats(i: int, o: int) -> tuple[torch.Tensor, torch.Tensor]:
    return UP.device_matrix(("adaptive_avg", i, o), lambda: UP.adaptive_avg_matrix(i, o))


@lowering("aten::_adaptive_avg_pool2d", dtypes=DTYPES)
def adaptive_avg_pool2d(self: torch.Tensor, output_size: Sequence[int]) -> Any:
    """Adaptive average pooling as ``P_h @ x @ P_w^T`` on the Tensor engine."""
    if not _ok(self) or _meta(torch.ops.aten._adaptive_avg_pool2d.default, self, output_size) is None:
        return NotImplemented
    oh, ow = (int(v) for v in output_size)
    ih, iw = self.shape[-2], self.shape[-1]
    if min(ih, iw, oh, ow) <= 0:
        return NotImplemented
    return UP.apply_separable(self, _adaptive_mats(ih, oh), _adaptive_mats(iw, ow), (oh, ow), False)


@lowering("aten::_adaptive_avg_pool2d_backward", dtypes=DTYPES)
def adaptive_avg_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor) -> Any:
    """Gradient of adaptive average pooling: ``P_h^T @ g @ P_w``."""
    if not _ok(self) or not _ok(grad_output) or grad_output.dtype != self.dtype or \
            grad_output.shape[:-2] != self.shape[:-2]:
        return NotImplemented
    oh, ow = grad_output.shape[-2], grad_output.shape[-1]
    ih, iw = self.shape[-2], self.shape[-1]
    if min(ih, iw, oh, ow) <= 0:
        return NotImplemented
    return UP.apply_separable(grad_output, _adaptive_mats(ih, oh), _adaptive_mats(iw, ow), (ih, iw), True)


@lowering("aten::_adaptive_avg_pool3d", dtypes=DTYPES)
def adaptive_avg_pool3d(self: torch.Tensor, output_size: Sequence[int]) -> Any:
    """3-D adaptive average pooling: one averaging matrix per spatial dim (``F.interpolate(mode="area")``)."""
    if not _ok(self, (4, 5)) or _meta(torch.ops.aten._adaptive_avg_pool3d.default, self, output_size) is None:
        return NotImplemented
    osz = [int(v) for v in output_size]
    isz = list(self.shape[-3:])
    if min(isz + osz) <= 0:
        return NotImplemented
    return UP.apply_axes(self, [_adaptive_mats(i, o) for i, o in zip(isz, osz)], osz, False)


@lowering("aten::_adaptive_avg_pool3d_backward", dtypes=DTYPES)
def adaptive_avg_pool3d_backward(grad_output: torch.Tensor, self: torch.Tensor) -> Any:
    """Gradient of 3-D adaptive average pooling."""
    if not _ok(self, (4, 5)) or not _ok(grad_output, (4, 5)) or grad_output.dtype != self.dtype or \
            grad_output.shape[:-3] != self.shape[:-3]:
        return NotImplemented
    osz = list(grad_output.shape[-3:])
    isz = list(self.shape[-3:])
    if min(isz + osz) <= 0:
        return NotImplemented
    return UP.apply_axes(grad_output, [_adaptive_mats(i, o) for i, o in zip(isz, osz)], isz, True)


def _windows(i: int, o: int) -> list[tuple[int, int]]:
    return [((d * i) // o, -(-((d + 1) * i) // o)) for d in range(o)]


def _wstr(ws: list[tuple[int, int]]) -> str:
    return ",".join(f"{a}:{b}" for a, b in ws)


_UNROLL = 256  # most window taps the unrolled adaptive-max kernels take (per axis, or output pairs backward)


@lowering("aten::adaptive_max_pool2d", dtypes=_IDX_DTYPES)
def adaptive_max_pool2d(self: torch.Tensor, output_size: Sequence[int]) -> Any:
    """Adaptive max pooling with int64 indices."""
    if not _ok(self) or _meta(torch.ops.aten.adaptive_max_pool2d.default, self, output_size) is None:
        return NotImplemented
    oh, ow = (int(v) for v in output_size)
    ih, iw = self.shape[-2], self.shape[-1]
    shape = (*self.shape[:-2], oh, ow)
    out = torch.empty(shape, dtype=self.dtype, device="trn")
    idx = torch.empty(shape, dtype=torch.int64, device="trn")
    if out.numel() == 0:
        return out, idx
    x3 = _planes(self)
    if ih % oh == 0 and iw % ow == 0:
        kh, kw = ih // oh, iw // ow
        max_pool_fwd(x3, out.view(-1, oh, ow), idx.view(-1, oh, ow), f"{kh},{kw},{kh},{kw},0,0,1,1")
        return out, idx
    wh, ww = _windows(ih, oh), _windows(iw, ow)
    if sum(b - a for a, b in wh) > _UNROLL or sum(b - a for a, b in ww) > _UNROLL:
        return NotImplemented
    pl = x3.shape[0]
    # rows: max along W for every input row -> m1 [P, H, OW] (+ column index); then along H
    m1 = torch.empty((pl, ih, ow), dtype=torch.float32, device="trn")
    a1 = torch.empty((pl, ih, ow), dtype=torch.int32, device="trn")
    xr = x3.view(pl * ih, iw, 1)
    window_max(xr, None, m1.view(pl * ih, ow, 1), a1.view(pl * ih, ow, 1), _wstr(ww), 1)
    window_max(m1, a1, out.view(pl, oh, ow), idx.view(pl, oh, ow), _wstr(wh), iw)
    return out, idx


@lowering("aten::adaptive_max_pool2d_backward", dtypes=_IDX_DTYPES)
def adaptive_max_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor, indices: torch.Tensor) -> Any:
    """Gradient of adaptive max pooling."""
    if not _ok(self) or not _ok(grad_output) or grad_output.dtype != self.dtype or \
            not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64 or \
            indices.shape != grad_output.shape or grad_output.shape[:-2] != self.shape[:-2]:
        return NotImplemented
    oh, ow = grad_output.shape[-2], grad_output.shape[-1]
    ih, iw = self.shape[-2], self.shape[-1]
    gin = torch.empty(self.shape, dtype=self.dtype, device="trn")
    if gin.numel() == 0:
        return gin
    if grad_output.numel() == 0:
        return gin.zero_()
    if ih % oh == 0 and iw % ow == 0:
        kh, kw = ih // oh, iw // ow
        max_pool_bwd(_planes(grad_output), _planes(indices), _planes(gin), f"{kh},{kw},{kh},{kw},0,0,1,1")
        return gin
    if oh * ow > _UNROLL // 4 or ih * iw > 8192:
        return NotImplemented
    window_max_bwd(_planes(grad_output), _planes(indices), _planes(gin), _wstr(_windows(ih, oh)),
                   _wstr(_windows(iw, ow)))
    return gin
