"""Pooling: max / average / adaptive average / adaptive max pooling (1-D, 2-D and 3-D), forward and backward.

``F.max_pool1d/2d/3d``, ``F.avg_pool1d/2d/3d`` and the adaptive forms reach the backend as their 2-D or 3-D ATen
ops (``max_pool2d_with_indices``, ``max_pool3d_with_indices``, ``avg_pool2d``, ``avg_pool3d``,
``_adaptive_avg_pool2d/3d``, ``adaptive_max_pool2d/3d`` and their backwards); 1-D pooling arrives as the 2-D op
with a unit height.

Layout: the ``N * C`` planes are the partition dimension (tiles of 128), a tile of output pixels
``[rows, cols]`` the free dimensions; the kernels take ``[P, D, H, W]`` planes and loop over output depth (2-D
pools have ``D = 1`` and trace no depth loop). Every kernel tap is one strided, masked DMA of the shifted input
(padding is the mask), so a window never needs an im2col buffer:

* max pooling scans the taps in torch's order keeping the running maximum and its flat index
  (``(id * H + ih) * W + iw``, an ``isa.iota`` tile), replicating the CPU kernel's tie, NaN and all-``-inf``
  rules; the indices are stored as int64 (HBM-only dtype) from int32 tiles.
* average pooling sums the taps and divides by a host-computed divisor map (``count_include_pad``,
  ``ceil_mode``, ``divisor_override`` as torch computes them).
* the 2-D and average backward passes gather instead of scatter: input positions are split into ``stride``
  phases (``i = s * q + r``), where the outputs whose window holds ``i`` at tap ``k`` are ``o = q + c(k)``,
  affine in ``q``. Max pooling adds ``g[o]`` where ``indices[o] == i``; average pooling adds
  ``g[o] / divisor[o]``. 3-D max pooling (whose ``s_d * s_h * s_w`` phase bodies would make a large kernel)
  and uneven adaptive max pooling scatter instead: one accumulating indirect DMA of ``g`` to ``indices``
  per plane into an fp32 scratch (:func:`scatter_add_planes`).
* adaptive average pooling (2-D and 3-D) is separable: ``P_h @ x @ P_w^T`` with averaging matrices, on the Tensor
  engine (shared with :mod:`stdlib_kernels.nn.upsample`); its gradient is the transposed product.
* adaptive max pooling uses the max-pooling kernels when the sizes divide; otherwise the windows are
  unrolled (at most 256 taps per axis): a separable scan (last axis first, composing the flat index).

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
from stdlib_kernels import _util as U
from stdlib_kernels.nn import upsample as UP
from stdlib_kernels.nn.conv import _phases
from trnlang.device import decline, lowering

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_IDX_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64)
#: max pooling forward: integer inputs too (as fp32, exact below 2^24)
_MAX_FWD_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
                   torch.uint8)
_OUT_FREE = 2048


def _tiles(oh_dim: int, ow_dim: int) -> tuple[int, int]:
    wt = min(ow_dim, 512)
    return max(1, min(oh_dim, _OUT_FREE // wt)), wt


def _geo(geo: str) -> list[int]:
    return [int(v) for v in geo.split(",")]


def _seq(n: int) -> Any:
    """A sequential loop over ``n``, or the constant 0 when ``n == 1`` (2-D pooling traces no depth loop)."""
    return (0,) if n == 1 else tl.sequential_range(n)


def _aff(n: int) -> Any:
    """An independent loop over ``n``, or the constant 0 when ``n == 1``."""
    return (0,) if n == 1 else tl.affine_range(n)


@trn.kernel
def max_pool_fwd(x, out, idx, geo):
    """``out, idx`` of max pooling ``x [P, D, H, W]``; ``geo = "kd,kh,kw,sd,sh,sw,pd,ph,pw,dd,dh,dw"``.

    Taps are scanned in torch's (d, h, w) order; the index is the flat ``(d * H + h) * W + w``.
    """
    p_dim, id_dim, ih_dim, iw_dim = x.shape
    od_dim, oh_dim, ow_dim = out.shape[1], out.shape[2], out.shape[3]
    kd_dim, kh_dim, kw_dim, sd, sh, sw, pd, ph, pw, dd, dh, dw = _geo(geo)
    for pi, od, oh, ow, mo in _plane_tiles(p_dim, od_dim, oh_dim, ow_dim):
        best = tl.full(_tile(pi, oh, ow), -math.inf, tl.float32)
        bidx = tl.full(_tile(pi, oh, ow), -1, tl.int32)
        for kd in _seq(kd_dim):
            dz = od * sd + kd * dd - pd
            for kh in tl.sequential_range(kh_dim):
                for kw in tl.sequential_range(kw_dim):
                    hh = oh * sh + kh * dh - ph
                    ww = ow * sw + kw * dw - pw
                    valid = (hh >= 0) & (hh < ih_dim) & (ww >= 0) & (ww < iw_dim)
                    if id_dim > 1 or kd_dim > 1 or pd:
                        valid = valid & (dz >= 0) & (dz < id_dim)
                    v = tl.load(x[pi, dz, hh, ww], mask=mo & valid, other=-math.inf).astype(tl.float32)
                    here = isa.iota(pi * 0 + (dz * ih_dim + hh) * iw_dim + ww, tl.int32)
                    unset = tl.where(valid, bidx, 0) < 0  # no index yet, at a real input position
                    upd = (v > best) | (v != v) | unset
                    best[...] = tl.where(upd, v, best)
                    bidx[...] = tl.where(upd, here, bidx)
        tl.store(out[pi, od, oh, ow], best, mask=mo)
        tl.store(idx[pi, od, oh, ow], bidx, mask=mo)


def _plane_tiles(p_dim: int, d_dim: int, h_dim: int, w_dim: int) -> Any:
    """Yield ``(pi, d, h, w, mask)`` for every ``[P, rows, cols]`` tile of a ``[P, D, H, W]`` space (trace time):
    partitions by 128, one depth plane per step, ``_tiles`` rows and columns of each plane."""
    pp = min(128, p_dim)
    rt, wt = _tiles(h_dim, w_dim)
    for pt in tl.affine_range(tl.cdiv(p_dim, pp)):
        pi = pt * pp + tl.arange(pp)[:, None, None]
        for d in _aff(d_dim):
            for ht in tl.affine_range(tl.cdiv(h_dim, rt)):
                for wt_ in tl.affine_range(tl.cdiv(w_dim, wt)):
                    h = ht * rt + tl.arange(rt)[None, :, None]
                    w = wt_ * wt + tl.arange(wt)[None, None, :]
                    yield pi, d, h, w, (pi < p_dim) & (h < h_dim) & (w < w_dim)


def _tile(pi: Any, h: Any, w: Any) -> tuple[int, int, int]:
    """The ``[P, rows, cols]`` shape of a :func:`_plane_tiles` tile."""
    return (pi.shape[0], h.shape[1], w.shape[2])


def _in_phases(i_dim: int, k_dim: int, s: int, d: int, p: int) -> list[tuple[int, ...]]:
    """Input phases of a pooling backward: per ``r``, the outputs ``o = q + c0 + j * dc`` whose window holds
    input ``i = s * q + r`` (see :func:`stdlib_kernels.nn.conv._phases`)."""
    return _phases(i_dim, k_dim, 1, s, d, (k_dim - 1) * d - p, True)


def _phase_gather(g: Any, gin: Any, k: tuple[int, int, int], st: tuple[int, int, int], pad: tuple[int, int, int],
                  dil: tuple[int, int, int]) -> Any:
    """The loop skeleton of a pooling backward written as a gather (trace time).

    For every input phase and ``[P, rows, cols]`` tile of inputs it yields ``(pi, at, acc, taps)``: the
    partition index, the tile's input position ``(d, h, w)`` index expressions, a zeroed fp32 accumulator
    tile, and the taps: ``(oz, oh, ow, mask)`` of every output whose window holds the tile's inputs (none
    when the phase has no taps). The caller adds each tap's contribution to ``acc``; ``acc`` is stored to
    ``gin`` after the taps.
    """
    p_dim, od_dim, oh_dim, ow_dim = g.shape
    id_dim, ih_dim, iw_dim = gin.shape[1], gin.shape[2], gin.shape[3]
    (kd_dim, kh_dim, kw_dim), (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = k, st, pad, dil
    for rd, qd_dim, _, _, kd_n, cd0, dcd in _in_phases(id_dim, kd_dim, sd, dd, pd):
        for rh, qh_dim, _, _, kh_n, ch0, dch in _in_phases(ih_dim, kh_dim, sh, dh, ph):
            for rw, qw_dim, _, _, kw_n, cw0, dcw in _in_phases(iw_dim, kw_dim, sw, dw, pw):
                if qd_dim == 0 or qh_dim == 0 or qw_dim == 0:
                    continue
                for pi, qd, qh, qw, mq in _plane_tiles(p_dim, qd_dim, qh_dim, qw_dim):
                    acc = tl.zeros(_tile(pi, qh, qw), tl.float32)
                    at = (qd * sd + rd, qh * sh + rh, qw * sw + rw)

                    def taps(qd: Any = qd, qh: Any = qh, qw: Any = qw, mq: Any = mq, kd_n: int = kd_n,
                             kh_n: int = kh_n, kw_n: int = kw_n, cd0: int = cd0, ch0: int = ch0,
                             cw0: int = cw0, dcd: int = dcd, dch: int = dch, dcw: int = dcw) -> Any:
                        if not (kd_n and kh_n and kw_n):
                            return
                        for jd in _seq(kd_n):
                            oz = qd + cd0 + jd * dcd
                            for jh in tl.sequential_range(kh_n):
                                for jw in tl.sequential_range(kw_n):
                                    oh = qh + ch0 + jh * dch
                                    ow = qw + cw0 + jw * dcw
                                    m = mq & (oh >= 0) & (oh < oh_dim) & (ow >= 0) & (ow < ow_dim)
                                    if od_dim > 1 or kd_dim > 1:
                                        m = m & (oz >= 0) & (oz < od_dim)
                                    yield oz, oh, ow, m

                    yield pi, at, acc, taps()
                    tl.store(gin[pi, at[0], at[1], at[2]], acc, mask=mq)


@trn.kernel
def max_pool_bwd(g, idx, gin, geo):
    """``gin[p, i] = sum_{o: idx[p, o] == i} g[p, o]`` over the windows holding ``i`` (phase gather).

    ``g, idx [P, OD, OH, OW]``, ``gin [P, D, H, W]``; ``geo`` as :func:`max_pool_fwd`'s.
    """
    kd_dim, kh_dim, kw_dim, sd, sh, sw, pd, ph, pw, dd, dh, dw = _geo(geo)
    ih_dim, iw_dim = gin.shape[2], gin.shape[3]
    for pi, at, acc, taps in _phase_gather(g, gin, (kd_dim, kh_dim, kw_dim), (sd, sh, sw), (pd, ph, pw), (dd, dh, dw)):
        target = isa.iota(pi * 0 + (at[0] * ih_dim + at[1]) * iw_dim + at[2], tl.int32)
        for oz, oh, ow, m in taps:
            gt = tl.load(g[pi, oz, oh, ow], mask=m).astype(tl.float32)
            it = tl.load(idx[pi, oz, oh, ow], mask=m, other=-1)
            acc[...] = acc + tl.where(it == target, gt, 0.0)


@trn.kernel
def avg_pool_fwd(x, div, out, geo):
    """``out = sum(window) / div`` for ``x [P, D, H, W]``; ``div [P(stride 0), OD, OH, OW]``;
    ``geo = "kd,kh,kw,sd,sh,sw,pd,ph,pw"``."""
    p_dim, id_dim, ih_dim, iw_dim = x.shape
    od_dim, oh_dim, ow_dim = out.shape[1], out.shape[2], out.shape[3]
    kd_dim, kh_dim, kw_dim, sd, sh, sw, pd, ph, pw = _geo(geo)
    for pi, od, oh, ow, mo in _plane_tiles(p_dim, od_dim, oh_dim, ow_dim):
        acc = tl.zeros(_tile(pi, oh, ow), tl.float32)
        for kd in _seq(kd_dim):
            dz = od * sd + kd - pd
            for kh in tl.sequential_range(kh_dim):
                for kw in tl.sequential_range(kw_dim):
                    hh = oh * sh + kh - ph
                    ww = ow * sw + kw - pw
                    m = mo & (hh >= 0) & (hh < ih_dim) & (ww >= 0) & (ww < iw_dim)
                    if id_dim > 1 or kd_dim > 1 or pd:
                        m = m & (dz >= 0) & (dz < id_dim)
                    acc[...] = acc + tl.load(x[pi, dz, hh, ww], mask=m).astype(tl.float32)
        dt = tl.load(div[pi, od, oh, ow], mask=mo, other=1.0)
        tl.store(out[pi, od, oh, ow], acc / dt, mask=mo)


@trn.kernel
def avg_pool_bwd(g, div, gin, geo):
    """``gin[p, i] = sum_{o: i in window(o)} g[p, o] / div[o]`` (phase gather); shapes as :func:`avg_pool_fwd`."""
    kd_dim, kh_dim, kw_dim, sd, sh, sw, pd, ph, pw = _geo(geo)
    for pi, _, acc, taps in _phase_gather(g, gin, (kd_dim, kh_dim, kw_dim), (sd, sh, sw), (pd, ph, pw), (1, 1, 1)):
        for oz, oh, ow, m in taps:
            gt = tl.load(g[pi, oz, oh, ow], mask=m).astype(tl.float32)
            acc[...] = acc + gt / tl.load(div[pi, oz, oh, ow], mask=m, other=1.0)


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
def scatter_add_planes(g, idx, gin):
    """``gin[p, idx[p, o], 0] += g[p, o]`` for ``g, idx [P, O]`` into a zeroed fp32 ``gin [P, I, 1]`` (an
    accumulating indirect DMA: repeated indices all add). The gradient of max pooling over any windows."""
    p_dim, o_dim = g.shape
    pp = min(128, p_dim)
    f = min(o_dim, 512)
    for pt in tl.affine_range(tl.cdiv(p_dim, pp)):
        rows = pt * pp + tl.arange(pp)[:, None]
        for j in tl.affine_range(tl.cdiv(o_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = (rows < p_dim) & (cols < o_dim)
            gt = tl.load(g[rows, cols], mask=m).astype(tl.float32)
            it = tl.load(idx[rows, cols], mask=m)
            tl.store(gin[rows, it, 0], gt, mask=m, accumulate="add")


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


def _planes(t: torch.Tensor, nsp: int) -> torch.Tensor:
    """``[N, C, (D,) H, W]`` / ``[C, (D,) H, W]`` as ``[P, D, H, W]`` (``D = 1`` for 2-D; a view of a contiguous
    tensor)."""
    tc = t if t.is_contiguous() else t.contiguous()
    sp = list(t.shape[-nsp:]) if nsp else []
    return tc.view(-1, *([1] * (3 - nsp)), *sp)


def _tuple(v: Any, n: int, default: Sequence[int]) -> list[int] | None:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if not v:
        v = list(default)
    if len(v) == 1:
        v = v * n
    return [int(e) for e in v] if len(v) == n else None


def _pool_params(kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                 n: int = 2) -> tuple[list[int], ...] | None:
    """``(k, s, p, d)`` per spatial axis, padded to three axes (a 2-D pool gets a unit depth)."""
    k = _tuple(kernel_size, n, [])
    if k is None:
        return None
    s, p, d = _tuple(stride, n, k), _tuple(padding, n, [0]), _tuple(dilation, n, [1])
    if s is None or p is None or d is None or min(k) < 1 or min(s) < 1 or min(d) < 1 or min(p) < 0:
        return None
    pad = 3 - n
    return [1] * pad + k, [1] * pad + s, [0] * pad + p, [1] * pad + d


def _gstr(*vals: Sequence[int]) -> str:
    return ",".join(str(v) for vs in vals for v in vs)


_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _max_pool(self: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool, n: int,
              op: Any) -> Any:
    if U.is_trn(self) and self.dtype in _INTS:  # integers below 2^24 (checked on the device) are exact in fp32
        from stdlib_kernels.elementwise.pointwise import int_within

        if self.dim() not in (n + 1, n + 2) or not int_within(self, 1 << 24):
            return decline("an integer input of the wrong rank, or with values of 2^24 or more (fp32 would round)")
        r = _max_pool(self.float(), kernel_size, stride, padding, dilation, ceil_mode, n, op)
        return r if r is NotImplemented else (r[0].to(self.dtype), r[1])
    if not _ok(self, (n + 1, n + 2)):
        return decline("not a float32/bfloat16/float16 trn tensor of the right rank (or a conj/neg bit)")
    prm = _pool_params(kernel_size, stride, padding, dilation, n)
    meta = _meta(op, self, kernel_size, stride, padding, dilation, ceil_mode)
    if prm is None or meta is None:
        return decline("invalid pooling arguments: torch raises")
    out = torch.empty(meta[0].shape, dtype=self.dtype, device="trn")
    idx = torch.empty(meta[1].shape, dtype=torch.int64, device="trn")
    if out.numel() == 0:
        return out, idx
    max_pool_fwd(_planes(self, n), _planes(out, n), _planes(idx, n), _gstr(*prm))
    return out, idx


@lowering("aten::max_pool2d_with_indices", dtypes=_MAX_FWD_DTYPES)
def max_pool2d_with_indices(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False) -> Any:
    """Max pooling with int64 flat indices (``F.max_pool1d/2d``)."""
    return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, 2,
                     torch.ops.aten.max_pool2d_with_indices.default)


@lowering("aten::max_pool3d_with_indices", dtypes=_MAX_FWD_DTYPES)
def max_pool3d_with_indices(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False) -> Any:
    """3-D max pooling with int64 flat indices ``(d * H + h) * W + w`` (``F.max_pool3d``)."""
    return _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, 3,
                     torch.ops.aten.max_pool3d_with_indices.default)


def _max_pool_bwd(grad_output: Any, self: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                  ceil_mode: bool, indices: Any, n: int, op: Any) -> Any:
    if not _ok(self, (n + 1, n + 2)) or not _ok(grad_output, (n + 1, n + 2)) or grad_output.dtype != self.dtype or \
            not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64 or indices.device.type != "trn":
        return decline("tensors not float32/bf16 on trn of the right rank and one dtype, or indices not int64 on trn")
    prm = _pool_params(kernel_size, stride, padding, dilation, n)
    if prm is None or _meta(op, grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                            indices) is None:
        return decline("invalid pooling arguments: torch raises")
    if indices.shape != grad_output.shape:
        return decline("indices of another shape than grad_output")
    gin = torch.empty(self.shape, dtype=self.dtype, device="trn")
    if gin.numel() == 0:
        return gin
    if grad_output.numel() == 0:
        return gin.zero_()
    if n == 3:  # 3-D: one small scatter-add kernel (the phase gather would trace s_d * s_h * s_w phase bodies)
        return _scatter_bwd(grad_output, indices, gin, n)
    max_pool_bwd(_planes(grad_output, n), _planes(indices, n), _planes(gin, n), _gstr(*prm))
    return gin


@lowering("aten::max_pool2d_with_indices_backward", dtypes=_IDX_DTYPES)
def max_pool2d_with_indices_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any,
                                     padding: Any, dilation: Any, ceil_mode: bool, indices: torch.Tensor) -> Any:
    """Gradient of max pooling: each output's gradient goes to its recorded input index."""
    return _max_pool_bwd(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices, 2,
                         torch.ops.aten.max_pool2d_with_indices_backward.default)


