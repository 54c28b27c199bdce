"""Sampling: ``grid_sample`` (2-D and 3-D, forward and backward); ``embedding_bag`` and ``cdist`` / ``pdist`` live
in :mod:`stdlib_kernels.nn.bags` and :mod:`stdlib_kernels.nn.distance` (imported here, so this family registers them).

``F.grid_sample`` reaches the backend as ``aten::grid_sampler_2d`` / ``grid_sampler_3d`` and their backwards.

Layout: 128 output points on the partitions, channels on the free axis. The input is seen channels-last,
``[N, D*H*W, C]`` (a strided view: spatial positions are rows), so every interpolation tap of a point tile is one
*indirect* DMA of whole channel rows ``inp[n, lin, c-chunk]`` with ``lin`` an int32 ``[128, 1]`` tile of flat
positions computed on chip from the grid: unnormalise, pad (``border`` clips, ``reflection`` folds then clips),
``floor`` / ``round``, and a validity flag per tap (out-of-range taps read a clamped row and are zeroed with
``where``, so they never touch memory outside the input and contribute nothing, as torch's masked gathers do).
The taps of a point tile are ``[128, K]`` tiles (``K`` = 1, 2^d or 16 taps on the free axis, built as outer
combinations of per-axis ``[128, 1|2|4]`` tiles), and the kernels loop over ``K`` with a real loop: the traced
kernel does not grow with the number of taps.

* forward: bilinear (trilinear in 3-D: 2^d corners with products of fractional weights), nearest (round half to
  even, as ``nearbyint``) and bicubic (2-D: 4x4 taps, cubic convolution with ``A = -0.75``; padding applies to
  each tap's integer coordinate).
* backward: the input gradient is a scatter-add of ``g * weight`` through the same taps (an accumulating indirect
  DMA into an fp32 scratch, rounded to the input dtype at the end); the grid gradient sums ``g * value`` over the
  channels (a free-axis reduction) against each tap's weight derivative, times the derivative of unnormalising
  and padding (clipped coordinates have zero gradient, reflected ones flip the sign), as torch's CPU kernel.

Example:
    >>> import torch, torch.nn.functional as F
    >>> x = torch.randn(1, 3, 8, 8, device="trn")                        # doctest: +SKIP
    >>> grid = torch.rand(1, 4, 4, 2, device="trn") * 2 - 1              # doctest: +SKIP
    >>> F.grid_sample(x, grid, align_corners=False).shape                 # doctest: +SKIP
    torch.Size([1, 3, 4, 4])
"""

from __future__ import annotations

from typing import Any

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels.tiling import col_chunks, row_tiles
from trnlang.device import decline, lowering

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_CH = 512  # channels per gathered row chunk
_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2
_A = -0.75  # the cubic convolution coefficient torch uses


# ------------------------------------------------------------------------------------------ coordinate math (traced)
def _unnormalize(c: Any, size: int, align: bool) -> tuple[Any, float]:
    """Grid coordinate in [-1, 1] -> pixel coordinate, and d(pixel)/d(grid)."""
    if align:
        f = (size - 1) / 2.0
        return (c + 1.0) * f, f
    f = size / 2.0
    return (c + 1.0) * f - 0.5, f


def _clip(c: Any, size: int) -> tuple[Any, Any]:
    """``clip(c, 0, size - 1)`` and its gradient (0 at and beyond the borders, as torch)."""
    hi = float(size - 1)
    r = tl.minimum(tl.maximum(c, 0.0), hi)
    return r, tl.where((c > 0.0) & (c < hi), 1.0, 0.0)


def _reflect(c: Any, twice_low: int, twice_high: int) -> tuple[Any, Any]:
    """Fold ``c`` into ``[twice_low / 2, twice_high / 2]`` (torch's ``reflect_coordinates``) and its gradient (+-1)."""
    if twice_low == twice_high:
        return c * 0.0, c * 0.0
    mn = twice_low / 2.0
    span = (twice_high - twice_low) / 2.0
    d = c - mn
    sgn = tl.where(d < 0.0, -1.0, 1.0)
    a = tl.abs(d)
    extra = tl.fmod(a, span)
    flips = tl.floor(a / span)
    odd = tl.fmod(flips, 2.0) != 0.0
    return tl.where(odd, span - extra + mn, extra + mn), tl.where(odd, -sgn, sgn)


def _pad(c: Any, size: int, pad: int, align: bool) -> tuple[Any, Any]:
    """Torch's ``compute_coordinates`` (with gradient; None for the identity)."""
    if pad == _BORDER:
        return _clip(c, size)
    if pad == _REFLECTION:
        r, g1 = _reflect(c, 0, 2 * (size - 1)) if align else _reflect(c, -1, 2 * size - 1)
        r, g2 = _clip(r, size)
        return r, g1 * g2
    return c, None


