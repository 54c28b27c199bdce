"""Small helpers for writing ``llvmlite.ir`` code (no ``llvmlite.binding`` here).

Types, splat constants and intrinsic declarations shared by the code
generators (``vecmath``, ``gemm`` and the IR lowering).
"""

from __future__ import annotations

from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

VF32 = ir.VectorType(F32, 8)
"""The JIT's main SIMD type: ``<8 x float>`` (one AVX2 register)."""


def vec(elem: ir.Type, n: int) -> ir.VectorType:
    """``<n x elem>``."""
    return ir.VectorType(elem, n)


def lanes(ty: ir.Type) -> int | None:
    """Number of lanes of a vector type, ``None`` for a scalar type."""
    return ty.count if isinstance(ty, ir.VectorType) else None


def scalar_of(ty: ir.Type) -> ir.Type:
    """Element type of a vector type, or the type itself."""
    return ty.element if isinstance(ty, ir.VectorType) else ty


def like(ty: ir.Type, elem: ir.Type) -> ir.Type:
    """``elem`` with the same shape (scalar or same lane count) as ``ty``."""
    n = lanes(ty)
    return elem if n is None else ir.VectorType(elem, n)


def const(ty: ir.Type, value: float | int | bool) -> ir.Constant:
    """Constant ``value`` of type ``ty`` (splatted over the lanes of a vector type)."""
    n = lanes(ty)
    if n is None:
        return ir.Constant(ty, value)
    return ir.Constant(ty, [ir.Constant(ty.element, value)] * n)


def type_suffix(ty: ir.Type) -> str:
    """LLVM's overloaded-intrinsic suffix for ``ty`` (``f32``, ``v8f32``, ``i32``, ``v8f64``...)."""
    n = lanes(ty)
    e = scalar_of(ty)
    if isinstance(e, ir.FloatType):
        s = "f32"
    elif isinstance(e, ir.DoubleType):
        s = "f64"
    elif isinstance(e, ir.IntType):
        s = f"i{e.width}"
    else:  # pragma: no cover - not used
        raise TypeError(f"no intrinsic suffix for {ty}")
    return s if n is None else f"v{n}{s}"


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """Declare (once per module) the function ``name`` with the given signature and return it."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def overloaded(builder: ir.IRBuilder, base: str, ty: ir.Type, nargs: int) -> ir.Function:
    """The intrinsic ``llvm.<base>.<suffix(ty)>`` taking ``nargs`` arguments of type ``ty``."""
    module = builder.block.function.module
    return intrinsic(module, f"llvm.{base}.{type_suffix(ty)}", ty, [ty] * nargs)


def call_overloaded(builder: ir.IRBuilder, base: str, *args: ir.Value) -> ir.Value:
    """Call ``llvm.<base>`` overloaded on the type of the first argument."""
    return builder.call(overloaded(builder, base, args[0].type, len(args)), list(args))


class Loop:
    """A counted loop ``for (i = start; i < stop; i += step)`` built with phis.

    Usage::

        with Loop(builder, start, stop, step, "k") as i:
            ...  # body (may create blocks); the builder ends after the loop

    The body runs zero times when ``start >= stop``.  ``i`` has the type of ``start``.
    """

    def __init__(self, builder: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: int | ir.Value = 1,
                 name: str = "i") -> None:
        self.b = builder
        self.start, self.stop, self.name = start, stop, name
        self.step = step if isinstance(step, ir.Value) else ir.Constant(start.type, step)

    def __enter__(self) -> ir.Value:
        b = self.b
        fn = b.block.function
        pre = b.block
        self.head = fn.append_basic_block(f"{self.name}.head")
        self.body = fn.append_basic_block(f"{self.name}.body")
        self.exit = fn.append_basic_block(f"{self.name}.exit")
        b.branch(self.head)
        b.position_at_end(self.head)
        self.i = b.phi(self.start.type, name=self.name)
        self.i.add_incoming(self.start, pre)
        b.cbranch(b.icmp_signed("<", self.i, self.stop), self.body, self.exit)
        b.position_at_end(self.body)
        return self.i

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            return
        b = self.b
        nxt = b.add(self.i, self.step, name=f"{self.name}.next")
        self.i.add_incoming(nxt, b.block)
        b.branch(self.head)
        b.position_at_end(self.exit)


def smin(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """Signed integer minimum."""
    return builder.select(builder.icmp_signed("<", a, b), a, b)
