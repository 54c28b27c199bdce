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
