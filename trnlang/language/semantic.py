"""Semantics of the tile language: checks, type promotion, broadcasting, and IR emission.

The documented builtins in ``core.py`` call into here; this module checks the
user's arguments (raising TrnErrors at the user's line), decides dtypes and
engines, and emits ISA-level instructions through the trace context.
"""

from __future__ import annotations

import math
from typing import Any

import sympy

from trnlang.frontend.errors import BoundsError, DTypeError, ShapeError, TraceError
from trnlang.frontend.tracer import current, nki_rules
from trnlang.ir.nodes import Access, Imm, Instr, Region, axis_sym, gather_sym
from trnlang.ir.ops import ALU_SPECS, Alu, AluKind, Op
from trnlang.ir.types import DType, Engine, Space, promote, to_dtype
from trnlang.language.semantic_views import index_key_as_slices, pattern_view, split_newaxes, view_of_view
from trnlang.language.values import (
    AccessPattern,
    DynSlice,
    HbmRef,
    Index,
    ParDim,
    Pred,
    Tile,
    broadcast_shapes,
    broadcasts_into,
    check_partition_vectors,
    const_int,
    to_expr,
)

PMAX = 128
_ZERO = sympy.Integer(0)


# --------------------------------------------------------------------------------------
# dtypes and operands
# --------------------------------------------------------------------------------------
def as_dtype(d: Any, what: str = "dtype") -> DType:
    """A DType from a trnlang/torch/numpy dtype; DTypeError naming the supported set otherwise."""
    r = to_dtype(d)
    if r is None or r == DType.int64:
        names = ", ".join(x.name.rstrip("_") for x in DType if x != DType.int64)
        raise DTypeError(f"unsupported {what} {d!r}; trnlang tiles support {names}")
    return r


def as_alu(op: Any) -> Alu:
    """An Alu from an Alu, a tl function (``tl.exp``) or a name (``"add"``)."""
    if isinstance(op, Alu):
        return op
    a = getattr(op, "_alu", None)
    if isinstance(a, Alu):
        return a
    if isinstance(op, str) and op in Alu.__members__:
        return Alu[op]
    if callable(op) and getattr(op, "__name__", None) in Alu.__members__:
        return Alu[op.__name__]
    raise TraceError(f"unknown ALU operation {op!r}; pass a tl function (tl.add) or an op name ('add')")


def _scalar_dtype(v: Any) -> DType:
    if isinstance(v, bool):
        return DType.bool_
    if isinstance(v, int):
        return DType.int32
    return DType.float32


def _result_dtype(alu: Alu, a: DType, b: DType | None, a_scalar: bool = False, b_scalar: bool = False) -> DType:
    spec = ALU_SPECS[alu]
    if spec.compare:
        return DType.bool_
    if b is None:
        d = a
    elif a_scalar and not b_scalar:  # python scalars do not widen a tile's dtype (torch rule)
        d = b if (b.is_float or not a.is_float) else DType.float32
    elif b_scalar and not a_scalar:
        d = a if (a.is_float or not b.is_float) else DType.float32
    else:
        d = promote(a, b)
    if spec.int_only:
        if d.is_float:
            raise DTypeError(f"{alu.value} needs integer or bool operands, got {d.name}")
        return d
    if d.is_int and (spec.transcendental or alu in (Alu.divide, Alu.reciprocal)):
        return DType.float32  # true division and math functions of ints give floats (torch rule)
    if d == DType.bool_ and alu in (Alu.add, Alu.subtract, Alu.multiply, Alu.negative):
        return DType.int32
    if d in (DType.float8_e4m3, DType.float8_e5m2):
        return DType.float32  # fp8 is a storage type: compute results are fp32
    return d


def to_tile(x: Any, shape_hint: tuple[int, ...] | None = None) -> Tile:
    """Turn an Index/Pred into a tile (GpSimd iota); tiles pass through."""
    if isinstance(x, Tile):
        if x.nblock:
            raise ShapeError(f"a tile of shape {x.shape} still has {x.nblock} block dimension(s) in front of its "
                             "partition dimension; index them first (t[i] or t[i, :, :])")
        return x
    if isinstance(x, (Index, Pred)):
        shape = x.shape if x.shape else (1,)
        expr = x.expr
        dtype = DType.bool_ if isinstance(x, Pred) else DType.int32
        ctx = current()
        buf = ctx.new_buf(shape, dtype, Space.SBUF)
        out = Region.whole(buf)
        ctx.emit(Instr(Op.IOTA, (out,), (), {"expr": expr}, Engine.GPSIMD))
        return Tile(out)
    if isinstance(x, AccessPattern):
        raise TraceError("an HBM access pattern cannot be used as a tile; tl.load(...) it first")
    raise TraceError(f"expected a tile, got {type(x).__name__} {x!r}")


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float, bool)) and not isinstance(x, Index)