@lowering("aten::max_pool3d_with_indices_backward", dtypes=_IDX_DTYPES)
def max_pool3d_with_indices_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any,
                                     padding: Any, dilation: Any, ceil_mode: bool, indices: torch.Tensor) -> Any:
    """Gradient of 3-D max pooling."""
    return _max_pool_bwd(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices, 3,
                         torch.ops.aten.max_pool3d_with_indices_backward.default)


def _avg_divisor(isz: Sequence[int], osz: Sequence[int], k: Sequence[int], s: Sequence[int], p: Sequence[int],
                 count_include_pad: bool, divisor_override: int | None) -> torch.Tensor:
    """Torch's per-output divisor of average pooling, ``[OD, OH, OW]`` fp32 on ``trn`` (1 for empty windows).

    Host-side shape arithmetic (window sizes and counts per axis), like the kernel's compile-time geometry.
    """
    def axis(i_dim: int, o_dim: int, kk: int, ss: int, pp: int) -> tuple[np.ndarray, np.ndarray]:
        size, cnt = np.zeros(o_dim), np.zeros(o_dim)
        for o in range(o_dim):
            a0 = o * ss - pp
            a1 = min(a0 + kk, i_dim + pp)
            size[o] = a1 - a0
            cnt[o] = max(0, min(a1, i_dim) - max(a0, 0))
        return size, cnt

    sizes, cnts = zip(*[axis(i, o, kk, ss, pp) for i, o, kk, ss, pp in zip(isz, osz, k, s, p)])
    size = np.einsum("i,j,k->ijk", *sizes)
    cnt = np.einsum("i,j,k->ijk", *cnts)
    if divisor_override:
        d = np.full(cnt.shape, float(divisor_override))
    elif count_include_pad:
        d = size
    else:
        d = cnt
    d = np.where(cnt == 0, 1.0, d).astype(np.float32)
    return torch.from_numpy(d).to("trn")