def _combine(tiles: list[Any], op: str) -> Any:
    """Outer combination of per-axis ``[P, k_a]`` tiles (x first) into ``[P, prod k]`` (x fastest)."""
    out = tiles[0]
    for t in tiles[1:]:
        k_in, k_t = out.shape[1], t.shape[1]
        a, b = tl.expand_dims(t, 2), tl.expand_dims(out, 1)
        r = a * b if op == "*" else a + b
        out = tl.reshape(r, (r.shape[0], k_t * k_in))
    return out


class _Taps:
    """The taps of a point tile as ``[P, K]`` tiles (taps on the free axis, x fastest): flat input rows ``lin``
    (int32), ``ok`` (1.0 where the tap is inside the input), weights ``w`` (None: nearest) and, per axis,
    d(weight)/d(pixel coordinate) ``dw``; ``mult``: per axis d(pixel)/d(grid) (0 where padding clipped)."""

    def __init__(self, lin: Any, ok: Any, w: Any, dw: list[Any], mult: list[Any]) -> None:
        self.lin, self.ok, self.w, self.dw, self.mult = lin, ok, w, dw, mult
        self.k = lin.shape[1]


def _axis_index(c: Any, size: int, stride: int) -> tuple[Any, Any]:
    """Integer-valued float coordinates ``c [P, k]`` -> (row offsets ``* stride`` as int32, 1.0 where in range)."""
    ok = (c >= 0.0) & (c < float(size))
    ci = tl.where(ok, c, 0.0).astype(tl.int32)
    return (ci * stride if stride != 1 else ci), tl.where(ok, 1.0, 0.0)


def _taps(coords: list[Any], rows: Any, sizes: list[int], mode: int, pad: int, align: bool) -> _Taps:
    """Per axis: the tap coordinates (``[P, 1|2|4]``), their weights and derivatives; combined over the axes."""
    nk = {_NEAREST: 1, _BILINEAR: 2, _BICUBIC: 4}[mode]
    offs = isa.iota(tl.arange(nk)[None, :] + 0 * rows, tl.float32) - (1.0 if mode == _BICUBIC else 0.0)
    lins, oks, ws, dws, mult = [], [], [], [], []
    stride = 1
    for c, sz in zip(coords, sizes):
        p, f = _unnormalize(c, sz, align)
        if mode != _BICUBIC:  # bicubic pads every tap's integer coordinate instead of the point
            p, g = _pad(p, sz, pad, align)
            f = f if g is None else g * f
        mult.append(f)
        if mode == _NEAREST:
            idx = tl.round(p)
        else:
            lo = tl.floor(p)
            t = p - lo
            idx = lo + offs
            if mode == _BILINEAR:
                ws.append(tl.where(offs == 1.0, t, 1.0 - t))
                dws.append(tl.where(offs == 1.0, 1.0, -1.0))
            else:
                idx, _ = _pad(idx, sz, pad, align)
                inner = (offs == 0.0) | (offs == 1.0)
                d = tl.abs(t - offs)  # the distance to each tap: t + 1, t, 1 - t, 2 - t
                c1 = ((d * (_A + 2.0) - (_A + 3.0)) * d) * d + 1.0
                c2 = ((d * _A - 5.0 * _A) * d + 8.0 * _A) * d - 4.0 * _A
                ws.append(tl.where(inner, c1, c2))
                e = offs - t  # torch's get_cubic_coefficients_grad arguments: -1 - t, -t, 1 - t, 2 - t
                sg = tl.where(offs >= 1.0, 1.0, -1.0)
                g_in = (e * sg * (3.0 * (_A + 2.0)) - 2.0 * (_A + 3.0)) * e
                g_out = (e * sg * (3.0 * _A) - 10.0 * _A) * e + sg * (8.0 * _A)
                dws.append(-tl.where(inner, g_in, g_out))  # torch accumulates ``gix -= val * coeff_grad * ...``
        li, ok = _axis_index(idx, sz, stride)
        lins.append(li)
        oks.append(ok)
        stride *= sz
    lin, ok = _combine(lins, "+"), _combine(oks, "*")
    if mode == _NEAREST:
        return _Taps(lin, ok, None, [], mult)
    w = _combine(ws, "*")
    dw = [_combine([dws[b] if b == a else ws[b] for b in range(len(ws))], "*") for a in range(len(ws))]
    return _Taps(lin, ok, w, dw, mult)


def _load_coords(grid: Any, n: Any, rows: Any, mr: Any) -> list[Any]:
    one = tl.arange(1)[None, :]
    return [tl.load(grid[n, rows, one + a], mask=mr).astype(tl.float32) for a in range(grid.shape[2])]


