"""Upsampling (nearest, nearest-exact, linear, bilinear, trilinear, bicubic), forward and backward, as matmuls.

Every mode is *separable*: along each spatial axis the output is a fixed linear map of the input,
``out = Wh @ x @ Ww^T`` per ``(n, c)`` plane, with interpolation matrices ``Wh [OH, IH]`` and
``Ww [OW, IW]`` built on the host exactly as torch's CPU kernels compute their source indices and
weights (same float32 arithmetic, bicubic border clamping included). The backward pass is the
transposed map, ``grad_in = Wh^T @ g @ Ww``. Both run as two Tensor-engine passes:

* :func:`sep_rows`: ``y[r, :] = x[r, :] @ M`` for every row ``r`` of all planes (the W axis), rows
  tiled by 128 on the output partitions, the contraction by 128, the output columns by 512;
* :func:`sep_planes`: ``out[p] = M^T @ y[p]`` for every plane ``p`` (the H axis), several planes per
  matmul when their rows are short.

3-D modes (``upsample_nearest3d``, ``upsample_trilinear3d``) apply a third map the same way, and the
anti-aliased modes (``_upsample_bilinear2d_aa``, ``_upsample_bicubic2d_aa``) are just other matrices. The
intermediate is kept in fp32 and the result is rounded once (bf16 inputs behave like torch's
fp32-opmath CPU kernels). The same machinery serves ``adaptive_avg_pool`` (averaging matrices), see
:mod:`stdlib_kernels.nn.pool`.

Example:
    >>> import torch, torch.nn.functional as F
    >>> x = torch.randn(1, 3, 8, 8, device="trn")                                    # doctest: +SKIP
    >>> F.interpolate(x, scale_factor=2, mode="bilinear").shape                     # doctest: +SKIP
    torch.Size([1, 3, 16, 16])
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch._prims_common import suggest_memory_format

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import decline, lowering

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FWD_DTYPES = (*DTYPES, torch.uint8)  # uint8 images: see _forward_u8
NEAREST_DTYPES = (*FWD_DTYPES, torch.float64)  # nearest modes copy elements (_nearest): exact in any dtype


@trn.kernel
def sep_rows(x, m, y):
    """``y[r, b] = sum_a x[r, a] * m[a, b]`` for ``x [R, A]``, ``m [A, B]`` (fp32), ``y [R, B]``.

    Row tiles of ``x`` are loaded as they lie in memory (contiguous rows) and transposed on the Tensor
    engine, so the contraction dim ``a`` sits on the partitions.
    """
    r_dim, a_dim = x.shape
    b_dim = m.shape[1]
    rp, ap, bp = min(128, r_dim), min(128, a_dim), min(512, b_dim)
    one = a_dim <= 128 and b_dim <= 512
    if one:
        mt1 = tl.load(m[tl.arange(ap)[:, None], tl.arange(bp)[None, :]])
    for rt in tl.affine_range(tl.cdiv(r_dim, rp)):
        ro = rt * rp + tl.arange(rp)[:, None]
        for bt in tl.affine_range(tl.cdiv(b_dim, bp)):
            acc = tl.zeros((rp, bp), tl.float32, buffer=tl.psum)
            bb = bt * bp + tl.arange(bp)[None, :]
            for at in tl.affine_range(tl.cdiv(a_dim, ap)):
                ac = at * ap + tl.arange(ap)[None, :]
                aa = at * ap + tl.arange(ap)[:, None]
                xr = tl.load(x[ro, ac], mask=(ro < r_dim) & (ac < a_dim)).astype(tl.float32)  # [R, A]
                xt = tl.copy(tl.transpose(xr))  # [A, R]
                mt = mt1 if one else tl.load(m[aa, bb], mask=(aa < a_dim) & (bb < b_dim))
                acc += tl.matmul(xt, mt, transpose_x=True)
            tl.store(y[ro, bb], acc, mask=(ro < r_dim) & (bb < b_dim))


@trn.kernel
def sep_planes(y, m, out):
    """``out[p, c, b] = sum_a m[a, c] * y[p, a, b]`` for ``y [P, A, B]``, ``m [A, C]`` (fp32), ``out [P, C, B]``.

    When a plane row is short (``B < 512``) several planes share one matmul: the moving tile is
    ``[A, planes, B]`` flattened to ``[A, planes * B]``.
    """
    p_dim, a_dim, b_dim = y.shape
    c_dim = m.shape[1]
    ap, cp, bp = min(128, a_dim), min(128, c_dim), min(512, b_dim)
    pt_dim = max(1, min(p_dim, 512 // bp))
    one = a_dim <= 128 and c_dim <= 128
    if one:
        mt1 = tl.load(m[tl.arange(ap)[:, None], tl.arange(cp)[None, :]])
    for pt in tl.affine_range(tl.cdiv(p_dim, pt_dim)):
        pp = pt * pt_dim + tl.arange(pt_dim)[None, :, None]
        for ct in tl.affine_range(tl.cdiv(c_dim, cp)):
            cc = ct * cp + tl.arange(cp)[None, :]
            for bt in tl.affine_range(tl.cdiv(b_dim, bp)):
                bb = bt * bp + tl.arange(bp)[None, None, :]
                acc = tl.zeros((cp, pt_dim * bp), tl.float32, buffer=tl.psum)
                for at in tl.affine_range(tl.cdiv(a_dim, ap)):
                    aa = at * ap + tl.arange(ap)[:, None]
                    a3 = at * ap + tl.arange(ap)[:, None, None]
                    mt = mt1 if one else tl.load(m[aa, cc], mask=(aa < a_dim) & (cc < c_dim))
                    yt = tl.load(y[pp, a3, bb], mask=(pp < p_dim) & (a3 < a_dim) & (bb < b_dim))
                    acc += tl.matmul(mt, tl.reshape(yt.astype(tl.float32), (ap, pt_dim * bp)), transpose_x=True)
                co = ct * cp + tl.arange(cp)[:, None, None]
                tl.store(out[pp, co, bb], tl.reshape(acc, (cp, pt_dim, bp)),
                         mask=(pp < p_dim) & (co < c_dim) & (bb < b_dim))


# --- interpolation matrices (host, float32 arithmetic as torch's CPU kernels) ---------------------------------------
_F = np.float32


def _scales_value(scale: float | None, i: int, o: int) -> np.float32:
    return _F(1.0 / scale) if scale is not None and scale > 0 else _F(i) / _F(o)


def _area_scale(i: int, o: int, align: bool, scale: float | None) -> np.float32:
    if align:
        return _F(i - 1) / _F(o - 1) if o > 1 else _F(0)
    return _scales_value(scale, i, o)


def _src(scale: np.float32, d: int, align: bool, cubic: bool) -> np.float32:
    if align:
        return _F(scale * _F(d))
    s = _F(scale * _F(_F(d) + _F(0.5)) - _F(0.5))
    return _F(0) if (not cubic and s < 0) else s


def _guard(real: np.float32, size: int) -> tuple[int, np.float32]:
    idx = min(int(math.floor(real)), size - 1)
    lam = _F(min(max(_F(real - _F(idx)), _F(0)), _F(1)))
    return idx, lam


def nearest_index(i: int, o: int, scale: float | None, exact: bool) -> np.ndarray:
    """The input index each of ``o`` outputs copies in nearest (``exact``: nearest-exact) upsampling."""
    s = _scales_value(scale, i, o)
    src = np.empty(o, np.int64)
    for d in range(o):
        if exact:
            src[d] = min(int(math.floor(_F((d + 0.5) * s))), i - 1)
        elif o == i:
            src[d] = d
        elif o == 2 * i:
            src[d] = d >> 1
        else:
            src[d] = min(int(math.floor(_F(_F(d) * s))), i - 1)
    return src


def nearest_matrix(i: int, o: int, scale: float | None, exact: bool) -> np.ndarray:
    """``W [o, i]`` of nearest (``exact``: nearest-exact) upsampling, one 1 per row."""
    w = np.zeros((o, i), np.float32)
    w[np.arange(o), nearest_index(i, o, scale, exact)] = 1.0
    return w


def linear_matrix(i: int, o: int, align: bool, scale: float | None) -> np.ndarray:
    """``W [o, i]`` of linear interpolation (``upsample_linear1d`` / ``bilinear2d`` per axis)."""
    w = np.zeros((o, i), np.float32)
    s = _area_scale(i, o, align, scale)
    for d in range(o):
        i0, l1 = _guard(_src(s, d, align, False), i)
        i1 = i0 + (1 if i0 < i - 1 else 0)
        w[d, i0] += _F(1) - l1
        w[d, i1] += l1
    return w


def _cubic1(x: np.float32, a: np.float32) -> np.float32:
    return _F(_F(_F(_F(a + 2) * x - _F(a + 3)) * x) * x + 1)


def _cubic2(x: np.float32, a: np.float32) -> np.float32:
    return _F(_F(_F(_F(a * x - 5 * a) * x + 8 * a) * x) - 4 * a)


def cubic_matrix(i: int, o: int, align: bool, scale: float | None) -> np.ndarray:
    """``W [o, i]`` of bicubic interpolation (A = -0.75) with torch's border clamping of source indices."""
    w = np.zeros((o, i), np.float32)
    s = _area_scale(i, o, align, scale)
    a = _F(-0.75)
    for d in range(o):
        i0, t = _guard(_src(s, d, align, True), i)
        cs = (_cubic2(_F(t + 1), a), _cubic1(t, a), _cubic1(_F(1 - t), a), _cubic2(_F(_F(1 - t) + 1), a))
        for k, c in enumerate(cs):
            w[d, min(max(i0 - 1 + k, 0), i - 1)] += c
    return w