def _bcast(t: torch.Tensor, planes: int) -> torch.Tensor:
    """``[OD, OH, OW]`` seen as ``[planes, OD, OH, OW]`` (stride 0 along planes)."""
    return torch.as_strided(t, (planes, *t.shape), (0, *t.stride()), t.storage_offset())


def _avg_args(self: Any, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool, count_include_pad: bool,
              divisor_override: Any, n: int, op: Any) -> Any:
    """``(meta output, (k, s, p))`` of an average pooling call, or None to decline."""
    if not _ok(self, (n + 1, n + 2)):
        return None
    prm = _pool_params(kernel_size, stride, padding, 1, n)
    meta = _meta(op, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if prm is None or meta is None:
        return None
    return meta, prm[:3]


def _int_avg_pool(self: torch.Tensor, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
                  count_include_pad: bool, divisor_override: Any, n: int, op: Any) -> Any:
    """int64 average pooling (the CPU's only integer one): torch sums in int64 and divides in integer arithmetic
    (toward zero). With every value below ``2^24 / window`` in magnitude (checked on the device) the fp32 window sum
    is exact, and so is the truncated fp32 quotient of two integers below 2^24 (its rounding error is under the
    ``1 / divisor`` distance of a non-integer quotient to the nearest integer)."""
    from stdlib_kernels.elementwise.pointwise import int_within

    prm = _pool_params(kernel_size, stride, padding, 1, n)
    if prm is None or self.dim() not in (n + 1, n + 2):
        return decline("an integer input of the wrong rank, or invalid pooling arguments (torch raises)")
    window = math.prod(prm[0])
    if window < 1 or window >= 1 << 24 or not int_within(self, (1 << 24) // window):
        return decline("int64 window sums that may reach 2^24 (inexact in fp32)")
    r = _avg_pool(self.float(), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, n, op)
    return r if r is NotImplemented else r.trunc().to(self.dtype)


def _avg_pool(self: Any, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool, count_include_pad: bool,
              divisor_override: Any, n: int, op: Any) -> Any:
    if U.is_trn(self) and self.dtype == torch.int64:
        return _int_avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, n, op)
    r = _avg_args(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, n, op)
    if r is None:
        return decline("not a float32/bf16 trn tensor of the right rank, or invalid pooling arguments (torch raises)")
    meta, (k, s, p) = r
    out = torch.empty(meta.shape, dtype=self.dtype, device="trn")
    if out.numel() == 0:
        return out
    x4, o4 = _planes(self, n), _planes(out, n)
    div = _avg_divisor(x4.shape[1:], o4.shape[1:], k, s, p, count_include_pad, divisor_override)
    avg_pool_fwd(x4, _bcast(div, x4.shape[0]), o4, _gstr(k, s, p))
    return out


def _avg_pool_bwd(grad_output: Any, self: Any, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
                  count_include_pad: bool, divisor_override: Any, n: int, op: Any) -> Any:
    if not _ok(grad_output, (n + 1, n + 2)) or grad_output.dtype != self.dtype:
        return decline("grad_output not a float32/bfloat16/float16 trn tensor of the right rank and self's dtype")
    r = _avg_args(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, n, op)
    if r is None or r[0].shape != grad_output.shape:
        return decline("not a float32/bf16 trn tensor of the right rank, bad pooling arguments, or a grad mismatch")
    k, s, p = r[1]
    gin = torch.empty(self.shape, dtype=self.dtype, device="trn")
    if gin.numel() == 0:
        return gin
    if grad_output.numel() == 0:
        return gin.zero_()
    g4, i4 = _planes(grad_output, n), _planes(gin, n)
    div = _avg_divisor(i4.shape[1:], g4.shape[1:], k, s, p, count_include_pad, divisor_override)
    avg_pool_bwd(g4, _bcast(div, g4.shape[0]), i4, _gstr(k, s, p))
    return gin


@lowering("aten::avg_pool2d", dtypes=(*DTYPES, torch.int64))
def avg_pool2d(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Any:
    """Average pooling (``F.avg_pool1d/2d``): ``count_include_pad``, ``ceil_mode``, ``divisor_override``."""
    return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2,
                     torch.ops.aten.avg_pool2d.default)


@lowering("aten::avg_pool3d", dtypes=(*DTYPES, torch.int64))
def avg_pool3d(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Any:
    """3-D average pooling (``F.avg_pool3d``)."""
    return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3,
                     torch.ops.aten.avg_pool3d.default)


@lowering("aten::avg_pool2d_backward", dtypes=DTYPES)
def avg_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any, padding: Any,
                        ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> Any:
    """Gradient of average pooling."""
    return _avg_pool_bwd(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override, 2, torch.ops.aten.avg_pool2d.default)


@lowering("aten::avg_pool3d_backward", dtypes=DTYPES)
def avg_pool3d_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any, padding: Any,
                        ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> Any:
    """Gradient of 3-D average pooling."""
    return _avg_pool_bwd(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                         divisor_override, 3, torch.ops.aten.avg_pool3d.default)


def _adaptive_mats(i: int, o: int) -> tuple[torch.Tensor, torch.Tensor]:
    return UP.device_matrix(("adaptive_avg", i, o), lambda: UP.adaptive_avg_matrix(i, o))


@lowering("aten::_adaptive_avg_pool2d", dtypes=DTYPES)
def adaptive_avg_pool2d(self: torch.Tensor, output_size: Sequence[int]) -> Any:
    """Adaptive average pooling as ``P_h @ x @ P_w^T`` on the Tensor engine."""
    if not _ok(self) or _meta(torch.ops.aten._adaptive_avg_pool2d.default, self, output_size) is None:
        return decline("not a 3-D/4-D float32/bfloat16/float16 trn tensor, or an invalid output_size (torch raises)")
    oh, ow = (int(v) for v in output_size)
    ih, iw = self.shape[-2], self.shape[-1]
    if min(ih, iw, oh, ow) <= 0:
        return decline("an empty input or output size")
    return UP.apply_separable(self, _adaptive_mats(ih, oh), _adaptive_mats(iw, ow), (oh, ow), False)


@lowering("aten::_adaptive_avg_pool2d_backward", dtypes=DTYPES)
def adaptive_avg_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor) -> Any:
    """Gradient of adaptive average pooling: ``P_h^T @ g @ P_w``."""
    if not _ok(self) or not _ok(grad_output) or grad_output.dtype != self.dtype or \
            grad_output.shape[:-2] != self.shape[:-2]:
        return decline("tensors not 3-D/4-D float32/bfloat16/float16 on trn of one dtype, or mismatched leading dims")
    oh, ow = grad_output.shape[-2], grad_output.shape[-1]
    ih, iw = self.shape[-2], self.shape[-1]
    if min(ih, iw, oh, ow) <= 0:
        return decline("an empty input or output size")
    return UP.apply_separable(grad_output, _adaptive_mats(ih, oh), _adaptive_mats(iw, ow), (ih, iw), True)


