"""Vectorisable inline fp32 math emitted as ``llvmlite.ir``.

Every ``emit_<fn>(builder, x[, y])`` takes values of type ``float`` or
``<N x float>`` (one generator for both: the scalar tail of a loop and its
SIMD body use the same code) and returns the result as a value of the same
type, emitted at the builder's position.  Nothing external is called (except
libm ``fmodf`` in fmod's rare block), so a lowering can fuse chains of
operations into one loop body.  Most emitters are
straight-line code; ``emit_sin`` / ``emit_cos`` (|x| >= 2^19) and
``emit_fmod`` (|x/y| >= 2^29) branch to a rarely taken block for exact
argument reduction, so after them the builder sits in a new basic block (use
``builder.block`` for phi incomings).

Algorithms: range reduction plus minimax / Cephes polynomials evaluated with
FMA; ``pow`` and the exact part of ``fmod`` run in double precision.  Special
values follow C99/torch: NaN propagates, exp overflows to inf and underflows to
(subnormal) 0, ``log(0) = -inf``, ``log(x<0) = NaN``, tanh/erf saturate,
``softplus(x) = x`` for ``x > 20`` (torch's threshold), and silu / gelu /
gelu_tanh give NaN at -inf like their literal formulas (torch, the interpreter).  Measured accuracy is in
``docs/vecmath_accuracy.md`` (``python -m tools.vecmath_accuracy``).

The erf/erfc coefficients come from ``tools/polyfit.py`` (Lawson minimax
fits, rounded to fp32 one coefficient at a time); exp, log, tanh, sin and cos
use Cephes' single-precision coefficients.  sin/cos live in ``vecmath_trig``,
the type-generic helper ``Ops`` in ``vecmath_ops``.

Results are faithful (about 1-3 ulp, see the table), not correctly rounded:
they can differ in the last bit from the interpreter's float64 oracle.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from llvmlite import ir

from codegen.irutil import call_overloaded
from codegen.mathlib.vecmath_ops import Ops, Value, ops_for, reduce_or
from codegen.mathlib.vecmath_trig import emit_cos, emit_sin

# ----------------------------------------------------------------------------- constants

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
LN2_HI = 0.693145751953125  # 16 significant bits: n * LN2_HI is exact for |n| < 256
LN2_LO = 1.428606765330187e-06
# Cephes expf: exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2
EXP_P = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1]
# Cephes logf: log(1+f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2)-1, sqrt(2)-1]
LOG_P = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
         -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]
LOG_C_HI = 0.693359375  # Cephes split of ln 2
LOG_C_LO = -2.12194440e-4
# expm1(r) = r + r^2 Q(r): Taylor 1/2!, 1/3!, ..., 1/9! (|r| <= ln2/2)
EXPM1_Q = [1 / 362880, 1 / 40320, 1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 0.5]
# Cephes tanhf, |x| < 0.625: tanh x = x + x z P(z), z = x^2
TANH_P = [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1]
TANH_SMALL = 0.625
# erf(a) = a + a P(a^2) for a < ERF_SMALL (tools/polyfit.py, degree 6)
ERF_SMALL = 0.875
ERF_P = [7.842241029720753e-05, -0.0008021723479032516, 0.0051906355656683445, -0.026855282485485077,
         0.11283621937036514, -0.3761262893676758, 0.12837916612625122]
# erfc(a) = exp(-a^2) t G(t), t = 1/(1 + a/2), a in [ERF_SMALL, ERFC_MAX] (tools/polyfit.py, degree 8)
ERFC_MAX = 10.5
ERFC_G = [-0.04414977878332138, 0.23832646012306213, -0.42859116196632385, 0.2393272966146469,
          -0.01266655046492815, 0.20019753277301788, 0.24320636689662933, 0.2824028432369232,
          0.2820836007595062]
SQRT1_2 = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654
GELU_TANH_K = 0.044715
SOFTPLUS_THRESHOLD = 20.0
FLT_MIN = 1.1754943508222875e-38

# ----------------------------------------------------------------------------- exp family


def _exp_parts(m: Ops, x: Value) -> tuple[Value, Value]:
    """exp(x) = p * 2**n with p in [0.7, 1.42] and ``n`` an integral float in [-217, 129] (scale with
    ``m.scale2``: one rounding, a subnormal result included). NaN inputs give garbage (callers restore the NaN).
    """
    xc = m.clamp(x, -150.0, 89.0)
    n = m.call("rint", m.mul(xc, m.c(LOG2E)))
    r = m.fma(n, m.c(-LN2_HI), xc)
    r = m.fma(n, m.c(-LN2_LO), r)
    y = m.poly(r, EXP_P)
    p = m.add(m.fma(y, m.mul(r, r), r), m.c(1.0))
    return p, n


def _exp_scaled(m: Ops, x: Value, factor: Value | None = None) -> Value:
    """``factor * exp(x)`` with one final rounding (no NaN handling)."""
    p, n = _exp_parts(m, x)
    if factor is not None:
        p = m.mul(factor, p)
    return m.scale2(p, n)


def emit_exp(builder: ir.IRBuilder, x: Value) -> Value:
    """e**x."""
    m = ops_for(builder, x)
    return m.keep_nan(x, _exp_scaled(m, x))


def emit_exp_precise(builder: ir.IRBuilder, x: Value) -> Value:
    """e**x evaluated in double precision and rounded once to fp32.

    About 2x the cost of :func:`emit_exp`; bit-identical to a float64 oracle
    (``np.exp(x.astype(float64)).astype(float32)``, the interpreter) except for
    the rare inputs whose exact result lies within ~1e-16 relative of an fp32
    rounding boundary.
    """
    m = ops_for(builder, x)
    w = m.wide()
    xd = builder.fpext(x, w.ty)
    res = builder.fptrunc(_exp_f64(w, w.clamp(xd, -160.0, 160.0)), m.ty)
    return m.keep_nan(x, res)


def emit_expm1(builder: ir.IRBuilder, x: Value) -> Value:
    """e**x - 1, accurate near 0."""
    m = ops_for(builder, x)
    xc = m.clamp(x, -30.0, 89.0)
    n = m.call("rint", m.mul(xc, m.c(LOG2E)))
    r = m.fma(n, m.c(-LN2_HI), xc)
    r = m.fma(n, m.c(-LN2_LO), r)
    em1r = m.fma(m.mul(r, r), m.poly(r, EXPM1_Q), r)  # expm1(r)
    ni = m.to_int(n)
    # n <= 60: 2^n * expm1(r) + (2^n - 1); larger n: the -1 is negligible, scale in two steps
    small_n = m.b.icmp_signed("<=", ni, m.ci(60))
    s = m.pow2i(m.b.select(small_n, ni, m.ci(60)))
    res_small = m.fma(s, em1r, m.sub(s, m.c(1.0)))
    n1 = m.b.ashr(ni, m.ci(1))
    res_big = m.mul(m.mul(m.add(em1r, m.c(1.0)), m.pow2i(n1)), m.pow2i(m.b.sub(ni, n1)))
    res = m.sel(small_n, res_small, res_big)
    res = m.sel(m.cmp("==", x, m.c(0.0)), x, res)  # keep -0
    return m.keep_nan(x, res)


def _x_sigmoid(m: Ops, x: Value | None, v: Value, v_lo: Value | None = None) -> Value:
    """``x * sigmoid(v)`` (``x`` None: 1), accurate also where the result is tiny.

    ``v_lo`` is an optional low part (v = v + v_lo) for arguments computed in
    extended precision.  v >= 0: x / (1 + e^-v); v < 0: x e^v / (1 + e^v).
    """
    neg = m.cmp("<", v, m.c(0.0))
    av = m.abs(v)
    p, n = _exp_parts(m, m.neg(av))
    if v_lo is not None:  # e^-|v| * (1 - lo|v|)
        av_lo = m.sel(neg, m.neg(v_lo), v_lo)
        p = m.mul(p, m.sub(m.c(1.0), av_lo))
    e = m.scale2(p, n)  # e^-|v| in (0, 1]
    s = m.div(m.c(1.0), m.add(m.c(1.0), e))
    xs = s if x is None else m.mul(x, s)
    tiny = m.scale2(m.mul(xs, p), n)  # x s e^-|v|, rounded once
    tiny = m.sel(m.cmp(">", av, m.c(160.0)), m.copysign(m.c(0.0), xs), tiny)  # huge x * e^-160
    return m.sel(neg, tiny, xs)


def _neg_inf_nan(m: Ops, x: Value, res: Value) -> Value:
    """NaN at x = -inf, as the literal formulas x * (something -> 0) give (torch and the interpreter)."""
    return m.sel(m.cmp("==", x, m.c(-np.inf)), m.c(np.nan), res)


def emit_sigmoid(builder: ir.IRBuilder, x: Value) -> Value:
    """1 / (1 + e**-x)."""
    m = ops_for(builder, x)
    return m.keep_nan(x, _x_sigmoid(m, None, x))


def emit_silu(builder: ir.IRBuilder, x: Value) -> Value:
    """x * sigmoid(x)."""
    m = ops_for(builder, x)
    return _neg_inf_nan(m, x, m.keep_nan(x, _x_sigmoid(m, x, x)))


def emit_tanh(builder: ir.IRBuilder, x: Value) -> Value:
    """tanh: Cephes polynomial for |x| < 0.625, else 1 - 2/(e^{2|x|} + 1)."""
    m = ops_for(builder, x)
    z = m.mul(x, x)
    small = m.fma(m.mul(m.poly(z, TANH_P), z), x, x)
    ax = m.abs(x)
    e = _exp_scaled(m, m.add(ax, ax))
    big = m.sub(m.c(1.0), m.div(m.c(2.0), m.add(e, m.c(1.0))))
    res = m.sel(m.cmp("<", ax, m.c(TANH_SMALL)), small, m.copysign(big, x))
    res = m.sel(m.cmp("==", x, m.c(0.0)), x, res)  # keep -0
    return m.keep_nan(x, res)


def emit_gelu_tanh(builder: ir.IRBuilder, x: Value) -> Value:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) computed as x * sigmoid(2u).

    The sigmoid argument is formed in double precision (its rounding error would
    otherwise be amplified by exp for large negative x).
    """
    m = ops_for(builder, x)
    w = m.wide()
    xd = builder.fpext(x, w.ty)
    c1 = 2.0 * SQRT_2_OVER_PI
    vd = w.mul(xd, w.fma(w.mul(xd, xd), w.c(c1 * GELU_TANH_K), w.c(c1)))
    v = builder.fptrunc(vd, m.ty)
    v_lo = builder.fptrunc(w.sub(vd, builder.fpext(v, w.ty)), m.ty)
    v_lo = m.sel(m.cmp("<", m.abs(v), m.c(1e30)), v_lo, m.c(0.0))  # inf - inf
    return _neg_inf_nan(m, x, m.keep_nan(x, _x_sigmoid(m, x, v, v_lo)))