def _aa_linear(x: np.float32) -> np.float32:
    x = abs(x)
    return _F(1 - x) if x < 1 else _F(0)


def _aa_cubic(x: np.float32) -> np.float32:
    a = _F(-0.5)
    x = abs(x)
    if x < 1:
        return _F(_F(_F(_F(a + 2) * x - _F(a + 3)) * x) * x + 1)
    if x < 2:
        return _F(_F(_F(_F(x - 5) * x + 8) * x - 4) * a)
    return _F(0)


def aa_matrix(i: int, o: int, align: bool, scale: float | None, cubic: bool) -> np.ndarray:
    """``W [o, i]`` of torch's anti-aliased (``antialias=True``) bilinear / bicubic resampling along one axis."""
    w = np.zeros((o, i), np.float32)
    s = _area_scale(i, o, align, scale)
    interp = 4 if cubic else 2
    support = _F(_F(interp * 0.5) * s) if s >= 1.0 else _F(interp * 0.5)
    inv = _F(1.0) / s if s >= 1.0 else _F(1.0)
    fn = _aa_cubic if cubic else _aa_linear
    for d in range(o):
        center = _F(s * _F(d + 0.5))
        xmin = max(int(_F(center - support + _F(0.5))), 0)
        xsize = min(int(_F(center + support + _F(0.5))), i) - xmin
        ws = [fn(_F(_F(_F(j + xmin) - center + _F(0.5)) * inv)) for j in range(max(xsize, 0))]
        total = _F(sum(ws, _F(0)))
        for j, v in enumerate(ws):
            w[d, xmin + j] = v / total if total != 0 else v
    return w