@lowering("aten::_adaptive_avg_pool3d", dtypes=DTYPES)
def adaptive_avg_pool3d(self: torch.Tensor, output_size: Sequence[int]) -> Any:
    """3-D adaptive average pooling: one averaging matrix per spatial dim (``F.interpolate(mode="area")``)."""
    if not _ok(self, (4, 5)) or _meta(torch.ops.aten._adaptive_avg_pool3d.default, self, output_size) is None:
        return decline("not a 4-D/5-D float32/bfloat16/float16 trn tensor, or an invalid output_size (torch raises)")
    osz = [int(v) for v in output_size]
    isz = list(self.shape[-3:])
    if min(isz + osz) <= 0:
        return decline("an empty input or output size")
    return UP.apply_axes(self, [_adaptive_mats(i, o) for i, o in zip(isz, osz)], osz, False)


@lowering("aten::_adaptive_avg_pool3d_backward", dtypes=DTYPES)
def adaptive_avg_pool3d_backward(grad_output: torch.Tensor, self: torch.Tensor) -> Any:
    """Gradient of 3-D adaptive average pooling."""
    if not _ok(self, (4, 5)) or not _ok(grad_output, (4, 5)) or grad_output.dtype != self.dtype or \
            grad_output.shape[:-3] != self.shape[:-3]:
        return decline("tensors not 4-D/5-D float32/bfloat16/float16 on trn of one dtype, or mismatched leading dims")
    osz = list(grad_output.shape[-3:])
    isz = list(self.shape[-3:])
    if min(isz + osz) <= 0:
        return decline("an empty input or output size")
    return UP.apply_axes(grad_output, [_adaptive_mats(i, o) for i, o in zip(isz, osz)], isz, True)


