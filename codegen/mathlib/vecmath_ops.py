"""The type-generic emission helper behind ``codegen.mathlib.vecmath`` (scalar or vector float/double)."""

from __future__ import annotations

from typing import TypeAlias

from llvmlite import ir

from codegen.irutil import F64, I1, I32, I64, call_overloaded, const, intrinsic, like, scalar_of, type_suffix

Value: TypeAlias = ir.Value


class Ops:
    """Type-generic emission helpers bound to a builder and a float type (scalar or vector).

    ``ty`` is ``float``/``double`` or a vector of them; ``ity`` the integer type of the same
    shape and width (i32 / i64) used for bit manipulation.
    """

    def __init__(self, b: ir.IRBuilder, ty: ir.Type) -> None:
        self.b = b
        self.ty = ty
        el = scalar_of(ty)
        if isinstance(el, ir.FloatType):
            self.ity = like(ty, I32)
            self.mant, self.bias = 23, 127
        elif isinstance(el, ir.DoubleType):
            self.ity = like(ty, I64)
            self.mant, self.bias = 52, 1023
        else:
            raise TypeError(f"vecmath needs a float/double scalar or vector, got {ty}")

    # constants
    def c(self, v: float) -> ir.Constant:
        return const(self.ty, v)

    def ci(self, v: int) -> ir.Constant:
        return const(self.ity, v)

    def with_type(self, ty: ir.Type) -> Ops:
        return Ops(self.b, ty)

    def wide(self) -> Ops:
        """Ops for the double type of the same shape."""
        return Ops(self.b, like(self.ty, F64))

    # float arithmetic
    def add(self, a: Value, b: Value) -> Value:
        return self.b.fadd(a, b)

    def sub(self, a: Value, b: Value) -> Value:
        return self.b.fsub(a, b)

    def mul(self, a: Value, b: Value) -> Value:
        return self.b.fmul(a, b)

    def div(self, a: Value, b: Value) -> Value:
        return self.b.fdiv(a, b)

    def neg(self, a: Value) -> Value:
        return self.b.fneg(a)

    def fma(self, a: Value, b: Value, c: Value) -> Value:
        return call_overloaded(self.b, "fma", a, b, c)

    def abs(self, a: Value) -> Value:
        return call_overloaded(self.b, "fabs", a)

    def copysign(self, mag: Value, sgn: Value) -> Value:
        return call_overloaded(self.b, "copysign", mag, sgn)

    def call(self, name: str, *args: Value) -> Value:
        return call_overloaded(self.b, name, *args)

    def poly(self, x: Value, coeffs: list[float]) -> Value:
        """Horner with FMA; ``coeffs`` highest degree first."""
        acc = self.c(coeffs[0])
        for ck in coeffs[1:]:
            acc = self.fma(acc, x, self.c(ck))
        return acc

    # comparisons / selection
    def cmp(self, op: str, a: Value, b: Value) -> Value:
        """Ordered comparison (false when either side is NaN)."""
        return self.b.fcmp_ordered(op, a, b)

    def isnan(self, a: Value) -> Value:
        return self.b.fcmp_unordered("uno", a, a)

    def sel(self, m: Value, a: Value, b: Value) -> Value:
        return self.b.select(m, a, b)

    def clamp(self, x: Value, lo: float, hi: float) -> Value:
        """Clamp to [lo, hi]; NaN becomes ``lo`` (so integer conversions never see NaN)."""
        x = self.sel(self.cmp(">", x, self.c(lo)), x, self.c(lo))
        return self.sel(self.cmp("<", x, self.c(hi)), x, self.c(hi))

    def keep_nan(self, x: Value, res: Value) -> Value:
        """``res`` where ``x`` is a number, ``x`` (the NaN) where it is not."""
        return self.sel(self.isnan(x), x, res)

    # bits
    def bits(self, x: Value) -> Value:
        return self.b.bitcast(x, self.ity)

    def fbits(self, i: Value) -> Value:
        return self.b.bitcast(i, self.ty)

    def to_int(self, x: Value) -> Value:
        """fptosi; ``x`` must be finite and in range."""
        return self.b.fptosi(x, self.ity)

    def to_float(self, i: Value) -> Value:
        return self.b.sitofp(i, self.ty)

    def pow2i(self, n: Value) -> Value:
        """2**n for an integer vector ``n`` in the normal exponent range."""
        return self.fbits(self.b.shl(self.b.add(n, self.ci(self.bias)), self.ci(self.mant)))

    def scale2(self, v: Value, n: Value) -> Value:
        """``v * 2**n`` for an integral-valued float ``n`` in [-2 * 126, 2 * 127], rounded once (a subnormal result
        too): ``llvm.ldexp`` where the ISA path has AVX-512 (one ``vscalefps``; the loop vectorizer widens it), else
        two exact power-of-two factors (the first product stays normal, so only the second rounds). The same bits
        either way."""
        ni = self.to_int(n)
        if _ldexp_ok(self.ty):
            fn = intrinsic(self.b.block.function.module, f"llvm.ldexp.{type_suffix(self.ty)}.{type_suffix(ni.type)}",
                           self.ty, [self.ty, ni.type])
            return self.b.call(fn, [v, ni])
        n1 = self.b.ashr(ni, self.ci(1))
        return self.mul(self.mul(v, self.pow2i(n1)), self.pow2i(self.b.sub(ni, n1)))


#: ISA paths whose targets have AVX-512F (``vscalefps``)
_AVX512_PATHS = ("amx", "avx512bf16", "avx512")


def _ldexp_ok(ty: ir.Type) -> bool:
    """``llvm.ldexp`` on ``ty`` lowers to ``vscalefps`` (fp32 on an AVX-512 path)."""
    from codegen import isa

    return isinstance(scalar_of(ty), ir.FloatType) and isa.selected().name in _AVX512_PATHS


def ops_for(builder: ir.IRBuilder, x: Value) -> Ops:
    return Ops(builder, x.type)



def reduce_or(builder: ir.IRBuilder, mask: Value) -> Value:
    """OR of the lanes of an i1 vector."""
    module = builder.block.function.module
    fn = intrinsic(module, f"llvm.vector.reduce.or.{type_suffix(mask.type)}", I1, [mask.type])
    return builder.call(fn, [mask])
