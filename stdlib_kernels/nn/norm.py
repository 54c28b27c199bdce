"""Normalisation layers: layer norm, group norm and RMS norm, forward and backward (batch norm, which uses the
row kernels below, is ``stdlib_kernels.nn.batchnorm``).

Every op is reduced to a few row-wise kernels over a ``[R, L]`` view (rows on the 128 partitions,
the normalised elements on the free axis, fp32 on chip):

- ``ln_fwd``: layer norm of each row tile: one ``isa.bn_stats`` for the moments (count, mean, M2:
  one pass, shifted sums), then one fused normalise-and-store chain ``(t - mean) * rstd * w + b``
  (elementwise producers with a single consumer fuse into the store, so the centred row is never
  materialised). On the host JIT the tile's load is re-evaluated in its two consumers rather than
  staged, so the data is read from memory once and from cache once. The host lowerings use
  one-row tiles (:data:`HOST_TILE`: the row is still in L1 for the second pass); 128-row tiles are
  the NeuronCore shape. Rows longer than :data:`CHUNK` take three streaming passes over column
  chunks. The host splits big inputs into one row range per thread (no views: ``lo`` / ``hi``).
- ``ln_bwd``: the layer-norm input gradient per row tile, plus per-128-row-block partial column
  sums of ``dy * xhat`` and ``dy`` (the weight and bias gradients): on the Tensor engine as
  ``ones.T @ tile`` with 128-row tiles, accumulated row by row with the host's one-row tiles; one
  ``reduce.col_sum`` launch adds the partials.
- ``row_moments`` / ``row_dots`` / ``row_affine`` / ``row_affine2``: per-row mean and variance,
  per-row ``sum(dy)`` and ``sum(dy * x)``, and ``x * a + c`` / ``dy * a + x * b + c`` with
  per-row coefficients. Group norm and batch norm view ``[N, C, *]`` as ``[N * C, HW]`` rows;
  the per-group / per-channel statistics and coefficients are small ``[N, C]`` tensors combined
  with native device ops on the host.

Example:
    >>> import torch
    >>> x = torch.randn(8, 32).to("trn")
    >>> y = torch.nn.functional.layer_norm(x, (32,))      # runs ``ln_fwd``  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import torch

import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels import tiling as T
from stdlib_kernels.reduction.reduce import Post, Pre, col_sum
from trnlang.device import decline, lowering, memory
from trnlang.device.registry import describe

#: Longest row kept whole in SBUF (elements per partition); longer rows stream in chunks.
CHUNK = 8192
#: Longest row the layer-norm backward handles (it keeps several fp32 rows per partition).
BWD_MAX = 4096
#: Column block of the Tensor-engine column sums (one PSUM bank of fp32).
COLS = 512
#: Rows per tile of ``ln_fwd`` / ``ln_bwd`` when the op runs on the host JIT. The kernels' passes
#: over a tile (moments, then normalise; sums, then the gradient) re-read it: one row (4 KiB at
#: N = 1024) is still in L1 for the second pass, a 128-row tile (512 KiB) is not, and is read twice
#: from L2/L3. Measured on 4096 x 1024 fp32, 2 threads: 0.42 ms with 1 row vs 0.68-0.74 ms with 128
#: (torch CPU: 0.9-1.1 ms).
HOST_TILE = 1


def _p(r: int) -> int:
    return min(128, r)


@dataclass(frozen=True)
class LnFwd:
    """What one :func:`ln_fwd` launch computes (a compile-time spec: equal specs share a variant).

    Attributes:
        eps: added to the variance (RMS norm: to the mean square) before the reciprocal square root.
        has_w / has_b: scale by the weight / add the bias.
        rms: RMS norm, ``x * rsqrt(mean(x * x) + eps) * w`` (no centring, no mean output).
        tile: rows per tile (128: all partitions, the NeuronCore shape; the host lowerings use :data:`HOST_TILE`).
        rb: the host's row bucket (:func:`stdlib_kernels.tiling.row_bucket`) of the row count, for ``tile > 1``.

    >>> LnFwd(1e-5, has_w=True, has_b=False).tile
    128
    """

    eps: float
    has_w: bool
    has_b: bool
    rms: bool = False
    tile: int = 128
    rb: int | None = None


@dataclass(frozen=True)
class LnBwd:
    """What one :func:`ln_bwd` launch computes (a compile-time spec).

    Attributes:
        has_w: the forward scaled by a weight (``g = dy * w``).
        want_dx / want_wb: write the input gradient ``dx`` / the per-block column sums ``pw``, ``pb`` (``dw``, ``db``).
        rms: RMS norm (``xhat = x * rstd``, no ``mean(g)`` term, no ``pb``).
        tile: 1: the host order (:func:`_ln_bwd_rows`); else 128-row tiles, column sums on the Tensor engine.
        rb: the host's row bucket (:func:`stdlib_kernels.tiling.row_bucket`) of a runtime row count.

    >>> LnBwd(True, want_dx=True, want_wb=False, rms=True).rb is None
    True
    """

    has_w: bool
    want_dx: bool
    want_wb: bool
    rms: bool = False
    tile: int = 128
    rb: int | None = None


@dataclass(frozen=True)
class GnFwd:
    """What one :func:`gn_fwd` launch computes (a compile-time spec).

    Attributes:
        eps: added to the variance before the reciprocal square root.
        groups: ``G``, the groups of a sample (the partitions of one tile).
        has_w / has_b: scale by the per-channel weight / add the per-channel bias.

    >>> GnFwd(1e-5, 8, has_w=False, has_b=False).groups
    8
    """

    eps: float
    groups: int
    has_w: bool
    has_b: bool


# the host's spec constructors: one instance per distinct spec (a warm launch's key compares the same object)
_ln_fwd_spec = functools.lru_cache(maxsize=1024)(LnFwd)
_ln_bwd_spec = functools.lru_cache(maxsize=1024)(LnBwd)
_gn_fwd_spec = functools.lru_cache(maxsize=1024)(GnFwd)


@T.polymorphic
def ln_fwd(x, w, b, out, mean_o, rstd_o, spec):
    """Layer norm of the rows of ``x [R, N]``: ``out``, and per-row ``mean_o`` / ``rstd_o`` ``[R, 1]``.

    ``w`` / ``b``: ``[N]`` or ``[1, N]``; ``spec``: an :class:`LnFwd`. The host splits big inputs between threads
    by launching on row pieces. Shape-polymorphic in the row count (``N`` sets the tiles: a compile-time constant).
    """
    eps, has_w, has_b, rms = spec.eps, spec.has_w, spec.has_b, spec.rms
    r_dim, n = x.shape
    p = 1 if spec.tile == 1 else T.extent(r_dim, spec.tile, spec.rb)
    ragged = p != 1 and T.ragged(r_dim, p)
    one = tl.arange(1)[None, :]
    inv_n = 1.0 / n
    if n <= CHUNK:
        cols = tl.arange(n)[None, :]
        wt = _param_row(w, n) if has_w else None
        bt = _param_row(b, n) if has_b else None
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            m = (rows < r_dim) if ragged else None
            t = tl.load(x[rows, cols], mask=m).astype(tl.float32)
            # one pass over the row block for the moments (count, mean, M2), then one normalising pass
            st = isa.bn_stats(t)
            mean = st[:, 1:2]
            if rms:
                rstd = tl.rsqrt(st[:, 2:3] * inv_n + mean * mean + eps)
                y = t * rstd
            else:
                rstd = tl.rsqrt(st[:, 2:3] * inv_n + eps)
                y = (t - mean) * rstd
            if has_w:
                y = y * wt
            if has_b:
                y = y + bt
            tl.store(out[rows, cols], y, mask=m)
            if not rms:
                tl.store(mean_o[rows, one], mean, mask=m)
            tl.store(rstd_o[rows, one], rstd, mask=m)
    else:
        f = CHUNK
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            s = tl.zeros((p, 1), tl.float32)
            for j in tl.sequential_range(tl.cdiv(n, f)):
                cols = j * f + tl.arange(f)[None, :]
                t = tl.load(x[rows, cols], mask=(rows < r_dim) & (cols < n)).astype(tl.float32)
                s[...] = s + tl.sum(t if not rms else tl.square(t), axis=1, keepdims=True)
            if rms:
                mean = tl.zeros((p, 1), tl.float32)
                rstd = tl.rsqrt(s * inv_n + eps)
            else:
                mean = s * inv_n
                q = tl.zeros((p, 1), tl.float32)
                for j in tl.sequential_range(tl.cdiv(n, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    mk = (rows < r_dim) & (cols < n)
                    t = tl.load(x[rows, cols], mask=mk).astype(tl.float32)
                    q[...] = q + tl.sum(tl.where(mk, tl.square(t - mean), 0.0), axis=1, keepdims=True)
                rstd = tl.rsqrt(q * inv_n + eps)
            for j in tl.affine_range(tl.cdiv(n, f)):
                cols = j * f + tl.arange(f)[None, :]
                mk = (rows < r_dim) & (cols < n)
                t = tl.load(x[rows, cols], mask=mk).astype(tl.float32)
                y = (t - mean) * rstd
                if has_w:
                    y = y * _param_row(w, f, cols, n)
                if has_b:
                    y = y + _param_row(b, f, cols, n)
                tl.store(out[rows, cols], y, mask=mk)
            if not rms:
                tl.store(mean_o[rows, one], mean, mask=rows < r_dim)
            tl.store(rstd_o[rows, one], rstd, mask=rows < r_dim)


def _param_row(t: Any, f: int, cols: Any = None, n: int = 0) -> Any:
    """A ``[1, f]`` fp32 tile of the parameter ``t`` (``[N]`` or ``[1, N]``): all of it, or columns ``cols < n``."""
    c = tl.arange(f)[None, :] if cols is None else cols
    mask = None if cols is None else cols < n
    ap = t[c] if t.ndim == 1 else t[tl.arange(1)[:, None], c]
    return tl.load(ap, mask=mask).astype(tl.float32)


def gn_fwd(x, w, b, out, mean_o, rstd_o, spec):
    """Group norm of ``x [N * G, Cg, HW]``, one tile of a sample's G groups per iteration.

    ``w`` / ``b``: ``[G * Cg]`` per-channel parameters; ``mean_o`` / ``rstd_o``: ``[N * G, 1]``; ``spec``: a
    :class:`GnFwd` (``G``: ``spec.groups``). The rows ``N * G`` of ``x`` are a runtime size shared by ``out``,
    ``mean_o`` and ``rstd_o`` (the same size at the same dim), and the loop runs ``N * G // G`` times, so every
    access is proven inside its tensor: no run-time check, and the tile's load fuses into its two consumers. The
    group's tile ``[G, Cg, HW]`` is keyed.
    """
    eps, groups, has_w, has_b = spec.eps, spec.groups, spec.has_w, spec.has_b
    ng, cg, hw = x.shape
    inv_d = 1.0 / (cg * hw)
    gi = tl.arange(groups)[:, None, None]
    ci = tl.arange(cg)[None, :, None]
    hi = tl.arange(hw)[None, None, :]
    gs = tl.arange(groups)[:, None]
    one = tl.arange(1)[None, :]
    wt = tl.load(w[gi * cg + ci]).astype(tl.float32) if has_w else None     # [G, Cg, 1]
    bt = tl.load(b[gi * cg + ci]).astype(tl.float32) if has_b else None
    for i in tl.affine_range(ng // groups):
        t = tl.load(x[i * groups + gi, ci, hi]).astype(tl.float32)
        st = isa.bn_stats(t)                                                 # one pass: count, mean, M2
        mean = st[:, 1:2]
        rstd = tl.rsqrt(st[:, 2:3] * inv_d + eps)
        y = (t - tl.expand_dims(mean, 2)) * tl.expand_dims(rstd, 2)
        if has_w:
            y = y * wt
        if has_b:
            y = y + bt
        tl.store(out[i * groups + gi, ci, hi], y)
        tl.store(mean_o[i * groups + gs, one], mean)
        tl.store(rstd_o[i * groups + gs, one], rstd)


gn_fwd = T.polymorphic(gn_fwd, static=(("x", 1), ("x", 2), ("out", 1), ("out", 2), ("w", 0), ("b", 0)))


@T.polymorphic
def ln_bwd(dy, x, mean, rstd, w, dx, pw, pb, spec):
    """Layer-norm backward of the rows of ``x [R, N]`` (``N <= BWD_MAX``).

    ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`` with ``g = dy * w``; ``pw[i]`` / ``pb[i]``
    are the column sums of ``dy * xhat`` / ``dy`` over row block ``i`` (128 rows, or all when fewer).
    ``spec``: an :class:`LnBwd` (RMS norm: ``xhat = x * rstd``, no ``mean(g)`` term, ``mean`` not read; column
    sums of 128-row tiles as ``ones.T @ tile`` on the Tensor engine, the NeuronCore shape, unless ``tile == 1``).
    """
    wt = tl.load(w[0:1, 0:x.shape[1]]).astype(tl.float32) if spec.has_w else None
    if spec.tile == 1:
        _ln_bwd_rows(dy, x, mean, rstd, dx, pw, pb, wt, spec)
        return
    rms = spec.rms
    r_dim, n = x.shape
    p = T.extent(r_dim, 128, spec.rb)
    ragged = T.ragged(r_dim, p)
    ones = tl.full((p, 1), 1.0, tl.float32)
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        g0, xh = _ln_bwd_dx(dy, x, mean, rstd, dx, rows, (rows < r_dim) if ragged else None, wt, spec)
        if spec.want_wb:
            gx = g0 * xh
            for c0 in range(0, n, COLS):
                cb = min(COLS, n - c0)
                cc = c0 + tl.arange(cb)[None, :]
                tl.store(pw[i + tl.arange(1)[:, None], cc],
                         tl.copy(tl.matmul(ones, gx[:, c0:c0 + cb], transpose_x=True)))
                if not rms:
                    tl.store(pb[i + tl.arange(1)[:, None], cc],
                             tl.copy(tl.matmul(ones, g0[:, c0:c0 + cb], transpose_x=True)))


def _ln_bwd_dx(dy, x, mean, rstd, dx, rows, m, wt, spec):
    """The input gradient of the rows ``rows`` (mask ``m``) of ``ln_bwd``; returns ``(dy, xhat)`` (fp32 tiles)."""
    rms = spec.rms
    n = x.shape[1]
    cols = tl.arange(n)[None, :]
    one = tl.arange(1)[None, :]
    g0 = tl.load(dy[rows, cols], mask=m).astype(tl.float32)
    rs = tl.load(rstd[rows, one], mask=m).astype(tl.float32)
    if rms:
        xh = tl.load(x[rows, cols], mask=m).astype(tl.float32) * rs
    else:
        mu = tl.load(mean[rows, one], mask=m).astype(tl.float32)
        xh = (tl.load(x[rows, cols], mask=m).astype(tl.float32) - mu) * rs
    if spec.want_dx:
        g = g0 * wt if wt is not None else g0
        c2 = tl.sum(g * xh, axis=1, keepdims=True) * (1.0 / n)
        if rms:
            tl.store(dx[rows, cols], (g - xh * c2) * rs, mask=m)
        else:
            c1 = tl.sum(g, axis=1, keepdims=True) * (1.0 / n)
            tl.store(dx[rows, cols], (g - c1 - xh * c2) * rs, mask=m)
    return g0, xh


def _ln_bwd_rows(dy, x, mean, rstd, dx, pw, pb, wt, spec):
    """``ln_bwd`` one row at a time: the row stays in L1 through its passes (sums, then ``dx``).

    Each block of 128 rows accumulates its column sums in on-chip ``[1, N]`` tiles, row after row
    (the order of the Tensor engine's K loop), and stores them as ``pw[i]`` / ``pb[i]``.
    """
    want_wb, rms = spec.want_wb, spec.rms
    r_dim, n = x.shape
    blk = T.extent(r_dim, 128, spec.rb)
    ragged = T.ragged(r_dim, blk)
    cols = tl.arange(n)[None, :]
    for i in tl.affine_range(tl.cdiv(r_dim, blk)):
        aw = tl.zeros((1, n), tl.float32) if want_wb else None
        ab = tl.zeros((1, n), tl.float32) if want_wb and not rms else None
        for j in tl.sequential_range(blk):
            row = i * blk + j + tl.arange(1)[:, None]
            g0, xh = _ln_bwd_dx(dy, x, mean, rstd, dx, row, (row < r_dim) if ragged else None, wt, spec)
            if want_wb:
                aw[...] = aw + g0 * xh
                if not rms:
                    ab[...] = ab + g0
        if want_wb:
            tl.store(pw[i + tl.arange(1)[:, None], cols], aw)
            if not rms:
                tl.store(pb[i + tl.arange(1)[:, None], cols], ab)


def _row_tiles(r_dim: Any, rb: int | None) -> Any:
    """The row kernels' loop: ``(rows [p, 1], p)`` per tile of up to 128 of ``r_dim`` rows (masked by the kernel)."""
    p = T.extent(r_dim, 128, rb)
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        yield i * p + tl.arange(p)[:, None], p


@T.row_polymorphic(static=(("x", 1),))
def row_moments(x, mean_o, var_o, rb=None):
    """Per-row mean and biased variance of ``x [R, L]`` (two passes, fp32) -> ``[R, 1]`` each."""
    r_dim, n = x.shape
    one = tl.arange(1)[None, :]
    inv_n = 1.0 / n
    f = min(n, CHUNK)
    for rows, p in _row_tiles(r_dim, rb):
        if n <= f:
            cols = tl.arange(n)[None, :]
            m = rows < r_dim
            t = tl.load(x[rows, cols], mask=m).astype(tl.float32)
            mean = tl.sum(t, axis=1, keepdims=True) * inv_n
            var = tl.sum(tl.square(t - mean), axis=1, keepdims=True) * inv_n
            tl.store(mean_o[rows, one], mean, mask=m)
            tl.store(var_o[rows, one], var, mask=m)
        else:
            s = tl.zeros((p, 1), tl.float32)
            for j in tl.sequential_range(tl.cdiv(n, f)):
                cols = j * f + tl.arange(f)[None, :]
                t = tl.load(x[rows, cols], mask=(rows < r_dim) & (cols < n)).astype(tl.float32)
                s[...] = s + tl.sum(t, axis=1, keepdims=True)
            mean = s * inv_n
            q = tl.zeros((p, 1), tl.float32)
            for j in tl.sequential_range(tl.cdiv(n, f)):
                cols = j * f + tl.arange(f)[None, :]
                mk = (rows < r_dim) & (cols < n)
                t = tl.load(x[rows, cols], mask=mk).astype(tl.float32)
                q[...] = q + tl.sum(tl.where(mk, tl.square(t - mean), 0.0), axis=1, keepdims=True)
            tl.store(mean_o[rows, one], mean, mask=rows < r_dim)
            tl.store(var_o[rows, one], q * inv_n, mask=rows < r_dim)


@T.row_polymorphic(static=(("x", 1), ("dy", 1),))
def row_dots(dy, x, s1, s2, rb=None):
    """Per row of ``[R, L]``: ``s1 = sum(dy)``, ``s2 = sum(dy * x)`` (fp32) -> ``[R, 1]`` each."""
    r_dim, n = x.shape
    one = tl.arange(1)[None, :]
    f = min(n, CHUNK)
    for rows, p in _row_tiles(r_dim, rb):
        a = tl.zeros((p, 1), tl.float32)
        c = tl.zeros((p, 1), tl.float32)
        for j in tl.sequential_range(tl.cdiv(n, f)):
            cols = j * f + tl.arange(f)[None, :]
            mk = (rows < r_dim) & (cols < n)
            g = tl.load(dy[rows, cols], mask=mk).astype(tl.float32)
            xt = tl.load(x[rows, cols], mask=mk).astype(tl.float32)
            a[...] = a + tl.sum(g, axis=1, keepdims=True)
            c[...] = c + tl.sum(g * xt, axis=1, keepdims=True)
        tl.store(s1[rows, one], a, mask=rows < r_dim)
        tl.store(s2[rows, one], c, mask=rows < r_dim)


@T.row_polymorphic(static=(("x", 1), ("out", 1),))
def row_affine(x, a, c, out, rb=None):
    """``out = x * a + c`` over ``[R, L]`` with per-row ``a``, ``c`` ``[R, 1]`` (fp32)."""
    r_dim, n = x.shape
    one = tl.arange(1)[None, :]
    f = min(n, CHUNK)
    for rows, p in _row_tiles(r_dim, rb):
        at = tl.load(a[rows, one], mask=rows < r_dim).astype(tl.float32)
        ct = tl.load(c[rows, one], mask=rows < r_dim).astype(tl.float32)
        for j in tl.affine_range(tl.cdiv(n, f)):
            cols = j * f + tl.arange(f)[None, :]
            mk = (rows < r_dim) & (cols < n)
            tl.store(out[rows, cols], tl.load(x[rows, cols], mask=mk).astype(tl.float32) * at + ct, mask=mk)


@T.row_polymorphic(static=(("x", 1), ("dy", 1), ("out", 1),))
def row_affine2(dy, x, a, b, c, out, rb=None):
    """``out = dy * a + x * b + c`` over ``[R, L]`` with per-row ``a``, ``b``, ``c`` ``[R, 1]`` (fp32)."""
    r_dim, n = x.shape
    one = tl.arange(1)[None, :]
    f = min(n, CHUNK)
    for rows, p in _row_tiles(r_dim, rb):
        at = tl.load(a[rows, one], mask=rows < r_dim).astype(tl.float32)
        bt = tl.load(b[rows, one], mask=rows < r_dim).astype(tl.float32)
        ct = tl.load(c[rows, one], mask=rows < r_dim).astype(tl.float32)
        for j in tl.affine_range(tl.cdiv(n, f)):
            cols = j * f + tl.arange(f)[None, :]
            mk = (rows < r_dim) & (cols < n)
            g = tl.load(dy[rows, cols], mask=mk).astype(tl.float32)
            xt = tl.load(x[rows, cols], mask=mk).astype(tl.float32)
            tl.store(out[rows, cols], g * at + xt * bt + ct, mask=mk)


# ------------------------------------------------------------------------------------------ helpers


#: the reason of a call whose tensors :func:`_ok` refuses
_NOT_OK = "tensors not float trn tensors, or a conj/neg bit"


def _ok(*ts: torch.Tensor | None) -> bool:
    return all(t is None or (U.is_trn(t) and t.dtype in U.FLOAT_DTYPES and not t.is_conj() and not t.is_neg())
               for t in ts)


def _params_ok(x: torch.Tensor, *ps: torch.Tensor | None) -> bool:
    """Parameters in the input's dtype or fp32 (the CPU's mixed-dtype rule; others raise there)."""
    return all(p is None or p.dtype in (x.dtype, torch.float32) for p in ps)


def _rows(t: torch.Tensor, r: int, n: int) -> torch.Tensor:
    """``t`` as a contiguous ``[r, n]`` view (a native copy if it is not contiguous)."""
    return t.contiguous().view(r, n)


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else t.float()


def _empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    return U.new_output(tuple(shape), dtype)


# ------------------------------------------------------------------------------------------ layer norm


@lowering("aten::native_layer_norm", dtypes=U.FLOAT_DTYPES)
def native_layer_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float) -> Any:
    """Layer norm over the trailing ``normalized_shape`` dims -> (out, mean, rstd)."""
    if not _ok(input, weight, bias):
        return decline(_NOT_OK)
    if not _params_ok(input, weight, bias):
        return decline("weight or bias neither in the input's dtype nor float32: torch raises")
    k = len(normalized_shape)
    if k == 0 or k > input.dim() or tuple(input.shape[-k:]) != tuple(normalized_shape):
        return decline("normalized_shape empty or not the input's trailing dims: torch raises")
    for t in (weight, bias):
        if t is not None and tuple(t.shape) != tuple(normalized_shape):
            return decline("weight or bias not of normalized_shape: torch raises")
    n = U.prod(normalized_shape)
    r = U.prod(input.shape[:-k])
    stat_shape = (*input.shape[:-k], *([1] * k))
    # the outputs are allocated in their final shapes; the kernel sees [r, n] / [r, 1] pieces of them (no views)
    out = memory.empty(input.shape, input.dtype)
    mean = memory.empty(stat_shape, input.dtype)
    rstd = memory.empty(stat_shape, input.dtype)
    if r and n:
        xc = input if input.is_contiguous() else input.contiguous()
        w2 = _param(weight, n, xc)
        b2 = _param(bias, n, xc)
        spec = _ln_fwd_spec(float(eps), weight is not None, bias is not None, False, HOST_TILE)
        parts = _row_parts(r, n)
        if len(parts) == 1:
            U.launch(ln_fwd, *_ln_rows((xc, w2, b2, out, mean, rstd), n, 0, r), spec)()
        else:  # one launch per thread on disjoint row ranges; every operand is contiguous (made so above)
            key = (xc.dtype, w2.dtype, b2.dtype, r, n, spec, tuple(parts), xc.data_ptr(), w2.data_ptr(),
                   b2.data_ptr(), out.data_ptr(), mean.data_ptr(), rstd.data_ptr())
            U.run_parallel(_LN_LAUNCHES.get(key, lambda: [
                U.launch(ln_fwd, *_ln_rows((xc, w2, b2, out, mean, rstd), n, lo, hi), spec) for lo, hi in parts]))
    elif r:
        mean.fill_(float("nan"))
        rstd.fill_(float("nan"))
    return out, mean, rstd


