"""Numeric semantics of the IR (docs/ir.md "Common rules"): compute types, casts, ALU functions, reductions.

Every function takes numpy arrays of *any* storage dtype and does the
widening itself: floats (bf16/fp16/fp8/fp32) compute in fp32, ints and bools in
int32 (wrapping), mixed float/int operands in fp32.

Float accuracy: the IEEE basic operations (add, subtract, multiply, divide,
sqrt, reciprocal, fmod, min/max, abs, negative, floor, ceil, square) run in
numpy float32 and are therefore correctly rounded; ``rsqrt`` is ``1 / sqrt(x)`` in float32 (two roundings, as
torch's CPU kernel). Transcendental and composite
functions (exp, log, log1p, expm1, tanh, sin, cos, power, sigmoid, gelu,
gelu_tanh, silu, softplus, erf, tan, asin, acos, atan, atan2, sinh, cosh, asinh, acosh,
atanh, log2, log10, exp2, erfc, erfinv, lgamma, digamma) are evaluated in float64 and rounded once to
float32: a stable, platform-independent oracle within ~0.5 ulp of the exact
function (``lgamma`` calls the C library's, ``erfinv`` refines an initial guess with
Newton steps on erf/erfc). ``trunc`` and ``round`` (half to even, as torch) are exact.
Float ``add``/``multiply`` reductions accumulate in float64 and round once to float32.

Edge cases follow torch where the IR spec is silent: ``sign(NaN) = 0``,
``relu`` keeps NaN and -0.0, ``softplus(x) = x`` for x > 20, fp8 e4m3fn
saturates to +-448 on overflow (also for +-inf; ml_dtypes alone would give NaN),
``divide`` on ints is true division in fp32, int ``power`` with a negative
exponent truncates (0 unless the base is +-1), int ``fmod`` by 0 gives 0.
Composite functions evaluate their formula literally in float64
(``gelu(+inf) = +inf``, ``gelu(-inf) = silu(-inf) = NaN``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from trnlang.ir.ops import Alu

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I32 = np.dtype(np.int32)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
_ML_FLOATS = {np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)}
_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
_E4M3_MAX = 448.0


class AluTypeError(TypeError):
    """An ALU function applied to operand types it does not support (e.g. bitwise ops on floats)."""


def is_float(dt: np.dtype) -> bool:
    """True for numpy and ml_dtypes floating types."""
    dt = np.dtype(dt)
    return dt.kind == "f" or dt in _ML_FLOATS


def to_f32(x: np.ndarray) -> np.ndarray:
    """Widen to float32 (exact for bf16/fp16/fp8; ints round to nearest even; bools give 0/1)."""
    x = np.asarray(x)
    return x.astype(F32, copy=False)


def to_compute(x: np.ndarray) -> np.ndarray:
    """Convert to the compute type: float32 for floats, int32 (wrapping) for ints and bools."""
    x = np.asarray(x)
    return x.astype(F32 if is_float(x.dtype) else I32, copy=False)


def cast(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Cast a value to a storage dtype with the IR's write rules.

    float -> narrower float: round to nearest even (fp8 e4m3fn, which has no
    infinity, saturates to +-448 like torch); int -> float: via float32 (RNE);
    float -> int: truncate toward zero, NaN -> 0, saturate at the type bounds;
    int -> int: wraps (two's complement); anything -> bool: ``!= 0``.
    """
    x = np.asarray(x)
    dt = np.dtype(dt)
    src = x.dtype
    if src == dt:
        return x
    if dt == BOOL:
        return x != 0
    if is_float(dt):
        if dt == F64:
            return x.astype(F64)
        x32 = x.astype(F32, copy=False)  # floats: widen (or round f64) to the fp32 compute type; ints: RNE
        if dt == F32:
            return x32
        if dt == _E4M3:
            x32 = np.clip(x32, -_E4M3_MAX, _E4M3_MAX)
        return x32.astype(dt)
    # integer target
    if is_float(src):
        info = np.iinfo(dt)
        y = np.trunc(x.astype(F64, copy=False))
        hi = y >= float(info.max)
        lo = y <= float(info.min)
        bad = hi | lo | np.isnan(y)
        out = np.where(bad, 0.0, y).astype(dt)
        out[hi] = info.max
        out[lo] = info.min
        return out
    return x.astype(dt)


