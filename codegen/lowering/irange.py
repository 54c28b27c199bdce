"""Index-range checks of the JIT (see ``trnlang.ir.index_range``; the interpreter's are in ``index_check.py``).

The value trees of an index producer check as they compute: a load from an int64
tensor fails when the 64-bit value is not the sign extension of its low word, an
integer add / subtract / multiply is done in i64 and fails when the result is not
an int32. A failure returns the ``KIND_DEFERRED`` error record of the producer,
whose ``BoundsError`` (message of ``index_range``, the producer's source line) is
registered while lowering. Values are those of the unchecked trees (the low 32
bits), so everything else about the lowering is unchanged. A producer inlined
into its consumer checks there; an inlined gather tile is first evaluated by the
consumer's bounds-check pass (``check_access``), so an HBM store still writes
nothing when its indices fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from codegen.lowering.ctx import CT, I32, I64, Ctx
from codegen.lowering.types import roundtrip, to_compute
from codegen.lowering.vals import AccessEval, Binary, Load, TensorArgs, Val
from trnlang.frontend.errors import BoundsError
from trnlang.ir.index_range import checked_ops, index_producers, narrowing_load, narrowing_message, overflow_message
from trnlang.ir.nodes import Instr
from trnlang.ir.ops import Alu
from trnlang.ir.types import DType

if TYPE_CHECKING:
    from codegen.lowering.kernel import KernelLowering

Fail = Callable[[], None]


def producers(L: KernelLowering) -> frozenset[int]:
    """``id()`` of the kernel's index producers (computed once per lowering)."""
    got = getattr(L, "_index_producers", None)
    if got is None:
        got = index_producers(L.kernel)
        L._index_producers = got  # type: ignore[attr-defined]
    return got


def _fail_fn(L: KernelLowering, ins: Instr, msg: str) -> Fail:
    from codegen.lowering.kernel import KIND_DEFERRED

    iid = L.plan.info(ins).id
    L.deferred.setdefault(iid, BoundsError(f"{ins.op.value}: {msg}", loc=ins.loc))
    return lambda: L._fail(KIND_DEFERRED, iid, {})


def load_fail(L: KernelLowering, ins: Instr) -> Fail | None:
    """The failure of a load that checks its int64 values fit int32, or None if ``ins`` needs no check."""
    if id(ins) not in producers(L) or not narrowing_load(ins):
        return None
    return _fail_fn(L, ins, narrowing_message(ins))


def binary(L: KernelLowering, ins: Instr, op: Alu, a: Val, c: Val, shape: Sequence[int] | None = None) -> Binary:
    """``Binary(op, a, c, shape)`` of instruction ``ins``, overflow-checked when ``ins`` is an index producer."""
    shp = tuple(shape) if shape is not None else None
    if id(ins) in producers(L) and op in checked_ops(ins):
        return CheckedBinary(op, a, c, shp, _fail_fn(L, ins, overflow_message(ins)))
    return Binary(op, a, c, shp)


def checked_load(ev: AccessEval, targs: Callable[[Ctx], TensorArgs], dst: DType, other: Any,
                 fail: Fail | None) -> Load:
    """A ``Load`` that fails on an int64 value outside int32 when ``fail`` is given."""
    return Load(ev, targs, dst, other) if fail is None else CheckedLoad(ev, targs, dst, other, fail)


def _check(cx: Ctx, v64: ir.Value, fail: Fail) -> ir.Value:
    """The low 32 bits of ``v64``; fails unless ``v64`` is their sign extension."""
    b = cx.b
    lo = b.trunc(v64, I32)
    with b.if_then(b.icmp_signed("!=", b.sext(lo, I64), v64), likely=False):
        fail()
    return lo


class CheckedBinary(Binary):
    """Integer add / subtract / multiply computed in i64 that fails when the result leaves int32."""

    def __init__(self, op: Alu, a: Val, c: Val, shape: Sequence[int] | None, fail: Fail) -> None:
        super().__init__(op, a, c, tuple(shape) if shape is not None else None)
        self.fail = fail

    def emit(self, cx: Ctx, idx: Sequence[ir.Value]) -> ir.Value:
        if self.a.ct is CT.F32 or self.c.ct is CT.F32 or self.ct is not CT.I32:
            return super().emit(cx, idx)
        b = cx.b
        x, y = b.sext(self.a.emit(cx, idx), I64), b.sext(self.c.emit(cx, idx), I64)
        r = b.add(x, y) if self.op is Alu.add else b.sub(x, y) if self.op is Alu.subtract else b.mul(x, y)
        return _check(cx, r, self.fail)


class CheckedLoad(Load):
    """A load from an int64 tensor that fails when a loaded value does not fit int32."""

    def __init__(self, ev: AccessEval, targs: Callable[[Ctx], TensorArgs], dst: DType, other: Any,
                 fail: Fail) -> None:
        super().__init__(ev, targs, dst, other)
        self.fail = fail

    def _value(self, cx: Ctx, t: TensorArgs, env: dict[Any, ir.Value]) -> ir.Value:
        raw = t.load(cx, self.ev.index(cx, env))
        if t.dtype is DType.int64:
            _check(cx, raw, self.fail)
        v, ct = to_compute(cx, raw, t.dtype)
        return roundtrip(cx, v, ct, self.dst)[0]
