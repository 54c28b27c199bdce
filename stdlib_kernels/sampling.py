"""Sampling: ``grid_sample`` (2-D and 3-D, forward and backward); ``embedding_bag`` and ``cdist`` / ``pdist`` live
in :mod:`stdlib_kernels.bags` and :mod:`stdlib_kernels.distance` (imported here, so this family registers them).

``F.grid_sample`` reaches the backend as ``aten::grid_sampler_2d`` / ``grid_sampler_3d`` and their backwards.

Layout: 128 output points on the partitions, channels on the free axis. The input is seen channels-last,
``[N, D*H*W, C]`` (a strided view: spatial positions are rows), so every interpolation tap of a point tile is one
*indirect* DMA of whole channel rows ``inp[n, lin, c-chunk]`` with ``lin`` an int32 ``[128, 1]`` tile of flat
positions computed on chip from the grid: unnormalise, pad (``border`` clips, ``reflection`` folds then clips),
``floor`` / ``round``, and a validity predicate per tap (out-of-range taps read a clamped row and are zeroed with
``where``, so they never touch memory outside the input and contribute nothing, as torch's masked gathers do).

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
from stdlib_kernels import _util as U
from trnlang.device import lowering

DTYPES = (torch.float32, torch.bfloat16)
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
    pp = min(128, q_dim)
    f = min(c_dim, _CH)
    for n in tl.affine_range(n_dim):
        for qt in tl.affine_range(tl.cdiv(q_dim, pp)):
            rows = qt * pp + tl.arange(pp)[:, None]
            mr = rows < q_dim
            taps = _taps(_load_coords(grid, n, rows, mr), rows, szs, mode, pad, align)
            for cc in tl.affine_range(tl.cdiv(c_dim, f)):
                cols = cc * f + tl.arange(f)[None, :]
                m = mr & (cols < c_dim)
                acc = tl.zeros((pp, f), tl.float32)
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
    pp = min(128, q_dim)
    f = min(c_dim, _CH)
    one = tl.arange(1)[None, :]
    need_grid = ggrid is not None and mode != _NEAREST
    for n in tl.affine_range(n_dim):
        for qt in tl.affine_range(tl.cdiv(q_dim, pp)):
            rows = qt * pp + tl.arange(pp)[:, None]
            mr = rows < q_dim
            taps = _taps(_load_coords(grid, n, rows, mr), rows, szs, mode, pad, align)
            sums = tl.zeros((pp, taps.k), tl.float32) if need_grid else None  # per tap: sum_c g * v
            for cc in tl.sequential_range(tl.cdiv(c_dim, f)):
                cols = cc * f + tl.arange(f)[None, :]
                m = mr & (cols < c_dim)
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
                        val = tl.zeros((pp, 1), tl.float32)
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
        return NotImplemented
    plan = _plan(input, grid, nd, mode, pad)
    if plan is None:
        return NotImplemented
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
        return NotImplemented
    plan = _plan(input, grid, nd, mode, pad)
    if plan is None:
        return NotImplemented
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


# ------------------------------------------------------------------------------------------ embedding_bag
_MAX_OFFSETS = 16384  # offsets checked in one SBUF row
_SUM, _MEAN, _MAX = 0, 1, 2


@trn.kernel
def bag_ids(offs, lo, hi, o2b, bad, n_bags, num_weights, last):
    """``o2b[i] = #{b < n_bags: offs[b] <= i} - 1`` (the bag of index position ``i``, ``o2b [L, 1]``) for offsets
    ``offs [1, n_off]``. ``bad [L + 1, 1]``: row ``i`` is 1.0 when index ``i`` (low/high int32 words ``lo``/``hi``
    ``[L, 1]``; ``hi`` None for int32 indices) is outside ``[0, num_weights)``; row ``L`` when the offsets are not a
    partition of ``[0, L)`` (first 0, non-decreasing, at most ``L``; ``last``: the last offset must be ``L``)."""
    n_off = offs.shape[1]
    l_dim = o2b.shape[0]
    one = tl.arange(1)[None, :]
    ot = tl.load(offs[0:1, tl.arange(n_off)[None, :]]).astype(tl.float32)
    flag = tl.maximum(tl.where(ot[:, 0:1] != 0.0, 1.0, 0.0),
                      tl.max(tl.where(ot > float(l_dim), 1.0, 0.0), axis=1, keepdims=True))
    if n_off > 1:
        flag = tl.maximum(flag, tl.max(tl.where(ot[:, 1:n_off] < ot[:, 0:n_off - 1], 1.0, 0.0), axis=1,
                                       keepdims=True))
    if last:
        flag = tl.maximum(flag, tl.where(ot[:, n_off - 1:n_off] != float(l_dim), 1.0, 0.0))
    tl.store(bad[l_dim:l_dim + 1, one], flag)
    if l_dim == 0:
        return
    pp = min(128, l_dim)
    obag = tl.broadcast_to(ot[:, 0:n_bags], (pp, n_bags))
    for i in tl.affine_range(tl.cdiv(l_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        m = rows < l_dim
        cnt = tl.sum(tl.where(obag <= isa.iota(rows, tl.float32), 1.0, 0.0), axis=1, keepdims=True)
        tl.store(o2b[rows, one], (cnt - 1.0).astype(tl.int32), mask=m)
        li = tl.load(lo[rows, one], mask=m)
        ok = (li >= 0) & (li < num_weights)
        if hi is not None:
            ok = ok & (tl.load(hi[rows, one], mask=m) == 0)
        tl.store(bad[rows, one], tl.where(ok, 0.0, 1.0), mask=m)


@trn.kernel
def bag_reduce(w, idx, o2b, psw, acc, cnt, pad, mode):
    """Per index position ``i`` (partitions): row ``w[idx[i]]`` (times ``psw[i]``) accumulated into ``acc [B, D]``
    (fp32) at bag ``o2b[i]`` (``add``, or ``max`` for mode max); ``cnt [B, 1] += (idx[i] != pad)``. Positions of the
    padding index contribute nothing."""
    l_dim = idx.shape[0]
    d_dim = w.shape[1]
    pp = min(128, l_dim)
    f = min(d_dim, _CH)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(l_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        m1 = rows < l_dim
        li = tl.load(idx[rows, one], mask=m1, other=0)
        bi = tl.load(o2b[rows, one], mask=m1, other=0)
        live = li != pad
        sc = tl.load(psw[rows, one], mask=m1).astype(tl.float32) if psw is not None else None
        tl.store(cnt[bi, one], tl.where(live, 1.0, 0.0), mask=m1, accumulate="add")
        for j in tl.affine_range(tl.cdiv(d_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = m1 & (cols < d_dim)
            v = tl.load(w[li, cols], mask=m).astype(tl.float32)
            if mode == _MAX:
                tl.store(acc[bi, cols], tl.where(live, v, -float("inf")), mask=m, accumulate="max")
            else:
                if sc is not None:
                    v = v * sc
                tl.store(acc[bi, cols], tl.where(live, v, 0.0), mask=m, accumulate="add")


@trn.kernel
def bag_argmax(w, idx, o2b, acc, first, pad):
    """Mode max: ``first[b, d] = min{i in bag b: w[idx[i], d] == acc[b, d]}`` (torch keeps the first maximum):
    an accumulating ``min`` store of candidate positions (``first`` starts at ``L``)."""
    l_dim = idx.shape[0]
    d_dim = w.shape[1]
    pp = min(128, l_dim)
    f = min(d_dim, _CH)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(l_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        m1 = rows < l_dim
        li = tl.load(idx[rows, one], mask=m1, other=0)
        bi = tl.load(o2b[rows, one], mask=m1, other=0)
        pos = isa.iota(rows, tl.float32)
        for j in tl.affine_range(tl.cdiv(d_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = m1 & (cols < d_dim)
            v = tl.load(w[li, cols], mask=m).astype(tl.float32)
            best = tl.load(acc[bi, cols], mask=m)
            cand = tl.where((v == best) & (li != pad), pos, float(l_dim))
            tl.store(first[bi, cols], cand, mask=m, accumulate="min")


@trn.kernel
def bag_finish(acc, cnt, first, idx3, out, bag_size, max_idx, mode):
    """``out [B, D]`` from the fp32 accumulator: sum, mean (``/ count``; 0 for empty bags) or max (0 for empty
    bags); ``bag_size [B, 1]`` (counts; zeros for sum); ``max_idx``: ``[B, D]`` indices of the first maximum
    (``idx3``: the indices as ``[1, L, D]`` with stride 0 along D) or ``[B, 1]`` (a copy of ``bag_size``)."""
    b_dim, d_dim = acc.shape
    pp = min(128, b_dim)
    f = min(d_dim, _CH)
    one = tl.arange(1)[None, :]
    low = out.dtype if out.dtype != tl.float32 else None
    for i in tl.affine_range(tl.cdiv(b_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        m1 = rows < b_dim
        c = tl.load(cnt[rows, one], mask=m1)
        size = c if mode != _SUM else c * 0.0
        tl.store(bag_size[rows, one], size.astype(tl.int32), mask=m1)
        if mode != _MAX:
            tl.store(max_idx[rows, one], size.astype(tl.int32), mask=m1)
        for j in tl.affine_range(tl.cdiv(d_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = m1 & (cols < d_dim)
            s = tl.load(acc[rows, cols], mask=m)
            if mode == _MEAN:
                if low is not None:  # torch rounds the sum to the output dtype before dividing
                    s = s.astype(low).astype(tl.float32)
                s = tl.where(c > 0.0, s / tl.maximum(c, 1.0), 0.0)
            elif mode == _MAX:
                s = tl.where(c > 0.0, s, 0.0)
                fi = tl.load(first[rows, cols], mask=m)
                at = tl.where(c > 0.0, fi, 0.0).astype(tl.int32)
                mi = tl.load(idx3[0, at, cols], mask=m)
                tl.store(max_idx[rows, cols], tl.where(c > 0.0, mi, 0), mask=m)
            tl.store(out[rows, cols], s, mask=m)


@trn.kernel
def bag_backward(g, idx, o2b, psw, bsz, freq, gw, pad, mode):
    """Sum/mean gradient: ``gw[idx[i]] += g[o2b[i]] * psw[i] / bag_size[o2b[i]] / freq[idx[i]]`` (the factors
    that apply), nothing for the padding index. ``gw [V, D]`` fp32, zeroed."""
    l_dim = idx.shape[0]
    d_dim = g.shape[1]
    pp = min(128, l_dim)
    f = min(d_dim, _CH)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(l_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        m1 = rows < l_dim
        li = tl.load(idx[rows, one], mask=m1, other=0)
        bi = tl.load(o2b[rows, one], mask=m1, other=0)
        sc = tl.where(li != pad, 1.0, 0.0)
        if freq is not None:
            sc = sc / tl.maximum(tl.load(freq[li, one], mask=m1), 1.0)
        if mode == _MEAN:
            sc = sc / tl.maximum(tl.load(bsz[bi, one], mask=m1).astype(tl.float32), 1.0)
        if psw is not None:
            sc = sc * tl.load(psw[rows, one], mask=m1).astype(tl.float32)
        for j in tl.affine_range(tl.cdiv(d_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = m1 & (cols < d_dim)
            gv = tl.load(g[bi, cols], mask=m).astype(tl.float32)
            tl.store(gw[li, cols], gv * sc, mask=m, accumulate="add")


@trn.kernel
def bag_backward_max(g, mi, bsz, gw):
    """Max gradient: ``gw[mi[b, d], d] += g[b, d]`` for non-empty bags (``gw [1, V, D]`` view, fp32, zeroed)."""
    b_dim, d_dim = g.shape
    pp = min(128, b_dim)
    f = min(d_dim, _CH)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(b_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        m1 = rows < b_dim
        ne = tl.load(bsz[rows, one], mask=m1) > 0
        for j in tl.affine_range(tl.cdiv(d_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = m1 & (cols < d_dim)
            at = tl.where(ne, tl.load(mi[rows, cols], mask=m), 0)
            gv = tl.where(ne, tl.load(g[rows, cols], mask=m).astype(tl.float32), 0.0)
            tl.store(gw[0, at, cols], gv, mask=m, accumulate="add")


@trn.kernel
def bag_psw_backward(g, w, idx, o2b, out, pad):
    """``out[i] = <g[o2b[i]], w[idx[i]]>`` (0 for the padding index): the per-sample-weight gradient."""
    l_dim = idx.shape[0]
    d_dim = w.shape[1]
    pp = min(128, l_dim)
    f = min(d_dim, _CH)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(l_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        m1 = rows < l_dim
        li = tl.load(idx[rows, one], mask=m1, other=0)
        bi = tl.load(o2b[rows, one], mask=m1, other=0)
        acc = tl.zeros((pp, 1), tl.float32)
        for j in tl.sequential_range(tl.cdiv(d_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = m1 & (cols < d_dim)
            gv = tl.load(g[bi, cols], mask=m).astype(tl.float32)
            wv = tl.load(w[li, cols], mask=m).astype(tl.float32)
            acc[...] = acc + tl.sum(gv * wv, axis=1, keepdims=True)
        tl.store(out[rows, one], tl.where(li != pad, acc, 0.0), mask=m1)


def _words(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A 1-D index tensor as ``[L, 1]`` int32 views of its low and high words (high: None for int32)."""
    n = t.shape[0]
    if t.dtype == torch.int32:
        return torch.as_strided(t, (n, 1), (t.stride(0), 1), t.storage_offset()), None
    base = torch.as_strided(t, (max(1, t.untyped_storage().nbytes() // 8),), (1,), 0).view(torch.int32)
    st, off = 2 * t.stride(0), 2 * t.storage_offset()
    return torch.as_strided(base, (n, 1), (st, 1), off), torch.as_strided(base, (n, 1), (st, 1), off + 1)


def _col(t: torch.Tensor) -> torch.Tensor:
    """A 1-D tensor as an ``[n, 1]`` view."""
    return torch.as_strided(t, (t.shape[0], 1), (t.stride(0), 1), t.storage_offset())


def _bag_plan(weight: Any, indices: Any, offsets: Any, include_last_offset: bool) -> Any:
    """``(B, offset2bag [L] int64)`` after validating on the device, or None to decline (bad input: the CPU raises
    torch's error; unusual layouts: the CPU runs them)."""
    if not (_ok(weight) and weight.dim() == 2 and isinstance(indices, torch.Tensor) and U.is_trn(indices)
            and isinstance(offsets, torch.Tensor) and U.is_trn(offsets) and indices.dim() == 1 and offsets.dim() == 1
            and indices.dtype in (torch.int64, torch.int32) and offsets.dtype in (torch.int64, torch.int32)):
        return None
    n_off = offsets.shape[0]
    n_bags = n_off - 1 if include_last_offset else n_off
    if n_off == 0 or n_off > _MAX_OFFSETS or n_bags <= 0 or weight.shape[0] >= 2 ** 31:
        return None
    l_dim = indices.shape[0]
    o2b = torch.empty((l_dim,), dtype=torch.int64, device="trn")
    bad = torch.empty((l_dim + 1, 1), dtype=torch.float32, device="trn")
    lo, hi = _words(indices)
    bag_ids(offsets.view(1, n_off) if offsets.is_contiguous() else offsets.contiguous().view(1, n_off), lo, hi,
            _col(o2b), bad, n_bags, int(weight.shape[0]), bool(include_last_offset))
    if bad.sum().item() > 0:
        return None
    return n_bags, o2b


def _embedding_bag_impl(weight: Any, indices: Any, offsets: Any, scale_grad_by_freq: bool, mode: int, sparse: bool,
                        per_sample_weights: Any, include_last_offset: bool, padding_idx: int) -> Any:
    if mode not in (_SUM, _MEAN, _MAX) or (per_sample_weights is not None and mode != _SUM):
        return NotImplemented
    if per_sample_weights is not None and (not _ok(weight, per_sample_weights) or per_sample_weights.dim() != 1
                                           or per_sample_weights.shape[0] != indices.shape[0]):
        return NotImplemented
    plan = _bag_plan(weight, indices, offsets, include_last_offset)
    if plan is None:
        return NotImplemented
    n_bags, o2b = plan
    v, d = weight.shape
    l_dim = indices.shape[0]
    pad = int(padding_idx) if padding_idx is not None and 0 <= padding_idx < v else -1
    acc = torch.full((n_bags, d), -float("inf") if mode == _MAX else 0.0, dtype=torch.float32, device="trn")
    cnt = torch.zeros((n_bags, 1), dtype=torch.float32, device="trn")
    out = torch.empty((n_bags, d), dtype=weight.dtype, device="trn")
    bag_size = torch.empty((n_bags,), dtype=torch.int64, device="trn")
    max_idx = torch.empty((n_bags, d) if mode == _MAX else (n_bags,), dtype=torch.int64, device="trn")
    idx_c = _col(indices)
    first = None
    if l_dim and d:
        bag_reduce(weight, idx_c, _col(o2b), _col(per_sample_weights) if per_sample_weights is not None else None,
                   acc, cnt, pad, mode)
        if mode == _MAX:
            first = torch.full((n_bags, d), float(l_dim), dtype=torch.float32, device="trn")
            bag_argmax(weight, idx_c, _col(o2b), acc, first, pad)
    if d:
        idx3 = torch.as_strided(indices, (1, max(l_dim, 1), d), (0, indices.stride(0), 0), indices.storage_offset())
        bag_finish(acc, cnt, first if first is not None else acc, idx3, out, _col(bag_size),
                   max_idx if mode == _MAX else _col(max_idx), mode)
    else:
        bag_size.zero_()
        max_idx.zero_()
    if mode == _SUM and pad < 0:  # torch's fast sum path returns no offset2bag
        o2b = torch.empty((0,), dtype=torch.int64, device="trn")
    return out, o2b, bag_size, max_idx


@lowering("aten::_embedding_bag", dtypes=None)
def embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, scale_grad_by_freq: bool = False,
                  mode: int = 0, sparse: bool = False, per_sample_weights: torch.Tensor | None = None,
                  include_last_offset: bool = False, padding_idx: int = -1) -> Any:
    """``F.embedding_bag``: sum / mean / max of gathered weight rows per bag -> (output, offset2bag, bag_size,
    max_indices), the auxiliary outputs as torch's CPU kernel makes them."""
    return _embedding_bag_impl(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                               include_last_offset, padding_idx)


@lowering("aten::_embedding_bag_forward_only", dtypes=None)
def embedding_bag_forward_only(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                               scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                               per_sample_weights: torch.Tensor | None = None, include_last_offset: bool = False,
                               padding_idx: int = -1) -> Any:
    """``F.embedding_bag`` without autograd (the same kernels)."""
    return _embedding_bag_impl(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                               include_last_offset, padding_idx)


def _dense_backward(grad: Any, indices: Any, offsets: Any, offset2bag: Any, bag_size: Any, maximum_indices: Any,
                    num_weights: int, scale_grad_by_freq: bool, mode: int, per_sample_weights: Any,
                    padding_idx: int) -> Any:
    if not (_ok(grad) and grad.dim() == 2 and U.is_trn(indices) and indices.dim() == 1
            and indices.dtype in (torch.int64, torch.int32) and U.is_trn(bag_size)) or mode not in (0, 1, 2):
        return NotImplemented
    b, d = grad.shape
    v = int(num_weights)
    l_dim = indices.shape[0]
    gw = torch.zeros((v, d), dtype=torch.float32, device="trn")
    pad = int(padding_idx) if padding_idx is not None and 0 <= padding_idx < v else -1
    if mode == _MAX:
        if not (U.is_trn(maximum_indices) and maximum_indices.shape == grad.shape and bag_size.shape[0] == b):
            return NotImplemented
        if b and d:
            try:
                bag_backward_max(grad, maximum_indices, _col(bag_size), gw.view(1, v, d))
            except trn.BoundsError:
                return NotImplemented
        return gw.to(grad.dtype)
    if offset2bag is None or offset2bag.numel() != l_dim:  # torch's fast sum path left it empty: recompute
        if offsets is None:
            return NotImplemented
        plan = _bag_plan(grad.new_empty((v, 1)), indices, offsets, offsets.shape[0] == b + 1)
        if plan is None:
            return NotImplemented
        offset2bag = plan[1]
    if per_sample_weights is not None and (not _ok(grad, per_sample_weights) or per_sample_weights.numel() != l_dim):
        return NotImplemented
    freq = None
    idx_c = _col(indices)
    if scale_grad_by_freq and l_dim:
        freq = torch.zeros((v, 1), dtype=torch.float32, device="trn")
        ones = torch.ones((l_dim, 1), dtype=torch.float32, device="trn")
        try:
            _count_rows(idx_c, ones, freq)
        except trn.BoundsError:
            return NotImplemented
    if l_dim and d:
        try:
            bag_backward(grad, idx_c, _col(offset2bag), _col(per_sample_weights) if per_sample_weights is not None
                         else None, _col(bag_size), freq, gw, pad, mode)
        except trn.BoundsError:
            return NotImplemented
    return gw.to(grad.dtype)


@trn.kernel
def _count_rows(idx, ones, freq):
    """``freq[idx[i]] += 1`` (how often each weight row is looked up: ``scale_grad_by_freq``)."""
    l_dim = idx.shape[0]
    pp = min(128, l_dim)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(l_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        m = rows < l_dim
        li = tl.load(idx[rows, one], mask=m, other=0)
        tl.store(freq[li, one], tl.load(ones[rows, one], mask=m), mask=m, accumulate="add")


@lowering("aten::_embedding_bag_backward", dtypes=None)
def embedding_bag_backward(grad: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                           offset2bag: torch.Tensor, bag_size: torch.Tensor, maximum_indices: torch.Tensor,
                           num_weights: int, scale_grad_by_freq: bool, mode: int, sparse: bool,
                           per_sample_weights: torch.Tensor | None, padding_idx: int = -1) -> Any:
    """Gradient of ``embedding_bag`` with respect to the weight (dense; a sparse gradient cannot live on trn)."""
    if sparse:
        return NotImplemented
    return _dense_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@lowering("aten::_embedding_bag_dense_backward", dtypes=None)
def embedding_bag_dense_backward(grad: torch.Tensor, indices: torch.Tensor, offset2bag: torch.Tensor,
                                 bag_size: torch.Tensor, maximum_indices: torch.Tensor, num_weights: int,
                                 scale_grad_by_freq: bool, mode: int, per_sample_weights: torch.Tensor | None,
                                 padding_idx: int = -1) -> Any:
    """The dense weight gradient of ``embedding_bag`` (scatter-adds of gradient rows)."""
    return _dense_backward(grad, indices, None, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@lowering("aten::_embedding_bag_per_sample_weights_backward", dtypes=None)
def embedding_bag_per_sample_weights_backward(grad: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor,
                                              offsets: torch.Tensor, offset2bag: torch.Tensor, mode: int,
                                              padding_idx: int = -1) -> Any:
    """Gradient of ``embedding_bag`` with respect to ``per_sample_weights``: ``<grad[bag], weight[index]>``."""
    if mode != _SUM or not _ok(grad, weight) or grad.dim() != 2 or weight.dim() != 2 or not U.is_trn(indices) \
            or indices.dim() != 1 or grad.shape[1] != weight.shape[1]:
        return NotImplemented
    l_dim = indices.shape[0]
    if offset2bag is None or offset2bag.numel() != l_dim:
        plan = _bag_plan(weight, indices, offsets, offsets.shape[0] == grad.shape[0] + 1)
        if plan is None:
            return NotImplemented
        offset2bag = plan[1]
    out = torch.empty((l_dim,), dtype=grad.dtype, device="trn")
    if l_dim:
        pad = int(padding_idx) if padding_idx is not None and 0 <= padding_idx < weight.shape[0] else -1
        try:
            bag_psw_backward(grad, weight, _col(indices), _col(offset2bag), _col(out), pad)
        except trn.BoundsError:
            return NotImplemented
    return out


from stdlib_kernels import distance as _distance  # noqa: E402,F401 - cdist/pdist register with this family
