"""Reductions along free axes: sum, mean, prod, amax/amin, max/min (with indices), argmax/argmin,
all/any, var/std (+ ``var_mean``/``std_mean``), ``linalg_vector_norm`` and ``logsumexp``.

The reduced dims are moved last (a strided view) and merged into one free axis ``C``; the kept
dims become rows ``R`` (tiled by 128 partitions), so reducing over a leading dim is a strided DMA
and never a transpose. Each row tile accumulates fp32 partials over column chunks (masked-off
elements load the reduction's identity). A full reduction of a long contiguous tensor first
spreads it over all 128 partitions, then combines the 128 partials with a second launch.

Indices (``max.dim``, ``argmax``) are computed as int32 tiles and stored into int64 HBM tensors
(the DMA widens). Integer sums of ``bool`` inputs count in int32; int32/int64 sums accumulate in int32
when a device check bounds every value by ``(2^31 - 1) / C`` (so no partial sum can overflow; int64 loads
narrow to the low word). Larger integer sums, ``mean`` of integers and anything else not handled here are
declined (CPU fallback, which also raises torch's errors for bad arguments).

Example:
    >>> x = torch.randn(4096, 1024).to("trn")
    >>> x.sum(0), x.amax(1), x.max(dim=1), torch.logsumexp(x, 1), x.var(1, correction=0)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch

import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels import tiling as T
from trnlang.device import decline, fastlane, lowering, memory
from trnlang.device.registry import warn_like_torch

_I32_MIN, _I32_MAX = -2**31, 2**31 - 1


class Op(U.Mode):
    """How a row reduction combines its elements (``LSE``: the max-stabilised log of the sum of exponentials)."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    LSE = "lse"


class Pre(U.Mode):
    """The elementwise map applied to each loaded (already cast) tile before reducing."""

    NONE = "none"
    ABS = "abs"
    SQ = "sq"    # x * x
    POW = "pow"  # |x| ** p
    NZ = "nz"    # 1.0 where nonzero (NaN counts), else 0.0


class Post(U.Mode):
    """The map applied to each reduced value before it is stored."""

    NONE = "none"
    DIV = "div"    # divided by ``scale`` (a runtime scalar)
    SQRT = "sqrt"
    ROOT = "root"  # acc ** (1 / p)


class Acc(U.Mode):
    """The arithmetic a reduction accumulates in (the value: the tiles' dtype): fp32, or int32 (exact integer sums
    and compares)."""

    F32 = tl.float32
    I32 = tl.int32


# The host code (it runs on every call) names members through these module globals: on Python 3.11 every attribute
# read on an Enum class (``Op.SUM``) goes through EnumType's ``__getattr__`` hook, ~0.1 us, 10x a global's read.
_SUM, _PROD, _MAX, _MIN, _LSE = Op.SUM, Op.PROD, Op.MAX, Op.MIN, Op.LSE
_NO_PRE, _ABS, _SQ, _POW, _NZ = Pre.NONE, Pre.ABS, Pre.SQ, Pre.POW, Pre.NZ
_NO_POST, _DIV, _SQRT, _ROOT = Post.NONE, Post.DIV, Post.SQRT, Post.ROOT
_F32, _I32 = Acc.F32, Acc.I32

#: identity of each combine op (the ``other=`` of masked loads), fp32 and int32.
_IDENT = {Op.SUM: 0.0, Op.PROD: 1.0, Op.MAX: -math.inf, Op.MIN: math.inf, Op.LSE: -math.inf}
_IDENT_I = {Op.SUM: 0, Op.PROD: 1, Op.MAX: _I32_MIN, Op.MIN: _I32_MAX}
_RED = {Op.SUM: tl.sum, Op.PROD: tl.prod, Op.MAX: tl.max, Op.MIN: tl.min}
_COMB = {Op.SUM: tl.add, Op.PROD: tl.multiply, Op.MAX: tl.maximum, Op.MIN: tl.minimum}
#: the body of each :class:`Pre` (``t``: the tile, ``p``: the exponent of ``POW``)
_PRE: dict[Pre, Callable[[Any, float], Any]] = {
    Pre.NONE: lambda t, p: t,
    Pre.ABS: lambda t, p: tl.abs(t),
    Pre.SQ: lambda t, p: t * t,
    Pre.POW: lambda t, p: tl.power(tl.abs(t), p),
    Pre.NZ: lambda t, p: (t != 0).astype(tl.float32),
}
#: the body of each :class:`Post` (``acc``: the reduced ``[P, 1]`` tile, ``scale``: ``DIV``'s divisor)
_POST: dict[Post, Callable[[Any, Any, float], Any]] = {
    Post.NONE: lambda acc, scale, p: acc,
    Post.DIV: lambda acc, scale, p: acc / T.runtime_scalar(scale),
    Post.SQRT: lambda acc, scale, p: tl.sqrt(acc),
    Post.ROOT: lambda acc, scale, p: tl.power(acc, 1.0 / p),
}


def _ident(op: Op, ct: Acc) -> Any:
    """The identity of ``op`` in ``ct`` arithmetic."""
    return _IDENT[op] if ct is Acc.F32 else _IDENT_I[op]