def poison_value(dt: np.dtype) -> float | int | bool:
    """The value fresh buffers are filled with: NaN for floats, the type's minimum for ints, True for bool."""
    dt = np.dtype(dt)
    if dt == BOOL:
        return True
    if is_float(dt):
        return float("nan")
    return int(np.iinfo(dt).min)


def imm_array(value: float | int | bool) -> np.ndarray:
    """An immediate as a 0-d array of its compute type (float -> fp32, int -> int32 wrapping, bool -> bool)."""
    if isinstance(value, bool | np.bool_):
        return np.asarray(bool(value))
    if isinstance(value, int | np.integer):
        v = ((int(value) + 2**31) % 2**32) - 2**31
        return np.asarray(v, dtype=I32)
    return np.asarray(float(value), dtype=F64).astype(F32)


# ---------------------------------------------------------------------------- unary


def _f64(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """Evaluate ``fn`` on float64 and round once to float32."""
    return lambda x: np.asarray(fn(x.astype(F64))).astype(F32)


_erf64 = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf64(x), dtype=F64) if x.size else x.astype(F64)


def _libm1(name: str, fallback: Callable[[float], float]) -> Callable[[np.ndarray], np.ndarray]:
    """A float64 libm function (the one the compiled code calls) applied elementwise; ``fallback`` without libm."""
    fn: Callable[[float], float] = fallback
    try:
        import ctypes
        import ctypes.util

        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        cfn = getattr(lib, name)
        cfn.restype = ctypes.c_double
        cfn.argtypes = [ctypes.c_double]
        fn = cfn
    except (OSError, AttributeError):  # pragma: no cover - no C libm (the fallback is within an ulp)
        pass
    vf = np.frompyfunc(fn, 1, 1)
    return lambda x: np.asarray(vf(x), dtype=F64) if x.size else x.astype(F64)


_lgamma64 = _libm1("lgamma", math.lgamma)
_erfc_py = np.frompyfunc(math.erfc, 1, 1)


def _erfc64(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erfc_py(x), dtype=F64) if x.size else x.astype(F64)


#: erfinv initial guess (M. Giles, "Approximating the erfinv function", single precision), then Newton
#: steps in float64 on erf (|y| <= 0.5) or erfc (|y| > 0.5, 1 - |y| is exact): float64 accurate.
ERFINV_W1 = [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
             -0.00417768164, 0.246640727, 1.50140941]
ERFINV_W2 = [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
             0.00943887047, 1.00167406, 2.83297682]
ERFINV_NEWTON = 3


def _erfinv(y: np.ndarray) -> np.ndarray:
    """erfinv in float64 (the compiled code runs the same steps with libm erf/erfc)."""
    a = np.abs(y)
    ac = np.minimum(a, 0.99999999)
    w = -np.log((1.0 - ac) * (1.0 + ac))
    small = w < 5.0
    ws = w - 2.5
    wb = np.sqrt(w) - 3.0
    ps = np.full_like(w, ERFINV_W1[0])
    pb = np.full_like(w, ERFINV_W2[0])
    for c1, c2 in zip(ERFINV_W1[1:], ERFINV_W2[1:]):
        ps = ps * ws + c1
        pb = pb * wb + c2
    x = np.where(small, ps, pb) * ac
    lo = a <= 0.5
    for _ in range(ERFINV_NEWTON):
        e = np.where(lo, _erf(x) - a, (1.0 - a) - _erfc64(x))
        x = x - e / (1.1283791670955126 * np.exp(-x * x))
    x = np.where(a == 1.0, np.inf, x)
    x = np.where(a > 1.0, np.nan, x)
    x = np.where(np.isnan(y), y, x)
    return np.copysign(x, y)


