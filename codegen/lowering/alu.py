"""ALU functions in LLVM with the interpreter's semantics (``trnlang/interpret/alu.py``).

Typing (decided at compile time by ``unary_ct`` / ``binary_ct``): a float
operand (or ``divide``) computes in fp32, otherwise in int32 with wrap-around;
comparisons and logical ops give int32 1/0. ``bitwise_not`` of a bool is
logical not. Integer-only functions on floats raise ``DTypeError``.

Floats: the IEEE basic operations are fp32 (correctly rounded, no FMA
contraction). ``maximum``/``minimum`` propagate NaN. Transcendental and
composite functions (exp, log, log1p, expm1, tanh, sin, cos, power, rsqrt,
sigmoid, gelu, gelu_tanh, silu, softplus, erf; tan, asin, acos, atan, atan2, sinh,
cosh, asinh, acosh, atanh, log2, log10, exp2, erfc, erfinv, lgamma, digamma) follow the interpreter's oracle:
``codegen.mathlib.vecmath`` fp32 kernels when that module provides them (vectorisable,
a few ulp), else libm in float64 rounded once to fp32 (scalar, matches the
interpreter to the last bit in practice). ``rsqrt`` is ``1 / sqrt(x)`` in fp32 (two correctly rounded operations,
as torch's CPU kernel and the interpreter compute it: bit exact, and vectorisable at full width).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

# vecmath's emitters are loaded with the lowering, not on a kernel's first transcendental: importing them (tens of
# ms without cached bytecode) is a one-time cost of the process, like LLVM's start-up, not of one compile
import codegen.mathlib.vecmath  # noqa: F401
from codegen.lowering.ctx import CT, F32, F64, I1, I32, I64, Ctx, cf32, cf64, ci32, ci64
from codegen.lowering.types import to_f32
from trnlang.frontend.errors import DTypeError
from trnlang.ir.ops import ALU_SPECS, Alu, AluKind

_FLOAT_UNARY = {
    Alu.copy, Alu.exp, Alu.log, Alu.log1p, Alu.expm1, Alu.sqrt, Alu.rsqrt, Alu.reciprocal, Alu.abs,
    Alu.negative, Alu.sign, Alu.floor, Alu.ceil, Alu.square, Alu.tanh, Alu.sigmoid, Alu.relu, Alu.gelu,
    Alu.gelu_tanh, Alu.silu, Alu.softplus, Alu.erf, Alu.sin, Alu.cos, Alu.logical_not,
    Alu.trunc, Alu.round, Alu.tan, Alu.asin, Alu.acos, Alu.atan, Alu.sinh, Alu.cosh, Alu.asinh, Alu.acosh,
    Alu.atanh, Alu.log2, Alu.log10, Alu.exp2, Alu.erfc, Alu.erfinv, Alu.lgamma, Alu.digamma,
}
_INT_UNARY = {Alu.copy, Alu.abs, Alu.negative, Alu.sign, Alu.floor, Alu.ceil, Alu.square, Alu.relu,
              Alu.logical_not, Alu.bitwise_not, Alu.trunc, Alu.round}
_COMPARE = {Alu.equal: "==", Alu.not_equal: "!=", Alu.less: "<", Alu.less_equal: "<=", Alu.greater: ">",
            Alu.greater_equal: ">="}
_LOGICAL = {Alu.logical_and, Alu.logical_or, Alu.logical_xor}
_INT_ONLY = {Alu.bitwise_and, Alu.bitwise_or, Alu.bitwise_xor}


# ---------------------------------------------------------------------------------------- typing


def unary_ct(op: Alu, ct: CT) -> CT:
    """Result compute type of a unary function (raises DTypeError like the interpreter)."""
    if ALU_SPECS[op].kind is not AluKind.UNARY:
        raise DTypeError(f"{op.name} is not a unary function")
    if ct is CT.F32:
        if op not in _FLOAT_UNARY:
            raise DTypeError(f"{op.name} is not defined on floating-point operands (float32)")
        return CT.I32 if op is Alu.logical_not else CT.F32
    if op in _INT_UNARY:
        return CT.I32
    return CT.I32 if op is Alu.logical_not else CT.F32


def binary_ct(op: Alu, a: CT, b: CT) -> CT:
    """Result compute type of a binary function."""
    if ALU_SPECS[op].kind is not AluKind.BINARY:
        raise DTypeError(f"{op.name} is not a binary function")
    flt = op in (Alu.divide, Alu.atan2) or a is CT.F32 or b is CT.F32
    if flt and op in _INT_ONLY:
        raise DTypeError(f"{op.name} is not defined on floating-point operands ({a.value}, {b.value})")
    if op in _COMPARE or op in _LOGICAL:
        return CT.I32
    return CT.F32 if flt else CT.I32


# ---------------------------------------------------------------------------------------- float64 oracle


def _libm(cx: Ctx, name: str, x: ir.Value) -> ir.Value:
    return cx.b.call(cx.extern(name, F64, [F64]), [x])


def _exp64(cx: Ctx, x: ir.Value) -> ir.Value:
    return _libm(cx, "exp", x)


def _sigmoid64(cx: Ctx, x: ir.Value) -> ir.Value:
    b = cx.b
    return b.fdiv(cf64(1.0), b.fadd(cf64(1.0), _exp64(cx, b.fneg(x))))


def _gelu64(cx: Ctx, x: ir.Value) -> ir.Value:
    b = cx.b
    e = _libm(cx, "erf", b.fdiv(x, cf64(math.sqrt(2.0))))
    return b.fmul(b.fmul(x, cf64(0.5)), b.fadd(cf64(1.0), e))


def _gelu_tanh64(cx: Ctx, x: ir.Value) -> ir.Value:
    b = cx.b
    cube = b.fmul(b.fmul(b.fmul(cf64(0.044715), x), x), x)
    t = _libm(cx, "tanh", b.fmul(cf64(math.sqrt(2.0 / math.pi)), b.fadd(x, cube)))
    return b.fmul(b.fmul(cf64(0.5), x), b.fadd(cf64(1.0), t))


def _softplus64(cx: Ctx, x: ir.Value) -> ir.Value:
    b = cx.b
    big = b.fcmp_ordered(">", x, cf64(20.0))
    return b.select(big, x, _libm(cx, "log1p", _exp64(cx, x)))


def _erfinv64(cx: Ctx, x: ir.Value) -> ir.Value:
    """erfinv: the interpreter's algorithm (Giles' initial guess, Newton steps on erf / erfc) in f64."""
    from trnlang.interpret.alu import ERFINV_NEWTON, ERFINV_W1, ERFINV_W2

    b = cx.b
    a = cx.call_intrinsic("llvm.fabs", [x])
    ac = cx.call_intrinsic("llvm.minnum", [a, cf64(0.99999999)])
    w = b.fneg(_libm(cx, "log", b.fmul(b.fsub(cf64(1.0), ac), b.fadd(cf64(1.0), ac))))
    ws = b.fsub(w, cf64(2.5))
    wb = b.fsub(cx.call_intrinsic("llvm.sqrt", [w]), cf64(3.0))
    ps: ir.Value = cf64(ERFINV_W1[0])
    pb: ir.Value = cf64(ERFINV_W2[0])
    for c1, c2 in zip(ERFINV_W1[1:], ERFINV_W2[1:]):
        ps = b.fadd(b.fmul(ps, ws), cf64(c1))
        pb = b.fadd(b.fmul(pb, wb), cf64(c2))
    r = b.fmul(b.select(b.fcmp_ordered("<", w, cf64(5.0)), ps, pb), ac)
    lo = b.fcmp_ordered("<=", a, cf64(0.5))
    for _ in range(ERFINV_NEWTON):
        e = b.select(lo, b.fsub(_libm(cx, "erf", r), a), b.fsub(b.fsub(cf64(1.0), a), _libm(cx, "erfc", r)))
        d = b.fmul(cf64(1.1283791670955126), _exp64(cx, b.fneg(b.fmul(r, r))))
        r = b.fsub(r, b.fdiv(e, d))
    r = b.select(b.fcmp_ordered("==", a, cf64(1.0)), cf64(math.inf), r)
    r = b.select(b.fcmp_ordered(">", a, cf64(1.0)), cf64(math.nan), r)
    r = b.select(b.fcmp_unordered("uno", x, x), x, r)
    return cx.call_intrinsic("llvm.copysign", [r, x])


def _digamma64(cx: Ctx, x: ir.Value) -> ir.Value:
    """digamma: the interpreter's algorithm (shift to x >= 10, asymptotic series, reflection) in f64."""
    from trnlang.interpret.alu import DIGAMMA_SERIES, DIGAMMA_SHIFT

    b = cx.b
    neg = b.fcmp_ordered("<", x, cf64(0.0))
    r = b.fsub(x, cx.call_intrinsic("llvm.trunc", [x]))
    tan = _libm(cx, "tan", b.fmul(cf64(math.pi), r))
    refl = b.select(neg, b.fdiv(cf64(math.pi), tan), cf64(0.0))
    y = b.select(neg, b.fsub(cf64(1.0), x), x)
    small = b.fcmp_ordered("<", y, cf64(float(DIGAMMA_SHIFT)))
    acc: ir.Value = cf64(0.0)
    for k in range(DIGAMMA_SHIFT):
        acc = b.fadd(acc, b.fdiv(cf64(1.0), b.fadd(y, cf64(float(k)))))
    acc = b.select(small, acc, cf64(0.0))
    y = b.select(small, b.fadd(y, cf64(float(DIGAMMA_SHIFT))), y)
    z = b.fdiv(cf64(1.0), b.fmul(y, y))
    p: ir.Value = cf64(DIGAMMA_SERIES[0])
    for c in DIGAMMA_SERIES[1:]:
        p = b.fadd(b.fmul(p, z), cf64(c))
    res = b.fadd(b.fsub(_libm(cx, "log", y), b.fdiv(cf64(0.5), y)), b.fmul(p, z))
    res = b.fsub(b.fsub(res, acc), refl)
    res = b.select(b.and_(neg, b.fcmp_ordered("==", r, cf64(0.0))), cf64(math.nan), res)
    zero = b.fcmp_ordered("==", x, cf64(0.0))
    res = b.select(zero, cx.call_intrinsic("llvm.copysign", [cf64(math.inf), b.fneg(x)]), res)
    return b.select(b.fcmp_unordered("uno", x, x), x, res)