def new_tile(shape: tuple[int, ...], dtype: DType, space: Space = Space.SBUF) -> Tile:
    shape = tuple(int(s) for s in shape)
    if not shape:
        raise ShapeError("a tile needs at least one dimension (the partition dimension)")
    if shape[0] > PMAX:
        raise ShapeError(f"partition dimension {shape[0]} exceeds {PMAX} (tl.tile_size.pmax) in a tile of shape "
                         f"{shape}; split it into tiles of at most 128 partitions")
    if any(s < 0 for s in shape):
        raise ShapeError(f"negative dimension in tile shape {shape}")
    if space not in (Space.SBUF, Space.PSUM):
        raise TraceError(f"new_tile: on-chip buffer expected, got {space}")
    buf = current().new_buf(shape, dtype, space)
    return Tile(Region.whole(buf))


def _emit(op: Op, outs: tuple[Any, ...], ins: tuple[Any, ...], attrs: dict[str, Any] | None = None,
          engine: Engine | None = None) -> Instr:
    return current().emit(Instr(op, outs, ins, attrs or {}, engine))


def _operand(x: Any) -> Any:
    return Imm(x) if _is_num(x) else x.region


def _sbuf_operand(t: Tile) -> Tile:
    """Matmul/DMA read SBUF only: evict a PSUM tile to SBUF with a copy."""
    if t.buffer is Space.PSUM:
        return copy(t)
    return t


# --------------------------------------------------------------------------------------
# elementwise
# --------------------------------------------------------------------------------------
def _pick_engine(engine: Any, op: Op, default: Engine) -> Engine:
    if engine is None:
        return default
    e = engine if isinstance(engine, Engine) else Engine(str(engine).lower().replace("engine", "").strip("._"))
    from trnlang.ir.ops import OP_SPECS

    if e not in OP_SPECS[op].engines:
        allowed = ", ".join(x.value for x in OP_SPECS[op].engines)
        raise TraceError(f"{op.value} cannot run on the {e.value} engine (allowed: {allowed})")
    return e


def binary(alu: Alu, a: Any, b: Any, dtype: Any = None, engine: Any = None) -> Any:
    """Elementwise binary op with numpy broadcasting; emits tensor_tensor or tensor_scalar."""
    if ALU_SPECS[alu].kind is not AluKind.BINARY:
        raise TraceError(f"{alu.value} is not a binary operation")
    if _is_num(a) and _is_num(b):
        raise TraceError(f"{alu.value} of two Python numbers: compute it in Python")
    a_num, b_num = _is_num(a), _is_num(b)
    ta = None if a_num else to_tile(a)
    tb = None if b_num else to_tile(b)
    da = _scalar_dtype(a) if ta is None else ta.dtype
    db = _scalar_dtype(b) if tb is None else tb.dtype
    out_dt = as_dtype(dtype) if dtype is not None else _result_dtype(alu, da, db, a_num, b_num)
    if a_num or b_num:
        t = tb if a_num else ta
        assert t is not None  # not both numbers (checked above)
        out = new_tile(t.shape, out_dt)
        _emit(Op.TENSOR_SCALAR, (out.region,), (t.region, Imm(a if a_num else b)),
              {"op0": alu, "op1": None, "reverse": (a_num, False)},
              _pick_engine(engine, Op.TENSOR_SCALAR, Engine.VECTOR))
        out.pvec = t.pvec
        return out
    assert ta is not None and tb is not None
    check_partition_vectors((ta, tb), max(ta.shape, tb.shape, key=len))
    shape = broadcast_shapes(ta.shape, tb.shape)
    out = new_tile(shape, out_dt)
    if len(shape) == 1:
        out.pvec = ta.pvec or tb.pvec
    # A per-partition scalar [P, 1] against a full tile is a tensor_scalar (half the Vector cost).
    if engine is None and len(shape) >= 2 and shape[0] > 0:
        for full, col, rev in ((ta, tb, False), (tb, ta, True)):
            if full.shape == shape and col.shape[0] == shape[0] and all(s == 1 for s in col.shape[1:]) \
                    and len(col.shape) == len(shape):
                _emit(Op.TENSOR_SCALAR, (out.region,), (full.region, col.region),
                      {"op0": alu, "op1": None, "reverse": (rev, False)}, Engine.VECTOR)
                return out
    _emit(Op.TENSOR_TENSOR, (out.region,), (ta.region, tb.region), {"op": alu},
          _pick_engine(engine, Op.TENSOR_TENSOR, Engine.VECTOR))
    return out


def binary_by_name(name: str, a: Any, b: Any) -> Any:
    return binary(Alu[name], a, b)


_SIMPLE_UNARY = {Alu.copy, Alu.abs, Alu.negative, Alu.sign, Alu.floor, Alu.ceil, Alu.square, Alu.relu,
                 Alu.logical_not, Alu.bitwise_not, Alu.reciprocal}