# ----------------------------------------------------------------------------- log family


def _log_reduce(m: Ops, x: Value) -> tuple[Value, Value]:
    """x = 2^k (1 + f), f in [sqrt(1/2) - 1, sqrt(2) - 1); x positive finite (subnormals ok)."""
    sub = m.cmp("<", x, m.c(FLT_MIN))
    xs = m.sel(sub, m.mul(x, m.c(2.0**23)), x)
    t = m.b.sub(m.bits(xs), m.ci(0x3F3504F3))
    k = m.b.add(m.b.ashr(t, m.ci(23)), m.b.select(sub, m.ci(-23), m.ci(0)))
    mant = m.fbits(m.b.add(m.b.and_(t, m.ci(0x7FFFFF)), m.ci(0x3F3504F3)))
    return m.sub(mant, m.c(1.0)), m.to_float(k)


def _log_core(m: Ops, f: Value, k: Value, extra: Value | None = None) -> Value:
    """k ln2 + log(1 + f) (+ ``extra``, a small correction term)."""
    z = m.mul(f, f)
    y = m.mul(m.mul(m.poly(f, LOG_P), f), z)
    y = m.fma(k, m.c(LOG_C_LO), y)
    if extra is not None:
        y = m.add(y, extra)
    y = m.fma(z, m.c(-0.5), y)
    return m.fma(k, m.c(LOG_C_HI), m.add(f, y))