#: digamma: psi(x) = psi(x + 10) - sum_k 1/(x + k) for x < 10, then the asymptotic series (z = 1/y^2);
#: x < 0 by reflection psi(x) = psi(1 - x) - pi / tan(pi frac(x)); psi(+-0) = -+inf, negative integers NaN (torch)
DIGAMMA_SHIFT = 10
DIGAMMA_SERIES = [-1.0 / 12, 691.0 / 32760, -1.0 / 132, 1.0 / 240, -1.0 / 252, 1.0 / 120, -1.0 / 12]


def _digamma(x: np.ndarray) -> np.ndarray:
    """digamma in float64 (the compiled code runs the same steps)."""
    neg = x < 0.0
    r = x - np.trunc(x)
    refl = np.where(neg, math.pi / np.tan(math.pi * r), 0.0)
    y = np.where(neg, 1.0 - x, x)
    small = y < DIGAMMA_SHIFT
    acc = np.zeros_like(y)
    for k in range(DIGAMMA_SHIFT):
        acc = acc + 1.0 / (y + k)
    acc = np.where(small, acc, 0.0)
    y = np.where(small, y + DIGAMMA_SHIFT, y)
    z = 1.0 / (y * y)
    p = np.full_like(y, DIGAMMA_SERIES[0])
    for c in DIGAMMA_SERIES[1:]:
        p = p * z + c
    res = np.log(y) - 0.5 / y + p * z - acc - refl
    res = np.where(neg & (r == 0.0), np.nan, res)
    res = np.where(x == 0.0, np.copysign(np.inf, -x), res)
    return np.where(np.isnan(x), x, res)


def _gelu(x: np.ndarray) -> np.ndarray:
    return x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _sign_f(x: np.ndarray) -> np.ndarray:
    # torch.sign: (0 < x) - (x < 0); NaN -> 0, -0.0 -> 0.0
    return ((x > 0).astype(F32) - (x < 0).astype(F32)).astype(F32)


def _relu_f(x: np.ndarray) -> np.ndarray:
    # torch.relu keeps NaN and -0.0
    return np.where(x < 0, np.float32(0.0), x).astype(F32)


_UNARY_F32: dict[Alu, Callable[[np.ndarray], np.ndarray]] = {
    Alu.copy: lambda x: x,
    Alu.exp: _f64(np.exp),
    Alu.log: _f64(np.log),
    Alu.log1p: _f64(np.log1p),
    Alu.expm1: _f64(np.expm1),
    Alu.sqrt: np.sqrt,
    Alu.rsqrt: lambda x: np.float32(1.0) / np.sqrt(x),  # two fp32 roundings, as torch's CPU kernel
    Alu.reciprocal: lambda x: np.float32(1.0) / x,
    Alu.abs: np.abs,
    Alu.negative: np.negative,
    Alu.sign: _sign_f,
    Alu.floor: np.floor,
    Alu.ceil: np.ceil,
    Alu.square: lambda x: x * x,
    Alu.tanh: _f64(np.tanh),
    Alu.sigmoid: _f64(_sigmoid),
    Alu.relu: _relu_f,
    Alu.gelu: _f64(_gelu),
    Alu.gelu_tanh: _f64(_gelu_tanh),
    Alu.silu: _f64(lambda x: x * _sigmoid(x)),
    Alu.softplus: _f64(lambda x: np.where(x > 20.0, x, np.log1p(np.exp(x)))),
    Alu.erf: _f64(_erf),
    Alu.sin: _f64(np.sin),
    Alu.cos: _f64(np.cos),
    Alu.logical_not: lambda x: (x == 0).astype(I32),
    Alu.trunc: np.trunc,
    Alu.round: np.rint,
    Alu.tan: _f64(np.tan),
    Alu.asin: _f64(np.arcsin),
    Alu.acos: _f64(np.arccos),
    Alu.atan: _f64(np.arctan),
    Alu.sinh: _f64(np.sinh),
    Alu.cosh: _f64(np.cosh),
    Alu.asinh: _f64(np.arcsinh),
    Alu.acosh: _f64(np.arccosh),
    Alu.atanh: _f64(np.arctanh),
    Alu.log2: _f64(np.log2),
    Alu.log10: _f64(np.log10),
    Alu.exp2: _f64(np.exp2),
    Alu.erfc: _f64(_erfc64),
    Alu.erfinv: _f64(_erfinv),
    Alu.lgamma: _f64(_lgamma64),
    Alu.digamma: _f64(_digamma),
}