def _rsqrt64(cx: Ctx, x: ir.Value) -> ir.Value:
    return cx.b.fdiv(cf64(1.0), cx.call_intrinsic("llvm.sqrt", [x]))


def _libm_op(name: str) -> Callable[[Ctx, ir.Value], ir.Value]:
    """The f64 emitter calling libm's ``name``."""
    def emit(cx: Ctx, x: ir.Value) -> ir.Value:
        return _libm(cx, name, x)
    return emit


_F64: dict[Alu, Callable[[Ctx, ir.Value], ir.Value]] = {
    Alu.exp: _exp64,
    Alu.log: lambda cx, x: _libm(cx, "log", x),
    Alu.log1p: lambda cx, x: _libm(cx, "log1p", x),
    Alu.expm1: lambda cx, x: _libm(cx, "expm1", x),
    Alu.tanh: lambda cx, x: _libm(cx, "tanh", x),
    Alu.erf: lambda cx, x: _libm(cx, "erf", x),
    Alu.sin: lambda cx, x: _libm(cx, "sin", x),
    Alu.cos: lambda cx, x: _libm(cx, "cos", x),
    Alu.sigmoid: _sigmoid64,
    Alu.gelu: _gelu64,
    Alu.gelu_tanh: _gelu_tanh64,
    Alu.silu: lambda cx, x: cx.b.fmul(x, _sigmoid64(cx, x)),
    Alu.softplus: _softplus64,
    Alu.rsqrt: _rsqrt64,
    Alu.erfinv: _erfinv64,
    Alu.digamma: _digamma64,
    Alu.tan: _libm_op("tan"),
    Alu.asin: _libm_op("asin"),
    Alu.acos: _libm_op("acos"),
    Alu.atan: _libm_op("atan"),
    Alu.sinh: _libm_op("sinh"),
    Alu.cosh: _libm_op("cosh"),
    Alu.asinh: _libm_op("asinh"),
    Alu.acosh: _libm_op("acosh"),
    Alu.atanh: _libm_op("atanh"),
    Alu.log2: _libm_op("log2"),
    Alu.log10: _libm_op("log10"),
    Alu.exp2: _libm_op("exp2"),
    Alu.erfc: _libm_op("erfc"),
    Alu.lgamma: _libm_op("lgamma"),
}


