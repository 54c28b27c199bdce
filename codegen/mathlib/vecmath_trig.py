"""sin / cos for ``codegen.mathlib.vecmath``: Cody-Waite reduction by pi/2 with FMA, Payne-Hanek for |x| >= 2^19.

Accuracy (docs/vecmath_accuracy.md): within ~2.5 ulp for every finite fp32 input.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from llvmlite import ir

from codegen.irutil import F32, F64, I32, I64
from codegen.mathlib.vecmath_ops import Ops, Value, ops_for, reduce_or

# Cephes sinf / cosf on |r| <= pi/4
SIN_P = [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1]
COS_P = [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2]

_PI_2 = Fraction("1.570796326794896619231321691639751442098584699687552910487472296153908203143104499314017412671")
_TWO_OVER_PI = Fraction(
    "0.636619772367581343075535053490057448137838582961825794990669376235587190536906140360455211065012343824291"
)


def _split(value: Fraction, bits: list[int]) -> list[float]:
    """Split ``value`` into fp32 parts with ``bits`` significant bits each (last part rounded)."""
    parts: list[float] = []
    rest = value
    for i, nb in enumerate(bits):
        if i == len(bits) - 1:
            part = float(np.float32(float(rest)))
        else:
            e = rest.numerator.bit_length() - rest.denominator.bit_length()
            scale = Fraction(2) ** (nb - 1 - e)
            part = float(Fraction(int(rest * scale)) / scale)
            if abs(Fraction(part)) > abs(rest):  # int() truncates toward zero; keep |part| <= |rest|
                raise AssertionError("bad split")
        parts.append(part)
        rest -= Fraction(part)
    return parts


# pi/2 as 4 x 11 bits + 24 bits: q * part is exact for |q| < 2^13, so the first steps of the
# Cody-Waite reduction cancel exactly; accurate reduction for |x| up to ~1e4 (see docs).
PIO2_PARTS = _split(_PI_2, [11, 11, 11, 11, 24])
TRIG_MAX_Q = 2.0**22  # keeps the fast path's int conversion defined (|x| >= TRIG_LARGE goes elsewhere)
TRIG_LARGE = 2.0**19  # from here on: exact table-driven (Payne-Hanek) reduction in a rare branch
TRIG_LARGE_EXP_MIN = -4  # 2^19 = 2^23 * 2^-4: smallest exponent of the 24-bit-integer mantissa


def _trig_table() -> list[float]:
    """(2^e * 2/pi) mod 4 for e = -4 .. 104 as 4 doubles each (24 + 24 + 24 significant bits + rest)."""
    out: list[float] = []
    for e in range(TRIG_LARGE_EXP_MIN, 105):
        t = (Fraction(2) ** e * _TWO_OVER_PI) % 4
        for shift in (22, 46, 70):
            chunk = Fraction(int(t * 2**shift), 2**shift)
            out.append(float(chunk))
            t -= chunk
        out.append(float(t))
    return out


def _trig_reduce_large(module: ir.Module) -> ir.Function:
    """``{float r, i32 q} f(float x)``: x = q pi/2 + r (mod 2 pi) exactly, for finite |x| >= 2^19.

    Payne-Hanek style with a table of (2^e 2/pi) mod 4 in 24-bit chunks (products with the
    24-bit mantissa are exact in double precision).  Defined once per module (internal).
    """
    name = "trn_vecmath_trig_reduce_large"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    ret_ty = ir.LiteralStructType([F32, I32])
    fn = ir.Function(module, ir.FunctionType(ret_ty, [F32]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    table = _trig_table()
    gty = ir.ArrayType(F64, len(table))
    gv = ir.GlobalVariable(module, gty, name + "_table")
    gv.linkage = "internal"
    gv.global_constant = True
    gv.initializer = ir.Constant(gty, table)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    m = Ops(b, F32)
    w = Ops(b, F64)
    x = fn.args[0]
    ix = b.and_(m.bits(x), m.ci(0x7FFFFFFF))
    idx = b.sub(b.lshr(ix, m.ci(23)), m.ci(127 + 23 + TRIG_LARGE_EXP_MIN))
    idx = b.select(b.icmp_signed("<", idx, m.ci(0)), m.ci(0), idx)
    idx = b.select(b.icmp_signed(">", idx, m.ci(104 - TRIG_LARGE_EXP_MIN)), m.ci(104 - TRIG_LARGE_EXP_MIN), idx)
    mant = b.sitofp(b.or_(b.and_(ix, m.ci(0x7FFFFF)), m.ci(0x800000)), F64)
    base = b.mul(b.zext(idx, I64), I64(4))
    t = [b.load(b.gep(gv, [I64(0), b.add(base, I64(k))], inbounds=True, source_etype=gty), typ=F64)
         for k in range(4)]
    a = w.mul(mant, t[0])
    qa = w.call("rint", a)
    f = w.fma(mant, t[1], w.sub(a, qa))
    qb = w.call("rint", f)
    f = w.sub(f, qb)
    f = w.fma(mant, t[2], f)
    f = w.fma(mant, t[3], f)
    r = b.fptrunc(w.mul(f, w.c(float(_PI_2))), F32)
    q = b.trunc(b.fptosi(w.add(qa, qb), I64), I32)
    neg = b.icmp_signed("<", m.bits(x), m.ci(0))
    r = b.select(neg, m.neg(r), r)
    q = b.and_(b.select(neg, b.neg(q), q), m.ci(3))
    res = b.insert_value(ir.Constant(ret_ty, None), r, 0)
    b.ret(b.insert_value(res, q, 1))
    return fn


def _sincos(m: Ops, x: Value, cos: bool) -> Value:
    b = m.b
    q = m.call("rint", m.mul(x, m.c(2.0 / np.pi)))
    q = m.clamp(q, -TRIG_MAX_Q, TRIG_MAX_Q)
    r = x
    for part in PIO2_PARTS:
        r = m.fma(q, m.c(-part), r)
    qi = m.to_int(q)
    # |x| >= 2^19: exact reduction in a rarely taken block
    big = b.and_(m.cmp(">=", m.abs(x), m.c(TRIG_LARGE)), m.cmp("<", m.abs(x), m.c(np.inf)))
    any_big = reduce_or(b, big) if isinstance(big.type, ir.VectorType) else big
    helper = _trig_reduce_large(b.block.function.module)
    cur = b.block
    slow_bb = b.append_basic_block("trig.large")
    done_bb = b.append_basic_block("trig.done")
    b.cbranch(any_big, slow_bb, done_bb)
    b.position_at_end(slow_bb)
    if isinstance(x.type, ir.VectorType):
        r_slow, q_slow = r, qi
        for lane in range(x.type.count):
            res = b.call(helper, [b.extract_element(x, I32(lane))])
            r_slow = b.insert_element(r_slow, b.extract_value(res, 0), I32(lane))
            q_slow = b.insert_element(q_slow, b.extract_value(res, 1), I32(lane))
    else:
        res = b.call(helper, [x])
        r_slow, q_slow = b.extract_value(res, 0), b.extract_value(res, 1)
    r_slow = m.sel(big, r_slow, r)
    q_slow = b.select(big, q_slow, qi)
    b.branch(done_bb)
    b.position_at_end(done_bb)
    r_phi = b.phi(m.ty)
    r_phi.add_incoming(r, cur)
    r_phi.add_incoming(r_slow, slow_bb)
    q_phi = b.phi(m.ity)
    q_phi.add_incoming(qi, cur)
    q_phi.add_incoming(q_slow, slow_bb)
    r, qi = r_phi, q_phi
    z = m.mul(r, r)
    sin_r = m.fma(m.mul(m.poly(z, SIN_P), z), r, r)
    cos_r = m.fma(m.mul(z, z), m.poly(z, COS_P), m.fma(z, m.c(-0.5), m.c(1.0)))
    if cos:
        qi = b.add(qi, m.ci(1))
    odd = b.icmp_signed("!=", b.and_(qi, m.ci(1)), m.ci(0))
    val = m.sel(odd, cos_r, sin_r)
    sign = b.shl(b.and_(qi, m.ci(2)), m.ci(30))
    res = m.fbits(b.xor(m.bits(val), sign))
    if not cos:
        res = m.sel(m.cmp("==", x, m.c(0.0)), x, res)  # keep -0
    finite = m.cmp("<", m.abs(x), m.c(np.inf))
    return m.sel(finite, res, m.sub(x, x))  # inf - inf = NaN, NaN stays NaN


def emit_sin(builder: ir.IRBuilder, x: Value) -> Value:
    """sin (accurate for |x| up to ~1e4, see docs/vecmath_accuracy.md)."""
    m = ops_for(builder, x)
    return _sincos(m, x, cos=False)


def emit_cos(builder: ir.IRBuilder, x: Value) -> Value:
    """cos (accurate for |x| up to ~1e4, see docs/vecmath_accuracy.md)."""
    m = ops_for(builder, x)
    return _sincos(m, x, cos=True)