_UNARY_I32: dict[Alu, Callable[[np.ndarray], np.ndarray]] = {
    Alu.copy: lambda x: x,
    Alu.abs: np.abs,
    Alu.negative: np.negative,
    Alu.sign: np.sign,
    Alu.floor: lambda x: x,
    Alu.ceil: lambda x: x,
    Alu.square: lambda x: x * x,
    Alu.relu: lambda x: np.maximum(x, np.int32(0)),
    Alu.logical_not: lambda x: (x == 0).astype(I32),
    Alu.bitwise_not: np.invert,
    Alu.trunc: lambda x: x,
    Alu.round: lambda x: x,
}


def unary(op: Alu, x: np.ndarray) -> np.ndarray:
    """Apply a unary ALU function; ints stay int32 where the function is integral, else go to fp32.

    ``bitwise_not`` on a bool operand is logical not (as torch's ``~``).
    """
    with np.errstate(all="ignore"):
        return _unary(op, np.asarray(x))


def _unary(op: Alu, x: np.ndarray) -> np.ndarray:
    if is_float(x.dtype):
        fn = _UNARY_F32.get(op)
        if fn is None:
            raise AluTypeError(f"{op.name} is not defined on floating-point operands ({x.dtype})")
        return np.asarray(fn(to_f32(x)))
    if op is Alu.bitwise_not and x.dtype == BOOL:
        return (~x).astype(I32)
    fn = _UNARY_I32.get(op)
    if fn is not None:
        return np.asarray(fn(x.astype(I32, copy=False)))
    if op in _UNARY_F32:
        return np.asarray(_UNARY_F32[op](to_f32(x)))
    raise AluTypeError(f"{op.name} is not a unary function")


# ---------------------------------------------------------------------------- binary


def _int_power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer power with int32 wrap-around; negative exponents truncate 1/a^|b| toward zero (0 for a == 0)."""
    a64, b64 = np.broadcast_arrays(a.astype(I64), b.astype(I64))
    pos = np.power(a64, np.maximum(b64, 0))  # int64 wraps mod 2^64: low 32 bits stay exact
    neg = np.where(a64 == 1, 1, np.where(a64 == -1, np.where(b64 % 2 == 0, 1, -1), 0))
    return np.where(b64 >= 0, pos, neg).astype(I32)


def _int_fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C remainder (sign of the dividend); x fmod 0 -> 0."""
    a64, b64 = np.broadcast_arrays(a.astype(I64), b.astype(I64))
    zero = b64 == 0
    r = np.fmod(a64, np.where(zero, 1, b64))
    return np.where(zero, 0, r).astype(I32)