def emit_log(builder: ir.IRBuilder, x: Value) -> Value:
    """Natural logarithm: log(0) = -inf, log(x<0) = NaN, log(inf) = inf."""
    m = ops_for(builder, x)
    f, k = _log_reduce(m, x)
    res = _log_core(m, f, k)
    res = m.sel(m.cmp("==", x, m.c(np.inf)), x, res)
    res = m.sel(m.cmp("==", x, m.c(0.0)), m.c(-np.inf), res)
    res = m.sel(m.cmp("<", x, m.c(0.0)), m.c(np.nan), res)
    return m.keep_nan(x, res)


def emit_log1p(builder: ir.IRBuilder, x: Value) -> Value:
    """log(1 + x), accurate near 0 (musl's correction of the rounding of 1 + x)."""
    m = ops_for(builder, x)
    u = m.add(m.c(1.0), x)
    f, k = _log_reduce(m, u)
    c = m.sel(m.cmp(">=", k, m.c(2.0)), m.sub(m.c(1.0), m.sub(u, x)), m.sub(x, m.sub(u, m.c(1.0))))
    c = m.sel(m.cmp("<", k, m.c(25.0)), m.div(c, u), m.c(0.0))
    res = _log_core(m, f, k, c)
    res = m.sel(m.cmp("==", x, m.c(0.0)), x, res)  # keep -0
    res = m.sel(m.cmp("==", x, m.c(np.inf)), x, res)
    res = m.sel(m.cmp("==", x, m.c(-1.0)), m.c(-np.inf), res)
    res = m.sel(m.cmp("<", x, m.c(-1.0)), m.c(np.nan), res)
    return m.keep_nan(x, res)


