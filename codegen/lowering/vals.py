"""Element values: expression trees evaluated per tile element inside loop nests.

An instruction's result is a ``Val`` tree over its output shape: leaves read
regions of on-chip buffers, HBM access patterns, immediates or index
expressions; inner nodes apply ALU functions, casts, selections and index maps
(broadcast, reshape, transpose). Fusion is just substitution: a region written
by an inlined producer is read as the producer's tree (through a round trip to
the producer's output dtype).

Protocol: ``prepare(cx)`` once per instruction execution, before the loops
(loop-invariant addresses), then ``emit(cx, idx)`` per element with one i64
index per dimension of ``shape``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from llvmlite import ir

from codegen.lowering import alu as alu
from codegen.lowering.ctx import CT, F32, I1, I32, I64, Ctx, ci32, ci64, const_int_value
from codegen.lowering.expr import KF, emit, emit_bool, emit_int, is_true
from codegen.lowering.types import imm_compute, roundtrip, to_compute, to_f32
from trnlang.frontend.errors import ShapeError
from trnlang.ir.nodes import Access, Region, axis_sym, gather_sym
from trnlang.ir.ops import Alu
from trnlang.ir.types import DType

Shape = tuple[int, ...]


def bcast_map(src: Shape, dst: Shape, what: str = "operand") -> list[int | None]:
    """For each src dim, the dst dim it reads (None: size-1, index 0); numpy right-aligned broadcasting."""
    if len(src) > len(dst):
        extra = src[: len(src) - len(dst)]
        if any(s != 1 for s in extra):
            raise ShapeError(f"{what} of shape {src} does not broadcast to {dst}")
    out: list[int | None] = []
    off = len(dst) - len(src)
    for j, s in enumerate(src):
        k = j + off
        if k < 0 or s == 1:
            out.append(None)
        elif dst[k] == s:
            out.append(k)
        else:
            raise ShapeError(f"{what} of shape {src} does not broadcast to {dst}")
    return out


class Val:
    """An element value over ``shape`` with compute type ``ct``."""

    shape: Shape = ()
    ct: CT = CT.F32

    def children(self) -> list[Val]:
        return []

    def prepare(self, cx: Ctx) -> None:
        for c in self.children():
            c.prepare(cx)

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        raise NotImplementedError

    def walk(self) -> Iterator[Val]:
        yield self
        for c in self.children():
            yield from c.walk()


# ---------------------------------------------------------------------------------------- regions


class RegionView:
    """Addressing of a region: ``base + start + sum(idx[k] * stride[k])`` in elements of the buffer dtype."""

    def __init__(self, region: Region, base_of: Callable[[Ctx, Any], ir.Value]) -> None:
        self.region = region
        self.base_of = base_of
        buf = region.buf
        strides = [1] * len(buf.shape)
        for d in range(len(buf.shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * int(buf.shape[d + 1])
        self.buf_strides = strides
        self.view_strides = region.view_strides
        self.shape: Shape = tuple(int(s) for s in region.shape)
        self.dtype: DType = buf.dtype
        self.ptr: ir.Value | None = None
        self.aa: tuple[Any, Any] | None = None   # (alias.scope, noalias) metadata of the buffer

    def _tag(self, instr: ir.Instruction) -> ir.Instruction:
        if self.aa is not None:
            instr.set_metadata("alias.scope", self.aa[0])
            instr.set_metadata("noalias", self.aa[1])
        return instr

    def prepare(self, cx: Ctx) -> None:
        base = self.base_of(cx, self.region.buf)
        off = ci64(0)
        b = cx.b
        for start, st in zip(self.region.starts, self.buf_strides):
            s = emit_int(cx, start)
            if const_int_value(s) != 0:
                off = b.add(off, b.mul(s, ci64(st)))
        self.ptr = cx.gep(base, off) if const_int_value(off) != 0 else base

    def addr(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        b = cx.b
        off: ir.Value | None = None
        for i, st in zip(idx, self.view_strides):
            if const_int_value(i) == 0:
                continue
            t = i if st == 1 else b.mul(i, ci64(st))
            off = t if off is None else b.add(off, t)
        assert self.ptr is not None, "RegionView.prepare was not called"
        return self.ptr if off is None else cx.gep(self.ptr, off)

    def load(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        return self._tag(cx.b.load(self.addr(cx, idx), align=self.dtype.itemsize))

    def store(self, cx: Ctx, idx: Sequence[ir.Value], v: ir.Value) -> None:
        self._tag(cx.b.store(v, self.addr(cx, idx), align=self.dtype.itemsize))


class RegionRead(Val):
    """A region's elements converted to their compute type."""

    def __init__(self, view: RegionView) -> None:
        self.view = view
        self.shape = view.shape
        self.ct = CT.F32 if view.dtype.is_float else (CT.BOOL if view.dtype is DType.bool_ else CT.I32)

    def prepare(self, cx: Ctx) -> None:
        self.view.prepare(cx)

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        return to_compute(cx, self.view.load(cx, idx), self.view.dtype)[0]


