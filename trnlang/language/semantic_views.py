"""Tile views from index values (NKI style): unit-stride keys become slices, other affine keys a strided /
permuted access pattern on the region (``Region.ap``), read and written in place by the instructions."""

from __future__ import annotations

import math
from typing import Any

import sympy

from trnlang.frontend.errors import ShapeError, TraceError
from trnlang.ir.nodes import Region, axis_sym
from trnlang.language.values import DynSlice, Index, Tile, broadcast_shapes


def index_key_as_slices(key: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[Any, ...] | None:
    """NKI-style tile indexing with index values (``t[i_p, j * 512 + i_f]``, ``i_p = arange(128)[:, None]``):
    when each index value is ``start + _a{m}``, one axis per dimension in order, the slices
    ``[start, start + n)``; None for a strided or permuted view (``t[i_p, 2 * i_f]``)."""
    idx = [k for k in key if isinstance(k, Index) and k.shape != ()]
    nd = max(k.ndim for k in idx)
    out: list[Any] = []
    last = -1
    for d, k in enumerate(key):
        if not (isinstance(k, Index) and k.shape != ()):
            out.append(k)
            continue
        e = k._aligned(nd)
        axes = [a for a in e.free_symbols if a.name.startswith("_a")]
        full = (1,) * (nd - k.ndim) + k.shape
        ok = len(axes) == 1 and e.coeff(axes[0]) == 1 and int(axes[0].name[2:]) > last
        if ok:
            m = int(axes[0].name[2:])
            start = sympy.expand(e - axes[0])
            ok = not any(a.name.startswith("_a") for a in start.free_symbols) and (
                sum(1 for x in full if x != 1) <= 1)
        if not ok:
            return None
        last = m
        out.append(DynSlice(start, full[m]))
    return tuple(out)


def pattern_view(t: Tile, key: tuple[Any, ...]) -> Tile:
    """A strided / permuted view ``t[e_0, e_1, ...]`` with affine index values ``e_d`` (NKI's access patterns:
    ``in_tile[i_p, 2 * i_h + i_k, ...]``): the engines read it as one access pattern, no copy. The first
    index must be ``start + step * i_p`` (``t[2 * i_p, i_f]``: every other partition; the view's partitions are
    partitions of the tile, in order); coefficients are non-negative ints."""
    r = t.region
    if t.nblock or r.ap is not None:
        raise ShapeError("a strided view of a tile with block dimensions or of a strided view is not supported")
    idx = [k for k in key if isinstance(k, Index)]
    nd = max(k.ndim for k in idx)
    view = broadcast_shapes(*[(1,) * (nd - k.ndim) + k.shape for k in idx])
    dims = [d for d, kp in enumerate(r.keep) if kp]
    bstride = [math.prod(r.buf.shape[d + 1:]) for d in range(len(r.buf.shape))]
    axes = [axis_sym(a) for a in range(nd)]
    strides = [0] * nd
    starts = list(r.starts)
    sizes = list(r.sizes)
    for j, (k, d) in enumerate(zip(key, dims)):
        if isinstance(k, slice) and k == slice(None):
            k = Index((sizes[d],), axis_sym(0))[(None,) * (j) + (slice(None),) + (None,) * (nd - j - 1)]
        if not isinstance(k, (Index, int)):
            raise TraceError(f"a strided tile view takes index values or ints on every dimension, got {k!r}")
        e = sympy.expand(k._aligned(nd) if isinstance(k, Index) else sympy.Integer(k))
        const = e.subs({a: 0 for a in axes})
        extent = 0
        for a_i, a in enumerate(axes):
            c = e.coeff(a)
            if not c.is_Integer or int(c) < 0 or e.coeff(a, 2) != 0:
                raise ShapeError(f"tile index {k} on dimension {j} of a tile of shape {t.shape}: a view needs "
                                 "non-negative integer coefficients of arange axes")
            strides[a_i] += int(c) * bstride[d]
            extent += int(c) * (view[a_i] - 1)
        step = e.coeff(axes[0]) if nd else 0
        if j == 0 and (not nd or step < 1 or sympy.expand(e - const - step * axes[0]) != 0):
            raise ShapeError(f"tile index {k} on the partition dimension must be start + step * "
                             "arange(n)[:, None, ...] (the view's partitions are partitions of the tile, in order)")
        starts[d] = starts[d] + const
        sizes[d] = extent + 1
    region = Region(r.buf, tuple(sympy.sympify(s) for s in starts), tuple(sizes), tuple(r.keep),
                    tuple(zip(strides, view)))
    return Tile(region)


def explicit_ap(t: Tile, pattern: Any, offset: Any = 0) -> Tile:
    """NKI's explicit access pattern ``t.ap(pattern=[[partition_step, n_p], [step_1, n_1], ...], offset=k)``:
    steps and offset in elements of the tile's row-major buffer. Each step is split over the buffer's
    dimensions (a linear map, so the flat address is exact) and the view is built like an index-value view
    (``pattern_view``): the partition step must be a whole number of partitions."""
    r = t.region
    if not isinstance(pattern, (list, tuple)) or not pattern or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, int) and v >= 0 for v in p)
            for p in pattern):
        raise TraceError(f".ap(pattern=...) takes [[step, count], ...] pairs of non-negative ints, got {pattern!r}")
    if not isinstance(offset, int) or offset < 0:
        raise TraceError(f".ap(offset=...) must be a non-negative int, got {offset!r}")
    if t.nblock or r.ap is not None:
        raise ShapeError(".ap() of a tile with block dimensions or of a strided view is not supported")
    dims = [d for d, kp in enumerate(r.keep) if kp]
    bstride = [math.prod(r.buf.shape[d + 1:]) for d in range(len(r.buf.shape))]
    if pattern[0][0] % bstride[dims[0]]:
        raise ShapeError(f".ap() partition step {pattern[0][0]} is not a whole number of partitions "
                         f"({bstride[dims[0]]} elements each)")
    view = tuple(n for _, n in pattern)
    axes = [axis_sym(a) for a in range(len(view))]
    exprs: list[Any] = [sympy.Integer(0) for _ in dims]

    def split(v: int, coeff: Any) -> None:
        for i, d in enumerate(dims):
            q, v = divmod(v, bstride[d])
            exprs[i] += q * coeff
        if v:
            raise ShapeError(f".ap() step or offset {v} does not address whole elements of the tile")

    split(offset, 1)
    for a, (step, _n) in enumerate(pattern):
        split(step, axes[a])
    return pattern_view(t, tuple(Index(view, e) for e in exprs))