def adaptive_avg_matrix(i: int, o: int) -> np.ndarray:
    """``W [o, i]`` of adaptive average pooling along one axis: ``1 / len`` over each window."""
    w = np.zeros((o, i), np.float32)
    for d in range(o):
        st = (d * i) // o
        en = -(-((d + 1) * i) // o)
        w[d, st:en] = 1.0 / (en - st)
    return w


_MATS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()  # device matrices and index vectors, least recent first


def _cached(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """``make()`` (device tensors built on the host) cached under ``key`` (the 256 most recent kept)."""
    hit = _MATS.get(key)
    if hit is not None:
        _MATS.move_to_end(key)
        return hit
    hit = _MATS[key] = make()
    if len(_MATS) > 256:
        _MATS.popitem(last=False)
    return hit


def device_matrix(key: tuple[Any, ...], build: Callable[[], np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W^T, W)`` of a host-built ``W [o, i]`` as contiguous fp32 ``trn`` tensors (cached)."""
    def make() -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.from_numpy(np.ascontiguousarray(build()))
        return w.t().contiguous().to("trn"), w.to("trn")

    return _cached(key, make)


def apply_separable(x: torch.Tensor, mh: tuple[torch.Tensor, torch.Tensor] | None,
                    mw: tuple[torch.Tensor, torch.Tensor], out_hw: Sequence[int], transpose: bool,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """``Wh @ x @ Ww^T`` (``transpose``: ``Wh^T @ x @ Ww``) over the last two (one, when ``mh`` is None) dims.

    ``mh`` / ``mw`` are ``(W^T, W)`` pairs from :func:`device_matrix`; ``out_hw`` the output's trailing sizes.
    """
    mats = [mw] if mh is None else [mh, mw]
    return apply_axes(x, mats, out_hw, transpose, out)


def apply_axes(x: torch.Tensor, mats: Sequence[tuple[torch.Tensor, torch.Tensor]], out_sizes: Sequence[int],
               transpose: bool, out: torch.Tensor | None = None,
               between: Callable[[torch.Tensor], Any] | None = None) -> torch.Tensor:
    """Apply one ``(W^T, W)`` linear map per trailing dim of ``x`` (``len(mats)`` dims; ``W^T`` for ``transpose``).

    The last dim goes through :func:`sep_rows`, the others through :func:`sep_planes`; intermediates are fp32
    (``between`` is applied to each, in place, before the next pass).
    """
    k = len(mats)
    lead = tuple(x.shape[:-k])
    shape = (*lead, *[int(v) for v in out_sizes])
    if out is None:
        out = torch.empty(shape, dtype=x.dtype, device="trn")
    if out.numel() == 0:
        return out
    if x.numel() == 0:
        return out.zero_()
    cur = x if x.is_contiguous() else x.contiguous()
    sizes = list(x.shape)
    for step, ax in enumerate(range(len(sizes) - 1, len(sizes) - k - 1, -1)):
        pair = mats[ax - len(lead)]
        m = pair[1] if transpose else pair[0]  # [in, out]
        last = step == k - 1
        new_sizes = sizes[:ax] + [m.shape[1]] + sizes[ax + 1:]
        dst = out if last else torch.empty(new_sizes, dtype=torch.float32, device="trn")
        outer, inner = _prod(sizes[:ax]), _prod(sizes[ax + 1:])
        work = outer * sizes[ax] * m.shape[1] * inner  # multiply-adds
        if inner == 1:
            U.split_rows(sep_rows, [cur.view(outer, sizes[ax]), m, dst.view(outer, m.shape[1])], work=work, keep=(1,))
        else:
            y3, o3 = cur.view(outer, sizes[ax], inner), dst.view(outer, m.shape[1], inner)
            blocks = U.chunks(outer, U.num_threads(), 1) if work >= U.PARALLEL_MIN_WORK and outer >= 2 else [(0, outer)]
            U.run_parallel([U.launch(sep_planes, U.rows_piece(y3, slice(lo, hi)), m, U.rows_piece(o3, slice(lo, hi)))
                            for lo, hi in blocks])
        if between is not None and not last:
            between(dst)
        cur, sizes = dst, new_sizes
    return out


def _prod(xs: Sequence[int]) -> int:
    r = 1
    for v in xs:
        r *= int(v)
    return r


# --- lowerings -----------------------------------------------------------------------------------------------------
def _ok(x: Any, nd: int) -> bool:
    return (isinstance(x, torch.Tensor) and x.device.type == "trn" and x.dtype in DTYPES and x.dim() == nd
            and not x.is_conj() and not x.is_neg())


def fixed_point(w: np.ndarray) -> np.ndarray:
    """``w`` rounded to the 16-bit fixed-point weights torch's uint8 kernels use: the most fractional bits that
    keep the largest weight (doubled) below 2^15, each weight rounded half away from zero."""
    top = float(np.abs(w).max()) if w.size else 0.0
    bits = 0
    while bits < 15 and int(0.5 + top * (1 << (bits + 1))) < (1 << 15):
        bits += 1
    scaled = w.astype(np.float64) * (1 << bits)
    return (np.trunc(scaled + np.where(scaled < 0, -0.5, 0.5)) / (1 << bits)).astype(np.float32)


def _mat(kind: str, i: int, o: int, align: bool, scale: float | None,
         fixed: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    builders: dict[str, Callable[[], np.ndarray]] = {
        "nearest": lambda: nearest_matrix(i, o, scale, False),
        "nearest_exact": lambda: nearest_matrix(i, o, scale, True),
        "linear": lambda: linear_matrix(i, o, align, scale),
        "cubic": lambda: cubic_matrix(i, o, align, scale),
        "aa_linear": lambda: aa_matrix(i, o, align, scale, False),
        "aa_cubic": lambda: aa_matrix(i, o, align, scale, True),
    }
    if fixed:
        return device_matrix((kind, i, o, align, scale, "fixed"), lambda: fixed_point(builders[kind]()))
    return device_matrix((kind, i, o, align, scale), builders[kind])


def _sizes_ok(out_size: Sequence[int], in_size: Sequence[int]) -> bool:
    return all(int(s) > 0 for s in out_size) and all(int(s) > 0 for s in in_size)


#: the interpolating modes (and spatial ranks) torch's CPU kernels take uint8 images for (nearest: :func:`_nearest`)
_U8_MODES = {"linear": (2,), "cubic": (2,), "aa_linear": (2,), "aa_cubic": (2,)}


def _bad_out(out: torch.Tensor | None, x: torch.Tensor, osz: Sequence[int]) -> bool:
    """An ``out=`` the forward cannot write: not a ``trn`` tensor of ``x``'s dtype and the result's shape, or
    overlapping ``x``."""
    return out is not None and (out.device.type != "trn" or out.dtype != x.dtype
                                or tuple(out.shape) != (*x.shape[:2], *osz) or _overlap(out, x))


def _round_u8(y: torch.Tensor) -> torch.Tensor:
    """fp32 values rounded half up and clamped to [0, 255], in place (what a uint8 store of a pass keeps)."""
    return y.add_(0.5).floor_().clamp_(0.0, 255.0)


def _forward_u8(kind: str, nsp: int, x: torch.Tensor, output_size: Sequence[int], align: bool,
                scales: Sequence[float | None], out: torch.Tensor | None) -> Any:
    """uint8 images in the interpolating modes, as torch's CPU kernels resize them: one separable pass per axis (the
    last first), each pass's result rounded half up and clamped to a uint8 value before the next.

    The weights are the float modes' rounded to torch's 16-bit fixed point (:func:`fixed_point`), and every
    product and sum of a pass is exact in fp32 (8-bit pixels times 15-bit weights). torch computes its float
    weights in another order, so a few weights differ in the last fixed-point bit: under 1% of the pixels of a
    bilinear/bicubic resize differ from the CPU's, by 1.
    """
    if nsp not in _U8_MODES.get(kind, ()):
        return decline("a uint8 input in a mode torch has no uint8 kernel for (torch raises)")
    osz = [int(s) for s in output_size]
    if _bad_out(out, x, osz):
        return decline("out= not a trn uint8 tensor of the result's shape, or overlapping the input")
    if x.dim() != nsp + 2 or not _sizes_ok(output_size, x.shape[2:]):
        return decline("not of the right rank, or a zero or mismatched size")
    mats = [_mat(kind, x.shape[2 + a], osz[a], align, scales[a], True) for a in range(nsp)]
    res = _round_u8(apply_axes(x.to(torch.float32), mats, osz, False, between=_round_u8)).to(torch.uint8)
    if out is None:
        return res
    out.copy_(res)
    return out


def _device_index(i: int, o: int, scale: float | None, exact: bool) -> torch.Tensor:
    return _cached(("index", i, o, scale, exact), lambda: torch.from_numpy(nearest_index(i, o, scale, exact)).to("trn"))


def _nearest(nsp: int, x: torch.Tensor, output_size: Sequence[int], scales: Sequence[float | None], exact: bool,
             out: torch.Tensor | None) -> Any:
    """Nearest modes copy input elements (one gather per axis): exact in every dtype, non-finite values included."""
    osz = [int(s) for s in output_size]
    if x.dim() != nsp + 2 or len(osz) != nsp or not _sizes_ok(osz, x.shape[2:]) or x.is_conj() or x.is_neg():
        return decline("not of the right rank, a zero or mismatched size, or a conjugate/negative view")
    if _bad_out(out, x, osz):
        return decline("out= not a trn tensor of the result's dtype and shape, or overlapping the input")
    y = x
    for a in range(nsp - 1, -1, -1):
        if osz[a] != x.shape[2 + a] or scales[a] is not None:
            y = y.index_select(2 + a, _device_index(x.shape[2 + a], osz[a], scales[a], exact))
    if out is not None:
        out.copy_(y)
        return out
    return y.clone() if y is x else y


def _in_format_of(r: Any, like: Any) -> Any:
    """A result in ``like``'s suggested memory format (channels-last in, channels-last out, as torch's kernels)."""
    if isinstance(r, torch.Tensor) and isinstance(like, torch.Tensor) and r.dim() in (4, 5):
        fmt = suggest_memory_format(like)
        if fmt != torch.contiguous_format and not r.is_contiguous(memory_format=fmt):
            return r.contiguous(memory_format=fmt)
    return r


def _forward(kind: str, nsp: int, x: torch.Tensor, output_size: Sequence[int], align: bool,
             scales: Sequence[float | None], out: torch.Tensor | None = None) -> Any:
    r = _forward_any(kind, nsp, x, output_size, align, scales, out)
    return r if out is not None else _in_format_of(r, x)


def _forward_any(kind: str, nsp: int, x: torch.Tensor, output_size: Sequence[int], align: bool,
                 scales: Sequence[float | None], out: torch.Tensor | None = None) -> Any:
    if kind in ("nearest", "nearest_exact") and isinstance(x, torch.Tensor) and x.device.type == "trn" \
            and x.dtype in NEAREST_DTYPES:
        return _nearest(nsp, x, output_size, scales, kind == "nearest_exact", out)
    if isinstance(x, torch.Tensor) and x.device.type == "trn" and x.dtype == torch.uint8:
        return _forward_u8(kind, nsp, x, output_size, align, scales, out)
    if not _ok(x, nsp + 2) or len(output_size) != nsp or not _sizes_ok(output_size, x.shape[2:]):
        return decline("not a float32/bfloat16/float16 trn tensor of the right rank, or a zero or mismatched size")
    osz = [int(s) for s in output_size]
    shape = (*x.shape[:2], *osz)
    if out is not None and (not _ok(out, nsp + 2) or out.dtype != x.dtype or tuple(out.shape) != shape
                            or not out.is_contiguous() or _overlap(out, x)):
        return decline("out= not a contiguous trn tensor of the result's dtype and shape, or overlapping the input")
    mats = [_mat(kind, x.shape[2 + a], osz[a], align, scales[a]) for a in range(nsp)]
    return apply_axes(x, mats, osz, False, out)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    from stdlib_kernels import _util as U

    return U.overlaps(a, b)


def _backward(kind: str, nsp: int, g: torch.Tensor, output_size: Sequence[int], input_size: Sequence[int],
              align: bool, scales: Sequence[float | None]) -> Any:
    if not _ok(g, nsp + 2) or len(output_size) != nsp or len(input_size) != nsp + 2:
        return decline("not a float32/bfloat16/float16 trn tensor of the right rank, or sizes of the wrong length")
    isz = [int(s) for s in input_size]
    if list(g.shape) != [*isz[:2], *[int(s) for s in output_size]] or not _sizes_ok(output_size, isz[2:]):
        return decline("grad_output's shape does not match the sizes, or a zero size")
    osz = [int(s) for s in output_size]
    mats = [_mat(kind, isz[2 + a], osz[a], align, scales[a]) for a in range(nsp)]
    return _in_format_of(apply_axes(g, mats, isz[2:], True), g)


@lowering("aten::upsample_nearest1d", dtypes=NEAREST_DTYPES)
def upsample_nearest1d(self: torch.Tensor, output_size: Sequence[int], scales: float | None = None, *,
                       out: torch.Tensor | None = None) -> Any:
    """Nearest upsampling of ``[N, C, L]``."""
    return _forward("nearest", 1, self, output_size, False, [scales], out)


@lowering("aten::_upsample_nearest_exact1d", dtypes=NEAREST_DTYPES)
def upsample_nearest_exact1d(self: torch.Tensor, output_size: Sequence[int], scales: float | None = None, *,
                             out: torch.Tensor | None = None) -> Any:
    """Nearest-exact upsampling of ``[N, C, L]``."""
    return _forward("nearest_exact", 1, self, output_size, False, [scales], out)


@lowering("aten::upsample_nearest2d", dtypes=NEAREST_DTYPES)
def upsample_nearest2d(self: torch.Tensor, output_size: Sequence[int], scales_h: float | None = None,
                       scales_w: float | None = None, *, out: torch.Tensor | None = None) -> Any:
    """Nearest upsampling of ``[N, C, H, W]``."""
    return _forward("nearest", 2, self, output_size, False, [scales_h, scales_w], out)


@lowering("aten::_upsample_nearest_exact2d", dtypes=NEAREST_DTYPES)
def upsample_nearest_exact2d(self: torch.Tensor, output_size: Sequence[int], scales_h: float | None = None,
                             scales_w: float | None = None, *, out: torch.Tensor | None = None) -> Any:
    """Nearest-exact upsampling of ``[N, C, H, W]``."""
    return _forward("nearest_exact", 2, self, output_size, False, [scales_h, scales_w], out)


@lowering("aten::upsample_linear1d", dtypes=FWD_DTYPES)
def upsample_linear1d(self: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                      scales: float | None = None, *, out: torch.Tensor | None = None) -> Any:
    """Linear interpolation of ``[N, C, L]``."""
    return _forward("linear", 1, self, output_size, align_corners, [scales], out)


@lowering("aten::upsample_bilinear2d", dtypes=FWD_DTYPES)
def upsample_bilinear2d(self: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                        scales_h: float | None = None, scales_w: float | None = None, *,
                        out: torch.Tensor | None = None) -> Any:
    """Bilinear interpolation of ``[N, C, H, W]``."""
    return _forward("linear", 2, self, output_size, align_corners, [scales_h, scales_w], out)


@lowering("aten::upsample_bicubic2d", dtypes=FWD_DTYPES)
def upsample_bicubic2d(self: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                       scales_h: float | None = None, scales_w: float | None = None, *,
                       out: torch.Tensor | None = None) -> Any:
    """Bicubic interpolation of ``[N, C, H, W]`` (A = -0.75, clamped borders)."""
    return _forward("cubic", 2, self, output_size, align_corners, [scales_h, scales_w], out)


@lowering("aten::upsample_nearest1d_backward", dtypes=DTYPES)
def upsample_nearest1d_backward(grad_output: torch.Tensor, output_size: Sequence[int], input_size: Sequence[int],
                                scales: float | None = None) -> Any:
    """Gradient of :func:`upsample_nearest1d`."""
    return _backward("nearest", 1, grad_output, output_size, input_size, False, [scales])


@lowering("aten::_upsample_nearest_exact1d_backward", dtypes=DTYPES)
def upsample_nearest_exact1d_backward(grad_output: torch.Tensor, output_size: Sequence[int],
                                      input_size: Sequence[int], scales: float | None = None) -> Any:
    """Gradient of :func:`upsample_nearest_exact1d`."""
    return _backward("nearest_exact", 1, grad_output, output_size, input_size, False, [scales])


@lowering("aten::upsample_nearest2d_backward", dtypes=DTYPES)
def upsample_nearest2d_backward(grad_output: torch.Tensor, output_size: Sequence[int], input_size: Sequence[int],
                                scales_h: float | None = None, scales_w: float | None = None) -> Any:
    """Gradient of :func:`upsample_nearest2d`."""
    return _backward("nearest", 2, grad_output, output_size, input_size, False, [scales_h, scales_w])


@lowering("aten::_upsample_nearest_exact2d_backward", dtypes=DTYPES)
def upsample_nearest_exact2d_backward(grad_output: torch.Tensor, output_size: Sequence[int],
                                      input_size: Sequence[int], scales_h: float | None = None,
                                      scales_w: float | None = None) -> Any:
    """Gradient of :func:`upsample_nearest_exact2d`."""
    return _backward("nearest_exact", 2, grad_output, output_size, input_size, False, [scales_h, scales_w])


@lowering("aten::upsample_linear1d_backward", dtypes=DTYPES)
def upsample_linear1d_backward(grad_output: torch.Tensor, output_size: Sequence[int], input_size: Sequence[int],
                               align_corners: bool, scales: float | None = None) -> Any:
    """Gradient of :func:`upsample_linear1d`."""
    return _backward("linear", 1, grad_output, output_size, input_size, align_corners, [scales])


@lowering("aten::upsample_bilinear2d_backward", dtypes=DTYPES)
def upsample_bilinear2d_backward(grad_output: torch.Tensor, output_size: Sequence[int], input_size: Sequence[int],
                                 align_corners: bool, scales_h: float | None = None,
                                 scales_w: float | None = None) -> Any:
    """Gradient of :func:`upsample_bilinear2d`."""
    return _backward("linear", 2, grad_output, output_size, input_size, align_corners, [scales_h, scales_w])


@lowering("aten::upsample_bicubic2d_backward", dtypes=DTYPES)
def upsample_bicubic2d_backward(grad_output: torch.Tensor, output_size: Sequence[int], input_size: Sequence[int],
                                align_corners: bool, scales_h: float | None = None,
                                scales_w: float | None = None) -> Any:
    """Gradient of :func:`upsample_bicubic2d`."""
    return _backward("cubic", 2, grad_output, output_size, input_size, align_corners, [scales_h, scales_w])


@lowering("aten::upsample_nearest3d", dtypes=NEAREST_DTYPES)
def upsample_nearest3d(self: torch.Tensor, output_size: Sequence[int], scales_d: float | None = None,
                       scales_h: float | None = None, scales_w: float | None = None, *,
                       out: torch.Tensor | None = None) -> Any:
    """Nearest upsampling of ``[N, C, D, H, W]``."""
    return _forward("nearest", 3, self, output_size, False, [scales_d, scales_h, scales_w], out)


@lowering("aten::_upsample_nearest_exact3d", dtypes=NEAREST_DTYPES)
def upsample_nearest_exact3d(self: torch.Tensor, output_size: Sequence[int], scales_d: float | None = None,
                             scales_h: float | None = None, scales_w: float | None = None, *,
                             out: torch.Tensor | None = None) -> Any:
    """Nearest-exact upsampling of ``[N, C, D, H, W]``."""
    return _forward("nearest_exact", 3, self, output_size, False, [scales_d, scales_h, scales_w], out)


@lowering("aten::upsample_trilinear3d", dtypes=FWD_DTYPES)
def upsample_trilinear3d(self: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                         scales_d: float | None = None, scales_h: float | None = None, scales_w: float | None = None,
                         *, out: torch.Tensor | None = None) -> Any:
    """Trilinear interpolation of ``[N, C, D, H, W]``."""
    return _forward("linear", 3, self, output_size, align_corners, [scales_d, scales_h, scales_w], out)


@lowering("aten::upsample_nearest3d_backward", dtypes=DTYPES)
def upsample_nearest3d_backward(grad_output: torch.Tensor, output_size: Sequence[int], input_size: Sequence[int],
                                scales_d: float | None = None, scales_h: float | None = None,
                                scales_w: float | None = None) -> Any:
    """Gradient of :func:`upsample_nearest3d`."""
    return _backward("nearest", 3, grad_output, output_size, input_size, False, [scales_d, scales_h, scales_w])


@lowering("aten::_upsample_nearest_exact3d_backward", dtypes=DTYPES)
def upsample_nearest_exact3d_backward(grad_output: torch.Tensor, output_size: Sequence[int],
                                      input_size: Sequence[int], scales_d: float | None = None,
                                      scales_h: float | None = None, scales_w: float | None = None) -> Any:
    """Gradient of :func:`upsample_nearest_exact3d`."""
    return _backward("nearest_exact", 3, grad_output, output_size, input_size, False,
                     [scales_d, scales_h, scales_w])


@lowering("aten::upsample_trilinear3d_backward", dtypes=DTYPES)
def upsample_trilinear3d_backward(grad_output: torch.Tensor, output_size: Sequence[int], input_size: Sequence[int],
                                  align_corners: bool, scales_d: float | None = None, scales_h: float | None = None,
                                  scales_w: float | None = None) -> Any:
    """Gradient of :func:`upsample_trilinear3d`."""
    return _backward("linear", 3, grad_output, output_size, input_size, align_corners,
                     [scales_d, scales_h, scales_w])


@lowering("aten::_upsample_bilinear2d_aa", dtypes=FWD_DTYPES)
def upsample_bilinear2d_aa(self: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                           scales_h: float | None = None, scales_w: float | None = None, *,
                           out: torch.Tensor | None = None) -> Any:
    """Anti-aliased bilinear resampling (``F.interpolate(..., mode="bilinear", antialias=True)``)."""
    return _forward("aa_linear", 2, self, output_size, align_corners, [scales_h, scales_w], out)


@lowering("aten::_upsample_bicubic2d_aa", dtypes=FWD_DTYPES)
def upsample_bicubic2d_aa(self: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                          scales_h: float | None = None, scales_w: float | None = None, *,
                          out: torch.Tensor | None = None) -> Any:
    """Anti-aliased bicubic resampling (``F.interpolate(..., mode="bicubic", antialias=True)``)."""
    return _forward("aa_cubic", 2, self, output_size, align_corners, [scales_h, scales_w], out)


@lowering("aten::_upsample_bilinear2d_aa_backward", dtypes=DTYPES)
def upsample_bilinear2d_aa_backward(grad_output: torch.Tensor, output_size: Sequence[int],
                                    input_size: Sequence[int], align_corners: bool, scales_h: float | None = None,
                                    scales_w: float | None = None) -> Any:
    """Gradient of :func:`upsample_bilinear2d_aa`."""
    return _backward("aa_linear", 2, grad_output, output_size, input_size, align_corners, [scales_h, scales_w])


@lowering("aten::_upsample_bicubic2d_aa_backward", dtypes=DTYPES)
def upsample_bicubic2d_aa_backward(grad_output: torch.Tensor, output_size: Sequence[int],
                                   input_size: Sequence[int], align_corners: bool, scales_h: float | None = None,
                                   scales_w: float | None = None) -> Any:
    """Gradient of :func:`upsample_bicubic2d_aa`."""
    return _backward("aa_cubic", 2, grad_output, output_size, input_size, align_corners, [scales_h, scales_w])