_LN_LAUNCHES = U.BoundLaunches()


def _ln_rows(ts: tuple[torch.Tensor, ...], n: int, lo: int, hi: int) -> list[Any]:
    """``ln_fwd``'s tensors for rows ``[lo, hi)``: row pieces of the contiguous input and outputs (``[r, n]`` rows,
    ``[r, 1]`` stats; a tensor that is exactly those rows is passed itself); weight and bias whole."""
    def rows(t: torch.Tensor, w: int) -> Any:
        if lo == 0 and t.dim() == 2 and t.shape[0] == hi:
            return t
        return U.piece(t, (hi - lo, w), (w, 1), t.storage_offset() + lo * w)

    x, w2, b2, out, mean, rstd = ts
    return [rows(x, n), w2, b2, rows(out, n), rows(mean, 1), rows(rstd, 1)]


def _row_parts(r: int, n: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` row ranges of ``[r, n]`` rows, one per thread (``U.row_blocks``: multiples of 128 rows)."""
    blocks = U.row_blocks(r, r * n)
    return [(0, r)] if len(blocks) == 1 else [(b.start, b.stop) for b in blocks]


def _param(t: torch.Tensor | None, n: int, dummy: torch.Tensor) -> torch.Tensor:
    """A weight / bias as a kernel argument: ``[N]`` (a contiguous view), or ``dummy`` when absent."""
    if t is None:
        return dummy
    return t if t.dim() == 1 and t.is_contiguous() else t.contiguous().view(n)


@lowering("aten::native_layer_norm_backward", dtypes=U.FLOAT_DTYPES)
def native_layer_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int],
                               mean: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None,
                               bias: torch.Tensor | None, output_mask: Sequence[bool]) -> Any:
    """Gradients of layer norm with respect to input, weight and bias (as ``output_mask`` asks)."""
    if not _ok(grad_out, input, mean, rstd, weight, bias):
        return decline(_NOT_OK)
    k = len(normalized_shape)
    n = U.prod(normalized_shape)
    r = U.prod(input.shape[:-k]) if k else 0
    if k == 0 or tuple(grad_out.shape) != tuple(input.shape):
        return decline("normalized_shape empty, or grad_out not shaped like the input")
    if n > BWD_MAX and r > 0:
        return _ln_bwd_long(grad_out, input, mean, rstd, weight, bias, output_mask, r, n)
    want_dx, want_w, want_b = (bool(v) for v in output_mask)
    want_w = want_w and weight is not None
    want_b = want_b and bias is not None
    dx = _empty(input.shape, input.dtype) if want_dx else None
    dw = _empty(weight.shape, weight.dtype) if want_w else None
    db = _empty(bias.shape, bias.dtype) if want_b else None
    if r == 0 or n == 0:
        return dx, (dw.zero_() if dw is not None else None), (db.zero_() if db is not None else None)
    x2 = _rows(input, r, n)
    g2 = _rows(grad_out, r, n)
    w2 = _rows(weight, 1, n) if weight is not None else x2
    tiles = -(-r // _p(r))
    wb = want_w or want_b
    pw = _empty((tiles, n), torch.float32) if wb else x2
    pb = _empty((tiles, n), torch.float32) if wb else x2
    args = [g2, x2, _rows(mean, r, 1), _rows(rstd, r, 1), w2, dx.view(r, n) if want_dx else x2, pw, pb]
    parts = _row_parts(r, n)
    if len(parts) == 1:
        ln_bwd(*args, _ln_bwd_spec(weight is not None, want_dx, wb, False, HOST_TILE, T.row_bucket(r)))
    else:  # one launch per thread on row blocks of 128-row tiles (their column-sum rows are theirs too)
        def part(lo: int, hi: int) -> Any:
            rows = [U.rows_piece(t, slice(lo, hi)) for t in args[:4]]
            tl_ = [U.rows_piece(t, slice(lo // 128, -(-hi // 128))) if wb else x2 for t in args[6:]]
            return U.launch(ln_bwd, *rows, w2, U.rows_piece(args[5], slice(lo, hi)) if want_dx else x2, *tl_,
                            _ln_bwd_spec(weight is not None, want_dx, wb, False, HOST_TILE, T.row_bucket(hi - lo)))

        U.run_parallel([part(lo, hi) for lo, hi in parts])
    if want_w:
        _sum_partials(pw, dw, n)
    if want_b:
        _sum_partials(pb, db, n)
    return dx, dw, db


def _sum_partials(parts: torch.Tensor, out: torch.Tensor, n: int) -> None:
    """``out = parts.sum(0)`` (cast to ``out``'s dtype) in one launch: the per-block column sums of a backward.

    The same kernel as the device ``sum`` over dim 0 (``reduce.col_sum``), without the op's host glue
    (dispatch, a temporary, a ``copy_``): after a large kernel that glue runs on cold host caches.
    """
    col_sum(parts, out.view(1, n), Pre.NONE, Post.NONE, 1.0, 1.0,
            (T.row_bucket(parts.shape[0]), T.free_bucket(n, 512)))


def _ln_bwd_long(grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                 weight: torch.Tensor | None, bias: torch.Tensor | None, output_mask: Sequence[bool], r: int,
                 n: int) -> Any:
    """Layer-norm backward for rows longer than ``BWD_MAX``: streaming row kernels plus native glue.

    With ``g = dy * w``, ``A = sum(g)``, ``B = sum(g * x)`` per row (``row_dots``):
    ``dx = g * rstd + x * (-rstd^2 c) + (mean * rstd^2 c - A / n * rstd)``, ``c = (B - mean A) rstd / n``.
    """
    want_dx, want_w, want_b = (bool(v) for v in output_mask)
    x2 = _rows(input, r, n)
    g2 = _rows(grad_out, r, n)
    mu = _f32(_rows(mean, r, 1))
    rs = _f32(_rows(rstd, r, 1))
    dx = dw = db = None
    if want_dx:
        g = (g2 * _rows(weight, 1, n)).contiguous() if weight is not None else g2
        a = _empty((r, 1), torch.float32)
        b = _empty((r, 1), torch.float32)
        row_dots(g, x2, a, b)
        c = (b - mu * a) * rs * (1.0 / n)
        xc = -(rs * rs * c)
        cc = -(mu * xc) - a * rs * (1.0 / n)
        dx = _empty(input.shape, input.dtype)
        row_affine2(g, x2, rs, xc, cc, dx.view(r, n))
    if want_w and weight is not None:
        xh = _empty((r, n), torch.float32)
        row_affine(x2, rs, -(mu * rs), xh)
        dw = (_f32(g2) * xh).sum(0).view(weight.shape).to(weight.dtype)
    if want_b and bias is not None:
        db = _f32(g2).sum(0).view(bias.shape).to(bias.dtype)
    return dx, dw, db


# ------------------------------------------------------------------------------------------ group norm


@lowering("aten::native_group_norm", dtypes=U.FLOAT_DTYPES)
def native_group_norm(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, N: int,
                      C: int, HxW: int, group: int, eps: float) -> Any:
    """Group norm of ``input [N, C, *]`` -> (out, mean ``[N, G]``, rstd ``[N, G]``)."""
    if not _ok(input, weight, bias):
        return decline(_NOT_OK)
    if not _params_ok(input, weight, bias):
        return decline("weight or bias neither in the input's dtype nor float32: torch raises")
    if group <= 0 or C % group or input.numel() != N * C * HxW:
        return decline("groups that do not divide the channels, or N * C * HxW not the input's size: torch raises")
    out = memory.empty(input.shape, input.dtype)
    mean = memory.empty((N, group), input.dtype)
    rstd = memory.empty((N, group), input.dtype)
    if N * C == 0:
        return out, mean, rstd
    if HxW == 0:
        return out, mean.fill_(float("nan")), rstd.fill_(float("nan"))
    d = (C // group) * HxW
    if group <= 128 and d <= CHUNK and all(t is None or t.dim() == 1 for t in (weight, bias)):
        # one kernel: a sample's groups per tile, moments and the per-channel affine in one launch
        cg = C // group
        x3 = input.contiguous().view(N * group, cg, HxW)
        none = U.view(x3, (1,), (1,), x3.storage_offset())  # an absent parameter: no batch size, not written
        gn_fwd(x3, weight.contiguous() if weight is not None else none,
               bias.contiguous() if bias is not None else none, out.view(N * group, cg, HxW),
               mean.view(N * group, 1), rstd.view(N * group, 1),
               _gn_fwd_spec(float(eps), group, weight is not None, bias is not None))
        return out, mean, rstd
    m32 = _empty((N * group, 1), torch.float32)
    v32 = _empty((N * group, 1), torch.float32)
    row_moments(_rows(input, N * group, d), m32, v32)
    r32 = (v32 + eps).rsqrt()
    mean.copy_(m32.view(N, group))
    rstd.copy_(r32.view(N, group))
    cg = C // group
    a = r32.view(N, group, 1).expand(N, group, cg)                 # [N, G, C/G]
    if weight is not None:
        a = a * _f32(weight).view(1, group, cg)
    c = -m32.view(N, group, 1) * a
    if bias is not None:
        c = c + _f32(bias).view(1, group, cg)
    row_affine(_rows(input, N * C, HxW), _rows(a, N * C, 1), _rows(c, N * C, 1), out.view(N * C, HxW))
    return out, mean, rstd


@lowering("aten::native_group_norm_backward", dtypes=U.FLOAT_DTYPES)
def native_group_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor,
                               rstd: torch.Tensor, weight: torch.Tensor | None, N: int, C: int, HxW: int,
                               group: int, output_mask: Sequence[bool]) -> Any:
    """Gradients of group norm with respect to input, weight and bias."""
    if not _ok(grad_out, input, mean, rstd, weight):
        return decline(_NOT_OK)
    if group <= 0 or C % group:
        return decline("groups that do not divide the channels: torch raises")
    want_dx, want_w, want_b = (bool(v) for v in output_mask)
    dx = _empty(input.shape, input.dtype) if want_dx else None
    dw = _empty((C,), input.dtype) if want_w else None
    db = _empty((C,), input.dtype) if want_b else None
    if N * C * HxW == 0:
        return (dx, dw.zero_() if dw is not None else None, db.zero_() if db is not None else None)
    cg = C // group
    x2 = _rows(input, N * C, HxW)
    g2 = _rows(grad_out, N * C, HxW)
    s1 = _empty((N * C, 1), torch.float32)
    s2 = _empty((N * C, 1), torch.float32)
    row_dots(g2, x2, s1, s2)
    db_nc = s1.view(N, group, cg)                                  # sum(dy) per (n, c)
    ds_nc = s2.view(N, group, cg)                                  # sum(dy * x) per (n, c)
    mu = _f32(mean).reshape(N, group, 1)
    rs = _f32(rstd).reshape(N, group, 1)
    if want_dx:
        w = _f32(weight).view(1, group, cg) if weight is not None else None
        ds_g = (ds_nc * w if w is not None else ds_nc).sum(2, keepdim=True)
        db_g = (db_nc * w if w is not None else db_nc).sum(2, keepdim=True)
        inv_d = 1.0 / (cg * HxW)
        c2 = (db_g * mu - ds_g) * rs * rs * rs * inv_d               # [N, G, 1]
        c3 = -c2 * mu - db_g * rs * inv_d
        a = rs.expand(N, group, cg) * w if w is not None else rs.expand(N, group, cg)
        row_affine2(g2, x2, _rows(a, N * C, 1), _rows(c2.expand(N, group, cg), N * C, 1),
                    _rows(c3.expand(N, group, cg), N * C, 1), dx.view(N * C, HxW))
    if want_w:
        dw.copy_(((ds_nc - db_nc * mu) * rs).sum(0).reshape(C))
    if want_b:
        db.copy_(db_nc.sum(0).reshape(C))
    return dx, dw, db


# ------------------------------------------------------------------------------------------ rms norm
# ``F.rms_norm`` reaches the backend as the composite ``aten::rms_norm``, which on a PrivateUse1
# device decomposes into pow/mean/rsqrt/mul. We route it (``AutogradPrivateUse1``) to
# ``aten::_fused_rms_norm``, whose autograd formula calls ``_fused_rms_norm_backward`` (CUDA-only
# in torch), and lower both with the layer-norm kernels in RMS mode. ``_fused_rms_norm`` is itself
# a CompositeImplicitAutograd op with its own autograd formula, so its kernel is registered with
# ``torch.library`` directly (a ``@lowering`` would route its autograd to the decomposition).


def _rms_eps(eps: float | None, dtype: torch.dtype) -> float:
    """The default eps is that of the op-math dtype (fp32 for fp32/bf16/fp16 inputs), as in torch."""
    return float(eps) if eps is not None else float(torch.finfo(torch.float32).eps)


def _rms_ok(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None) -> bool:
    k = len(normalized_shape)
    if not _ok(input, weight) or k == 0 or k > input.dim() or tuple(input.shape[-k:]) != tuple(normalized_shape):
        return False
    if weight is not None and (tuple(weight.shape) != tuple(normalized_shape) or weight.dtype != input.dtype):
        return False
    return U.prod(normalized_shape) > 0


def fused_rms_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                   eps: float | None) -> Any:
    """``aten::_fused_rms_norm`` on trn -> (out, rstd ``[*, 1...]`` fp32)."""
    if not _rms_ok(input, normalized_shape, weight):
        return torch.ops.aten._fused_rms_norm.default.decompose(input, normalized_shape, weight, eps)
    k = len(normalized_shape)
    n = U.prod(normalized_shape)
    r = U.prod(input.shape[:-k])
    out = _empty(input.shape, input.dtype)
    rstd = _empty((*input.shape[:-k], *([1] * k)), torch.float32)
    if r == 0:
        return out, rstd
    x2 = _rows(input, r, n)
    w2 = _rows(weight, 1, n) if weight is not None else x2
    ln_fwd(x2, w2, x2, out.view(r, n), rstd.view(r, 1), rstd.view(r, 1),
           _ln_fwd_spec(_rms_eps(eps, input.dtype), weight is not None, False, True, 128, T.row_bucket(r)))
    return out, rstd


@lowering("aten::_fused_rms_norm_backward", dtypes=(torch.float32, torch.bfloat16, torch.float16))
def fused_rms_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int],
                            rstd: torch.Tensor, weight: torch.Tensor | None, output_mask: Sequence[bool]) -> Any:
    """Gradients of RMS norm with respect to input and weight."""
    k = len(normalized_shape)
    n = U.prod(normalized_shape)
    if not _rms_ok(input, normalized_shape, weight):
        return decline("tensors not float trn tensors (or a conj/neg bit), a weight not of normalized_shape and the "
                       "input's dtype, or an empty normalized_shape")
    if n > BWD_MAX or tuple(grad_out.shape) != tuple(input.shape):
        return decline(f"rows longer than {BWD_MAX} elements, or grad_out not shaped like the input")
    r = U.prod(input.shape[:-k])
    want_dx, want_w = bool(output_mask[0]), bool(output_mask[1]) and weight is not None
    dx = _empty(input.shape, input.dtype) if want_dx else None
    dw = _empty(weight.shape, weight.dtype) if want_w else None
    if r == 0:
        return dx, (dw.zero_() if dw is not None else None)
    x2 = _rows(input, r, n)
    g2 = _rows(grad_out, r, n)
    w2 = _rows(weight, 1, n) if weight is not None else x2
    tiles = -(-r // _p(r))
    pw = _empty((tiles, n), torch.float32) if want_w else x2
    rs = _rows(rstd, r, 1)
    ln_bwd(g2, x2, rs, rs, w2, dx.view(r, n) if want_dx else x2, pw, pw,
           _ln_bwd_spec(weight is not None, want_dx, want_w, True, HOST_TILE, T.row_bucket(r)))
    if want_w:
        _sum_partials(pw, dw, n)
    return dx, dw


def _rms_norm_autograd(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                       eps: float | None = None) -> torch.Tensor:
    """``aten::rms_norm`` on trn: the fused op (with its autograd formula) when supported."""
    if not _rms_ok(input, normalized_shape, weight) or U.prod(normalized_shape) > BWD_MAX:
        return torch.ops.aten.rms_norm.default.decompose(input, normalized_shape, weight, eps)
    return torch.ops.aten._fused_rms_norm(input, normalized_shape, weight, eps)[0]


_LIB = torch.library.Library("aten", "IMPL")
_LIB.impl("_fused_rms_norm", fused_rms_norm, "PrivateUse1")
_LIB.impl("rms_norm", _rms_norm_autograd, "AutogradPrivateUse1")
describe("aten::_fused_rms_norm", fused_rms_norm)
describe("aten::rms_norm", _rms_norm_autograd)
