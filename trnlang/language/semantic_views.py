"""Tile views from index values (NKI style): unit-stride keys become slices, other affine keys a strided /
permuted access pattern on the region (``Region.ap``), read and written in place by the instructions."""

from __future__ import annotations

import math
from typing import Any

import sympy

from trnlang.frontend.errors import ShapeError, TraceError
from trnlang.frontend.tracer import nki_rules
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
    if r.ap is not None and not t.nblock:
        return view_of_view(t, key)
    if t.nblock:
        raise ShapeError("a strided view of a tile with block dimensions: index its blocks first")
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


def _flat_view(t: Tile, view: tuple[int, ...], strides: list[int], offset: Any) -> Tile:
    """The view of ``t``'s buffer whose element ``a`` is at flat ``base(t) + offset + sum(strides[k] * a_k)``
    (``offset``: ints times loop symbols plus an int). Each stride and offset term is split over the buffer's
    dimensions (a linear map, so addresses are exact) and the view is built like an index-value view."""
    r = t.region
    dims = list(range(len(r.buf.shape)))
    bstride = [math.prod(r.buf.shape[d + 1:]) for d in dims]
    axes = [axis_sym(a) for a in range(len(view))]
    exprs: list[Any] = [sympy.Integer(0) for _ in dims]

    def split(v: Any, coeff: Any) -> None:
        if not (isinstance(v, int) or (isinstance(v, sympy.Integer))) or int(v) < 0:
            raise ShapeError(f"a view's step or offset {v} must be a non-negative integer number of elements")
        v = int(v)
        for d in dims:
            q, v = divmod(v, bstride[d])
            exprs[d] += q * coeff
        if v:
            raise ShapeError(f"a view's step or offset {v} does not address whole elements of the tile")

    c0, terms = sympy.expand(sympy.sympify(offset)).as_coeff_add()
    split(c0, 1)
    for term in terms:
        c, syms = term.as_coeff_mul()
        if len(syms) != 1 or not syms[0].is_Symbol:
            raise ShapeError(f"a view's offset {offset} must be affine in loop variables")
        split(c, syms[0])
    for a, st in enumerate(strides):
        split(st, axes[a])
    base = Tile(Region(r.buf, tuple(r.starts), tuple(r.buf.shape), tuple(True for _ in dims)))
    return pattern_view(base, tuple(Index(view, e) for e in exprs))


def view_of_view(t: Tile, key: tuple[Any, ...]) -> Tile:
    """A view of a strided view (``v = t[i_p, 2 * i_f]``; ``v[i_p, 0:4]``, ``v[:, j]``, ``v[i_p, 2 * i_g]``):
    the composed access pattern on the buffer, one strided access, no copy. Keys: slices with step 1, ints
    and loop variables, or index values (``nl.arange``) on every axis of the view."""
    r = t.region
    assert r.ap is not None
    idx = [k for k in key if isinstance(k, Index) and k.shape != ()]
    if idx:
        nd = max(k.ndim for k in idx)
        view = broadcast_shapes(*[(1,) * (nd - k.ndim) + k.shape for k in idx])
    else:
        view = ()
    axes = [axis_sym(a) for a in range(max(len(view), len(key)))]
    new_view: list[int] = list(view)
    exprs: list[Any] = []
    scalar = [j for j, k in enumerate(key) if not isinstance(k, (slice, DynSlice)) and not (
        isinstance(k, Index) and k.shape != ())]
    if not idx and nki_rules() and len(key) - len(scalar) == 1 and len(key) > 1 and 0 not in scalar:
        # NKI: a tile keeps a free dimension (v[0:4, j] is [4, 1]): the last single index stays an axis of 1
        j = scalar[-1]
        key = key[:j] + (DynSlice(sympy.sympify(key[j].expr if isinstance(key[j], Index) else key[j]), 1),) + \
            key[j + 1:]
    for j, (k, (_, n)) in enumerate(zip(key, r.ap)):
        if isinstance(k, (slice, DynSlice)) and not idx:
            if isinstance(k, slice) and k.step not in (None, 1):
                raise ShapeError("a strided slice of a strided view: write the composed index values instead")
            start = sympy.sympify(k.start if isinstance(k, DynSlice) else (k.start or 0))
            size = k.size if isinstance(k, DynSlice) else (k.stop if k.stop is not None else n) - (k.start or 0)
            exprs.append(start + axes[len(new_view)])
            new_view.append(int(size))
        elif isinstance(k, slice) and k == slice(None) and idx:
            exprs.append(axes[j])
        elif isinstance(k, Index) and k.shape != ():
            exprs.append(k._aligned(len(view)))
        elif isinstance(k, (int, Index, sympy.Expr)) and not isinstance(k, bool):
            exprs.append(sympy.sympify(k.expr if isinstance(k, Index) else k))
        else:
            raise TraceError(f"a view of a strided view takes slices, ints or index values, got {k!r}")
    view_t = tuple(new_view)
    vaxes = [axis_sym(a) for a in range(len(view_t))]
    strides = [0] * len(view_t)
    offset: Any = sympy.Integer(0)
    for e, (st, n) in zip(exprs, r.ap):
        e = sympy.expand(e)
        const = e.subs({a: 0 for a in vaxes})
        offset += st * const
        hi = const
        for a_i, a in enumerate(vaxes):
            c = e.coeff(a)
            if not c.is_Integer or int(c) < 0:
                raise ShapeError(f"index {e} of a strided view needs non-negative integer coefficients")
            strides[a_i] += int(c) * st
            hi += int(c) * (view_t[a_i] - 1)
        lo_hi = [const.subs({s: 0 for s in const.free_symbols}), hi]
        if any(v.is_number and (v < 0 or v >= n) for v in lo_hi):
            raise ShapeError(f"index {e} leaves the strided view's axis of size {n}")
    return _flat_view(t, view_t, strides, offset)