def emit_softplus(builder: ir.IRBuilder, x: Value) -> Value:
    """log(1 + e**x), and x itself for x > 20 (torch's threshold, beta = 1)."""
    m = ops_for(builder, x)
    lp = emit_log1p(builder, emit_exp(builder, x))
    return m.sel(m.cmp(">", x, m.c(SOFTPLUS_THRESHOLD)), x, lp)


# ----------------------------------------------------------------------------- erf family


def _erf_small(m: Ops, a: Value) -> Value:
    """erf(a) for |a| < ERF_SMALL (odd; the leading term a is exact)."""
    return m.fma(a, m.poly(m.mul(a, a), ERF_P), a)


def _erfc_big(m: Ops, a: Value, a2_hi: Value, a2_lo: Value) -> Value:
    """erfc(a) for ERF_SMALL <= a <= ERFC_MAX, with a^2 = a2_hi + a2_lo given exactly."""
    t = m.div(m.c(1.0), m.fma(a, m.c(0.5), m.c(1.0)))
    g = m.mul(t, m.poly(t, ERFC_G))
    g = m.mul(g, m.sub(m.c(1.0), a2_lo))  # exp(-lo) ~ 1 - lo, |lo| < 2^-24 a^2
    return _exp_scaled(m, m.neg(a2_hi), g)


def _square_split(m: Ops, a: Value) -> tuple[Value, Value]:
    hi = m.mul(a, a)
    return hi, m.fma(a, a, m.neg(hi))


def emit_erf(builder: ir.IRBuilder, x: Value) -> Value:
    """Error function; erf(+-inf) = +-1."""
    m = ops_for(builder, x)
    a = m.abs(x)
    ac = m.clamp(a, ERF_SMALL, ERFC_MAX)
    hi, lo = _square_split(m, ac)
    big = m.sub(m.c(1.0), _erfc_big(m, ac, hi, lo))
    res = m.sel(m.cmp("<", a, m.c(ERF_SMALL)), _erf_small(m, a), big)
    return m.keep_nan(x, m.copysign(res, x))


def emit_gelu(builder: ir.IRBuilder, x: Value) -> Value:
    """0.5 x (1 + erf(x / sqrt 2)); the negative tail is computed as 0.5 x erfc(|x| / sqrt 2)."""
    m = ops_for(builder, x)
    ax = m.abs(x)
    a = m.mul(ax, m.c(SQRT1_2))
    axc = m.clamp(ax, ERF_SMALL, ERFC_MAX / SQRT1_2)
    hi, lo = _square_split(m, axc)  # a^2 = (hi + lo) / 2 exactly
    erfc_a = _erfc_big(m, m.mul(axc, m.c(SQRT1_2)), m.mul(hi, m.c(0.5)), m.mul(lo, m.c(0.5)))
    small = m.cmp("<", a, m.c(ERF_SMALL))
    erf_a = _erf_small(m, a)
    one = m.c(1.0)
    pos = m.add(one, m.sel(small, erf_a, m.sub(one, erfc_a)))
    neg = m.sel(small, m.sub(one, erf_a), erfc_a)
    phi2 = m.sel(m.cmp("<", x, m.c(0.0)), neg, pos)  # 2 Phi(x)
    return _neg_inf_nan(m, x, m.keep_nan(x, m.mul(m.mul(x, m.c(0.5)), phi2)))


