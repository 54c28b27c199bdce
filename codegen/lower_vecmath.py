"""Adapter between the lowering and ``codegen.vecmath`` (vectorisable fp32 transcendental emitters).

``emitter(op)`` returns ``fn(cx, x) -> fp32 value`` for the ALU functions
``codegen.vecmath`` implements, or None (the lowering then uses the float64
libm oracle). ``TRN_JIT_LIBM=1`` forces the libm path (bit-compatible with the
interpreter, scalar).
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from codegen.lower_ctx import Ctx
from trnlang.ir.ops import Alu


def emitter(op: Alu) -> Callable[[Ctx, ir.Value], ir.Value] | None:
    """The vecmath emitter for ``op`` or None."""
    return None