def _gather(inp: Any, n: Any, taps: _Taps, k: Any, cols: Any, m: Any) -> Any:
    """Tap ``k``'s rows of channels ``[P, f]`` (fp32), zero where the tap is outside the input."""
    v = tl.load(inp[n, taps.lin[:, k:k + 1], cols], mask=m).astype(tl.float32)
    return tl.where(taps.ok[:, k:k + 1] != 0.0, v, 0.0)


# ------------------------------------------------------------------------------------------ kernels
@trn.kernel
def grid_sample_fwd(inp, grid, out, sizes, mode, pad, align):
    """``out[n, q, c] = sum_taps w * inp[n, lin, c]`` for ``inp [N, S, C]`` (channels-last view), ``grid [N, Q, d]``,
    ``out [N, Q, C]``; ``sizes = "W,H(,D)"``. Taps are a real loop over the ``[P, K]`` tap tiles."""
    n_dim, q_dim, _ = grid.shape
    c_dim = inp.shape[2]
    szs = [int(v) for v in sizes.split(",")]
    for n in tl.affine_range(n_dim):
        for rows, mr in row_tiles(q_dim):
            taps = _taps(_load_coords(grid, n, rows, mr), rows, szs, mode, pad, align)
            for cols, m in col_chunks(c_dim, _CH, mr):
                acc = tl.zeros((rows.shape[0], cols.shape[1]), tl.float32)
                for k in tl.sequential_range(taps.k):
                    v = _gather(inp, n, taps, k, cols, m)
                    acc[...] = acc + (v if taps.w is None else v * taps.w[:, k:k + 1])
                tl.store(out[n, rows, cols], acc, mask=m)


@trn.kernel
def grid_sample_bwd(g, inp, grid, ginp, ggrid, sizes, mode, pad, align):
    """Gradients of :func:`grid_sample_fwd`: ``ginp [N, S, C]`` (fp32, zeroed; None to skip) gets ``g * w`` added
    through every tap; ``ggrid [N, Q, d]`` (None to skip) gets ``mult * sum_taps dw * sum_c g * v``."""
    n_dim, q_dim, nd = grid.shape
    c_dim = inp.shape[2]
    szs = [int(v) for v in sizes.split(",")]
    one = tl.arange(1)[None, :]
    need_grid = ggrid is not None and mode != _NEAREST
    for n in tl.affine_range(n_dim):
        for rows, mr in row_tiles(q_dim):
            taps = _taps(_load_coords(grid, n, rows, mr), rows, szs, mode, pad, align)
            sums = tl.zeros((rows.shape[0], taps.k), tl.float32) if need_grid else None  # per tap: sum_c g * v
            for cols, m in col_chunks(c_dim, _CH, mr, loop=tl.sequential_range):
                gt = tl.load(g[n, rows, cols], mask=m).astype(tl.float32)
                for k in tl.sequential_range(taps.k):
                    if ginp is not None:
                        gw = gt if taps.w is None else gt * taps.w[:, k:k + 1]
                        tl.store(ginp[n, taps.lin[:, k:k + 1], cols], tl.where(taps.ok[:, k:k + 1] != 0.0, gw, 0.0),
                                 mask=m, accumulate="add")
                    if need_grid:
                        v = _gather(inp, n, taps, k, cols, m)
                        sums[:, k:k + 1] = sums[:, k:k + 1] + tl.sum(v * gt, axis=1, keepdims=True)
            if ggrid is not None:
                for a in range(nd):
                    if need_grid:
                        val = tl.sum(sums * taps.dw[a], axis=1, keepdims=True) * taps.mult[a]
                    else:
                        val = tl.zeros((rows.shape[0], 1), tl.float32)
                    tl.store(ggrid[n, rows, one + a], val, mask=mr)


# ------------------------------------------------------------------------------------------ host side
def _ok(*ts: Any) -> bool:
    return all(isinstance(t, torch.Tensor) and t.device.type == "trn" and t.dtype in DTYPES and not t.is_conj()
               and not t.is_neg() for t in ts) and len({t.dtype for t in ts}) == 1