# ----------------------------------------------------------------------------- simple ones


def emit_sqrt(builder: ir.IRBuilder, x: Value) -> Value:
    """Correctly rounded square root (``llvm.sqrt``)."""
    return call_overloaded(builder, "sqrt", x)


def emit_rsqrt(builder: ir.IRBuilder, x: Value) -> Value:
    """1 / sqrt(x) (two correctly rounded operations)."""
    m = ops_for(builder, x)
    return m.div(m.c(1.0), emit_sqrt(builder, x))


def emit_floor(builder: ir.IRBuilder, x: Value) -> Value:
    """floor (``llvm.floor``)."""
    return call_overloaded(builder, "floor", x)


def emit_ceil(builder: ir.IRBuilder, x: Value) -> Value:
    """ceil (``llvm.ceil``)."""
    return call_overloaded(builder, "ceil", x)


# ----------------------------------------------------------------------------- pow / fmod


def _log_f64(w: Ops, X: Value) -> Value:
    """Natural log of positive finite doubles to ~1e-15 relative (no special values)."""
    t = w.b.sub(w.bits(X), w.ci(0x3FE6A09E667F3BCD))
    k = w.to_float(w.b.ashr(t, w.ci(52)))
    mant = w.fbits(w.b.add(w.b.and_(t, w.ci((1 << 52) - 1)), w.ci(0x3FE6A09E667F3BCD)))
    s = w.div(w.sub(mant, w.c(1.0)), w.add(mant, w.c(1.0)))
    z = w.mul(s, s)
    series = w.poly(z, [1 / 17, 1 / 15, 1 / 13, 1 / 11, 1 / 9, 1 / 7, 1 / 5, 1 / 3])
    two_s = w.add(s, s)
    return w.fma(k, w.c(LN2), w.fma(w.mul(two_s, z), series, two_s))


def _exp_f64(w: Ops, t: Value) -> Value:
    """e**t for doubles to ~1 ulp of double, |t| <= 160 (no special values)."""
    n = w.call("rint", w.mul(t, w.c(LOG2E)))
    r = w.fma(n, w.c(-0.6931471803691238), t)
    r = w.fma(n, w.c(-1.9082149292705877e-10), r)
    p = w.poly(r, [1.0 / math.factorial(k) for k in range(13, -1, -1)])  # Taylor, |r| <= ln2/2: < 1e-17
    return w.mul(p, w.pow2i(w.to_int(n)))


def emit_pow(builder: ir.IRBuilder, x: Value, y: Value) -> Value:
    """x**y with C99 ``powf`` special cases; computed as exp(y log|x|) in double precision.

    pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN; x < 0 needs an integer y
    (else NaN) and gives the sign (-1)**y; pow(+-0, y<0) = +-inf; overflow gives
    inf, underflow (subnormal) 0.
    """
    m = ops_for(builder, x)
    w = m.wide()
    ax = m.abs(x)
    X = builder.fpext(ax, w.ty)
    Y = builder.fpext(y, w.ty)
    finite_pos = m.b.and_(m.cmp(">", ax, m.c(0.0)), m.cmp("<", ax, m.c(np.inf)))
    Xs = w.sel(finite_pos, X, w.c(1.0))
    L = _log_f64(w, Xs)
    L = w.sel(w.cmp("==", X, w.c(0.0)), w.c(-np.inf), L)
    L = w.sel(w.cmp("==", X, w.c(np.inf)), w.c(np.inf), L)
    t = w.mul(Y, L)  # NaN for NaN inputs only (L = 0 only at |x| = 1, handled below)
    tc = w.clamp(t, -160.0, 160.0)
    r = builder.fptrunc(_exp_f64(w, tc), m.ty)
    r = m.sel(w.isnan(t), m.c(np.nan), r)
    # integer / odd y
    ay = m.abs(y)
    is_int = m.cmp("==", m.call("rint", y), y)  # true for +-inf too
    small_y = m.cmp("<", ay, m.c(2.0**24))
    yi = m.to_int(m.sel(small_y, y, m.c(0.0)))
    odd = m.b.and_(m.b.icmp_signed("!=", m.b.and_(yi, m.ci(1)), m.ci(0)), small_y)
    odd = m.b.and_(odd, is_int)
    xneg = m.b.icmp_signed("<", m.bits(x), m.ci(0))  # sign bit (covers -0)
    r = m.sel(m.b.and_(xneg, odd), m.neg(r), r)
    bad = m.b.and_(m.cmp("<", x, m.c(0.0)), m.cmp(">", x, m.c(-np.inf)))
    bad = m.b.and_(bad, m.b.and_(m.b.not_(is_int), m.cmp("<", ay, m.c(np.inf))))
    r = m.sel(bad, m.c(np.nan), r)
    r = m.sel(m.b.or_(m.isnan(x), m.isnan(y)), m.c(np.nan), r)
    one = m.b.or_(m.cmp("==", y, m.c(0.0)), m.cmp("==", x, m.c(1.0)))
    one = m.b.or_(one, m.b.and_(m.cmp("==", x, m.c(-1.0)), m.cmp("==", ay, m.c(np.inf))))
    return m.sel(one, m.c(1.0), r)