def unary(alu: Alu, x: Any, dtype: Any = None, engine: Any = None) -> Tile:
    """Elementwise unary op: Scalar-engine activation for transcendental functions, Vector otherwise."""
    if ALU_SPECS[alu].kind is not AluKind.UNARY:
        raise TraceError(f"{alu.value} is not a unary operation")
    t = to_tile(x)
    out_dt = as_dtype(dtype) if dtype is not None else _result_dtype(alu, t.dtype, None)
    if alu in (Alu.floor, Alu.ceil, Alu.sign, Alu.abs, Alu.negative, Alu.square, Alu.relu) and t.dtype.is_int \
            and dtype is None:
        out_dt = DType.int32 if t.dtype == DType.bool_ else t.dtype
    out = new_tile(t.shape, out_dt)
    out.pvec = t.pvec
    default = Engine.VECTOR if alu in _SIMPLE_UNARY else Engine.SCALAR
    _emit(Op.ACTIVATION, (out.region,), (t.region,), {"func": alu, "scale": 1.0, "reduce_op": None},
          _pick_engine(engine, Op.ACTIVATION, default))
    return out


def unary_by_name(name: str, x: Any) -> Tile:
    return unary(Alu[name], x)


def inplace(name: str, t: Tile, o: Any) -> None:
    """``t op= o`` writes into t's own region; ``psum += matmul(...)`` accumulates in the matmul itself."""
    ctx = current()
    last = ctx.last_instr()
    fresh_psum = t.buffer is Space.PSUM and id(t.region.buf) not in ctx.written
    if (name == "add" and isinstance(o, Tile) and last is not None and last.op is Op.MATMUL
            and last.outs[0] is o.region and o.region.is_whole and t.buffer is Space.PSUM
            and o.shape == t.shape and _fresh(o)):
        if fresh_psum and not ctx.nki:
            raise TraceError(_UNINIT_PSUM)
        # retarget the matmul to accumulate into t (NKI: a fresh PSUM tile starts a group); drop o's buffer
        accumulate = psum_group_start(t) if fresh_psum else True
        blk = ctx.blocks[-1]
        last.outs = (t.region,)
        last.attrs["accumulate"] = accumulate
        ctx.written.add(id(t.region.buf))
        _drop_alloc(blk, o.region.buf)
        o.region = t.region
        return
    if fresh_psum:
        raise TraceError(_UNINIT_PSUM)
    alu = Alu[name]
    if _is_num(o):
        _emit(Op.TENSOR_SCALAR, (t.region,), (t.region, Imm(o)), {"op0": alu, "op1": None, "reverse": (False, False)},
              Engine.VECTOR)
        return
    ot = to_tile(o)
    check_partition_vectors((ot,), t.shape, "an in-place update of a tile", fixed=True)
    if not broadcasts_into(ot.shape, t.shape):
        raise ShapeError(f"in-place {name}: cannot broadcast {ot.shape} into a tile of shape {t.shape}")
    _emit(Op.TENSOR_TENSOR, (t.region,), (t.region, ot.region), {"op": alu}, Engine.VECTOR)


_UNINIT_PSUM = ("this reads a PSUM tile nothing has written yet (its contents are undefined: `acc += ...` would "
                 "add to garbage); create it with tl.zeros(shape, tl.float32, buffer=tl.psum) or write it first")


def psum_group_start(t: Tile) -> bool:
    """A matmul into PSUM tile ``t`` that no instruction has written yet: NKI starts an accumulation group.

    Returns the matmul's ``accumulate`` flag: False (overwrite) when ``t`` is its whole buffer and no loop was
    opened since the allocation; otherwise the buffer is zeroed once right after its allocation (a Vector
    memset) and the matmul accumulates."""
    ctx = current()
    buf = t.region.buf
    ctx.written.add(id(buf))
    for blk in reversed(ctx.blocks):
        for j, st in enumerate(blk):
            if isinstance(st, Instr) and st.op is Op.ALLOC and st.outs[0] is buf:
                if blk is ctx.blocks[-1] and t.region.is_whole:
                    return False
                blk.insert(j + 1, Instr(Op.MEMSET, (Region.whole(buf),), (), {"value": 0}, Engine.VECTOR, st.loc))
                return True
    return True


def _fresh(t: Tile) -> bool:
    """True when t's buffer is read by nothing yet (only its producer wrote it)."""
    from trnlang.ir.nodes import operand_regions

    buf = t.region.buf
    for blk in current().blocks:
        for s in blk:
            if isinstance(s, Instr) and any(r.buf is buf for x in s.ins for r in operand_regions(x)):
                return False
    return True


def _drop_alloc(blk: list[Any], buf: Any) -> None:
    for j in range(len(blk) - 1, -1, -1):
        s = blk[j]
        if isinstance(s, Instr) and s.op is Op.ALLOC and s.outs[0] is buf:
            del blk[j]
            return


