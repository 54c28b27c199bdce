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
    index must be ``start + i_p`` (partitions stay partitions); coefficients are non-negative ints."""
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
        if j == 0 and (e - const != axes[0] if nd else True):
            raise ShapeError(f"tile index {k} on the partition dimension must be start + arange(n)[:, None, ...] "
                             "(partitions stay partitions in a view)")
        starts[d] = starts[d] + const
        sizes[d] = extent + 1
    region = Region(r.buf, tuple(sympy.sympify(s) for s in starts), tuple(sizes), tuple(r.keep),
                    tuple(zip(strides, view)))
    return Tile(region)