class Imm(Val):
    def __init__(self, value: Any) -> None:
        self.value = value
        self.const, self.ct = imm_compute(value)
        self.shape = ()

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        return self.const


class Bcast(Val):
    """``x`` broadcast to ``shape`` (numpy rules)."""

    def __init__(self, x: Val, shape: Shape, what: str = "operand") -> None:
        self.x = x
        self.shape = tuple(shape)
        self.ct = x.ct
        self.map = bcast_map(x.shape, self.shape, what)

    def children(self) -> list[Val]:
        return [self.x]

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        return self.x.emit(cx, [ci64(0) if k is None else idx[k] for k in self.map])


def bcast(x: Val, shape: Shape, what: str = "operand") -> Val:
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    return Bcast(x, shape, what)


class Reshape(Val):
    """Free elements of each partition reinterpreted row-major (``tensor_copy(reshape=True)``)."""

    def __init__(self, x: Val, shape: Shape) -> None:
        self.x = x
        self.shape = tuple(shape)
        self.ct = x.ct
        n_src = 1
        for s in x.shape:
            n_src *= s
        n_dst = 1
        for s in self.shape:
            n_dst *= s
        if not x.shape or not self.shape or x.shape[0] != self.shape[0] or n_src != n_dst:
            raise ShapeError(f"tensor_copy reshape of {tuple(x.shape)} to {self.shape}: partition count or element "
                             "count differ")

    def children(self) -> list[Val]:
        return [self.x]

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        flat = flatten(cx, idx[1:], self.shape[1:])
        return self.x.emit(cx, [idx[0], *unflatten(cx, flat, self.x.shape[1:])])


class FlatMap(Val):
    """Element ``e`` (row-major in ``shape``) of ``x`` transposed: ``nc_transpose``'s index map."""

    def __init__(self, x: Val, shape: Shape) -> None:
        self.x = x
        self.shape = tuple(shape)
        self.ct = x.ct
        xs = tuple(x.shape) if x.shape else (1,)
        self.p = xs[0]
        f = 1
        for s in xs[1:]:
            f *= s
        self.f = f
        n = 1
        for s in self.shape:
            n *= s
        if n != self.p * self.f:
            raise ShapeError(f"nc_transpose of {xs} does not fit output {self.shape}")

    def children(self) -> list[Val]:
        return [self.x]

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        b = cx.b
        if tuple(self.shape) == (self.f, self.p) and len(self.x.shape) == 2:
            return self.x.emit(cx, [idx[1], idx[0]])
        e = flatten(cx, idx, self.shape)
        f = b.udiv(e, ci64(self.p))
        p = b.urem(e, ci64(self.p))
        src = b.add(b.mul(p, ci64(self.f)), f)
        return self.x.emit(cx, unflatten(cx, src, tuple(self.x.shape)))


def flatten(cx: Ctx, idx: Sequence[ir.Value], shape: Shape) -> ir.Value:
    b = cx.b
    acc: ir.Value = ci64(0)
    for i, s in zip(idx, shape):
        acc = b.add(b.mul(acc, ci64(s)), i)
    return acc


def unflatten(cx: Ctx, flat: ir.Value, shape: Shape) -> list[ir.Value]:
    b = cx.b
    out: list[ir.Value] = []
    for s in reversed(shape):
        if s == 1:
            out.append(ci64(0))
            continue
        out.append(b.urem(flat, ci64(s)))
        flat = b.udiv(flat, ci64(s))
    return list(reversed(out))


# ---------------------------------------------------------------------------------------- arithmetic


class Unary(Val):
    def __init__(self, op: Alu, x: Val) -> None:
        self.op, self.x = op, x
        self.shape = x.shape
        self.ct = alu.unary_ct(op, x.ct)

    def children(self) -> list[Val]:
        return [self.x]

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        return alu.unary(cx, self.op, self.x.emit(cx, idx), self.x.ct)[0]