# --------------------------------------------------------------------------------------
# sub-tiles and assignment
# --------------------------------------------------------------------------------------
def _norm_key(key: Any, ndim: int, what: str) -> tuple[Any, ...]:
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        fill = ndim - (len(key) - 1)
        key = key[:i] + (slice(None),) * fill + key[i + 1:]
    if len(key) > ndim:
        raise TraceError(f"too many indices ({len(key)}) for {what} with {ndim} dimensions")
    return key + (slice(None),) * (ndim - len(key))


def _slice_bounds(k: Any, n: int) -> tuple[sympy.Expr, int, int]:
    """(start expr, size, step) of a slice or ds over a dimension of size n."""
    if isinstance(k, DynSlice):
        return to_expr(k.start), int(k.size), 1
    step = 1 if k.step is None else const_int(k.step, "slice step")
    if step <= 0:
        raise TraceError("slice steps must be positive")
    if all(isinstance(v, int) or v is None for v in (k.start, k.stop)):
        start = 0 if k.start is None else (k.start + n if k.start < 0 else k.start)
        stop = n if k.stop is None else (k.stop + n if k.stop < 0 else k.stop)
        if start < 0 or stop > n:
            raise BoundsError(f"slice [{k.start}:{k.stop}] is outside a dimension of size {n} (slices are not "
                              "clamped: a tile's shape is what you write); mask the access or fix the bounds")
        return sympy.Integer(start), max(0, (stop - start + step - 1) // step), step
    start = _ZERO if k.start is None else to_expr(k.start)
    stop = sympy.Integer(n) if k.stop is None else to_expr(k.stop)
    size = sympy.simplify(stop - start)
    if not size.is_Integer:
        raise TraceError(f"slice size {stop} - ({start}) must be a compile-time constant; use tl.ds(start, size)")
    return start, max(0, (int(size) + step - 1) // step), step


def subtile(t: Tile, key: Any) -> Tile:
    """A view of part of a tile: slices (affine bounds), ds, and single indices per dimension; ``None`` adds a
    free axis of size 1 (numpy's new axis: a copy, ``v[:, None]`` is ``[P, 1]``)."""
    newaxes = split_newaxes(key, t.ndim)
    if newaxes is not None:
        v = subtile(t, newaxes[0])
        shape = list(v.shape)
        for a in newaxes[1]:
            shape.insert(a, 1)
        return reshape(v, tuple(shape))
    key = _norm_key(key, t.ndim, "a tile")
    if t.region.ap is not None and not t.nblock:  # a view of a strided view: compose the access patterns
        return view_of_view(t, key)
    if any(isinstance(k, Index) and k.shape != () for k in key):
        as_slices = index_key_as_slices(key, t.shape)
        if as_slices is None:
            return pattern_view(t, key)
        key = as_slices
    nb = t.nblock
    if nb:  # NKI block dimensions come first in the written order, after the partition one in the buffer
        key = (key[nb],) + key[:nb] + key[nb + 1:]
    r = t.region
    starts, sizes, keep = list(r.starts), list(r.sizes), list(r.keep)
    view_dims = [d for d, kp in enumerate(keep) if kp]
    for k, d in zip(key, view_dims):
        if isinstance(k, (slice, DynSlice)):
            s, n, step = _slice_bounds(k, sizes[d])
            if step != 1:
                raise TraceError("strided slices of tiles are not supported")
            starts[d] = starts[d] + s
            sizes[d] = n
        elif isinstance(k, (int, Index)) and not isinstance(k, bool):
            e = to_expr(k)
            if e.is_Integer and int(e) < 0:
                e = e + sizes[d]
            starts[d] = starts[d] + e
            sizes[d] = 1
            keep[d] = False
        else:
            raise TraceError(f"tiles can be indexed by slices, tl.ds and single indices, not {type(k).__name__}")
    kept_blocks = sum(1 for k in key[1:nb + 1] if isinstance(k, (slice, DynSlice))) if nb else 0
    if nki_rules() and sum(keep) == 1 and keep[view_dims[0]] and len(view_dims) > 1:
        # NKI: a tile keeps a free dimension: t[0:128, j] is [128, 1], not [128]
        last = max(d for d in view_dims[1 + nb:] or view_dims[1:] if not keep[d])
        keep[last] = True
    return Tile(Region(r.buf, tuple(sympy.sympify(s) for s in starts), tuple(sizes), tuple(keep)), kept_blocks)


_TO_PSUM = (Op.MATMUL, Op.TRANSPOSE)


def _retarget(view: Tile, v: Tile) -> bool:
    """``buf[i] = op(...)`` (and NKI's ``dst=`` forms) under NKI rules, where ``v`` is the fresh result of the
    instruction just emitted: that instruction writes the view itself (no copy). Same shape and dtype;
    matmul/transpose results stay in PSUM."""
    ctx = current()
    last = ctx.last_instr()
    if (not ctx.nki or last is None or not last.outs or last.outs[0] is not v.region or not v.region.is_whole
            or view.shape != v.shape or view.dtype != v.dtype or last.attrs.get("accumulate")
            or (last.op in _TO_PSUM and last.engine is Engine.TENSOR and view.buffer is not Space.PSUM)
            or (view.buffer is Space.PSUM and last.op is Op.DMA_COPY)
            or view.region.buf is v.region.buf or not _fresh(v)):
        return False
    if any(isinstance(x, Region) and x.buf is view.region.buf for x in last.ins):
        return False  # reads the buffer it would now write: keep the copy (the hazard rules stay simple)
    last.outs = (view.region,) + tuple(last.outs[1:])
    _drop_alloc(ctx.blocks[-1], v.region.buf)
    if view.buffer is Space.PSUM:
        ctx.written.add(id(view.region.buf))
    v.region = view.region
    return True


def _same_region(a: Region, b: Region) -> bool:
    return a.buf is b.buf and a.sizes == b.sizes and a.keep == b.keep and a.ap == b.ap and all(
        sympy.simplify(x - y) == 0 for x, y in zip(a.starts, b.starts))


def assign(view: Tile, value: Any) -> None:
    """``buf[...] = value``: write a tile, a number or an index expression into a sub-tile."""
    if _is_num(value):
        _emit(Op.MEMSET, (view.region,), (), {"value": value}, Engine.VECTOR)
        return
    if isinstance(value, (Index, Pred)):
        sh = broadcast_shapes(value.shape, view.shape)
        if sh != view.shape:
            raise ShapeError(f"cannot assign an index of shape {value.shape} to a tile of shape {view.shape}")
        expr = value._aligned(len(view.shape))
        _emit(Op.IOTA, (view.region,), (), {"expr": expr}, Engine.GPSIMD)
        return
    v = to_tile(value)
    if _same_region(v.region, view.region):
        return
    mask = getattr(v, "mask", None)
    if mask is not None:  # NKI compute mask=: lanes off the predicate keep the buffer's contents
        if broadcast_shapes(v.shape, view.shape) != view.shape or broadcast_shapes(mask.shape, view.shape) != \
                view.shape:
            raise ShapeError(f"cannot assign a masked tile of shape {v.shape} to a tile of shape {view.shape}")
        _emit(Op.AFFINE_SELECT, (view.region,), (v.region, view.region), {"pred": mask._aligned(view.ndim)},
              Engine.GPSIMD)
        return
    if _retarget(view, v):
        return
    check_partition_vectors((v,), view.shape, "an assignment to a tile", fixed=True)
    if not broadcasts_into(v.shape, view.shape):
        raise ShapeError(f"cannot assign a tile of shape {v.shape} to a tile of shape {view.shape}")
    _emit(Op.TENSOR_COPY, (view.region,), (v.region,), {"reshape": False}, Engine.VECTOR)


# --------------------------------------------------------------------------------------
# HBM access patterns, load and store
# --------------------------------------------------------------------------------------
def _access_component(k: Any, n: Any) -> tuple[str, Any]:
    """One index of ``tensor[key]`` on a dimension of size ``n``: ``("axis", (start, size, step))`` for a slice,
    ``("axis_idx" | "bcast", index)`` for a 1-D / 2+-D index value, ``("gather", tile)`` for an integer tile or
    ``("fixed", expr)`` for a scalar (negative constants count from the end)."""
    if isinstance(k, (slice, DynSlice)):
        s, size, step = _slice_bounds(k, int(n))
        return "axis", (s, size, step)
    if isinstance(k, Index) and k.shape != ():
        return ("axis_idx", k) if k.ndim == 1 else ("bcast", k)
    if isinstance(k, Tile):
        if k.dtype.is_float:
            raise DTypeError(f"gather indices must be an integer tile, got {k.dtype.name}")
        return "gather", k
    if isinstance(k, (int, Index)) and not isinstance(k, bool):
        e = to_expr(k)
        if e.is_Integer and int(e) < 0:
            e = e + n
        return "fixed", e
    raise TraceError(f"cannot index an HBM tensor with {type(k).__name__} {k!r}")


def _nki_keep_2d(comps: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """NKI: ``x[0:128, j]`` is a ``[128, 1]`` access: the last single index after the only ranged one stays an
    axis of size 1 (single indices before it, ``x[b, 0:128, :]``, still drop their axis)."""
    ranged = [i for i, c in enumerate(comps) if c[0] != "fixed"]
    if len(ranged) != 1 or comps[ranged[0]][0] not in ("axis", "axis_idx"):
        return comps
    later = [i for i in range(ranged[0] + 1, len(comps)) if comps[i][0] == "fixed"]
    if not later:
        return comps
    out = list(comps)
    out[later[-1]] = ("axis", (comps[later[-1]][1], 1, 1))
    return out


def hbm_reshape(ref: HbmRef, shape: Any) -> HbmRef:
    """A row-major reshaped view of an HBM tensor (its accesses index the tensor through it)."""
    new = tuple(const_int(d, "a reshape dimension") for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    old = tuple(const_int(d, "the size of a reshaped tensor") for d in ref.tensor.shape)
    if math.prod(new) != math.prod(old):
        raise ShapeError(f"cannot reshape tensor {ref.tensor.name} of shape {old} to {new}")
    return HbmRef(ref.tensor, new)


def _through_view(ref: HbmRef, exprs: list[Any]) -> list[Any]:
    """Indices into a reshaped view -> indices into the tensor (row-major linearisation)."""
    assert ref.view is not None
    flat = sympy.Integer(0)
    for e, n in zip(exprs, ref.view):
        flat = flat * n + e
    old = [int(d) for d in ref.tensor.shape]
    out = []
    for d in range(len(old)):
        stride = math.prod(old[d + 1:])
        q = flat if stride == 1 else sympy.floor(flat / stride)
        out.append(sympy.expand(q if d == 0 else sympy.Mod(q, old[d])))
    return out


def make_access(ref: HbmRef, key: Any) -> AccessPattern:
    """``tensor[key]`` -> access pattern. Slices and 1-D indices take their own axis in order; index
    values of 2+ dims broadcast right-aligned (NKI style: ``x[i * 128 + ix, iy]``)."""
    tensor = ref.tensor
    dims = ref.shape
    key = _norm_key(key, len(dims), f"tensor {tensor.name}")
    comps = [_access_component(k, dims[d]) for d, k in enumerate(key)]
    if nki_rules():
        comps = _nki_keep_2d(comps)
    # Slices and 1-D indices take the axis of their position among the non-scalar indices.
    nonfixed = [c for c in comps if c[0] != "fixed"]
    nd = max([len(nonfixed)] + [c[1].ndim for c in comps if c[0] in ("bcast", "gather")])
    if nd == 0:
        raise ShapeError(f"this access selects a single element of {tensor.name}; tiles need at least one "
                         "dimension: index with a slice, e.g. x[i:i + 1]")
    shapes: list[tuple[int, ...]] = []
    exprs: list[Any] = []
    gathers: list[Region] = []
    pos = 0
    for kind, v in comps:
        if kind == "fixed":
            exprs.append(v)
            continue
        pos += 1
        if kind in ("axis", "axis_idx") or (kind == "gather" and v.ndim == 1):
            sh = [1] * nd
            j = pos - 1
            if kind == "axis":
                s, size, step = v
                sh[j] = size
                exprs.append(s + step * axis_sym(j))
            elif kind == "axis_idx":
                sh[j] = v.shape[0]
                exprs.append(v.expr.xreplace({axis_sym(0): axis_sym(j)}))
            else:
                sh[j] = v.shape[0]
                if j != nd - 1:  # a 1-D gather tile on a non-last axis: reshape it to [n, 1, ...]
                    tile_shape = tuple(sh[j:])
                    g = new_tile(tile_shape, v.dtype)
                    _emit(Op.TENSOR_COPY, (g.region,), (v.region,), {"reshape": True}, Engine.VECTOR)
                    v = g
                gathers.append(v.region)
                exprs.append(gather_sym(len(gathers) - 1))
            shapes.append(tuple(sh))
        elif kind == "bcast":
            shapes.append((1,) * (nd - v.ndim) + v.shape)
            exprs.append(v._aligned(nd))
        else:  # gather, 2+ dims
            shapes.append((1,) * (nd - v.ndim) + v.shape)
            gathers.append(v.region)
            exprs.append(gather_sym(len(gathers) - 1))
    shape = broadcast_shapes(*shapes) if shapes else ()
    if ref.view is not None:
        exprs = _through_view(ref, exprs)
    return AccessPattern(Access(tensor, shape, tuple(sympy.sympify(e) for e in exprs), tuple(gathers), None))


def _mask_expr(mask: Any, shape: tuple[int, ...]) -> Any:
    if mask is None or mask is True:
        return None
    if mask is False:
        return sympy.false
    if isinstance(mask, Tile):
        raise TraceError("mask= must be a predicate over index values (e.g. rows < n), not a tile; "
                         "use tl.where(tile_mask, value, other) for data-dependent selection")
    if not isinstance(mask, Pred):
        raise TraceError(f"mask= must be a predicate over index values (e.g. rows < n), got {type(mask).__name__}")
    if broadcast_shapes(mask.shape, shape) != tuple(shape):
        raise ShapeError(f"mask of shape {mask.shape} does not broadcast to the access shape {shape}")
    return mask._aligned(len(shape))


def load(ap: Any, mask: Any = None, other: Any = 0, dtype: Any = None) -> Tile:
    """HBM -> SBUF (a DMA)."""
    if isinstance(ap, HbmRef):
        ap = make_access(ap, ())
    if not isinstance(ap, AccessPattern):
        raise TraceError(f"tl.load expects an HBM tensor access like x[i * 128:(i + 1) * 128, :], got "
                         f"{type(ap).__name__}")
    acc = ap.access
    src_dt = acc.tensor.dtype
    dt = as_dtype(dtype) if dtype is not None else (DType.int32 if src_dt == DType.int64 else src_dt)
    if not _is_num(other):
        raise TraceError("other= must be a Python number")
    a2 = Access(acc.tensor, acc.shape, acc.index, acc.gathers, _mask_expr(mask, acc.shape))
    out = new_tile(acc.shape, dt)
    _emit(Op.DMA_COPY, (out.region,), (a2,), {"other": other}, Engine.DMA)
    return out


def load_transpose2d(ap: Any, dtype: Any = None) -> Tile:
    """Load a 2-D access ``[a, b]`` as a ``[b, a]`` tile (the DMA walks the transposed pattern)."""
    if isinstance(ap, HbmRef):
        ap = make_access(ap, ())
    acc = ap.access
    if len(acc.shape) != 2:
        raise ShapeError(f"load_transpose2d needs a 2-D access, got shape {acc.shape}")
    swap = {axis_sym(0): axis_sym(1), axis_sym(1): axis_sym(0)}
    idx = tuple(e.xreplace(swap) for e in acc.index)
    if acc.gathers:
        raise TraceError("load_transpose2d does not support gathered indices")
    return load(AccessPattern(Access(acc.tensor, (acc.shape[1], acc.shape[0]), idx, (), None)), dtype=dtype)


#: ``accumulate=`` names of accumulating stores -> the ALU function the DMA applies (read-modify-write).
ACCUMULATE_OPS = {"add": Alu.add, "multiply": Alu.multiply, "max": Alu.maximum, "min": Alu.minimum}


def store(ap: Any, value: Any, mask: Any = None, accumulate: Any = None) -> None:
    """SBUF -> HBM (a DMA); a PSUM value is first evicted to SBUF.

    ``accumulate="add"|"multiply"|"max"|"min"`` makes it an accumulating DMA: each element becomes
    ``op(old, value)`` (computed in fp32/int32, rounded to the tensor dtype), element by element in
    row-major tile order, so repeated (gathered) indices all accumulate (scatter-add).
    """
    acc_op = None
    if accumulate is not None and accumulate is not False:
        acc_op = ACCUMULATE_OPS.get("add" if accumulate is True else accumulate)
        if acc_op is None:
            raise TraceError(f"accumulate= must be one of {', '.join(ACCUMULATE_OPS)} (or True for add), "
                             f"got {accumulate!r}")
    if isinstance(ap, HbmRef):
        ap = make_access(ap, ())
    if not isinstance(ap, AccessPattern):
        raise TraceError(f"tl.store expects an HBM tensor access as its first argument, got {type(ap).__name__}")
    acc = ap.access
    if _is_num(value) or isinstance(value, (Index, Pred)):
        t = full(acc.shape, value, acc.tensor.dtype if acc.tensor.dtype != DType.int64 else DType.int32) \
            if _is_num(value) else to_tile(value)
    else:
        t = to_tile(value)
    if t.shape != acc.shape:
        check_partition_vectors((t,), acc.shape, "the store's access", fixed=True)
        if not broadcasts_into(t.shape, acc.shape):
            raise ShapeError(f"cannot store a tile of shape {t.shape} into an access of shape {acc.shape}")
        t = broadcast_to(t, acc.shape)
    t = _sbuf_operand(t)
    a2 = Access(acc.tensor, acc.shape, acc.index, acc.gathers, _mask_expr(mask, acc.shape))
    _emit(Op.DMA_COPY, (a2,), (t.region,), {"accumulate": acc_op} if acc_op is not None else {}, Engine.DMA)


# --------------------------------------------------------------------------------------
# creation, copies, shapes
# --------------------------------------------------------------------------------------
def _space(buffer: Any) -> Space:
    if isinstance(buffer, Space):
        return buffer
    raise TraceError(f"buffer= must be tl.sbuf, tl.psum, tl.hbm or tl.shared_hbm, got {buffer!r}")


def ndarray(shape: Any, dtype: Any, buffer: Any = Space.SBUF) -> Any:
    space = _space(buffer)
    dt = as_dtype(dtype) if not (space in (Space.HBM, Space.SHARED_HBM) and to_dtype(dtype) == DType.int64) \
        else DType.int64
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    pos = [i for i, d in enumerate(dims) if isinstance(d, ParDim)]
    shape = tuple(const_int(s, "a tile dimension") for s in dims)
    if space in (Space.HBM, Space.SHARED_HBM):
        return HbmRef(current().new_hbm(shape, dt, space))
    if len(pos) > 1:
        raise ShapeError(f"a tile has one partition dimension, got par_dim at positions {pos} of {dims}")
    if pos and pos[0] > 0:  # NKI block dimensions: the buffer keeps the partition dimension first
        k = pos[0]
        t = new_tile((shape[k],) + shape[:k] + shape[k + 1:], dt, space)
        if space is Space.PSUM and current().nki:
            t.region.buf.blocks = k  # NKI allocates PSUM blocks as they are used (the capacity check counts one)
        return Tile(t.region, k)
    return new_tile(shape, dt, space)


def full(shape: Any, value: Any, dtype: Any, buffer: Any = Space.SBUF) -> Tile:
    t = ndarray(shape, dtype, buffer)
    if not isinstance(t, Tile):
        raise TraceError("tl.full/zeros/ones create on-chip tiles (tl.sbuf or tl.psum)")
    if not _is_num(value):
        raise TraceError("tl.full: value must be a Python number")
    _emit(Op.MEMSET, (t.region,), (), {"value": value}, Engine.VECTOR)
    return t


def copy(x: Any, dtype: Any = None, engine: Any = None) -> Tile:
    t = to_tile(x)
    out = new_tile(t.shape, as_dtype(dtype) if dtype is not None else t.dtype)
    _emit(Op.TENSOR_COPY, (out.region,), (t.region,), {"reshape": False},
          _pick_engine(engine, Op.TENSOR_COPY, Engine.VECTOR))
    out.pvec = t.pvec  # a cast is elementwise: still one value per partition
    return out


def broadcast_to(x: Any, shape: Any) -> Tile:
    t = to_tile(x)
    shape = tuple(int(s) for s in shape)
    if not broadcasts_into(t.shape, shape):
        raise ShapeError(f"cannot broadcast a tile of shape {t.shape} to {shape}")
    out = new_tile(shape, t.dtype)
    _emit(Op.TENSOR_COPY, (out.region,), (t.region,), {"reshape": False}, Engine.VECTOR)
    return out


def reshape(x: Any, shape: Any) -> Tile:
    t = to_tile(x)
    shape = tuple(int(s) for s in shape)
    if not shape or shape[0] != t.shape[0] or math.prod(shape) != math.prod(t.shape):
        raise ShapeError(f"reshape changes free dimensions only: {t.shape} -> {shape} keeps neither the partition "
                         "dimension nor the element count" if shape and shape[0] != t.shape[0] else
                         f"cannot reshape a tile of shape {t.shape} to {shape}")
    out = new_tile(shape, t.dtype)
    _emit(Op.TENSOR_COPY, (out.region,), (t.region,), {"reshape": True}, Engine.VECTOR)
    if len(shape) == 1:
        out.pvec = t.pvec
    return out


def expand_dims(x: Any, axis: int) -> Tile:
    t = to_tile(x)
    nd = t.ndim + 1
    ax = axis + nd if axis < 0 else axis
    if not 0 < ax < nd:
        raise ShapeError(f"expand_dims axis {axis} must be a free axis (1..{nd - 1}) of the result")
    return reshape(t, t.shape[:ax] + (1,) + t.shape[ax:])


def where(cond: Any, a: Any, b: Any, dtype: Any = None) -> Tile:
    if isinstance(cond, Pred) and (_is_num(a) or isinstance(a, Tile)) and (_is_num(b) or isinstance(b, Tile)) \
            and not (_is_num(a) and _is_num(b)) and (isinstance(a, Tile) or _is_num(a)):
        # affine predicate: one GpSimd affine_select
        shapes = [cond.shape] + [v.shape for v in (a, b) if isinstance(v, Tile)]
        check_partition_vectors((a, b), max(shapes, key=len))
        shape = broadcast_shapes(*shapes)
        if shape and shape[0] > 0:
            da = a.dtype if isinstance(a, Tile) else _scalar_dtype(a)
            db = b.dtype if isinstance(b, Tile) else _scalar_dtype(b)
            dt = as_dtype(dtype) if dtype is not None else _result_dtype(Alu.add, da, db, _is_num(a), _is_num(b))
            out = new_tile(shape, dt)
            _emit(Op.AFFINE_SELECT, (out.region,), (_operand(a), _operand(b)), {"pred": cond._aligned(len(shape))},
                  Engine.GPSIMD)
            return out
    c = to_tile(cond)
    shapes = [c.shape] + [to_tile(v).shape if not _is_num(v) else () for v in (a, b)]
    check_partition_vectors((c, a, b), max(shapes, key=len))
    shape = broadcast_shapes(*shapes)
    av = a if _is_num(a) else to_tile(a)
    bv = b if _is_num(b) else to_tile(b)
    da = _scalar_dtype(a) if _is_num(a) else av.dtype
    db = _scalar_dtype(b) if _is_num(b) else bv.dtype
    dt = as_dtype(dtype) if dtype is not None else _result_dtype(Alu.add, da, db, _is_num(a), _is_num(b))
    if dt == DType.int32 and da == DType.bool_ and db == DType.bool_:
        dt = DType.bool_
    out = new_tile(shape, dt)
    _emit(Op.SELECT, (out.region,), (c.region, _operand(av), _operand(bv)), {}, Engine.VECTOR)
    if len(shape) == 1:  # a choice between per-partition values is one too
        out.pvec = next((v.pvec for v in (c, av, bv) if isinstance(v, Tile) and v.pvec), None)
    return out