def _other(op: Op, pre: Pre, p: float, ct: Acc) -> Any:
    """The value masked-off loads give: one that ``pre`` maps to the identity of ``op``."""
    if ct is Acc.I32:
        return _IDENT_I[op]
    if pre is Pre.NONE:
        return _IDENT[op]
    if op is Op.MIN or (pre is Pre.POW and p < 0):
        return math.inf  # abs/nz/pow(p<0) of inf: inf / 1 / 0
    return 0.0


def _shape(x: Any, tile: tuple[int, int, bool] | None) -> tuple[Any, Any, int, int, bool, bool]:
    """(rows, cols, partitions per tile, column chunk, ragged rows, one pass) of ``x [R, C]``.

    ``tile``: the host's buckets (:func:`stdlib_kernels.tiling.tile_of`) for sizes that are runtime values;
    compile-time sizes tile exactly. None: every size the tiles depend on becomes a compile-time constant.
    """
    r_dim, c_dim = x.shape
    pp = T.extent(r_dim, 128, tile and tile[0])
    f = T.extent(c_dim, U.FREE_CHUNK, tile and tile[1])
    return r_dim, c_dim, pp, f, T.ragged(r_dim, pp), T.fits(c_dim, f, tile and tile[2])


def _cols(c_dim: Any, f: int, rm: Any) -> tuple[Any, Any, bool]:
    """Columns of a one-pass tile of ``f >= C`` columns, its mask (rows ``rm`` and, for a bucket, the columns
    past ``C``) and whether columns are masked (the masked-off loads then need the reduction's identity)."""
    cols = tl.arange(f)[None, :]
    if not T.ragged(c_dim, f):
        return cols, rm, False
    return cols, (cols < c_dim) if rm is None else rm & (cols < c_dim), True


