"""Lowering side of the ``plan_matmul_operands`` pass: where the gemm of one ``nc_matmul`` reads its operands.

:func:`resolve` runs first thing in the ``nc_matmul`` handler. For each operand the plan deferred
to this matmul it returns a direct source for the gemm, or emits the deferred instructions right
there (the plan made moving them to this point safe) so the operand is the staged tile as usual:

- a deferred HBM load (of the moving operand, of the stationary, or of the transpose's source)
  becomes a :class:`PtrView` on the tensor when its tile has unit column stride, known at compile
  time, and a row stride from the access pattern;
- a deferred transpose chain makes the stationary operand ``A [M, K]`` (the transpose's source:
  the load's :class:`PtrView`, or the source region when its rows are unit stride); the gemm then
  uses its ``nn`` entry instead of ``tn``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sympy
from llvmlite import ir

from codegen.lowering.ctx import Ctx, ci64, const_int_value
from codegen.lowering.expr import emit_int
from codegen.lowering.vals import axis_env
from trnlang.ir.nodes import Access, Instr, axis_sym

if TYPE_CHECKING:
    from codegen.lowering.kernel import KernelLowering
    from codegen.lowering.vals import RegionView

__all__ = ["PtrView", "Sources", "hbm_view", "resolve"]


class PtrView:
    """A row-major fp32 ``[R, C]`` view at ``ptr`` with row stride ``ld`` (i64 value) and unit column stride."""

    def __init__(self, ptr: ir.Value, ld: ir.Value) -> None:
        self.ptr = ptr
        self.ld = ld
        self.view_strides = [ld, 1]

    def prepare(self, cx: Ctx) -> None:
        pass

    def addr(self, cx: Ctx, idx: list[ir.Value]) -> ir.Value:
        b = cx.b
        i, j = idx
        off = j if const_int_value(i) == 0 else b.add(b.mul(i, self.ld), j)
        return cx.gep(self.ptr, off)

    def load(self, cx: Ctx, idx: list[ir.Value]) -> ir.Value:
        return cx.b.load(self.addr(cx, idx), align=4)


class Sources:
    """The gemm's operand views: ``a`` is ``A [M, K]`` (None: use the stationary ``[K, M]`` as usual);
    ``s`` is the stationary ``[K, M]`` read in place (None: the staged tile); ``v`` is the moving
    ``[K, N]`` (None: the staged tile)."""

    __slots__ = ("a", "s", "v")

    def __init__(self) -> None:
        self.a: Any = None
        self.s: Any = None
        self.v: Any = None


def hbm_view(L: KernelLowering, ld: Instr, transposed: bool = False) -> PtrView | None:
    """The load's tile read in place: a :class:`PtrView` on its tensor, or None (strides not provably unit).
    ``transposed``: a view of the tile's transpose (the tile's rows must have the unit stride)."""
    src = ld.ins[0]
    assert isinstance(src, Access)
    t = L.targs(src.tensor)
    a0, a1 = axis_sym(0), axis_sym(1)
    if transposed:
        a0, a1 = a1, a0
    row: list[tuple[int, Any]] = []
    col = 0
    for e, st in zip(src.index, t.strides):
        ex = sympy.sympify(e)
        c0, c1 = sympy.diff(ex, a0), sympy.diff(ex, a1)
        if not (c0.is_Integer and c1.is_Integer):
            return None
        c0, c1 = int(c0), int(c1)
        if c1:
            s = const_int_value(st)
            if s is None:
                return None
            col += c1 * s
        if c0:
            row.append((c0, st))
    if col != 1:
        return None
    cx, b = L.cx, L.cx.b
    zero = axis_env([ci64(0), ci64(0)])
    ptr = t.addr(cx, [emit_int(cx, e, zero) for e in src.index])
    ldv: ir.Value = ci64(0)
    for c0, st in row:
        s = const_int_value(st)
        term = ci64(c0 * s) if s is not None else b.mul(st, ci64(c0))
        ldv = term if const_int_value(ldv) == 0 else b.add(ldv, term)
    return PtrView(ptr, ldv)


def _emit(L: KernelLowering, ins: Instr, cur: Instr) -> None:
    L.lower_instr(ins)
    L.cur = cur
    L.temp_top = 0


def resolve(L: KernelLowering, ins: Instr) -> Sources | None:
    """The direct operand sources of ``nc_matmul`` ``ins`` (None: no deferred operands)."""
    mo = L.plan.mm_ops.get(id(ins))
    if mo is None:
        return None
    got = Sources()
    if mo.v_load is not None:
        got.v = hbm_view(L, mo.v_load)
        if got.v is None:
            _emit(L, mo.v_load, ins)
    if mo.s_load is not None:
        got.s = hbm_view(L, mo.s_load)
        if got.s is None:
            _emit(L, mo.s_load, ins)
    if mo.transpose is not None:
        a: PtrView | RegionView | None = hbm_view(L, mo.a_load) if mo.a_load is not None else None
        if a is None and mo.a_load is not None:
            _emit(L, mo.a_load, ins)
        if a is None:
            view = L.view(mo.a_region)
            if view.dtype.is_float and view.view_strides[-1:] == [1] and len(view.view_strides) == 2:
                view.prepare(L.cx)
                a = view
        if a is None:  # the transpose and the copy run as written
            _emit(L, mo.transpose, ins)
            _emit(L, mo.copy, ins)
        got.a = a
    return got