def _logical(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    return lambda a, b: fn(a != 0, b != 0).astype(I32)


def _compare(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    return lambda a, b: fn(a, b).astype(I32)


_COMMON_BINARY: dict[Alu, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Alu.add: np.add,
    Alu.subtract: np.subtract,
    Alu.multiply: np.multiply,
    Alu.maximum: np.maximum,
    Alu.minimum: np.minimum,
    Alu.equal: _compare(np.equal),
    Alu.not_equal: _compare(np.not_equal),
    Alu.less: _compare(np.less),
    Alu.less_equal: _compare(np.less_equal),
    Alu.greater: _compare(np.greater),
    Alu.greater_equal: _compare(np.greater_equal),
    Alu.logical_and: _logical(np.logical_and),
    Alu.logical_or: _logical(np.logical_or),
    Alu.logical_xor: _logical(np.logical_xor),
}

_BINARY_F32: dict[Alu, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    **_COMMON_BINARY,
    Alu.divide: np.divide,
    Alu.power: lambda a, b: np.power(a.astype(F64), b.astype(F64)).astype(F32),
    Alu.fmod: np.fmod,
    Alu.atan2: lambda a, b: np.arctan2(a.astype(F64), b.astype(F64)).astype(F32),
}

_BINARY_I32: dict[Alu, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    **_COMMON_BINARY,
    Alu.power: _int_power,
    Alu.fmod: _int_fmod,
    Alu.bitwise_and: np.bitwise_and,
    Alu.bitwise_or: np.bitwise_or,
    Alu.bitwise_xor: np.bitwise_xor,
}


def binary(op: Alu, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Apply a binary ALU function (numpy broadcasting).

    fp32 if either operand is a float (and always for ``divide``: true division,
    as torch), else int32 with wrap-around. Comparisons and logical ops give int32 1/0.
    """
    with np.errstate(all="ignore"):
        return _binary(op, np.asarray(a), np.asarray(b))


def _binary(op: Alu, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op in (Alu.divide, Alu.atan2) or is_float(a.dtype) or is_float(b.dtype):
        fn = _BINARY_F32.get(op)
        if fn is None:
            raise AluTypeError(f"{op.name} is not defined on floating-point operands ({a.dtype}, {b.dtype})")
        return np.asarray(fn(to_f32(a), to_f32(b)))
    fn = _BINARY_I32.get(op)
    if fn is None:
        raise AluTypeError(f"{op.name} is not a binary function")
    return np.asarray(fn(a.astype(I32, copy=False), b.astype(I32, copy=False)))


# ---------------------------------------------------------------------------- reductions


def reduce(op: Alu, x: np.ndarray, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    """Reduce ``x`` over ``axes`` with ``op``.

    add/multiply: floats accumulate in float64 and round once to fp32, ints in
    int64 then wrap to int32; maximum/minimum propagate NaN; logical_and/or give
    int32 1/0; argmax/argmin (exactly one axis) give the int32 index of the
    first extreme, NaN counting as the extreme (as torch).
    """
    with np.errstate(all="ignore"):
        return _reduce(op, np.asarray(x), axes, keepdims)


def _reduce(op: Alu, x: np.ndarray, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    axes = tuple(int(a) for a in axes)
    flt = is_float(x.dtype)
    fn: Callable[..., Any]
    if op in (Alu.add, Alu.multiply):
        fn = np.sum if op is Alu.add else np.prod
        if flt:
            return np.asarray(fn(x.astype(F64), axis=axes, keepdims=keepdims)).astype(F32)
        return np.asarray(fn(x.astype(I64), axis=axes, keepdims=keepdims)).astype(I32)
    if op in (Alu.maximum, Alu.minimum):
        fn = np.max if op is Alu.maximum else np.min
        return np.asarray(fn(to_compute(x), axis=axes, keepdims=keepdims))
    if op in (Alu.logical_and, Alu.logical_or):
        fn = np.all if op is Alu.logical_and else np.any
        return np.asarray(fn(x != 0, axis=axes, keepdims=keepdims)).astype(I32)
    if op in (Alu.argmax, Alu.argmin):
        if len(axes) != 1:
            raise AluTypeError(f"{op.name} reduces exactly one axis, got axes={axes}")
        fn = np.argmax if op is Alu.argmax else np.argmin
        return np.asarray(fn(to_compute(x), axis=axes[0], keepdims=keepdims)).astype(I32)
    raise AluTypeError(f"{op.name} is not a reduction")