def _vecmath_fn(op: Alu) -> Callable[[Ctx, ir.Value], ir.Value] | None:
    """An fp32 emitter from ``codegen.mathlib.vecmath`` for ``op`` (None when that module does not provide one)."""
    from codegen.lowering import vecmath as lower_vecmath

    return lower_vecmath.emitter(op)


def _transcendental(cx: Ctx, op: Alu, x: ir.Value) -> ir.Value:
    vm = _vecmath_fn(op)
    if vm is not None:
        return vm(cx, x)
    b = cx.b
    return b.fptrunc(_F64[op](cx, b.fpext(x, F64)), F32)


# ---------------------------------------------------------------------------------------- unary


#: fp32 unary functions that are one LLVM intrinsic (correctly rounded or exact)
_F32_INTRINSIC = {Alu.sqrt: "llvm.sqrt", Alu.abs: "llvm.fabs", Alu.floor: "llvm.floor", Alu.trunc: "llvm.trunc",
                  Alu.round: "llvm.rint", Alu.ceil: "llvm.ceil"}


def _unary_f32(cx: Ctx, op: Alu, x: ir.Value) -> ir.Value:
    b = cx.b
    if op is Alu.copy:
        return x
    if op is Alu.rsqrt:  # fp32 sqrt then fp32 division, as torch (f64 division and sqrt ran 4-5x slower)
        return b.fdiv(cf32(1.0), cx.call_intrinsic("llvm.sqrt", [x]))
    if op in _F64:
        return _transcendental(cx, op, x)
    if op in _F32_INTRINSIC:
        return cx.call_intrinsic(_F32_INTRINSIC[op], [x])
    if op is Alu.reciprocal:
        return b.fdiv(cf32(1.0), x)
    if op is Alu.negative:
        return b.fneg(x)
    if op is Alu.sign:
        pos = b.uitofp(b.fcmp_ordered(">", x, cf32(0.0)), F32)
        neg = b.uitofp(b.fcmp_ordered("<", x, cf32(0.0)), F32)
        return b.fsub(pos, neg)
    if op is Alu.square:
        return b.fmul(x, x)
    if op is Alu.relu:
        return b.select(b.fcmp_ordered("<", x, cf32(0.0)), cf32(0.0), x)
    if op is Alu.logical_not:
        return b.zext(b.fcmp_ordered("==", x, cf32(0.0)), I32)
    raise DTypeError(f"{op.name} is not defined on floating-point operands (float32)")


