"""Convolutions on the Tensor engine: conv1d/2d/3d and their transposed forms, forward and backward.

``F.conv*`` on a PrivateUse1 device reaches the backend as ``aten::convolution_overrideable`` (and
``aten::convolution_backward_overrideable`` for autograd); both are lowered here.

One *generalised convolution* kernel (:func:`conv_kernel`) does every "data" pass. Per spatial axis
it computes ``out[o] = sum_k w[k] * x[i]`` with ``i * u = o * s + k * d - p`` (stride ``s``, input
stride ``u``, dilation ``d``, offset ``p``):

* forward convolution: ``u = 1`` (``i = o * s + k * d - p``);
* transposed convolution and the input gradient of a convolution: ``s = 1``, ``u = stride``,
  flipped taps, ``p = (K - 1) * d - padding``. Output positions are split into ``u`` *phases*
  ``o = u * q + r``; inside one phase only the taps with ``(r + k * d - p) % u == 0`` contribute and
  ``i = q + (r + k * d - p) // u`` is affine in ``q``, so no zeros are ever inserted.

For one tile of output pixels (N <= 512), one tile of output channels (M <= 128) and one tile of
input channels (K <= 128), every contributing tap is a matmul of a weight slice ``[C_in, C_out]``
with the shifted input patch ``[C_in, pixels]`` (loaded by a strided, masked DMA: padding is the
mask), all accumulated in one PSUM bank; the bias is added when the bank is evicted. Groups are a
loop; the weight is a 6-D view ``[G, C_out/G, C_in/G, KD, KH, KW]`` so the transposed weight of the
input-gradient pass is a view, not a copy. 3-D convolutions loop over output depth planes (and their
depth phases), the depth taps accumulating into the same PSUM bank; 1-D and 2-D convolutions are
5-D views with unit depth (and height), which trace no depth loop.

The weight gradient (:func:`conv_wgrad_kernel`) contracts over pixels: per tap, tiles of the
gradient and of the shifted input (pixels x channels, transposed on chip) are multiplied and
accumulated over the batch and all pixel tiles in PSUM. The bias gradient is a native ``sum``.

Example:
    >>> import torch, torch.nn.functional as F
    >>> x, w = torch.randn(2, 3, 8, 8, device="trn"), torch.randn(4, 3, 3, 3, device="trn")  # doctest: +SKIP
    >>> F.conv2d(x, w, padding=1).shape                                                         # doctest: +SKIP
    torch.Size([2, 4, 8, 8])
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import fallback, lowering

aten = torch.ops.aten
_WBUF = 16384  # most weight elements per partition kept in SBUF for a whole output-channel tile
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _phases(o_dim: int, k_dim: int, s: int, u: int, d: int, p: int, flip: bool) -> list[tuple[int, ...]]:
    """Per output phase ``r``: ``(r, q_dim, k0, step, count, c0, dc)``.

    Output ``o = u * q + r`` (``q < q_dim``) gets the taps ``k = k0 + j * step`` (``j < count``), which read
    input ``i = q * s + c0 + j * dc``; the weight tap is ``k`` (``K - 1 - k`` when flipped).
    """
    import math

    res = []
    step = u // math.gcd(u, d)
    for r in range(u):
        q_dim = -(-(o_dim - r) // u) if o_dim > r else 0
        ks = [k for k in range(k_dim) if (r + k * d - p) % u == 0]
        if not ks:
            res.append((r, q_dim, 0, 1, 0, 0, 0))
            continue
        k0 = ks[0]
        res.append((r, q_dim, k0, step, len(ks), (r + k0 * d - p) // u, step * d // u))
    return res


def _rng(n: int) -> Any:
    """A loop over ``n``: a real loop, or the constant 0 when ``n == 1`` (2-D convolutions have a unit depth)."""
    return (0,) if n == 1 else tl.affine_range(n)


@trn.kernel
def conv_kernel(x, w, bias, out, geo, flip):
    """Generalised 3-D convolution (see the module docstring); 1-D and 2-D convolutions have unit depth/height.

    ``x [N, G*Ci, ID, IH, IW]``, ``w [G, Co, Ci, KD, KH, KW]``, ``bias [G*Co]`` or None,
    ``out [N, G*Co, OD, OH, OW]``; ``geo = "s_d,u_d,d_d,p_d,s_h,u_h,d_h,p_h,s_w,u_w,d_w,p_w"`` (a compile-time
    string: kernels take no tuples). Depth is a loop (one output plane per iteration, one tap per step).
    """
    n_dim, _, id_dim, ih_dim, iw_dim = x.shape
    g_dim, co_dim, ci_dim, kd_dim, kh_dim, kw_dim = w.shape
    od_dim, oh_dim, ow_dim = out.shape[2], out.shape[3], out.shape[4]
    sd, ud, dd, pd, sh, uh, dh, ph, sw, uw, dw, pw = (int(v) for v in geo.split(","))
    cip, cop = min(128, ci_dim), min(128, co_dim)
    n_ci = tl.cdiv(ci_dim, cip)
    n_taps = kd_dim * kh_dim * kw_dim
    for g in tl.affine_range(g_dim):
        for cot in tl.affine_range(tl.cdiv(co_dim, cop)):
            co = cot * cop + tl.arange(cop)[None, :]
            co_p = cot * cop + tl.arange(cop)[:, None, None]
            # the weight slices [C_in tile, C_out tile] of every tap, loaded once per output-channel tile
            wbuf = None
            if n_ci * n_taps * cop <= _WBUF:
                wbuf = tl.ndarray((cip, n_ci * n_taps * cop), w.dtype, buffer=tl.sbuf)
                for cit in tl.affine_range(n_ci):
                    ci_k = cit * cip + tl.arange(cip)[:, None]
                    for kd in _rng(kd_dim):
                        for kh in tl.affine_range(kh_dim):
                            for kw in tl.affine_range(kw_dim):
                                slot = (((cit * kd_dim + kd) * kh_dim + kh) * kw_dim + kw) * cop
                                wbuf[:, slot:slot + cop] = tl.load(w[g, co, ci_k, kd, kh, kw],
                                                                    mask=(ci_k < ci_dim) & (co < co_dim))
            for rd, qd_dim, kd0, kd_st, kd_n, cd0, dcd in _phases(od_dim, kd_dim, sd, ud, dd, pd, flip):
                for rh, qh_dim, kh0, kh_st, kh_n, ch0, dch in _phases(oh_dim, kh_dim, sh, uh, dh, ph, flip):
                    for rw, qw_dim, kw0, kw_st, kw_n, cw0, dcw in _phases(ow_dim, kw_dim, sw, uw, dw, pw, flip):
                        if qd_dim == 0 or qh_dim == 0 or qw_dim == 0:
                            continue
                        _conv_phase(x, w, bias, out, wbuf, g, cot, co, co_p, flip, (sd, ud, dd, sh, uh, dh, sw, uw, dw),
                                    (rd, qd_dim, kd0, kd_st, kd_n, cd0, dcd), (rh, qh_dim, kh0, kh_st, kh_n, ch0, dch),
                                    (rw, qw_dim, kw0, kw_st, kw_n, cw0, dcw))


#: Smallest convolution (output elements x weight elements per group) split across threads by batch.
SPLIT_MIN_MACS = 1 << 22


def _conv(x5: torch.Tensor, w6: torch.Tensor, bias: torch.Tensor | None, o5: torch.Tensor, geo: str,
          flip: bool) -> None:
    """``conv_kernel``, as one launch per thread on blocks of the batch when big (the images are independent)."""
    n = x5.shape[0]
    threads = U.num_threads()
    if threads == 1 or n < 2 or o5.numel() * w6[0, 0].numel() < SPLIT_MIN_MACS:
        conv_kernel(x5, w6, bias, o5, geo, flip)
        return
    U.run_parallel([U.launch(conv_kernel, U.rows_piece(x5, slice(lo, hi)), w6, bias, U.rows_piece(o5, slice(lo, hi)),
                             geo, flip) for lo, hi in U.chunks(n, threads, 1)])


def _conv_weight(w: Any, wbuf: Any, g: Any, co: Any, ci_k: Any, mw: Any, cit: Any, kd: Any, kh: Any, kw: Any,
                 cop: int, flip: bool) -> Any:
    """The ``[ci, co]`` weight tile of tap ``(kd, kh, kw)`` (``flip``: ``kh``/``kw`` count from the end; ``kd`` is
    already flipped): loaded from ``w``, or a window of the staged ``wbuf``."""
    _, _, _, kd_dim, kh_dim, kw_dim = w.shape
    if flip:
        kh, kw = kh_dim - 1 - kh, kw_dim - 1 - kw
    if wbuf is None:
        return tl.load(w[g, co, ci_k, kd, kh, kw], mask=mw)
    slot = (((cit * kd_dim + kd) * kh_dim + kh) * kw_dim + kw) * cop
    return wbuf[:, slot:slot + cop]


def _conv_bias(bias: Any, g: Any, co_dim: int, cot: Any, cop: int) -> Any:
    """The fp32 ``[cop, 1]`` bias column of output-channel tile ``cot`` of group ``g``."""
    bt = tl.load(bias[g * co_dim + cot * cop + tl.arange(cop)[:, None]],
                 mask=cot * cop + tl.arange(cop)[:, None] < co_dim)
    return bt.astype(tl.float32)


def _conv_phase(x: Any, w: Any, bias: Any, out: Any, wbuf: Any, g: Any, cot: Any, co: Any, co_p: Any, flip: bool,
                geo: tuple[int, ...], phd: tuple[int, ...], phh: tuple[int, ...], phw: tuple[int, ...]) -> None:
    """The output positions of one (depth, height, width) phase of :func:`conv_kernel` (traced inline)."""
    n_dim, _, id_dim, ih_dim, iw_dim = x.shape
    g_dim, co_dim, ci_dim, kd_dim, kh_dim, kw_dim = w.shape
    sd, ud, dd, sh, uh, dh, sw, uw, dw = geo
    rd, qd_dim, kd0, kd_st, kd_n, cd0, dcd = phd
    rh, qh_dim, kh0, kh_st, kh_n, ch0, dch = phh
    rw, qw_dim, kw0, kw_st, kw_n, cw0, dcw = phw
    cip, cop = min(128, ci_dim), min(128, co_dim)
    n_ci = tl.cdiv(ci_dim, cip)
    wt_dim = min(qw_dim, 512)
    rt_dim = max(1, min(qh_dim, 512 // wt_dim))
    flat = id_dim == 1 and kd_dim == 1  # no depth: no depth masks
    for n in tl.affine_range(n_dim):
        for qd in _rng(qd_dim):
            for qht in tl.affine_range(tl.cdiv(qh_dim, rt_dim)):
                for qwt in tl.affine_range(tl.cdiv(qw_dim, wt_dim)):
                    qh = qht * rt_dim + tl.arange(rt_dim)[None, :, None]
                    qw = qwt * wt_dim + tl.arange(wt_dim)[None, None, :]
                    mo = (co_p < co_dim) & (qh < qh_dim) & (qw < qw_dim)
                    if kd_n and kh_n and kw_n:
                        acc = tl.zeros((cop, rt_dim * wt_dim), tl.float32, buffer=tl.psum)
                        for cit in tl.affine_range(n_ci):
                            ci_k = cit * cip + tl.arange(cip)[:, None]
                            ci_x = cit * cip + tl.arange(cip)[:, None, None]
                            mw = (ci_k < ci_dim) & (co < co_dim)
                            for jd in _rng(kd_n):
                                kd = kd0 + jd * kd_st
                                if flip:
                                    kd = kd_dim - 1 - kd
                                dz = qd * sd + cd0 + jd * dcd
                                mc = ci_x < ci_dim
                                if not flat:
                                    mc = mc & (dz >= 0) & (dz < id_dim)
                                slab = None
                                if sh == sw == uh == uw == 1 and wbuf is not None:
                                    # stride 1: one halo'd input slab per pixel tile, taps are SBUF windows
                                    h_sl, w_sl = rt_dim + (kh_dim - 1) * dh, wt_dim + (kw_dim - 1) * dw
                                    sa = qht * rt_dim + ch0 + tl.arange(h_sl)[None, :, None]
                                    sb = qwt * wt_dim + cw0 + tl.arange(w_sl)[None, None, :]
                                    slab = tl.load(x[n, g * ci_dim + ci_x, dz, sa, sb],
                                                   mask=mc & (sa >= 0) & (sa < ih_dim) & (sb >= 0) & (sb < iw_dim))
                                for jh in tl.affine_range(kh_n):
                                    for jw in tl.affine_range(kw_n):
                                        wt = _conv_weight(w, wbuf, g, co, ci_k, mw, cit, kd, kh0 + jh * kh_st,
                                                          kw0 + jw * kw_st, cop, flip)
                                        if slab is not None:
                                            xt = slab[:, jh * dh:jh * dh + rt_dim, jw * dw:jw * dw + wt_dim]
                                        else:
                                            hh = qh * sh + ch0 + jh * dch
                                            ww = qw * sw + cw0 + jw * dcw
                                            mx = (mc & (hh >= 0) & (hh < ih_dim) & (ww >= 0) & (ww < iw_dim)
                                                  & (qh < qh_dim) & (qw < qw_dim))
                                            xt = tl.load(x[n, g * ci_dim + ci_x, dz, hh, ww], mask=mx)
                                        acc += tl.matmul(wt, tl.reshape(xt, (cip, rt_dim * wt_dim)), transpose_x=True)
                        res = tl.copy(acc)
                    else:
                        res = tl.zeros((cop, rt_dim * wt_dim), tl.float32)
                    if bias is not None:
                        res = res + _conv_bias(bias, g, co_dim, cot, cop)
                    tl.store(out[n, g * co_dim + co_p, qd * ud + rd, qh * uh + rh, qw * uw + rw],
                             tl.reshape(res, (cop, rt_dim, wt_dim)), mask=mo)


@trn.kernel
def conv_wgrad_kernel(a, b, gw, geo):
    """Weight gradient ``gw[g, i, j, kd, kh, kw] = sum_{n, o} a[n, g*A+i, od, oh, ow] * b[n, g*B+j, id, ih, iw]``.

    ``ih = oh * s_h + kh * d_h - p_h`` (likewise for d and w); ``geo = "s_d,d_d,p_d,s_h,d_h,p_h,s_w,d_w,p_w"``.
    Pixels are the contraction: tiles ``[channels, pixels]`` are transposed on chip to ``[pixels, channels]``.
    Taps are real loops (the kernel's size does not grow with the filter's): a group of whole ``kw`` rows (or a
    chunk of one row, for wide rows) shares one PSUM bank ``[A tile, taps * B tile]``, so a pixel tile of ``a``
    is transposed once per group, and with ``s_w == 1`` one halo'd slab of ``b`` serves a whole row (its taps are
    windows of it).
    """
    n_dim, _, od_dim, oh_dim, ow_dim = a.shape
    id_dim = b.shape[2]
    g_dim, a_dim, b_dim, kd_dim, kh_dim, kw_dim = gw.shape
    sd, dd, pd, sh, dh, ph, sw, dw, pw = (int(v) for v in geo.split(","))
    ap, bp = min(128, a_dim), min(128, b_dim)
    wt_dim = min(ow_dim, 128)
    rt_dim = max(1, min(oh_dim, 128 // wt_dim))
    k_dim = rt_dim * wt_dim
    per = max(1, 512 // bp)  # taps sharing one PSUM bank
    if kw_dim <= per:  # whole rows: up to per // kw_dim of them per bank
        rows_per, kw_chunks = min(kh_dim, per // kw_dim), [(0, kw_dim)]
    else:
        rows_per, kw_chunks = 1, [(c0, min(per, kw_dim - c0)) for c0 in range(0, kw_dim, per)]
    row_chunks = [(h0, min(rows_per, kh_dim - h0)) for h0 in range(0, kh_dim, rows_per)]
    flat = id_dim == 1 and kd_dim == 1
    for g in tl.affine_range(g_dim):
        for at in tl.affine_range(tl.cdiv(a_dim, ap)):
            ai = at * ap + tl.arange(ap)[:, None, None]
            ii = at * ap + tl.arange(ap)[:, None]
            for bt in tl.affine_range(tl.cdiv(b_dim, bp)):
                bi = bt * bp + tl.arange(bp)[:, None, None]
                jj = bt * bp + tl.arange(bp)[None, :]
                for kd in _rng(kd_dim):
                    for h0, hcnt in row_chunks:
                        for c0, cnt in kw_chunks:
                            acc = tl.zeros((ap, hcnt * cnt * bp), tl.float32, buffer=tl.psum)
                            for n in tl.affine_range(n_dim):
                                for od in _rng(od_dim):
                                    _wgrad_tile(a, b, acc, g, ai, bi, n, od, kd, h0, hcnt, c0, cnt, flat,
                                                (sd, dd, pd, sh, dh, ph, sw, dw, pw), (rt_dim, wt_dim, k_dim),
                                                (a_dim, b_dim))
                            for khl in _rng(hcnt):
                                for kwi in tl.affine_range(cnt):
                                    t = khl * cnt + kwi
                                    tl.store(gw[g, ii, jj, kd, h0 + khl, c0 + kwi], acc[:, t * bp:(t + 1) * bp],
                                             mask=(ii < a_dim) & (jj < b_dim))


def _wgrad_tile(a: Any, b: Any, acc: Any, g: Any, ai: Any, bi: Any, n: Any, od: Any, kd: Any, h0: int, hcnt: int,
                c0: int, cnt: int, flat: bool, geo: tuple[int, ...], tile: tuple[int, ...],
                chans: tuple[int, int]) -> None:
    """All pixel tiles of one ``(n, od)`` for a group of taps of :func:`conv_wgrad_kernel` (traced inline).

    ``chans``: the channels per group ``(A, B)``; ``ai``/``bi``: this tile's channel indices within the group.
    """
    _, _, od_dim, oh_dim, ow_dim = a.shape
    id_dim, ih_dim, iw_dim = b.shape[2], b.shape[3], b.shape[4]
    sd, dd, pd, sh, dh, ph, sw, dw, pw = geo
    rt_dim, wt_dim, k_dim = tile
    a_dim, b_dim = chans
    ap, bp = min(128, a_dim), min(128, b_dim)
    dz = od * sd + kd * dd - pd
    mb = bi < b_dim
    if not flat:
        mb = mb & (dz >= 0) & (dz < id_dim)
    for oht in tl.affine_range(tl.cdiv(oh_dim, rt_dim)):
        oh = oht * rt_dim + tl.arange(rt_dim)[None, :, None]
        for owt in tl.affine_range(tl.cdiv(ow_dim, wt_dim)):
            ow = owt * wt_dim + tl.arange(wt_dim)[None, None, :]
            ta = tl.load(a[n, g * a_dim + ai, od, oh, ow], mask=(ai < a_dim) & (oh < oh_dim) & (ow < ow_dim))
            ta_t = tl.copy(tl.transpose(tl.reshape(ta, (ap, k_dim))), dtype=ta.dtype)
            for khl in _rng(hcnt):
                hh = oh * sh + (h0 + khl) * dh - ph
                mh = mb & (oh < oh_dim) & (hh >= 0) & (hh < ih_dim)
                slab = None
                if sw == 1:  # one halo'd slab of b for the row's taps
                    sb = owt * wt_dim - pw + c0 * dw + tl.arange(wt_dim + (cnt - 1) * dw)[None, None, :]
                    slab = tl.load(b[n, g * b_dim + bi, dz, hh, sb], mask=mh & (sb >= 0) & (sb < iw_dim))
                for kwi in tl.affine_range(cnt):
                    if slab is not None:
                        tb = slab[:, :, kwi * dw:kwi * dw + wt_dim]
                    else:
                        ww = ow * sw + (c0 + kwi) * dw - pw
                        tb = tl.load(b[n, g * b_dim + bi, dz, hh, ww],
                                     mask=mh & (ow < ow_dim) & (ww >= 0) & (ww < iw_dim))
                    tb_t = tl.copy(tl.transpose(tl.reshape(tb, (bp, k_dim))), dtype=tb.dtype)
                    t = khl * cnt + kwi
                    acc[:, t * bp:(t + 1) * bp] += tl.matmul(ta_t, tb_t, transpose_x=True)


# --- host side ------------------------------------------------------------------------------------------------
def _cpu_forward(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Any, padding: Any,
                 dilation: Any, transposed: bool, output_padding: Any, groups: int) -> torch.Tensor:
    return aten.convolution.default(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                    groups)


def _cpu_backward(grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, stride: Any, padding: Any,
                  dilation: Any, transposed: bool, output_padding: Any, groups: int,
                  output_mask: Any) -> tuple[Any, ...]:
    bias_sizes = [weight.shape[1] * groups] if transposed else [weight.shape[0]]
    return aten.convolution_backward.default(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                                             transposed, output_padding, groups, output_mask)


_FWD = "aten::convolution_overrideable"
_BWD = "aten::convolution_backward_overrideable"


def _decline_fwd(*args: Any, reason: str = fallback.NO_LOWERING) -> Any:
    return fallback.run_on_cpu(aten.convolution_overrideable.default, args, {}, cpu_op=_cpu_forward, name=_FWD,
                               reason=reason)


def _decline_bwd(*args: Any) -> Any:
    return fallback.run_on_cpu(aten.convolution_backward_overrideable.default, args, {}, cpu_op=_cpu_backward,
                               name=_BWD)


def _ok(ts: Sequence[Any], nd: int) -> bool:
    """All tensors on trn with one supported dtype, the right rank, and no conj/neg bits."""
    dt = ts[0].dtype
    return all(isinstance(t, torch.Tensor) and t.device.type == "trn" and t.dtype == dt and t.dim() == nd
               and not t.is_conj() and not t.is_neg() for t in ts) and dt in DTYPES


def _params(stride: Any, padding: Any, dilation: Any, output_padding: Any, nsp: int) -> tuple[list[int], ...] | None:
    def lst(v: Any, default: int) -> list[int] | None:
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        if len(v) == 1:
            v = v * nsp
        return [int(e) for e in v] if len(v) == nsp else None

    st, pd, dl, op = lst(stride, 1), lst(padding, 0), lst(dilation, 1), lst(output_padding, 0)
    if st is None or pd is None or dl is None or op is None:
        return None
    if any(s < 1 for s in st) or any(d < 1 for d in dl) or any(p < 0 for p in pd):
        return None
    return st, pd, dl, op


def _as5d(t: torch.Tensor) -> torch.Tensor:
    """``[N, C, L]`` / ``[N, C, H, W]`` as ``[N, C, 1, 1, L]`` / ``[N, C, 1, H, W]`` (views)."""
    while t.dim() < 5:
        t = t.unsqueeze(2)
    return t


def _w6(w: torch.Tensor, groups: int, transposed_layout: bool) -> torch.Tensor:
    """The weight as ``[G, C_out/G, C_in/G, KD, KH, KW]`` of the pass whose output channels come first.

    ``transposed_layout``: ``w`` is stored ``[G * A, B, ...]`` and the pass needs ``[G, B, A, ...]``.
    """
    w5 = _as5d(w)
    a, b = w5.shape[0] // groups, w5.shape[1]
    w6 = torch.as_strided(w5, (groups, a, b, *w5.shape[2:]), (a * w5.stride(0), *w5.stride()), w5.storage_offset())
    return w6.transpose(1, 2) if transposed_layout else w6


def _geo(st: list[int], pd: list[int], dl: list[int], ks: Sequence[int], data_transposed: bool) -> str:
    """The per-axis ``s,u,d,p`` of the generalised convolution (d, h then w)."""
    vals = []
    for s, p, d, k in zip(st, pd, dl, ks):
        vals += [1, s, d, (k - 1) * d - p] if data_transposed else [s, 1, d, p]
    return ",".join(str(v) for v in vals)


def _spatial(st: list[int], pd: list[int], dl: list[int], op: list[int], nsp: int) -> tuple[list[int], ...]:
    """Parameters padded to three spatial axes (1-D and 2-D convolutions get unit leading axes)."""
    pad = 3 - nsp
    return [1] * pad + st, [0] * pad + pd, [1] * pad + dl, [0] * pad + op


@lowering(_FWD, dtypes=None)
def convolution(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Any, padding: Any,
                dilation: Any, transposed: bool, output_padding: Any, groups: int) -> Any:
    """``aten::convolution_overrideable``: conv1d/2d/3d and their transposed forms (fp32, bf16, fp16; int64 through fp32
    when the operands' magnitudes bound every sum below 2^24, checked on the device)."""
    args = (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if isinstance(input, torch.Tensor) and input.dtype == torch.int64:
        return _int_convolution(*args)
    nd = input.dim() if isinstance(input, torch.Tensor) else 0
    ts = [input, weight] + ([bias] if bias is not None else [])
    if nd not in (3, 4, 5) or not _ok([input, weight], nd) or (bias is not None and not _ok([bias], 1)) \
            or (bias is not None and bias.dtype != input.dtype) or groups < 1:
        return _decline_fwd(*args)
    nsp = nd - 2
    prm = _params(stride, padding, dilation, output_padding, nsp)
    if prm is None:
        return _decline_fwd(*args)
    try:  # shapes, and torch's own errors for bad arguments, from the meta kernel
        meta = _cpu_forward(*[t.to("meta") if isinstance(t, torch.Tensor) else t for t in args])
    except Exception:  # noqa: BLE001 - let the CPU raise its own error
        return _decline_fwd(*args)
    del ts
    st, pd, dl, op = _spatial(*prm, nsp)
    out = torch.empty(meta.shape, dtype=input.dtype, device="trn")
    if out.numel() == 0:
        return out
    x5, o5 = _as5d(input), _as5d(out)
    if input.numel() == 0 or weight.numel() == 0:
        out.zero_()
        if bias is not None:
            out.add_(bias.view(1, -1, *([1] * nsp)))
        return out
    ks = _as5d(weight).shape[2:]
    _conv(x5, _w6(weight, groups, transposed), bias, o5, _geo(st, pd, dl, ks, transposed), transposed)
    return out


def _int_convolution(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *rest: Any) -> Any:
    """An int64 convolution as an fp32 one: exact when ``max|x| max|w| (terms per output) + max|b| < 2^24``."""
    from stdlib_kernels.elementwise.pointwise import int_maxabs as mag

    ts = [input, weight] + ([bias] if bias is not None else [])
    if not all(U.is_trn(t) and t.dtype == torch.int64 for t in ts) or input.dim() not in (3, 4, 5):
        return _decline_fwd(input, weight, bias, *rest)
    groups = int(rest[-1])
    transposed = bool(rest[3])
    per = weight.shape[0] // max(groups, 1) if transposed else weight.shape[1]  # input channels per output
    terms = max(1, per * math.prod(weight.shape[2:]))
    if mag(input) * mag(weight) * terms + (mag(bias) if bias is not None else 0) >= 1 << 24:
        return _decline_fwd(input, weight, bias, *rest, reason="int64 sums that may reach 2^24 (inexact in fp32)")
    r = convolution(input.float(), weight.float(), bias.float() if bias is not None else None, *rest)
    return r if r is NotImplemented else r.to(torch.int64)


@lowering(_BWD, dtypes=None)
def convolution_backward(grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, stride: Any,
                         padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: int,
                         output_mask: Any) -> Any:
    """``aten::convolution_backward_overrideable``: (grad_input, grad_weight, grad_bias) as ``output_mask`` asks."""
    args = (grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask)
    nd = input.dim() if isinstance(input, torch.Tensor) else 0
    if nd not in (3, 4, 5) or not _ok([grad_output, input, weight], nd) or groups < 1:
        return _decline_bwd(*args)
    nsp = nd - 2
    prm = _params(stride, padding, dilation, output_padding, nsp)
    if prm is None:
        return _decline_bwd(*args)
    try:
        _cpu_backward(*[t.to("meta") if isinstance(t, torch.Tensor) else t for t in args])
    except Exception:  # noqa: BLE001
        return _decline_bwd(*args)
    st, pd, dl, op = _spatial(*prm, nsp)
    ks = _as5d(weight).shape[2:]
    g5, x5 = _as5d(grad_output), _as5d(input)
    empty = grad_output.numel() == 0 or input.numel() == 0 or weight.numel() == 0
    gi = gw = gb = None
    if output_mask[0]:
        gi = torch.empty(input.shape, dtype=input.dtype, device="trn")
        if empty:
            gi.zero_()
        elif transposed:  # the input gradient of a transposed convolution is a convolution of grad_output
            _conv(g5, _w6(weight, groups, False), None, _as5d(gi), _geo(st, pd, dl, ks, False), False)
        else:
            _conv(g5, _w6(weight, groups, True), None, _as5d(gi), _geo(st, pd, dl, ks, True), True)
    if output_mask[1]:
        gw = torch.empty(weight.shape, dtype=weight.dtype, device="trn")
        if empty:
            gw.zero_()
        else:
            geo = ",".join(str(v) for i in range(3) for v in (st[i], dl[i], pd[i]))
            w6 = _w6(gw, groups, False)
            if transposed:  # gw[ci, co] = sum x[ci, i] * g[co, i * s + k * d - p]
                conv_wgrad_kernel(x5, g5, w6, geo)
            else:  # gw[co, ci] = sum g[co, o] * x[ci, o * s + k * d - p]
                conv_wgrad_kernel(g5, x5, w6, geo)
    if output_mask[2]:
        c = grad_output.shape[1]
        if grad_output.numel() == 0:
            gb = torch.zeros((c,), dtype=grad_output.dtype, device="trn")
        else:
            gb = grad_output.sum(dim=[0, *range(2, nd)])
    return gi, gw, gb
