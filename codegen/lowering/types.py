"""Storage types and the IR's casts in LLVM (docs/ir.md "Common rules", ``trnlang/interpret/alu.py:cast``).

Storage: f32 ``float``; bf16, f16 and i16 ``i16``; fp8, i8, u8 and bool ``i8``;
i32 ``i32``; i64 ``i64``. Element values are computed in a compute type
(``CT``): fp32 for floats, int32 for ints (bool is an int32 0/1 tagged
``CT.BOOL``).

Conversions are bit exact with numpy / ml_dtypes:

- widening bf16 / f16 / fp8 to fp32 is exact (bf16 by shifting, f16 by
  ``fpext half`` on F16C hosts, fp8 through a 256-entry table built from
  ml_dtypes);
- narrowing fp32 to bf16 / f16 / fp8 rounds to nearest even in integer
  arithmetic (vectorisable); NaN gives the format's quiet NaN with the sign
  kept; fp8 e4m3fn (no infinity) saturates to +-448 first (as the interpreter's
  ``np.clip``), e5m2 overflows to infinity;
- float -> int truncates toward zero, NaN -> 0, saturating (``llvm.fptosi.sat``);
  int -> narrower int wraps; anything -> bool is ``!= 0``; int -> float rounds
  through fp32.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from llvmlite import ir

from codegen.lowering.ctx import CT, F16, F32, F64, I8, I16, I32, I64, Ctx, cf32, ci32
from trnlang.ir.types import DType

_STORAGE: dict[DType, ir.Type] = {
    DType.float32: F32, DType.bfloat16: I16, DType.float16: I16, DType.float8_e4m3: I8,
    DType.float8_e5m2: I8, DType.int32: I32, DType.int16: I16, DType.int8: I8, DType.uint8: I8,
    DType.bool_: I8, DType.int64: I64,
}


def storage_ty(dt: DType) -> ir.Type:
    """The LLVM type an element of ``dt`` is stored as."""
    return _STORAGE[dt]


def compute_ct(dt: DType) -> CT:
    """The compute type of values loaded from ``dt`` storage."""
    if dt.is_float:
        return CT.F32
    return CT.BOOL if dt is DType.bool_ else CT.I32


@functools.cache
def _has_f16c() -> bool:
    from codegen import llvm

    return llvm.host_has_feature("f16c")


@functools.cache
def _fp8_table(dt: DType) -> list[float]:
    vals = np.arange(256, dtype=np.uint8).view(dt.np).astype(np.float32)
    return [float(v) for v in vals]


# ---------------------------------------------------------------------------------------- widening


def to_compute(cx: Ctx, v: ir.Value, dt: DType) -> tuple[ir.Value, CT]:
    """A stored element of ``dt`` -> its compute-type value (exact for floats; int64 wraps to int32)."""
    b = cx.b
    if dt is DType.float32:
        return v, CT.F32
    if dt is DType.bfloat16:
        return b.bitcast(b.shl(b.zext(v, I32), ci32(16)), F32), CT.F32
    if dt is DType.float16:
        return half_to_f32(cx, v), CT.F32
    if dt in (DType.float8_e4m3, DType.float8_e5m2):
        table = cx.const_table(f"trn.{dt.short}.table", F32, _fp8_table(dt))
        p = b.gep(table, [ci32(0), b.zext(v, I32)], inbounds=True)
        return b.load(p), CT.F32
    if dt is DType.int32:
        return v, CT.I32
    if dt in (DType.int16, DType.int8):
        return b.sext(v, I32), CT.I32
    if dt is DType.uint8:
        return b.zext(v, I32), CT.I32
    if dt is DType.bool_:
        return b.zext(b.icmp_unsigned("!=", v, ir.Constant(I8, 0)), I32), CT.BOOL
    if dt is DType.int64:
        return b.trunc(v, I32), CT.I32
    raise NotImplementedError(dt)


def half_to_f32(cx: Ctx, v: ir.Value) -> ir.Value:
    """IEEE half bits (i16) -> fp32, exactly."""
    b = cx.b
    if _has_f16c():
        return b.fpext(b.bitcast(v, F16), F32)
    h = b.zext(v, I32)
    sign = b.shl(b.and_(h, ci32(0x8000)), ci32(16))
    e = b.and_(b.lshr(h, ci32(10)), ci32(0x1F))
    m = b.and_(h, ci32(0x3FF))
    normal = b.or_(sign, b.or_(b.shl(b.add(e, ci32(112)), ci32(23)), b.shl(m, ci32(13))))
    special = b.or_(sign, b.or_(ci32(0x7F800000), b.shl(m, ci32(13))))
    sub = b.fmul(b.uitofp(m, F32), cf32(2.0 ** -24))
    sub_bits = b.or_(b.bitcast(sub, I32), sign)
    bits = b.select(b.icmp_unsigned("==", e, ci32(31)), special, normal)
    bits = b.select(b.icmp_unsigned("==", e, ci32(0)), sub_bits, bits)
    return b.bitcast(bits, F32)


def to_f32(cx: Ctx, v: ir.Value, ct: CT) -> ir.Value:
    """A compute value as fp32 (ints round to nearest even; bools give 0/1)."""
    if ct is CT.F32:
        return v
    return cx.b.sitofp(v, F32)


def to_f64(cx: Ctx, v: ir.Value, ct: CT) -> ir.Value:
    return cx.b.fpext(to_f32(cx, v, ct), F64)


# ---------------------------------------------------------------------------------------- narrowing


def _small_float(cx: Ctx, x: ir.Value, man: int, bias: int, max_code: int, nan_code: int, sign_bit: int,
                 overflow_code: int | None) -> ir.Value:
    """fp32 -> a small binary float format (as i32 bits), round to nearest even.

    ``overflow_code`` None: saturate to ``max_code`` (e4m3fn after the interpreter's clip to +-448).
    """
    name = f"trn.f32_to_m{man}b{bias}_{'sat' if overflow_code is None else 'inf'}"
    fn = cx.helper(name)
    if fn is None:
        fn, b = cx.add_helper(name, ir.FunctionType(I32, [F32]))
        u = b.bitcast(fn.args[0], I32)
        sign = b.shl(b.lshr(u, ci32(31)), ci32(sign_bit))
        a = b.and_(u, ci32(0x7FFFFFFF))
        shift = 23 - man
        r = b.add(b.add(a, ci32((1 << (shift - 1)) - 1)), b.and_(b.lshr(a, ci32(shift)), ci32(1)))
        r = b.sub(b.lshr(r, ci32(shift)), ci32((127 - bias) << man))
        if overflow_code is None:
            big = b.icmp_unsigned(">", r, ci32(max_code))
            r = b.select(big, ci32(max_code), r)
        else:
            r = b.select(b.icmp_unsigned(">", r, ci32(max_code)), ci32(overflow_code), r)
        # below the format's smallest normal: count units of the smallest subnormal, round half even
        q = b.fmul(b.bitcast(a, F32), cf32(2.0 ** (bias - 1 + man)))
        q = b.call(cx.intrinsic("llvm.roundeven", (F32,)), [q])
        rs = b.fptoui(q, I32)
        res = b.select(b.icmp_unsigned(">=", a, ci32((128 - bias) << 23)), r, rs)
        res = b.select(b.icmp_unsigned(">", a, ci32(0x7F800000)), ci32(nan_code), res)
        b.ret(b.or_(res, sign))
    return cx.b.call(fn, [x])


def f32_to_bf16(cx: Ctx, x: ir.Value) -> ir.Value:
    """fp32 -> bf16 bits (i16): round to nearest even; NaN -> quiet NaN with its sign (as ml_dtypes)."""
    fn = cx.helper("trn.f32_to_bf16")
    if fn is None:
        fn, b = cx.add_helper("trn.f32_to_bf16", ir.FunctionType(I16, [F32]))
        u = b.bitcast(fn.args[0], I32)
        r = b.lshr(b.add(b.add(u, ci32(0x7FFF)), b.and_(b.lshr(u, ci32(16)), ci32(1))), ci32(16))
        nan = b.or_(b.and_(b.lshr(u, ci32(16)), ci32(0x8000)), ci32(0x7FC0))
        isnan = b.icmp_unsigned(">", b.and_(u, ci32(0x7FFFFFFF)), ci32(0x7F800000))
        b.ret(b.trunc(b.select(isnan, nan, r), I16))
    return cx.b.call(fn, [x])


def f32_to_f16(cx: Ctx, x: ir.Value) -> ir.Value:
    """fp32 -> IEEE half bits (i16), round to nearest even."""
    b = cx.b
    if _has_f16c():
        return b.bitcast(b.fptrunc(x, F16), I16)
    return b.trunc(_small_float(cx, x, 10, 15, 0x7BFF, 0x7E00, 15, 0x7C00), I16)


def f32_to_storage_float(cx: Ctx, x: ir.Value, dt: DType) -> ir.Value:
    """An fp32 value -> storage bits of float type ``dt``."""
    b = cx.b
    if dt is DType.float32:
        return x
    if dt is DType.bfloat16:
        return f32_to_bf16(cx, x)
    if dt is DType.float16:
        return f32_to_f16(cx, x)
    if dt is DType.float8_e4m3:
        return b.trunc(_small_float(cx, x, 3, 7, 0x7E, 0x7F, 7, None), I8)
    if dt is DType.float8_e5m2:
        return b.trunc(_small_float(cx, x, 2, 15, 0x7B, 0x7E, 7, 0x7C), I8)
    raise NotImplementedError(dt)


def _float_to_int(cx: Ctx, x: ir.Value, dt: DType) -> ir.Value:
    """fp32 -> int storage: truncate toward zero, NaN -> 0, saturate (``llvm.fptosi.sat``)."""
    ty = storage_ty(dt)
    name = "llvm.fptoui.sat" if dt is DType.uint8 else "llvm.fptosi.sat"
    return cx.b.call(cx.intrinsic(name, (ty, F32)), [x])


def from_compute(cx: Ctx, v: ir.Value, ct: CT, dt: DType) -> ir.Value:
    """A compute value -> storage of ``dt`` with the IR's write rules."""
    b = cx.b
    if dt is DType.bool_:
        if ct is CT.F32:
            nz = b.fcmp_unordered("!=", v, cf32(0.0))
        else:
            nz = b.icmp_signed("!=", v, ci32(0))
        return b.zext(nz, I8)
    if dt.is_float:
        return f32_to_storage_float(cx, to_f32(cx, v, ct), dt)
    if ct is CT.F32:
        return _float_to_int(cx, v, dt)
    ty = storage_ty(dt)
    if ty == I32:
        return v
    if ty == I64:
        return b.sext(v, I64)
    return b.trunc(v, ty)


def roundtrip(cx: Ctx, v: ir.Value, ct: CT, dt: DType) -> tuple[ir.Value, CT]:
    """``to_compute(from_compute(v))``: the value a write of ``v`` to ``dt`` storage would read back."""
    if dt is DType.float32 and ct is CT.F32:
        return v, ct
    if dt is DType.int32 and ct is CT.I32:
        return v, ct
    return to_compute(cx, from_compute(cx, v, ct, dt), dt)


def convert_storage(cx: Ctx, v: ir.Value, src: DType, dst: DType) -> ir.Value:
    """A stored element of ``src`` -> storage of ``dst``, as ``alu.cast`` (used by HBM -> HBM copies).

    Unlike the compute path, int64 values are not wrapped to int32 first.
    """
    b = cx.b
    if src is dst:
        return v
    if src.is_float:
        f, _ = to_compute(cx, v, src)
        return from_compute(cx, f, CT.F32, dst)
    # integer or bool source, widened to i64
    if src is DType.bool_:
        w = b.zext(b.icmp_unsigned("!=", v, ir.Constant(I8, 0)), I64)
    elif src is DType.uint8:
        w = b.zext(v, I64)
    elif src is DType.int64:
        w = v
    else:
        w = b.sext(v, I64)
    if dst is DType.bool_:
        return b.zext(b.icmp_signed("!=", w, ir.Constant(I64, 0)), I8)
    if dst.is_float:
        return f32_to_storage_float(cx, b.sitofp(w, F32), dst)
    ty = storage_ty(dst)
    return w if ty == I64 else b.trunc(w, ty)


def poison_storage(dt: DType) -> ir.Constant:
    """The storage constant fresh buffers are filled with in debug mode (NaN / int minimum / True)."""
    if dt is DType.float32:
        return ir.Constant(F32, float("nan"))
    if dt is DType.bool_:
        return ir.Constant(I8, 1)
    if dt.is_float:
        bits = int(np.array([np.nan], dt.np).view(np.uint8 if dt.itemsize == 1 else np.uint16)[0])
        return ir.Constant(storage_ty(dt), bits)
    info = np.iinfo(dt.np)
    return ir.Constant(storage_ty(dt), int(info.min))


def imm_compute(value: float | int | bool | np.number[Any] | np.bool_) -> tuple[ir.Constant, CT]:
    """An immediate as the interpreter's ``imm_array``: bool -> bool, int -> int32 (wrapping), float -> fp32."""
    if isinstance(value, bool | np.bool_):
        return ci32(int(bool(value))), CT.BOOL
    if isinstance(value, int | np.integer):
        return ci32(int(value)), CT.I32
    return cf32(float(np.float32(np.float64(float(value))))), CT.F32


__all__ = ["storage_ty", "compute_ct", "to_compute", "to_f32", "to_f64", "from_compute", "roundtrip",
           "convert_storage", "poison_storage", "imm_compute", "f32_to_storage_float", "half_to_f32"]