def _windows(i: int, o: int) -> list[tuple[int, int]]:
    return [((d * i) // o, -(-((d + 1) * i) // o)) for d in range(o)]


def _wstr(ws: list[tuple[int, int]]) -> str:
    return ",".join(f"{a}:{b}" for a, b in ws)


_UNROLL = 256  # most window taps the unrolled adaptive-max forward kernel takes per axis


def _adaptive_max(self: Any, output_size: Any, n: int, op: Any) -> Any:
    if not _ok(self, (n + 1, n + 2)) or _meta(op, self, output_size) is None:
        return decline("not a float32/bfloat16/float16 trn tensor of the right rank, or an invalid output_size "
                       "(torch raises)")
    osz = [int(v) for v in output_size]
    isz = list(self.shape[-n:])
    shape = (*self.shape[:-n], *osz)
    out = torch.empty(shape, dtype=self.dtype, device="trn")
    idx = torch.empty(shape, dtype=torch.int64, device="trn")
    if out.numel() == 0:
        return out, idx
    x4, o4, i4 = _planes(self, n), _planes(out, n), _planes(idx, n)
    if all(i % o == 0 for i, o in zip(isz, osz)):  # equal, disjoint windows: max pooling
        k = [1] * (3 - n) + [i // o for i, o in zip(isz, osz)]
        max_pool_fwd(x4, o4, i4, _gstr(k, k, [0, 0, 0], [1, 1, 1]))
        return out, idx
    wins = [_windows(i, o) for i, o in zip(isz, osz)]
    if any(sum(b - a for a, b in w) > _UNROLL for w in wins):
        return decline("windows of more than 256 taps per axis")
    # separable: max along the last axis for every input row (with its index), then along each earlier axis,
    # composing the index ``i_axis * inner + index_so_far``; the scan order keeps torch's first-max/NaN rules
    pl = x4.shape[0]
    cur, cur_i = x4.reshape(-1, isz[-1], 1), None
    inner = 1
    for ax in range(n - 1, -1, -1):
        lead = pl * U.prod(isz[:ax])
        tail = U.prod(osz[ax + 1:])
        src = cur.reshape(lead, isz[ax], tail)
        srci = cur_i.reshape(lead, isz[ax], tail) if cur_i is not None else None
        if ax == 0:
            dst, dsti = o4.reshape(lead, osz[0], tail), i4.reshape(lead, osz[0], tail)
        else:
            dst = torch.empty((lead, osz[ax], tail), dtype=torch.float32, device="trn")
            dsti = torch.empty((lead, osz[ax], tail), dtype=torch.int32, device="trn")
        window_max(src, srci, dst, dsti, _wstr(wins[ax]), inner)
        cur, cur_i = dst, dsti
        inner *= isz[ax]
    return out, idx


@lowering("aten::adaptive_max_pool2d", dtypes=_IDX_DTYPES)
def adaptive_max_pool2d(self: torch.Tensor, output_size: Sequence[int]) -> Any:
    """Adaptive max pooling with int64 indices."""
    return _adaptive_max(self, output_size, 2, torch.ops.aten.adaptive_max_pool2d.default)


@lowering("aten::adaptive_max_pool3d", dtypes=_IDX_DTYPES)
def adaptive_max_pool3d(self: torch.Tensor, output_size: Sequence[int]) -> Any:
    """3-D adaptive max pooling with int64 indices."""
    return _adaptive_max(self, output_size, 3, torch.ops.aten.adaptive_max_pool3d.default)


def _adaptive_max_bwd(grad_output: Any, self: Any, indices: Any, n: int) -> Any:
    if not _ok(self, (n + 1, n + 2)) or not _ok(grad_output, (n + 1, n + 2)) or grad_output.dtype != self.dtype or \
            not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64 or indices.device.type != "trn" or \
            indices.shape != grad_output.shape or grad_output.shape[:-n] != self.shape[:-n]:
        return decline("not float32/bf16 trn tensors of the right rank and dtype, or indices not int64 of its shape")
    osz, isz = list(grad_output.shape[-n:]), list(self.shape[-n:])
    gin = torch.empty(self.shape, dtype=self.dtype, device="trn")
    if gin.numel() == 0:
        return gin
    if grad_output.numel() == 0:
        return gin.zero_()
    if n == 2 and all(i % o == 0 for i, o in zip(isz, osz)):
        k = [1] + [i // o for i, o in zip(isz, osz)]
        max_pool_bwd(_planes(grad_output, n), _planes(indices, n), _planes(gin, n), _gstr(k, k, [0, 0, 0], [1, 1, 1]))
        return gin
    return _scatter_bwd(grad_output, indices, gin, n)


def _scatter_bwd(grad_output: torch.Tensor, indices: torch.Tensor, gin: torch.Tensor, n: int) -> Any:
    """``gin[p, indices[p, o]] += grad_output[p, o]`` per plane (fp32 scratch, rounded once into ``gin``)."""
    isz = gin.shape[-n:]
    pl = gin.numel() // U.prod(isz)
    acc = torch.zeros((pl, U.prod(isz), 1), dtype=torch.float32, device="trn")
    try:
        scatter_add_planes(_planes(grad_output, n).reshape(pl, -1), _planes(indices, n).reshape(pl, -1), acc)
    except trn.BoundsError:  # an index outside the plane: torch's own error from the CPU
        return decline("an index outside the plane: torch raises")
    return gin.copy_(acc.view(gin.shape))


@lowering("aten::adaptive_max_pool2d_backward", dtypes=_IDX_DTYPES)
def adaptive_max_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor, indices: torch.Tensor) -> Any:
    """Gradient of adaptive max pooling (a scatter-add of the gradient to the recorded indices)."""
    return _adaptive_max_bwd(grad_output, self, indices, 2)


@lowering("aten::adaptive_max_pool3d_backward", dtypes=_IDX_DTYPES)
def adaptive_max_pool3d_backward(grad_output: torch.Tensor, self: torch.Tensor, indices: torch.Tensor) -> Any:
    """Gradient of 3-D adaptive max pooling."""
    return _adaptive_max_bwd(grad_output, self, indices, 3)
