"""Adapter between the lowering and ``codegen.mathlib.vecmath`` (vectorisable inline fp32 transcendental emitters).

``emitter(op)`` returns ``fn(cx, x[, y]) -> fp32 value`` for the ALU functions
``codegen.mathlib.vecmath`` implements (exp, expm1, log, log1p, tanh, sigmoid, silu,
softplus, gelu, gelu_tanh, erf, sin, cos, power), or None: the lowering then
uses its float64 libm oracle (``lower_alu``), bit-compatible with the
interpreter in practice but scalar. ``TRN_JIT_LIBM=1`` forces the libm path
(it is part of the JIT cache key). sqrt, rsqrt, floor, ceil, reciprocal and
fmod stay on LLVM's correctly rounded / exact operations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir

from codegen.lowering.ctx import Ctx
from trnlang import config as _config
from trnlang.ir.ops import Alu

_NAMES = {
    Alu.exp: "emit_exp", Alu.expm1: "emit_expm1", Alu.log: "emit_log", Alu.log1p: "emit_log1p",
    Alu.tanh: "emit_tanh", Alu.sigmoid: "emit_sigmoid", Alu.silu: "emit_silu", Alu.softplus: "emit_softplus",
    Alu.gelu: "emit_gelu", Alu.gelu_tanh: "emit_gelu_tanh", Alu.erf: "emit_erf", Alu.sin: "emit_sin",
    Alu.cos: "emit_cos", Alu.power: "emit_pow",
}


def libm_forced() -> bool:
    """True when ``TRN_JIT_LIBM`` asks for the float64 libm oracle instead of vecmath (``trnlang.config``)."""
    return _config.current.jit_libm


def emitter(op: Alu) -> Callable[..., ir.Value] | None:
    """The vecmath emitter for ``op`` or None."""
    if libm_forced():
        return None
    name = _NAMES.get(op)
    if name is None:
        return None
    try:
        from codegen.mathlib import vecmath
    except ImportError:  # pragma: no cover - vecmath is part of the package
        return None
    fn: Any = getattr(vecmath, name, None)
    if fn is None:
        return None

    def emit(cx: Ctx, *xs: ir.Value) -> ir.Value:
        return fn(cx.b, *xs)

    return emit