def _unary_i32(cx: Ctx, op: Alu, x: ir.Value, ct: CT) -> ir.Value:
    b = cx.b
    if op is Alu.bitwise_not and ct is CT.BOOL:
        return b.zext(b.icmp_signed("==", x, ci32(0)), I32)
    if op in (Alu.copy, Alu.floor, Alu.ceil, Alu.trunc, Alu.round):
        return x
    if op is Alu.abs:
        return b.select(b.icmp_signed("<", x, ci32(0)), b.neg(x), x)
    if op is Alu.negative:
        return b.neg(x)
    if op is Alu.sign:
        return b.sub(b.zext(b.icmp_signed(">", x, ci32(0)), I32), b.zext(b.icmp_signed("<", x, ci32(0)), I32))
    if op is Alu.square:
        return b.mul(x, x)
    if op is Alu.relu:
        return b.select(b.icmp_signed("<", x, ci32(0)), ci32(0), x)
    if op is Alu.logical_not:
        return b.zext(b.icmp_signed("==", x, ci32(0)), I32)
    if op is Alu.bitwise_not:
        return b.not_(x)
    raise DTypeError(f"{op.name} is not a unary function")


def unary(cx: Ctx, op: Alu, x: ir.Value, ct: CT) -> tuple[ir.Value, CT]:
    """Apply a unary ALU function to a compute value."""
    rct = unary_ct(op, ct)
    if ct is CT.F32:
        return _unary_f32(cx, op, x), rct
    if op in _INT_UNARY:
        return _unary_i32(cx, op, x, ct), rct
    return _unary_f32(cx, op, to_f32(cx, x, ct)), rct