def _meta(fn: Any, *args: Any) -> Any:
    try:
        return fn(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
    except Exception:  # noqa: BLE001 - declined: the CPU raises torch's own error
        return None


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    """``[N, C, *spatial]`` (contiguous) as ``[N, S, C]`` rows of channels."""
    n, c = t.shape[0], t.shape[1]
    s = t.numel() // max(1, n * c)
    return torch.as_strided(t, (n, s, c), (c * s, 1, s), t.storage_offset())


def _plan(input: Any, grid: Any, nd: int, mode: int, pad: int) -> tuple[torch.Tensor, torch.Tensor, str] | None:
    if not _ok(input, grid) or input.dim() != nd + 2 or grid.dim() != nd + 2 or grid.shape[-1] != nd:
        return None
    if mode not in (_BILINEAR, _NEAREST, _BICUBIC) or pad not in (_ZEROS, _BORDER, _REFLECTION):
        return None
    if mode == _BICUBIC and nd != 2:
        return None
    sizes = ",".join(str(s) for s in reversed(input.shape[2:]))
    g = grid.contiguous()
    return input.contiguous(), g.view(g.shape[0], -1, nd), sizes


def _forward(input: Any, grid: Any, mode: int, pad: int, align: bool, nd: int, op: Any) -> Any:
    if _meta(op, input, grid, mode, pad, align) is None:
        return decline("invalid arguments: torch raises")
    plan = _plan(input, grid, nd, mode, pad)
    if plan is None:
        return decline("not float32/bf16 trn tensors of one dtype, a bad grid shape, unknown mode/padding, 3-D bicubic")
    x, g, sizes = plan
    out = torch.empty((input.shape[0], input.shape[1], *grid.shape[1:-1]), dtype=input.dtype, device="trn")
    if out.numel() == 0:
        return out
    if x.numel() == 0:
        return out.zero_()
    grid_sample_fwd(_channels_last(x), g, _channels_last(out), sizes, mode, pad, bool(align))
    return out


def _backward(grad_output: Any, input: Any, grid: Any, mode: int, pad: int, align: bool, output_mask: Any, nd: int,
              op: Any) -> Any:
    if _meta(op, grad_output, input, grid, mode, pad, align, output_mask) is None or not _ok(grad_output, input):
        return decline("invalid arguments (torch raises), or not float32/bfloat16/float16 trn tensors of one dtype")
    plan = _plan(input, grid, nd, mode, pad)
    if plan is None:
        return decline("not float32/bf16 trn tensors of one dtype, a bad grid shape, unknown mode/padding, 3-D bicubic")
    x, g, sizes = plan
    want_in, want_grid = bool(output_mask[0]), bool(output_mask[1])
    gin = torch.zeros(input.shape, dtype=torch.float32, device="trn") if want_in else None
    ggrid = torch.empty(grid.shape, dtype=grid.dtype, device="trn") if want_grid else None
    if grad_output.numel() and x.numel():
        go = grad_output.contiguous()
        grid_sample_bwd(_channels_last(go), _channels_last(x), g, _channels_last(gin) if gin is not None else None,
                        ggrid.view(g.shape) if ggrid is not None else None, sizes, mode, pad, bool(align))
    elif ggrid is not None:
        ggrid.zero_()
    gi = gin.to(input.dtype) if gin is not None and input.dtype != torch.float32 else gin
    return gi, ggrid


@lowering("aten::grid_sampler_2d", dtypes=DTYPES)
def grid_sampler_2d(input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> Any:
    """``F.grid_sample`` on 4-D inputs: bilinear / nearest / bicubic, zeros / border / reflection padding."""
    return _forward(input, grid, interpolation_mode, padding_mode, align_corners, 2,
                    torch.ops.aten.grid_sampler_2d.default)


@lowering("aten::grid_sampler_3d", dtypes=DTYPES)
def grid_sampler_3d(input: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> Any:
    """``F.grid_sample`` on 5-D inputs: trilinear / nearest, zeros / border / reflection padding."""
    return _forward(input, grid, interpolation_mode, padding_mode, align_corners, 3,
                    torch.ops.aten.grid_sampler_3d.default)


@lowering("aten::grid_sampler_2d_backward", dtypes=DTYPES)
def grid_sampler_2d_backward(grad_output: torch.Tensor, input: torch.Tensor, grid: torch.Tensor,
                             interpolation_mode: int, padding_mode: int, align_corners: bool,
                             output_mask: Any) -> Any:
    """``(grad_input, grad_grid)`` of 2-D grid sampling, as ``output_mask`` asks."""
    return _backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask, 2,
                     torch.ops.aten.grid_sampler_2d_backward.default)


@lowering("aten::grid_sampler_3d_backward", dtypes=DTYPES)
def grid_sampler_3d_backward(grad_output: torch.Tensor, input: torch.Tensor, grid: torch.Tensor,
                             interpolation_mode: int, padding_mode: int, align_corners: bool,
                             output_mask: Any) -> Any:
    """``(grad_input, grad_grid)`` of 3-D grid sampling, as ``output_mask`` asks."""
    return _backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask, 3,
                     torch.ops.aten.grid_sampler_3d_backward.default)


from stdlib_kernels.nn import bags as _bags  # noqa: E402,F401 - embedding_bag registers with this family
from stdlib_kernels.nn import distance as _distance  # noqa: E402,F401 - cdist/pdist register with this family