@T.polymorphic
def row_reduce(x, out, op, pre, post, scale, p, ct, tile=None):
    """``out[r, 0] = post(op_c pre(x[r, c]))``: ``op`` an :class:`Op`, ``pre`` a :class:`Pre`, ``post`` a
    :class:`Post`, ``ct`` the :class:`Acc` arithmetic; ``p`` the exponent of ``Pre.POW`` / ``Post.ROOT``.

    ``scale``: the divisor of ``Post.DIV``, a number or a ``[1, 1]`` fp32 tensor (a runtime value).
    Example: ``row_reduce(x, out, Op.SUM, Pre.NONE, Post.DIV, float(C), 0.0, Acc.F32)`` is a row mean.
    """
    r_dim, c_dim, pp, f, rr, one_pass = _shape(x, tile)
    dt = ct.value
    red = Op.MAX if op is Op.LSE else op
    ident = _ident(red, ct)
    other = _other(red, pre, p, ct)
    prep = _PRE[pre]
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(r_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        rm = (rows < r_dim) if rr else None
        if one_pass:
            cols, cm, masked = _cols(c_dim, f, rm)
            t = prep(tl.load(x[rows, cols], mask=cm, other=other if masked else 0).astype(dt), p)
            acc = _RED[red](t, axis=1, keepdims=True)
            if op is Op.LSE:
                m = tl.where(tl.abs(acc) == math.inf, 0.0, acc)
                acc = tl.log(tl.sum(tl.exp(t - m), axis=1, keepdims=True)) + m
        else:
            acc = tl.full((pp, 1), ident, dt)
            for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                cols = j * f + tl.arange(f)[None, :]
                m = (rows < r_dim) & (cols < c_dim)
                t = prep(tl.load(x[rows, cols], mask=m, other=other).astype(dt), p)
                acc[...] = _COMB[red](acc, _RED[red](t, axis=1, keepdims=True))
            if op is Op.LSE:
                m = tl.where(tl.abs(acc) == math.inf, 0.0, acc)
                s = tl.zeros((pp, 1), tl.float32)
                for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    t = tl.load(x[rows, cols], mask=(rows < r_dim) & (cols < c_dim), other=-math.inf).astype(dt)
                    s[...] = s + tl.sum(tl.exp(t - m), axis=1, keepdims=True)
                acc = tl.log(s) + m
        tl.store(out[rows, one], _POST[post](acc, scale, p), mask=rm)


def _first_index(t: Any, v: Any, col0: Any, rows: Any, f: int, ct: Acc) -> Any:
    """Index (fp32) of the first element of ``t`` equal to ``v`` (or NaN): the min of a masked iota.

    Plain whole-tile compare/select/min instructions (cheaper than a ``tensor_reduce`` argmax).
    """
    pos = isa.iota(col0 + tl.arange(f)[None, :] + 0 * rows, tl.float32)
    hit = (t == v) | (t != t) if ct is Acc.F32 else (t == v)
    return tl.min(tl.where(hit, pos, _BIG), axis=1, keepdims=True)


_BIG = float(2 ** 30)


@T.polymorphic
def row_arg_reduce(x, vals, idx, op, ct, tile=None):
    """Per row the max (``op``: ``Op.MAX``) or min (``Op.MIN``) and the index of its first occurrence (NaN wins,
    as in torch), in ``ct`` (an :class:`Acc`) arithmetic.

    ``vals`` may be None (argmax/argmin only); ``idx`` is an int32 or int64 ``[R, 1]`` tensor.
    """
    r_dim, c_dim, pp, f, rr, one_pass = _shape(x, tile)
    dt = ct.value
    red = _RED[op]
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(r_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        rm = (rows < r_dim) if rr else None
        if one_pass:
            cols, cm, masked = _cols(c_dim, f, rm)
            t = tl.load(x[rows, cols], mask=cm, other=_ident(op, ct) if masked else 0)
            t = t.astype(dt)
            v = red(t, axis=1, keepdims=True)
            ai = _first_index(t, v, 0, rows, f, ct)
        else:
            ident = _ident(op, ct)
            v = tl.full((pp, 1), ident, dt)
            ai = tl.zeros((pp, 1), tl.float32)
            for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                cols = j * f + tl.arange(f)[None, :]
                t = tl.load(x[rows, cols], mask=(rows < r_dim) & (cols < c_dim), other=ident).astype(dt)
                cv = red(t, axis=1, keepdims=True)
                ci = _first_index(t, cv, j * f, rows, f, ct)
                better = (cv > v) if op is Op.MAX else (cv < v)
                if ct is Acc.F32:
                    better = better | ((cv != cv) & (v == v))
                ai[...] = tl.where(better, ci, ai)
                v[...] = tl.where(better, cv, v)
        if vals is not None:
            tl.store(vals[rows, one], v, mask=rm)
        tl.store(idx[rows, one], ai.astype(tl.int32), mask=rm)


@T.polymorphic
def row_var(x, out, mean_out, divisor, std, tile=None, count=None):
    """Per row ``sum((x - mean)^2) / divisor`` (two passes, fp32), its sqrt for ``std``; the mean if asked.

    ``divisor`` and ``count`` (``C`` as a float; None: taken from the size, which then keys the variant) are
    numbers or ``[1, 1]`` fp32 tensors (runtime values).
    """
    r_dim, c_dim, pp, f, rr, one_pass = _shape(x, tile)
    cnt = T.runtime_scalar(count) if count is not None else float(c_dim)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(r_dim, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        rm = (rows < r_dim) if rr else None
        if one_pass:
            cols, cm, masked = _cols(c_dim, f, rm)
            t = tl.load(x[rows, cols], mask=cm).astype(tl.float32)
            mean = tl.sum(t, axis=1, keepdims=True) / cnt
            d = tl.where(cols < c_dim, t - mean, 0.0) if masked else t - mean
            ss = tl.sum(d * d, axis=1, keepdims=True)
        else:
            s = tl.zeros((pp, 1), tl.float32)
            for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                cols = j * f + tl.arange(f)[None, :]
                t = tl.load(x[rows, cols], mask=(rows < r_dim) & (cols < c_dim)).astype(tl.float32)
                s[...] = s + tl.sum(t, axis=1, keepdims=True)
            mean = s / cnt
            ss = tl.zeros((pp, 1), tl.float32)
            for j in tl.sequential_range(tl.cdiv(c_dim, f)):
                cols = j * f + tl.arange(f)[None, :]
                m = (rows < r_dim) & (cols < c_dim)
                t = tl.load(x[rows, cols], mask=m).astype(tl.float32)
                d = tl.where(cols < c_dim, t - mean, 0.0)
                ss[...] = ss + tl.sum(d * d, axis=1, keepdims=True)
        v = ss / T.runtime_scalar(divisor)
        tl.store(out[rows, one], tl.sqrt(v) if std else v, mask=rm)
        if mean_out is not None:
            tl.store(mean_out[rows, one], mean, mask=rm)


#: Rows :func:`col_sum` sums from zero before adding them to its running total.
COL_BLOCK = 128


@T.polymorphic
def col_sum(xt, out, pre, post, scale, p, tile=None):
    """``out[0, r] = post(sum_c pre(xt[c, r]))`` (``pre`` a :class:`Pre`, ``post`` a :class:`Post`): a sum over
    the partition axis of ``xt [C, R]``.

    For a reduction over leading dims the kept dims are contiguous. Per block of 512 kept columns, the rows are
    added one after another into a ``[1, 512]`` fp32 accumulator, :data:`COL_BLOCK` rows from zero at a time (two
    levels, as accurate as the CPU's cascade sum): the host JIT's order (one dense row stream, the
    accumulator in L1; a ``ones[128, 1]`` matmul over ``[128, 512]`` tiles, the NeuronCore's way to sum
    partitions, ran 5-7x slower here through the gemm's packing). ``tile``: the host's ``(C bucket, R bucket)``
    for runtime sizes (see :func:`_shape`).
    """
    c_dim, r_dim = xt.shape
    f = T.extent(r_dim, 512, tile and tile[1])
    ragged = T.ragged(r_dim, f)
    one = tl.arange(1)[:, None]
    nfull = c_dim // COL_BLOCK
    for jb in tl.affine_range(tl.cdiv(r_dim, f)):
        cols = jb * f + tl.arange(f)[None, :]
        m = (cols < r_dim) if ragged else None
        acc = tl.zeros((1, f), tl.float32)
        for ib in tl.sequential_range(nfull):  # each block of rows summed from zero, then added (two levels)
            blk = tl.zeros((1, f), tl.float32)
            for i in tl.sequential_range(COL_BLOCK):
                row = ib * COL_BLOCK + i + one
                blk[...] = blk + _PRE[pre](tl.load(xt[row, cols], mask=m).astype(tl.float32), p)
            acc[...] = acc + blk
        rest = tl.zeros((1, f), tl.float32)
        for i in tl.sequential_range(c_dim - nfull * COL_BLOCK):
            rest[...] = rest + _PRE[pre](tl.load(xt[nfull * COL_BLOCK + i + one, cols], mask=m).astype(tl.float32), p)
        tl.store(out[one, cols], _POST[post](acc + rest, scale, p), mask=m)


_SPREAD = 16384


def _as_rows(x: torch.Tensor, red: list[int]) -> Any:
    """``x`` with the reduced dims last, merged: a ``[R, C]`` piece (or a contiguous copy's view)."""
    kept = [d for d in range(x.dim()) if d not in red]
    r_sh = [x.shape[d] for d in kept]
    c_sh = [x.shape[d] for d in red]
    kr, ks = U.coalesce(r_sh, [[x.stride(d) for d in kept]])
    cr, cs = U.coalesce(c_sh, [[x.stride(d) for d in red]])
    if len(kr) > 1 or len(cr) > 1:
        xp = x.permute(kept + red).contiguous()
        return xp.view(U.prod(r_sh), U.prod(c_sh))
    r, c = U.prod(r_sh), U.prod(c_sh)
    rs = ks[0][0] if kr else 0
    cst = cs[0][0] if cr else 1
    return U.piece(x, (r, c), (rs, cst), x.storage_offset())  # a kernel argument only: no torch view


def _dims(self: torch.Tensor, dim: Sequence[int] | int | None) -> list[int] | None:
    """Normalised, sorted reduced dims (all for None/[]); None for invalid dims (declined)."""
    nd = self.dim()
    if isinstance(dim, int):
        dim = [dim]
    if nd == 0:
        return [] if not dim or all(d in (0, -1) for d in dim) else None
    dims = list(range(nd)) if not dim else [d if d >= 0 else d + nd for d in dim]
    if any(not 0 <= d < nd for d in dims) or len(set(dims)) != len(dims):
        return None
    return sorted(dims)


def _out_shape(self: torch.Tensor, red: list[int], keepdim: bool) -> list[int]:
    if keepdim:
        return [1 if d in red else n for d, n in enumerate(self.shape)]
    return [n for d, n in enumerate(self.shape) if d not in red]


def _spread_ok(x2: torch.Tensor) -> bool:
    return x2.shape[0] == 1 and x2.shape[1] >= _SPREAD and x2.stride(1) == 1


def _launch(x2: Any, o2: Any, op: Op, pre: Pre, post: Post, scale: float, p: float, ct: Acc) -> None:
    """``o2 [R, 1] = reduce(x2 [R, C])`` (tensors or pieces), spreading one long row over 128 partitions first.

    The divisor ``scale`` of ``Post.DIV`` (a count: it changes with the size) reaches the kernels as a
    ``[1, 1]`` device scalar, a runtime value, so a new size does not key a new variant.
    """
    r, c = x2.shape
    sc = U.scalar_tensor(float(scale), torch.float32) if post is _DIV else 1.0
    if op is _SUM and ct is _F32 and r > 1 and c > 1 and x2.stride(0) == 1 and x2.stride(1) >= r \
            and o2.is_contiguous() and not (pre is _POW and p < 0):
        # one launch per thread on blocks of 512 kept columns when big
        blocks = U.chunks(r, U.num_threads(), 512) if r * c >= U.PARALLEL_MIN_WORK else [(0, r)]
        U.run_parallel([U.launch(col_sum, U.piece(x2, (c, hi - lo), (x2.stride(1), 1), x2.storage_offset() + lo),
                                 U.piece(o2, (1, hi - lo), (r, 1), o2.storage_offset() + lo), pre, post, sc, p,
                                 (T.row_bucket(c), T.free_bucket(hi - lo, 512)))
                        for lo, hi in blocks])
    elif _spread_ok(x2) and ct is _F32:
        # one long row: partial results of [rows, cols] consecutive pieces (all partitions; a tile is
        # one linear stream), then one reduction of the partials
        c = x2.shape[1]
        cols = c // 128 if c <= 128 * U.ROW_1D else U.ROW_1D
        rows = c // cols
        rem = c - rows * cols
        n_part = rows + (1 if rem else 0)
        part = memory.empty((n_part, 1), torch.float32)
        off = x2.storage_offset()
        calls = []
        for s in U.row_blocks(rows, rows * cols):
            lo, hi, _ = s.indices(rows)
            calls.append(U.launch(row_reduce, U.piece(x2, (hi - lo, cols), (cols, 1), off + lo * cols),
                                  U.piece(part, (hi - lo, 1), (1, 1), lo), op, pre, _NO_POST, 1.0, p, ct,
                                  T.tile_of(hi - lo, cols, U.FREE_CHUNK)))
        if rem:
            calls.append(U.launch(row_reduce, U.piece(x2, (1, rem), (rem, 1), off + rows * cols),
                                  U.piece(part, (1, 1), (1, 1), rows), op, pre, _NO_POST, 1.0, p, ct,
                                  T.tile_of(1, rem, U.FREE_CHUNK)))
        U.run_parallel(calls)
        U.launch(row_reduce, U.piece(part, (1, n_part), (n_part, 1), 0), o2, op, _NO_PRE, post, sc, p, ct,
                 T.tile_of(1, n_part, U.FREE_CHUNK))()
    else:
        consts = (op, pre, post, sc, p, ct, T.tile_of(r, c, U.FREE_CHUNK))
        if len(U.row_blocks(r, r * c)) == 1:  # one launch: a reduction's fast lane repeats it
            fastlane.record_launch(row_reduce, (x2, o2, *consts))
            row_reduce(x2, o2, *consts)
        else:
            U.split_rows(row_reduce, [x2, o2], *consts)


#: Integer dtypes loaded into int32 exactly, with no range check.
_SMALL_INTS = (torch.int8, torch.int16, torch.uint8)
_SUM_INTS = (torch.bool, torch.int64, torch.int32, *_SMALL_INTS)  # integer (and bool) inputs of sum


def _widen(x: torch.Tensor) -> torch.Tensor:
    """An int32 copy of an int8/int16/uint8/bool tensor (the reduction kernels read 1- and 2-byte elements of
    strided row views wrongly at ragged tile edges, and a bool load's masked-off identity, -2^31 for a max, reads
    as True: all-False rows of odd length gave True at index n), else ``x``."""
    return x.to(torch.int32) if x.dtype in _SMALL_INTS or x.dtype == torch.bool else x


def _simple(self: Any, dim: Any, keepdim: bool, odt: torch.dtype, op: Op, pre: Pre = Pre.NONE,
            post: Post = Post.NONE, p: float = 0.0, empty_value: Any = None, ints: bool = False) -> Any:
    """Reduce ``self`` over ``dim`` into a new ``odt`` tensor; ``Post.DIV`` divides by the reduced count."""
    if not U.is_trn(self) or self.is_conj() or self.is_neg():
        return decline("self not a trn tensor, or a conj/neg bit")
    if self.dtype not in U.FLOAT_DTYPES and not (ints and self.dtype in (torch.int32, torch.bool, torch.int64,
                                                                          *_SMALL_INTS)):
        return decline("a dtype this reduction has no kernel for")
    if self.dtype == torch.bool and op in (_MAX, _MIN) and odt != torch.bool:
        return decline("max/min of bool into a non-bool result")
    red = _dims(self, dim)
    if red is None:
        return decline("dims out of range or repeated: torch raises")
    self = _widen(self)
    out = U.new_output(_out_shape(self, red, keepdim), odt)
    r = U.prod(self.shape[d] for d in range(self.dim()) if d not in red)
    c = U.prod(self.shape[d] for d in red)
    if r == 0:
        return out
    if c == 0:
        if empty_value is None:
            return decline("an empty reduction without an identity: torch raises")
        return out.fill_(empty_value)
    if self.dim() == 0:
        x2 = U.piece(self, (1, 1), (1, 1), self.storage_offset())
    else:
        x2 = _as_rows(self, red)
    o2 = U.piece(out, (r, 1), (1, 1), 0)
    ct = _F32 if self.dtype.is_floating_point else _I32
    scale = float(c) if post is _DIV else 1.0
    _launch(x2, o2, op, pre, post, scale, p, ct)
    return out


def _float_out(self: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype | None:
    odt = dtype or self.dtype
    return odt if odt in U.FLOAT_DTYPES else None


# --- sum / mean / prod -------------------------------------------------------------------------------------
_C64 = (*U.FLOAT_DTYPES, torch.complex64)  # complex64 reduces on its real/imaginary planes (complex_planes.py)


def _int_sum_ok(self: torch.Tensor, dim: Any) -> bool:
    """The int32 sums of an int32/int64 reduction are exact: every value ``|x| <= (2^31 - 1) // C``
    (``C``: elements per output), checked on the device (one host sync). Larger values are declined."""
    red = _dims(self, dim)
    if red is None or self.numel() == 0:
        return red is not None
    c = max(1, U.prod(self.shape[d] for d in red))
    bound = (2**31 - 1) // c
    if self.dtype == torch.int64:
        from stdlib_kernels.elementwise.pointwise import int64_ok

        return int64_ok(self, bound)  # the loads then narrow int64 to its (exact) low word
    if self.dtype in _SMALL_INTS and 2 ** (8 * self.element_size()) <= bound:
        return True  # no value of the dtype can overflow
    return -bound <= int(self.amin().item()) and int(self.amax().item()) <= bound


def _sum(self: Any, dim: Any, keepdim: bool, dtype: torch.dtype | None) -> Any:
    if not U.is_trn(self):
        return decline("self not a trn tensor")
    if self.dtype == torch.complex64:
        return _complex.sum_planes(self, dim, keepdim, dtype)
    if self.dtype == torch.bool and dtype in (None, torch.int64, torch.int32):
        if self.numel() >= 2**31:
            return decline("a bool sum over 2^31 or more elements (int32 counts)")
        return _simple(self, dim, keepdim, dtype or torch.int64, _SUM, empty_value=0, ints=True)
    if self.dtype in (torch.int64, torch.int32, *_SMALL_INTS) and dtype in (
            None, torch.int64, self.dtype if self.dtype in (torch.int64, torch.int32) else torch.int64):
        # int32 accumulation, exact when the values are small enough (counts: masked means, prod's zero counts)
        if not _int_sum_ok(self, dim):
            return decline("int64/int32 values whose sum may leave int32")
        return _simple(self, dim, keepdim, torch.int64 if dtype is None else dtype, _SUM, empty_value=0, ints=True)
    if self.dtype in _SUM_INTS and dtype in (*U.FLOAT_DTYPES, *_SMALL_INTS, torch.int32):
        return _sum_as(self, dim, keepdim, dtype)
    if dtype == torch.complex64 and (self.dtype in _SUM_INTS or self.dtype in U.FLOAT_DTYPES):
        return _sum(self.to(torch.complex64), dim, keepdim, None)  # torch converts the input to dtype= first
    odt = _float_out(self, dtype)
    if odt is None or self.dtype not in U.FLOAT_DTYPES:
        return decline("not a float input, or an unsupported dtype=")
    if odt != self.dtype:  # torch converts the input first: float32 -> float16 rounds each element
        self = self.to(odt)
    return _simple(self, dim, keepdim, odt, _SUM, empty_value=0.0)


def _sum_as(self: torch.Tensor, dim: Any, keepdim: bool, dtype: torch.dtype) -> Any:
    """Sum of an integer/bool tensor into a float/integer ``dtype=``: the input is converted to ``dtype`` first, as
    torch does; integer sums are exact (checked int32 accumulation), then wrapped into ``dtype`` as the CPU's."""
    x = self.to(dtype)
    if dtype in U.FLOAT_DTYPES:
        return _sum(x, dim, keepdim, None)
    return r if (r := _sum(x, dim, keepdim, torch.int64)) is NotImplemented else r.to(dtype)


def _float_rows_key(self: Any, dim: Any, keepdim: Any) -> Any:
    """The fast-lane key of a float reduction ``op(self, dim, keepdim)`` on a ``trn`` tensor: dtype, shape, strides,
    dims and keepdim decide the lowering's launch and its constant (the divisor of a mean); else None. A fast
    function runs before the registry's argument checks: the key admits only calls they pass, or that the lowering
    declines (bad dims), so torch's errors are raised as before."""
    if type(self) not in (torch.Tensor, torch.nn.Parameter) or self.is_cpu or self.dtype not in U.FLOAT_DTYPES \
            or self.is_neg() or type(keepdim) is not bool or self.dim() > 64:  # the dim check raises past 64 dims
        return None
    if dim is None or isinstance(dim, int):
        return self.dtype, self.shape, self.stride(), dim, keepdim
    return self.dtype, self.shape, self.stride(), tuple(dim), keepdim


def _rows_fast(lower: Callable[..., Any]) -> Callable[..., Any]:
    """A fast lane for ``lower(self, dim, keepdim)`` (a float row reduction made of one launch): repeated calls on
    one layout rerun that launch (fastlane.fast_function; the mean's divisor is a frozen cached constant)."""
    fast = fastlane.fast_function(lower, 3, _float_rows_key, allow_consts=True)

    def rows_fast(*args: Any) -> Any:
        return fast(*args, False) if len(args) == 2 else fast(*args)  # keepdim omitted: its default

    rows_fast.lanes = fast.lanes  # type: ignore[attr-defined]
    return rows_fast


@lowering("aten::sum.dim_IntList", dtypes=None, fast=_rows_fast(lambda x, d, k: sum_dim(x, d, k)))
def sum_dim(self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *,
            dtype: torch.dtype | None = None) -> Any:
    """Sum over ``dim`` (all dims for None or []); float inputs, and bool inputs counted in int32."""
    return _sum(self, dim, keepdim, dtype)


@lowering("aten::sum", dtypes=None)
def sum_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> Any:
    """Sum of all elements."""
    return _sum(self, None, False, dtype)


@lowering("aten::nansum", dtypes=None)
def nansum(self: torch.Tensor, dim: Sequence[int] | None = None, keepdim: bool = False, *,
           dtype: torch.dtype | None = None) -> Any:
    """Sum treating NaN as zero (integer inputs: a plain sum); the registry checks ``dim`` as torch does."""
    if not U.is_trn(self) or self.is_complex():
        return decline("self not a real trn tensor: torch raises for complex")
    return _sum(torch.where(self.isnan(), 0.0, self) if self.is_floating_point() else self, dim, keepdim, dtype)


@lowering("aten::mean.dim", dtypes=_C64, fast=_rows_fast(lambda x, d, k: mean_dim(x, d, k)))
def mean_dim(self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *,
             dtype: torch.dtype | None = None) -> Any:
    """Mean over ``dim`` (all dims for None or [])."""
    if self.dtype == torch.complex64:
        return _complex.sum_planes(self, dim, keepdim, dtype, mean=True)
    odt = _float_out(self, dtype)
    if odt is None:
        return decline("a non-float input or dtype=")
    return _simple(self, dim, keepdim, odt, _SUM, post=_DIV, empty_value=math.nan)


@lowering("aten::mean", dtypes=_C64)
def mean_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> Any:
    """Mean of all elements."""
    return mean_dim(self, None, False, dtype=dtype)


# --- amax / amin / max / min / argmax / argmin ---------------------------------------------------------------
_MINMAX_DTYPES = (*U.FLOAT_DTYPES, torch.int32, torch.bool, *_SMALL_INTS)


def _minmax(self: Any, dim: Any, keepdim: bool, op: Op) -> Any:
    """amax/amin/max/min; int64 inputs whose values fit int32 (a device check) reduce in int32, exactly."""
    if U.is_trn(self) and self.dtype == torch.int64 and self.numel():
        from stdlib_kernels.elementwise.pointwise import int64_ok

        if not int64_ok(self, 2**31):
            return _minmax_words(self, dim, keepdim, op)
    return _simple(self, dim, keepdim, self.dtype, op, ints=True)


def _minmax_words(self: torch.Tensor, dim: Any, keepdim: bool, op: Op) -> Any:
    """Exact int64 amax/amin on the two int32 words of each element: the extreme high word, then the extreme low
    word among the elements holding it (compared unsigned: its sign bit flipped), the two words joined again."""
    red = _dims(self, dim)
    if red is None or self.is_conj() or self.is_neg():
        return decline("invalid dims: torch raises")
    x = self.contiguous().reshape(self.shape or (1,))
    red = red if self.dim() else [0]
    words = x.view(torch.int32).reshape(*x.shape, 2)
    pick = torch.amax if op is _MAX else torch.amin
    hi, lo = words[..., 1], torch.bitwise_xor(words[..., 0], U.SIGN32)
    mh = pick(hi, red, keepdim=True)
    ml = pick(torch.where(hi == mh, lo, _I32_MIN if op is _MAX else _I32_MAX), red, keepdim=True)
    r = torch.stack((torch.bitwise_xor(ml, U.SIGN32), mh), -1).contiguous().view(torch.int64).squeeze(-1)
    if not self.dim():
        return r.reshape(())
    return r if keepdim else r.reshape(_out_shape(self, red, False))


def _empty_slice_check(self: torch.Tensor, dim: Any, name: str) -> None:
    """torch's errors for amax/amin over an empty slice (they have no identity)."""
    if self.numel() or not U.is_trn(self):
        return
    red = _dims(self, dim)
    if self.dim() and (dim is None or len(dim) == 0):
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                           "reduction dim with the 'dim' argument.")
    for d in red or []:
        if self.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


@lowering("aten::amax", dtypes=_MINMAX_DTYPES + (torch.int64,))
def amax(self: torch.Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> Any:
    """Maximum over ``dim`` (all dims for []); NaN propagates."""
    _empty_slice_check(self, dim, "amax")
    return _minmax(self, dim, keepdim, _MAX)


@lowering("aten::amin", dtypes=_MINMAX_DTYPES + (torch.int64,))
def amin(self: torch.Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> Any:
    """Minimum over ``dim`` (all dims for [])."""
    _empty_slice_check(self, dim, "amin")
    return _minmax(self, dim, keepdim, _MIN)


_aminmax_warned = [False]


def _legacy_aminmax(self: torch.Tensor, dim: Any, keepdim: bool) -> Any:
    """``(amin, amax)``, with torch's once-per-process deprecation warning (every call under warn-always)."""
    if not _aminmax_warned[0] or torch.is_warn_always_enabled():
        _aminmax_warned[0] = True
        warn_like_torch("_aminmax is deprecated as of PyTorch 1.11 and will be removed in a future release. Use "
                        "aminmax instead. This warning will only appear once per process.")
    lo = _minmax(self, dim, keepdim, _MIN)
    return lo if lo is NotImplemented else (lo, _minmax(self, dim, keepdim, _MAX))


@lowering("aten::_aminmax", dtypes=_MINMAX_DTYPES + (torch.int64,))
def legacy_aminmax(self: torch.Tensor) -> Any:
    """The deprecated ``torch._aminmax``: ``(min, max)`` of all elements."""
    return _legacy_aminmax(self, (), False)


@lowering("aten::_aminmax.dim", dtypes=_MINMAX_DTYPES + (torch.int64,))
def legacy_aminmax_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    """The deprecated ``torch._aminmax(x, dim, keepdim)``."""
    return _legacy_aminmax(self, [dim], keepdim)


@lowering("aten::max", dtypes=_MINMAX_DTYPES + (torch.int64,))
def max_all(self: torch.Tensor) -> Any:
    """Maximum of all elements (empty tensors are declined: torch raises)."""
    return _minmax(self, None, False, _MAX)


@lowering("aten::min", dtypes=_MINMAX_DTYPES + (torch.int64,))
def min_all(self: torch.Tensor) -> Any:
    """Minimum of all elements."""
    return _minmax(self, None, False, _MIN)


def _arg(self: Any, dim: int | None, keepdim: bool, op: Op, with_values: bool) -> Any:
    if not U.is_trn(self) or self.dtype not in _MINMAX_DTYPES + (torch.int64,) or self.is_conj() or self.is_neg():
        return decline("self not a trn tensor of a supported dtype, or a conj/neg bit")
    if self.dtype == torch.int64 and self.numel():
        from stdlib_kernels.elementwise.pointwise import int64_ok

        if not int64_ok(self, 2**31):
            return decline("int64 values beyond 2^31 (int32 compares would wrap)")
    nd = self.dim()
    if dim is None:
        red = list(range(nd))
        shape = [1] * nd if keepdim else []
    else:
        if not -max(nd, 1) <= dim < max(nd, 1):
            return decline("dim out of range: torch raises")
        d = dim % max(nd, 1)
        red = [d] if nd else []
        shape = _out_shape(self, red, keepdim)
    name = ("max" if op is _MAX else "min") if with_values else ("argmax" if op is _MAX else "argmin")
    if dim is None and self.numel() == 0:
        raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
    if U.prod(self.shape[d] for d in red) == 0:
        raise IndexError(f"{name}(): Expected reduction dim {red[0]} to have non-zero size.")
    idx = torch.empty(shape, dtype=torch.int64, device="trn")
    vals = torch.empty(shape, dtype=self.dtype, device="trn") if with_values else None
    if self.numel() == 0:  # no rows: empty results (the reduced dim is not empty)
        return (vals, idx) if with_values else idx
    self = _widen(self)
    r = U.prod(self.shape[d] for d in range(nd) if d not in red)
    x2 = _as_rows(self, red) if nd else U.view(self, (1, 1), (1, 1), self.storage_offset())
    v2 = U.view(vals, (r, 1), (1, 1), 0) if vals is not None else None
    row_arg_reduce(x2, v2, U.view(idx, (r, 1), (1, 1), 0), op, _F32 if self.dtype.is_floating_point else _I32,
                   T.tile_of(*x2.shape, U.FREE_CHUNK))
    return (vals, idx) if with_values else idx


@lowering("aten::max.dim", dtypes=None)
def max_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    """``(values, indices)`` of the maximum along ``dim`` (first occurrence; NaN wins)."""
    return _arg(self, dim, keepdim, _MAX, True)


@lowering("aten::min.dim", dtypes=None)
def min_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    """``(values, indices)`` of the minimum along ``dim``."""
    return _arg(self, dim, keepdim, _MIN, True)


@lowering("aten::argmax", dtypes=None)
def argmax(self: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """Index of the first maximum (over the flattened tensor for ``dim=None``)."""
    if self.dtype == torch.bool:
        return decline("bool input: torch raises")
    return _arg(self, dim, keepdim, _MAX, False)


@lowering("aten::argmin", dtypes=None)
def argmin(self: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """Index of the first minimum."""
    if self.dtype == torch.bool:
        return decline("bool input: torch raises")
    return _arg(self, dim, keepdim, _MIN, False)


# --- var / std ---------------------------------------------------------------------------------------------
def _var(self: Any, dim: Any, correction: Any, keepdim: bool, std: bool, with_mean: bool) -> Any:
    if U.is_trn(self) and self.dtype == torch.complex64:
        return _complex.var_planes(self, dim, correction, keepdim, std, with_mean)
    if not U.is_trn(self) or self.dtype not in U.FLOAT_DTYPES or self.is_conj() or self.is_neg():
        return decline("self not a float trn tensor, or a conj/neg bit")
    red = _dims(self, dim)
    if red is None:
        return decline("dims out of range or repeated: torch raises")
    corr = 1.0 if correction is None else float(correction)
    shape = _out_shape(self, red, keepdim)
    out = torch.empty(shape, dtype=self.dtype, device="trn")
    mean = torch.empty(shape, dtype=self.dtype, device="trn") if with_mean else None
    r = U.prod(self.shape[d] for d in range(self.dim()) if d not in red)
    c = U.prod(self.shape[d] for d in red)
    if (c if r else 0) - corr <= 0:  # torch's warning (an empty reduction, or a correction >= the count)
        import warnings

        fname = ("std" if std else "var") + ("_mean" if with_mean else "")
        warnings.warn(f"{fname}(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                      "factor (input numel divided by output numel).", UserWarning, stacklevel=2)
    if r == 0:
        return (out, mean) if with_mean else out
    if c == 0:  # an empty reduction: NaN, as torch fills it
        out.fill_(math.nan)
        return (out, mean.fill_(math.nan)) if with_mean else out
    x2 = _as_rows(self, red) if self.dim() else U.view(self, (1, 1), (1, 1), self.storage_offset())
    m2 = U.view(mean, (r, 1), (1, 1), 0) if mean is not None else None
    row_var(x2, U.view(out, (r, 1), (1, 1), 0), m2, U.scalar_tensor(max(0.0, c - corr), torch.float32), std,
            T.tile_of(*x2.shape, U.FREE_CHUNK), U.scalar_tensor(float(c), torch.float32))
    return (out, mean) if with_mean else out


def _var_lowering(name: str, std: bool, with_mean: bool, doc: str) -> None:
    """Register ``aten::<name>.correction`` (var, std, var_mean, std_mean: one kernel, :func:`row_var`)."""

    def fn(self: torch.Tensor, dim: Sequence[int] | None = None, *, correction: Any = None,
           keepdim: bool = False) -> Any:
        return _var(self, dim, correction, keepdim, std, with_mean)

    fn.__doc__ = doc
    lowering(f"aten::{name}.correction", dtypes=_C64)(fn)


_var_lowering("var", False, False, "Variance over ``dim`` with ``correction`` (default 1).")
_var_lowering("std", True, False, "Standard deviation over ``dim``.")
_var_lowering("var_mean", False, True, "``(var, mean)`` in one kernel.")
_var_lowering("std_mean", True, True, "``(std, mean)`` in one kernel.")

from stdlib_kernels.reduction import complex_planes as _complex  # noqa: E402 - complex64 on planes
from stdlib_kernels.reduction import logic as _logic  # noqa: E402,F401 - registers all, any, count_nonzero
from stdlib_kernels.reduction import norms as _norms  # noqa: E402,F401 - registers vector_norm, logsumexp
from stdlib_kernels.reduction import products as _products  # noqa: E402,F401 - registers prod