def explicit_ap(t: Tile, pattern: Any, offset: Any = 0) -> Tile:
    """NKI's explicit access pattern ``t.ap(pattern=[[partition_step, n_p], [step_1, n_1], ...], offset=k)``:
    steps and offset in elements of the tile's buffer, from the tile's first element (its flat address
    when the tile is itself a strided view). The partition step must be a whole number of partitions."""
    r = t.region
    if not isinstance(pattern, (list, tuple)) or not pattern or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, int) and v >= 0 for v in p)
            for p in pattern):
        raise TraceError(f".ap(pattern=...) takes [[step, count], ...] pairs of non-negative ints, got {pattern!r}")
    if not isinstance(offset, int) or offset < 0:
        raise TraceError(f".ap(offset=...) must be a non-negative int, got {offset!r}")
    if t.nblock:
        raise ShapeError(".ap() of a tile with block dimensions: index its blocks first")
    row = math.prod(r.buf.shape[1:])
    if pattern[0][0] % row:
        raise ShapeError(f".ap() partition step {pattern[0][0]} is not a whole number of partitions ({row} elements "
                         "each)")
    return _flat_view(t, tuple(n for _, n in pattern), [st for st, _ in pattern], offset)


def split_newaxes(key: Any, ndim: int) -> tuple[tuple[Any, ...], tuple[int, ...]] | None:
    """numpy's ``None`` (new axis) in a tile key: the key without them and the result axes where a size-1 axis
    goes (``v[:, None]`` on a ``[P]`` tile -> ``((slice(None),), (1,))``); None when the key has no ``None``.
    A new axis in front of the partition dimension is a ``ShapeError`` (it would be a new partition dimension)."""
    if not isinstance(key, tuple):
        key = (key,)
    if not any(k is None for k in key):
        return None
    if any(k is Ellipsis for k in key):  # spell the Ellipsis out, counting only the keys that index an axis
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        fill = ndim - sum(1 for k in key if k is not None and k is not Ellipsis)
        key = key[:i] + (slice(None),) * max(fill, 0) + key[i + 1:]
    rest: list[Any] = []
    new_at: list[int] = []
    pos = 0  # the axis of the result the next key element makes
    for k in key:
        if k is None:
            new_at.append(pos)
            pos += 1
            continue
        rest.append(k)
        if isinstance(k, (slice, DynSlice)) or (isinstance(k, Index) and k.shape != ()):
            pos += 1
    if new_at and new_at[0] == 0:
        raise ShapeError("a tile's first axis is its partition dimension: t[None, ...] would make a new one; "
                         "index a free axis (v[:, None] makes a [P] value a per-partition [P, 1] tile)")
    return tuple(rest), tuple(new_at)