class Binary(Val):
    def __init__(self, op: Alu, a: Val, c: Val, shape: Shape | None = None) -> None:
        self.op = op
        self.shape = tuple(shape) if shape is not None else tuple(a.shape)
        self.a = bcast(a, self.shape)
        self.c = bcast(c, self.shape)
        self.ct = alu.binary_ct(op, a.ct, c.ct)

    def children(self) -> list[Val]:
        return [self.a, self.c]

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        return alu.binary(cx, self.op, self.a.emit(cx, idx), self.a.ct, self.c.emit(cx, idx), self.c.ct)[0]


class ToF32(Val):
    def __init__(self, x: Val) -> None:
        self.x = x
        self.shape = x.shape
        self.ct = CT.F32

    def children(self) -> list[Val]:
        return [self.x]

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        return to_f32(cx, self.x.emit(cx, idx), self.x.ct)


class RoundTrip(Val):
    """The value read back after writing ``x`` to ``dtype`` storage (inlined producers)."""

    def __init__(self, x: Val, dtype: DType) -> None:
        self.x, self.dtype = x, dtype
        self.shape = x.shape
        self.ct = CT.F32 if dtype.is_float else (CT.BOOL if dtype is DType.bool_ else CT.I32)

    def children(self) -> list[Val]:
        return [self.x]

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        return roundtrip(cx, self.x.emit(cx, idx), self.x.ct, self.dtype)[0]


def nonzero(cx: Ctx, v: ir.Value, ct: CT) -> ir.Value:
    if ct is CT.F32:
        return cx.b.fcmp_unordered("!=", v, ir.Constant(F32, 0.0))
    return cx.b.icmp_signed("!=", v, ci32(0))


class Where(Val):
    """``where(cond != 0, a, b)`` in the common compute type (fp32 if either is float, else int32)."""

    def __init__(self, cond: Val, a: Val, c: Val, shape: Shape) -> None:
        self.shape = tuple(shape)
        self.cond = bcast(cond, self.shape, "condition")
        self.a = bcast(a, self.shape)
        self.c = bcast(c, self.shape)
        self.ct = CT.F32 if (a.ct is CT.F32 or c.ct is CT.F32) else CT.I32

    def children(self) -> list[Val]:
        return [self.cond, self.a, self.c]

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        m = nonzero(cx, self.cond.emit(cx, idx), self.cond.ct)
        av, cv = self.a.emit(cx, idx), self.c.emit(cx, idx)
        if self.ct is CT.F32:
            av, cv = to_f32(cx, av, self.a.ct), to_f32(cx, cv, self.c.ct)
        return cx.b.select(m, av, cv)


def axis_env(idx: Sequence[ir.Value]) -> dict[Any, ir.Value]:
    return {axis_sym(k): v for k, v in enumerate(idx)}


class Pred(Val):
    """A sympy predicate over the axes as int32 1/0."""

    def __init__(self, expr: Any, shape: Shape) -> None:
        self.expr, self.shape, self.ct = expr, tuple(shape), CT.I32

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        return cx.b.zext(emit_bool(cx, self.expr, axis_env(idx)), I32)


class Iota(Val):
    """``iota``: integer expressions wrap to int32; non-integer ones round to fp32."""

    def __init__(self, expr: Any, shape: Shape) -> None:
        self.expr, self.shape = expr, tuple(shape)
        self.ct = CT.F32 if iota_is_float(expr) else CT.I32

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        b = cx.b
        v, kind = emit(cx, self.expr, axis_env(idx))
        if kind == KF:
            return b.fptrunc(v, F32) if self.ct is CT.F32 else b.trunc(b.fptosi(v, I64), I32)
        v = b.zext(v, I64) if v.type == I1 else v
        return b.sitofp(v, F32) if self.ct is CT.F32 else b.trunc(v, I32)


def iota_is_float(expr: Any) -> bool:
    """Whether an iota expression evaluates to floats (decided by lowering it into a scratch function)."""
    import sympy

    e = sympy.sympify(expr)
    if isinstance(e, sympy.logic.boolalg.Boolean) and not isinstance(e, sympy.Expr):
        return False
    if e.is_integer:
        return False
    from codegen.lowering.expr import _is_int_valued

    if _is_int_valued(e):
        return False
    # conservative: floats when there is any non-integer rational / float outside floor/ceiling/Mod
    stripped = e.replace(lambda x: isinstance(x, sympy.floor | sympy.ceiling | sympy.Mod), lambda x: sympy.Integer(0))
    return bool(stripped.has(sympy.Float) or any(r.q != 1 for r in stripped.atoms(sympy.Rational)))


