"""The lowering context: LLVM types, constants, intrinsics, loops and the per-instance state.

Every ``codegen/lowering/*.py`` module emits code through one ``Ctx``: it owns the
``llvmlite.ir`` module, the builder positioned in the instance function, the
values of the symbols in scope (program ids, loop variables, symbolic tensor
sizes) and the pointers of the launch (tensors, scratch arena, error record,
print callback).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any

from llvmlite import ir

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
VOID = ir.VoidType()
I8P = I8.as_pointer()
I64P = I64.as_pointer()


class CT(enum.Enum):
    """Compute types of element values: fp32, int32 and bool (an int32 holding 0/1, see ``alu.unary``)."""

    F32 = "f32"
    I32 = "i32"
    BOOL = "bool"

    @property
    def is_float(self) -> bool:
        return self is CT.F32

    @property
    def llvm(self) -> ir.Type:
        return F32 if self is CT.F32 else I32


# intrinsics declared by name: arity, and whether it converts (overloaded on result and source type)
_EXTRA_INTRINSICS = {
    "llvm.maximum": (2, False), "llvm.minimum": (2, False), "llvm.maxnum": (2, False), "llvm.minnum": (2, False),
    "llvm.roundeven": (1, False), "llvm.floor": (1, False), "llvm.ceil": (1, False), "llvm.trunc": (1, False),
    "llvm.sqrt": (1, False), "llvm.fabs": (1, False), "llvm.exp": (1, False), "llvm.pow": (2, False),
    "llvm.fptosi.sat": (1, True), "llvm.fptoui.sat": (1, True), "llvm.copysign": (2, False),
    "llvm.fma": (3, False), "llvm.smax": (2, False), "llvm.smin": (2, False), "llvm.ldexp": (2, True),
}


def _mangle(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_mangle(t.element)}"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    raise NotImplementedError(f"cannot mangle {t}")


def ci64(v: int) -> ir.Constant:
    """An i64 constant (wrapped to 64 bits)."""
    v = ((int(v) + 2**63) % 2**64) - 2**63
    return ir.Constant(I64, v)


def ci32(v: int) -> ir.Constant:
    """An i32 constant (wrapped to 32 bits)."""
    v = ((int(v) + 2**31) % 2**32) - 2**31
    return ir.Constant(I32, v)


def cf32(v: float) -> ir.Constant:
    return ir.Constant(F32, float(v))


def cf64(v: float) -> ir.Constant:
    return ir.Constant(F64, float(v))


def const_int_value(v: Any) -> int | None:
    """The Python int of an integer ``ir.Constant`` (None for anything else)."""
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and isinstance(v.constant, int):
        return int(v.constant)
    return None


class Ctx:
    """Code generation state of the function being emitted (the per-instance kernel body)."""

    def __init__(self, module: ir.Module, fn: ir.Function, builder: ir.IRBuilder) -> None:
        self.module = module
        self.fn = fn
        self.b = builder
        self.env: dict[Any, ir.Value] = {}     # sympy.Symbol -> i64 value
        self.loop_syms: list[Any] = []          # enclosing loop variables, outer first
        self._helpers: dict[str, ir.Function] = {}
        self._globals: dict[str, ir.GlobalVariable] = {}

    # ------------------------------------------------------------------ module-level helpers
    def intrinsic(self, name: str, tys: tuple[ir.Type, ...], fnty: ir.FunctionType | None = None) -> ir.Function:
        """An LLVM intrinsic (``llvm.exp`` + overload types, or an explicit function type).

        Intrinsics llvmlite does not know (``llvm.maximum``, ``llvm.fptosi.sat``...) are declared by name.
        """
        if fnty is None and name in _EXTRA_INTRINSICS:
            arity, conv = _EXTRA_INTRINSICS[name]
            full = name + "".join("." + _mangle(t) for t in tys)
            fn = self.module.globals.get(full)
            if fn is None:
                ret = tys[0]
                args = [tys[1]] if conv else [tys[0]] * arity
                fn = ir.Function(self.module, ir.FunctionType(ret, args), full)
            return fn
        return self.module.declare_intrinsic(name, tys, fnty)

    def call_intrinsic(self, name: str, args: list[ir.Value], tys: tuple[ir.Type, ...] | None = None,
                       ret: ir.Type | None = None) -> ir.Value:
        """Call an intrinsic overloaded on the first argument's type (or ``tys``)."""
        if ret is not None:
            fn = self.intrinsic(name, (), ir.FunctionType(ret, [a.type for a in args]))
        else:
            fn = self.intrinsic(name, tys if tys is not None else (args[0].type,))
        return self.b.call(fn, args)

    def extern(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """Declare (once) an external C function such as libm's ``exp``."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name)
            fn.attributes.add("nounwind")
        return fn

    def helper(self, name: str) -> ir.Function | None:
        return self._helpers.get(name)

    def add_helper(self, name: str, fnty: ir.FunctionType) -> tuple[ir.Function, ir.IRBuilder]:
        """Create an internal always-inline helper function; returns it and a builder at its entry."""
        fn = ir.Function(self.module, fnty, name)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        fn.attributes.add("nounwind")
        self._helpers[name] = fn
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    def const_table(self, name: str, ty: ir.Type, values: list[Any]) -> ir.GlobalVariable:
        """A private constant global array (lookup tables)."""
        g = self._globals.get(name)
        if g is None:
            arr_ty = ir.ArrayType(ty, len(values))
            g = ir.GlobalVariable(self.module, arr_ty, name)
            g.global_constant = True
            g.linkage = "private"
            g.initializer = ir.Constant(arr_ty, [ir.Constant(ty, v) for v in values])
            g.align = 64
            self._globals[name] = g
        return g

    # ------------------------------------------------------------------ control flow
    @contextlib.contextmanager
    def loop(self, start: ir.Value, stop: ir.Value, step: ir.Value | int = 1, name: str = "i",
             vectorize: bool = True) -> Iterator[ir.Value]:
        """``for iv in range(start, stop, step)`` with a positive step (i64); yields the induction variable.

        ``vectorize=False`` tells LLVM's loop vectoriser to leave this loop alone (``llvm.loop.vectorize.enable``
        false): an outer loop over tile rows whose inner loop LLVM unrolls would otherwise be vectorised across
        rows with gathers and scatters, where the unrolled row itself is contiguous (the SLP vectoriser then
        makes it a few whole-vector loads and stores)."""
        b = self.b
        step_v = ci64(step) if isinstance(step, int) else step
        pre = b.block
        header = b.append_basic_block(f"{name}.head")
        body = b.append_basic_block(f"{name}.body")
        exit_ = b.append_basic_block(f"{name}.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, name=name)
        iv.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", iv, stop), body, exit_)
        b.position_at_end(body)
        yield iv
        if not b.block.is_terminated:
            nxt = b.add(iv, step_v, name=f"{name}.next", flags=("nsw",))
            iv.add_incoming(nxt, b.block)
            br = b.branch(header)
            if not vectorize:
                br.set_metadata("llvm.loop", self._no_vectorize_id())
        b.position_at_end(exit_)

    def _no_vectorize_id(self) -> Any:
        """A new loop ID (self-referential, as LLVM requires) carrying ``llvm.loop.vectorize.enable false``."""
        m = self.module
        off = m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.enable"), ir.Constant(ir.IntType(1), 0)])
        loop_id = ir.values.MDValue(m, [], name=str(len(m.metadata)))  # not uniqued: one per loop
        loop_id.operands = (loop_id, off)
        return loop_id

    @contextlib.contextmanager
    def loop_n(self, n: int | ir.Value, name: str = "i", vectorize: bool = True) -> Iterator[ir.Value]:
        """``for iv in range(n)``; a constant 1 gives no loop (iv = 0)."""
        if isinstance(n, int) and n == 1:
            yield ci64(0)
            return
        with self.loop(ci64(0), ci64(n) if isinstance(n, int) else n, 1, name, vectorize) as iv:
            yield iv

    def select(self, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.select(cond, a, b)

    def alloca_entry(self, ty: ir.Type, n: int = 1, name: str = "") -> ir.Value:
        """An alloca placed in the function's entry block (so it is not repeated in loops)."""
        b = self.b
        entry = self.fn.entry_basic_block
        with b.goto_block(entry):
            if entry.instructions:
                b.position_before(entry.instructions[0])
            ptr = b.alloca(ty, size=ci64(n) if n != 1 else None, name=name)
        return ptr

    def gep(self, ptr: ir.Value, off: ir.Value) -> ir.Value:
        return self.b.gep(ptr, [off], inbounds=True)