# ---------------------------------------------------------------------------------------- binary


def _ipow(cx: Ctx) -> ir.Function:
    """int32 power with wrap-around; negative exponents give 1/a^|b| truncated (0 unless a is +-1)."""
    fn = cx.helper("trn.ipow")
    if fn is not None:
        return fn
    fn, b = cx.add_helper("trn.ipow", ir.FunctionType(I32, [I32, I32]))
    fn.attributes.discard("alwaysinline")
    a, e = fn.args
    entry = b.block
    neg_bb = fn.append_basic_block("neg")
    loop_bb = fn.append_basic_block("loop")
    done_bb = fn.append_basic_block("done")
    b.cbranch(b.icmp_signed("<", e, ci32(0)), neg_bb, loop_bb)
    b.position_at_end(neg_bb)
    odd = b.icmp_signed("!=", b.and_(e, ci32(1)), ci32(0))
    m1 = b.select(odd, ci32(-1), ci32(1))
    r = b.select(b.icmp_signed("==", a, ci32(1)), ci32(1), b.select(b.icmp_signed("==", a, ci32(-1)), m1, ci32(0)))
    b.ret(r)
    b.position_at_end(loop_bb)
    res = b.phi(I32)
    base = b.phi(I32)
    ex = b.phi(I32)
    res.add_incoming(ci32(1), entry)
    base.add_incoming(a, entry)
    ex.add_incoming(e, entry)
    bit = b.icmp_signed("!=", b.and_(ex, ci32(1)), ci32(0))
    res2 = b.select(bit, b.mul(res, base), res)
    base2 = b.mul(base, base)
    ex2 = b.lshr(ex, ci32(1))
    res.add_incoming(res2, loop_bb)
    base.add_incoming(base2, loop_bb)
    ex.add_incoming(ex2, loop_bb)
    b.cbranch(b.icmp_signed("==", ex2, ci32(0)), done_bb, loop_bb)
    b.position_at_end(done_bb)
    b.ret(res2)
    return fn