def emit_fmod(builder: ir.IRBuilder, x: Value, y: Value) -> Value:
    """C ``fmod``: x - trunc(x/y) y exactly, with the sign of x; NaN for y = 0 or x = +-inf.

    Exact in double precision for |x/y| < 2**29 (inline, branch free); lanes with a
    larger quotient are recomputed by LLVM's ``frem`` (libm ``fmodf``) in a rarely
    taken block, so on return the builder sits in a new basic block.
    """
    m = ops_for(builder, x)
    w = m.wide()
    X = builder.fpext(x, w.ty)
    Y = builder.fpext(y, w.ty)
    q = w.call("trunc", w.div(X, Y))
    r = builder.fptrunc(w.fma(w.neg(q), Y, X), m.ty)
    r = m.copysign(r, x)
    ax, ay = m.abs(x), m.abs(y)
    r = m.sel(m.b.and_(m.cmp("==", ay, m.c(np.inf)), m.cmp("<", ax, m.c(np.inf))), x, r)
    slow = m.cmp(">=", ax, m.mul(ay, m.c(2.0**29)))
    slow = m.b.and_(slow, m.cmp("<", ax, m.c(np.inf)))
    slow = m.b.and_(slow, m.cmp(">", ay, m.c(0.0)))
    if isinstance(slow.type, ir.VectorType):
        any_slow = reduce_or(builder, slow)
    else:
        any_slow = slow
    cur = builder.block
    slow_bb = builder.append_basic_block("fmod.slow")
    done_bb = builder.append_basic_block("fmod.done")
    builder.cbranch(any_slow, slow_bb, done_bb)
    builder.position_at_end(slow_bb)
    r_slow = m.sel(slow, builder.frem(x, y), r)
    builder.branch(done_bb)
    builder.position_at_end(done_bb)
    phi = builder.phi(m.ty)
    phi.add_incoming(r, cur)
    phi.add_incoming(r_slow, slow_bb)
    return phi


# ----------------------------------------------------------------------------- registry / harness

UNARY: dict[str, Callable[[ir.IRBuilder, Value], Value]] = {
    "exp": emit_exp,
    "log": emit_log,
    "log1p": emit_log1p,
    "expm1": emit_expm1,
    "tanh": emit_tanh,
    "sigmoid": emit_sigmoid,
    "erf": emit_erf,
    "gelu": emit_gelu,
    "gelu_tanh": emit_gelu_tanh,
    "silu": emit_silu,
    "softplus": emit_softplus,
    "sin": emit_sin,
    "cos": emit_cos,
    "sqrt": emit_sqrt,
    "rsqrt": emit_rsqrt,
    "floor": emit_floor,
    "ceil": emit_ceil,
}
"""Unary emitters by ``Alu`` name."""

VARIANTS: dict[str, Callable[[ir.IRBuilder, Value], Value]] = {
    "exp_precise": emit_exp_precise,
}
"""Alternative unary emitters (not an ``Alu`` name): slower, bit-compatible with a float64 oracle."""

BINARY: dict[str, Callable[[ir.IRBuilder, Value, Value], Value]] = {
    "power": emit_pow,
    "fmod": emit_fmod,
}
"""Binary emitters by ``Alu`` name."""