# ---------------------------------------------------------------------------------------- HBM


class TensorArgs:
    """Pointer (typed), shape and stride values (i64, in elements) of one launch tensor."""

    def __init__(self, ptr: ir.Value, shape: list[ir.Value], strides: list[ir.Value], dtype: DType,
                 aa: tuple[Any, Any] | None = None) -> None:
        self.ptr, self.shape, self.strides, self.dtype = ptr, shape, strides, dtype
        self.aa = aa

    def load(self, cx: Ctx, index: Sequence[ir.Value]) -> ir.Value:
        return self._tag(cx.b.load(self.addr(cx, index), align=self.dtype.itemsize))

    def store(self, cx: Ctx, index: Sequence[ir.Value], v: ir.Value) -> None:
        self._tag(cx.b.store(v, self.addr(cx, index), align=self.dtype.itemsize))

    def _tag(self, instr: ir.Instruction) -> ir.Instruction:
        if self.aa is not None:
            instr.set_metadata("alias.scope", self.aa[0])
            instr.set_metadata("noalias", self.aa[1])
        return instr

    def addr(self, cx: Ctx, index: Sequence[ir.Value]) -> ir.Value:
        b = cx.b
        off: ir.Value | None = None
        for i, st in zip(index, self.strides):
            c = const_int_value(st)
            t = i if c == 1 else b.mul(i, st)
            off = t if off is None else b.add(off, t)
        return self.ptr if off is None else cx.gep(self.ptr, off)


class AccessEval:
    """Evaluates an access pattern at a tile position: gathers, mask (i1 or None), tensor indices (i64)."""

    def __init__(self, acc: Access, gathers: list[Val]) -> None:
        self.acc = acc
        self.shape: Shape = tuple(int(s) for s in acc.shape)
        self.gathers = [bcast(g, self.shape, f"gather {k}") for k, g in enumerate(gathers)]

    def prepare(self, cx: Ctx) -> None:
        for g in self.gathers:
            g.prepare(cx)

    def local(self, cx: Ctx, idx: Sequence[ir.Value]) -> dict[Any, ir.Value]:
        env = axis_env(idx)
        b = cx.b
        for k, g in enumerate(self.gathers):
            v = g.emit(cx, idx)
            if g.ct is CT.F32:
                v = b.call(cx.intrinsic("llvm.fptosi.sat", (I32, F32)), [v])
            env[gather_sym(k)] = b.sext(v, I64)
        return env

    def mask(self, cx: Ctx, env: dict[Any, ir.Value]) -> ir.Value | None:
        if is_true(self.acc.mask):
            return None
        return emit_bool(cx, self.acc.mask, env)

    def index(self, cx: Ctx, env: dict[Any, ir.Value]) -> list[ir.Value]:
        return [emit_int(cx, e, env) for e in self.acc.index]


class Load(Val):
    """``dma_copy`` load as a value: ``cast(to_compute(src[index]), dst dtype)``, ``other`` where masked off."""

    def __init__(self, ev: AccessEval, targs: Callable[[Ctx], TensorArgs], dst: DType, other: Any) -> None:
        self.ev, self.targs, self.dst, self.other = ev, targs, dst, other
        self.shape = ev.shape
        self.ct = CT.F32 if dst.is_float else (CT.BOOL if dst is DType.bool_ else CT.I32)

    def children(self) -> list[Val]:
        return list(self.ev.gathers)

    def prepare(self, cx: Ctx) -> None:
        self.ev.prepare(cx)

    def _value(self, cx: Ctx, t: TensorArgs, env: dict[Any, ir.Value]) -> ir.Value:
        raw = t.load(cx, self.ev.index(cx, env))
        v, ct = to_compute(cx, raw, t.dtype)
        return roundtrip(cx, v, ct, self.dst)[0]

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        t = self.targs(cx)
        env = self.ev.local(cx, idx)
        m = self.ev.mask(cx, env)
        if m is None:
            return self._value(cx, t, env)
        ov, oct_ = imm_compute(self.other if self.other is not None else 0)
        other = roundtrip(cx, ov, oct_, self.dst)[0]
        b = cx.b
        pre = b.block
        with b.if_then(m) as _:
            val = self._value(cx, t, env)
            then_end = b.block
        phi = b.phi(self.ct.llvm)
        phi.add_incoming(val, then_end)
        phi.add_incoming(other, pre)
        return phi