def _binary_f32(cx: Ctx, op: Alu, a: ir.Value, c: ir.Value) -> ir.Value:
    b = cx.b
    if op is Alu.add:
        return b.fadd(a, c)
    if op is Alu.subtract:
        return b.fsub(a, c)
    if op is Alu.multiply:
        return b.fmul(a, c)
    if op is Alu.divide:
        return b.fdiv(a, c)
    if op in (Alu.maximum, Alu.minimum):
        # numpy: NaN propagates; on ties (+0 vs -0) the second operand wins (x86 maxps)
        t = b.select(b.fcmp_ordered(">" if op is Alu.maximum else "<", a, c), a, c)
        return b.select(b.fcmp_unordered("uno", a, a), a, t)
    if op is Alu.power:
        vm = _vecmath_fn(Alu.power)
        if vm is not None:
            return vm(cx, a, c)  # type: ignore[call-arg]
        p = cx.call_intrinsic("llvm.pow", [b.fpext(a, F64), b.fpext(c, F64)])
        return b.fptrunc(p, F32)
    if op is Alu.fmod:
        return b.frem(a, c)
    if op is Alu.atan2:
        at = cx.b.call(cx.extern("atan2", F64, [F64, F64]), [b.fpext(a, F64), b.fpext(c, F64)])
        return b.fptrunc(at, F32)
    if op in _COMPARE:
        rel = _COMPARE[op]
        cmp = b.fcmp_unordered(rel, a, c) if rel == "!=" else b.fcmp_ordered(rel, a, c)
        return b.zext(cmp, I32)
    if op in _LOGICAL:
        x = b.fcmp_unordered("!=", a, cf32(0.0))
        y = b.fcmp_unordered("!=", c, cf32(0.0))
        return b.zext(_logical(b, op, x, y), I32)
    raise DTypeError(f"{op.name} is not defined on floating-point operands")


def _logical(b: ir.IRBuilder, op: Alu, x: ir.Value, y: ir.Value) -> ir.Value:
    if op is Alu.logical_and:
        return b.and_(x, y)
    if op is Alu.logical_or:
        return b.or_(x, y)
    return b.xor(x, y)


def _binary_i32(cx: Ctx, op: Alu, a: ir.Value, c: ir.Value) -> ir.Value:
    b = cx.b
    if op is Alu.add:
        return b.add(a, c)
    if op is Alu.subtract:
        return b.sub(a, c)
    if op is Alu.multiply:
        return b.mul(a, c)
    if op is Alu.maximum:
        return b.select(b.icmp_signed(">", c, a), c, a)
    if op is Alu.minimum:
        return b.select(b.icmp_signed("<", c, a), c, a)
    if op is Alu.power:
        return b.call(_ipow(cx), [a, c])
    if op is Alu.fmod:
        a64, c64 = b.sext(a, I64), b.sext(c, I64)
        zero = b.icmp_signed("==", c64, ci64(0))
        r = b.srem(a64, b.select(zero, ci64(1), c64))
        return b.trunc(b.select(zero, ci64(0), r), I32)
    if op in _COMPARE:
        return b.zext(b.icmp_signed(_COMPARE[op], a, c), I32)
    if op in _LOGICAL:
        x = b.icmp_signed("!=", a, ci32(0))
        y = b.icmp_signed("!=", c, ci32(0))
        return b.zext(_logical(b, op, x, y), I32)
    if op is Alu.bitwise_and:
        return b.and_(a, c)
    if op is Alu.bitwise_or:
        return b.or_(a, c)
    if op is Alu.bitwise_xor:
        return b.xor(a, c)
    raise DTypeError(f"{op.name} is not a binary function")


def binary(cx: Ctx, op: Alu, a: ir.Value, act: CT, c: ir.Value, cct: CT) -> tuple[ir.Value, CT]:
    """Apply a binary ALU function to two compute values (already broadcast)."""
    rct = binary_ct(op, act, cct)
    if op in (Alu.divide, Alu.atan2) or act is CT.F32 or cct is CT.F32:
        return _binary_f32(cx, op, to_f32(cx, a, act), to_f32(cx, c, cct)), rct
    return _binary_i32(cx, op, a, c), rct


# ---------------------------------------------------------------------------------------- reductions


class Reducer:
    """Accumulation of ``tensor_reduce`` / activation ``reduce_op`` over compute values of one type.

    add/multiply: floats in f64 (reassociable, so LLVM vectorises), ints in wrapping int32;
    maximum/minimum: NaN propagating; logical_and/or: int32 1/0; argmax/argmin: the first
    extreme (NaN counts as the extreme), as int32 index.
    """

    def __init__(self, op: Alu, ct: CT) -> None:
        if op not in (Alu.add, Alu.multiply, Alu.maximum, Alu.minimum, Alu.logical_and, Alu.logical_or,
                      Alu.argmax, Alu.argmin):
            raise DTypeError(f"{op.name} is not a reduction")
        self.op = op
        self.ct = ct
        self.flt = ct is CT.F32

    @property
    def result_ct(self) -> CT:
        if self.op in (Alu.logical_and, Alu.logical_or, Alu.argmax, Alu.argmin):
            return CT.I32
        return CT.F32 if self.flt else CT.I32

    def acc_types(self) -> list[ir.Type]:
        op = self.op
        if op in (Alu.add, Alu.multiply):
            return [F64 if self.flt else I32]
        if op in (Alu.maximum, Alu.minimum):
            return [F32 if self.flt else I32]
        if op in (Alu.logical_and, Alu.logical_or):
            return [I1]
        return [F32 if self.flt else I32, I64]

    def init(self) -> list[ir.Value]:
        op, flt = self.op, self.flt
        if op is Alu.add:
            return [cf64(-0.0) if flt else ci32(0)]
        if op is Alu.multiply:
            return [cf64(1.0) if flt else ci32(1)]
        if op is Alu.maximum:
            return [cf32(-math.inf) if flt else ci32(-2**31)]
        if op is Alu.minimum:
            return [cf32(math.inf) if flt else ci32(2**31 - 1)]
        if op is Alu.logical_and:
            return [ir.Constant(I1, 1)]
        if op is Alu.logical_or:
            return [ir.Constant(I1, 0)]
        return [ir.Constant(F32 if flt else I32, None), ci64(-1)]

    def step(self, cx: Ctx, acc: list[ir.Value], v: ir.Value, pos: ir.Value | None = None) -> list[ir.Value]:
        b = cx.b
        op, flt = self.op, self.flt
        if op is Alu.add:
            return [b.fadd(acc[0], b.fpext(v, F64), flags=("reassoc",)) if flt else b.add(acc[0], v)]
        if op is Alu.multiply:
            return [b.fmul(acc[0], b.fpext(v, F64), flags=("reassoc",)) if flt else b.mul(acc[0], v)]
        if op in (Alu.maximum, Alu.minimum):
            if flt:
                return [cx.call_intrinsic("llvm.maximum" if op is Alu.maximum else "llvm.minimum", [acc[0], v])]
            rel = ">" if op is Alu.maximum else "<"
            return [b.select(b.icmp_signed(rel, v, acc[0]), v, acc[0])]
        if op in (Alu.logical_and, Alu.logical_or):
            nz = b.fcmp_unordered("!=", v, cf32(0.0)) if flt else b.icmp_signed("!=", v, ci32(0))
            return [b.and_(acc[0], nz) if op is Alu.logical_and else b.or_(acc[0], nz)]
        # argmax / argmin: take v when nothing taken yet, or best is not NaN and (v is NaN or v beats best)
        best, idx = acc
        first = b.icmp_signed("<", idx, ci64(0))
        rel = ">" if op is Alu.argmax else "<"
        if flt:
            best_nan = b.fcmp_unordered("uno", best, best)
            v_nan = b.fcmp_unordered("uno", v, v)
            better = b.and_(b.not_(best_nan), b.or_(v_nan, b.fcmp_ordered(rel, v, best)))
        else:
            better = b.icmp_signed(rel, v, best)
        take = b.or_(first, better)
        return [b.select(take, v, best), b.select(take, pos, idx)]

    def final(self, cx: Ctx, acc: list[ir.Value]) -> ir.Value:
        b = cx.b
        op, flt = self.op, self.flt
        if op in (Alu.add, Alu.multiply):
            return b.fptrunc(acc[0], F32) if flt else acc[0]
        if op in (Alu.maximum, Alu.minimum):
            return acc[0]
        if op in (Alu.logical_and, Alu.logical_or):
            return b.zext(acc[0], I32)
        return b.trunc(acc[1], I32)
