"""Emit a matmul's tile loops as one gemm call over the whole product (the ``collapse_gemm`` pass decided).

``trnlang.passes.collapse_gemm`` records, per loop, a K loop (``acc += A[:, K] @ V[K, :]`` read in
place) or a tile nest of one or two loops (``out[M0:, N0:] = A @ V`` writing the output in place)
in ``plan.gemms``; see that module for what qualifies. This module only emits it: the trip counts,
the operand views (an operand tile with unit rows read as its transpose), one ``gemm_tn`` / ``gemm_nn`` (their
``_vt`` forms for a transposed moving operand; or bf16) call, and for a bf16/fp16 output an fp32
heap block rounded once into it.

Loads (and the store) the verifier could not prove inside their tensors (a user kernel's run-time
sizes) are checked at the corners of the collapsed range (their indices are affine, so the corners
bound them); if a corner is outside, the tile loops run as written and report the first bad tile
exactly as before. Only code generation changes: the traced program, the interpreter and the
simulator (the device profile) still see the tile loops. The result is the same sum of products in
another order (the fp32 tolerance of any gemm).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from codegen.lowering.ctx import F32, I1, I64, ci64
from codegen.lowering.expr import emit_int
from codegen.lowering.mmfuse import hbm_view
from codegen.lowering.vals import axis_env
from trnlang.ir.nodes import Access, Instr, Loop
from trnlang.ir.ops import Op
from trnlang.ir.types import DType
from trnlang.passes.collapse_gemm import GemmCollapse

if TYPE_CHECKING:
    from codegen.lowering.kernel import KernelLowering

__all__ = ["try_collapse"]


def _int_step(lp: Loop) -> int:
    return int(lp.step)  # a positive integer constant (collapse_gemm matched only such loops)


def _trip_count(L: KernelLowering, lp: Loop) -> ir.Value:
    """``max(0, ceil((stop - start) / step))`` as i64 (``step`` a positive constant)."""
    b = L.cx.b
    step = _int_step(lp)
    start, stop = emit_int(L.cx, lp.start), emit_int(L.cx, lp.stop)
    n = b.sdiv(b.add(b.sub(stop, start), ci64(step - 1)), ci64(step))
    return b.select(b.icmp_signed(">", n, ci64(0)), n, ci64(0))


def _in_bounds(L: KernelLowering, acc: Access, loops: list[Loop], trips: list[ir.Value]) -> ir.Value:
    """i1: every corner of ``acc``'s tile at the first and last iteration of ``loops`` is inside its tensor
    (the indices are affine in the tile axes and the loop variables, so the corners bound the range)."""
    cx, b = L.cx, L.cx.b
    dims = L.plan.access_checks.get(id(acc))
    ok: ir.Value = ir.Constant(I1, 1)
    if dims is None:
        return ok
    t = L.targs(acc.tensor)
    firsts = [emit_int(cx, lp.start) for lp in loops]
    lasts = [b.add(f, b.mul(b.sub(n, ci64(1)), ci64(_int_step(lp)))) for f, n, lp in zip(firsts, trips, loops)]
    saved = {lp.var: cx.env.get(lp.var) for lp in loops}
    try:
        for ends in itertools.product(*[(f, la) for f, la in zip(firsts, lasts)]):
            for lp, v in zip(loops, ends):
                cx.env[lp.var] = v
            for corner in itertools.product(*[(0, int(s) - 1) for s in acc.shape]):
                env = axis_env([ci64(x) for x in corner])
                for d in dims:
                    i = emit_int(cx, acc.index[d], env)
                    ok = b.and_(ok, b.and_(b.icmp_signed(">=", i, ci64(0)), b.icmp_signed("<", i, t.shape[d])))
    finally:
        for var, v in saved.items():
            if v is None:
                cx.env.pop(var, None)
            else:
                cx.env[var] = v
    return ok


def _view(L: KernelLowering, ld: Instr, transposed: bool = False) -> Any:
    """The HBM tile of load ``ld`` (or its transpose) read in place (the pass checked its unit column, or row,
    stride)."""
    v = hbm_view(L, ld, transposed)
    if v is None:
        pos = L.plan.info(ld).id if id(ld) in L.plan.by_instr else "?"
        raise AssertionError(f"collapse_gemm planned a gemm reading {ld.op.value} #{pos} in place, but the lowering "
                             f"cannot (its {'row' if transposed else 'column'} stride is not a compile-time 1)")
    return v


def try_collapse(L: KernelLowering, lp: Loop, plain: Callable[[Loop], None]) -> bool:
    """Emit ``lp`` as one gemm call when ``collapse_gemm`` planned it (``L.plan.gemms``); loads that need
    run-time checks are checked at the range's corners, with ``plain(lp)`` (the loops as written) run when
    one fails. False: not planned, the caller lowers ``lp``."""
    m: GemmCollapse | None = L.plan.gemms.get(id(lp))
    if m is None:
        return False
    cx = L.cx
    loops = m.loops
    saved = {x.var: cx.env.get(x.var) for x in loops}
    try:
        for x in loops:
            cx.env[x.var] = emit_int(cx, x.start)  # the first tiles: every loop's first iteration
        s_view, v_view = _view(L, m.s_load, m.s_t), _view(L, m.v_load, m.v_t)
        # the store's tile, read like a load's
        out_view = _view(L, Instr(Op.DMA_COPY, (), (m.store.outs[0],))) if m.store is not None \
            else L.view(m.c.outs[0])
        trips = [_trip_count(L, x) for x in loops]
        accs = [m.s_load.ins[0], m.v_load.ins[0]] + ([m.store.outs[0]] if m.store is not None else [])
        checked = [a for a in accs if id(a) in L.plan.access_checks]
        L.cur, L.temp_top = m.c, 0
        if not checked:
            _emit(L, m, s_view, v_view, out_view, trips)
            return True
        b = cx.b
        ok = b.icmp_signed("==", trips[0], ci64(0))
        for n in trips[1:]:
            ok = b.or_(ok, b.icmp_signed("==", n, ci64(0)))
        inside: ir.Value = ir.Constant(I1, 1)
        for a in checked:
            inside = b.and_(inside, _in_bounds(L, a, loops, trips))
        ok = b.or_(ok, inside)  # no iteration at all, or every tile of every iteration inside its tensor
        with b.if_else(ok, likely=True) as (fast, slow):
            with fast:
                _emit(L, m, s_view, v_view, out_view, trips)
            with slow:
                for x, v in saved.items():
                    _restore(cx, x, v)
                plain(lp)
        return True
    finally:
        for x, v in saved.items():
            _restore(cx, x, v)


def _restore(cx: Any, var: Any, v: Any) -> None:
    if v is None:
        cx.env.pop(var, None)
    else:
        cx.env[var] = v


def _emit(L: KernelLowering, m: GemmCollapse, s_view: Any, v_view: Any, out_view: Any, trips: list[ir.Value]) -> None:
    from codegen.lowering.gemm import call_gemm, gemm_fn
    from codegen.lowering.gemm_bf16 import gemm_bf16

    b = L.cx.b
    tm, tn = (int(x) for x in m.c.outs[0].shape)
    dims: list[int | ir.Value] = [tm, tn]
    for (_, ax), n in zip(m.nest, trips):
        dims[ax] = b.mul(n, ci64((tm, tn)[ax]))
    k_total = b.mul(trips[-1], ci64(m.k_tile))
    if m.store is None:
        out_view.prepare(L.cx)
    # the K loop adds to the PSUM tile; the nest writes the output, or adds to it (an fp32 store with accumulate)
    accumulate = m.store is None or m.store.attrs.get("accumulate") is not None
    low = m.store.outs[0].tensor.dtype if m.store is not None else DType.float32
    scratch = _Scratch(L, dims[0], dims[1]) if low is not DType.float32 else None
    dest = scratch if scratch is not None else out_view
    if m.bf16:
        gemm_bf16(L, s_view, v_view, dest, k_total, dims[0], dims[1], accumulate, m.a_nn)
    else:
        call_gemm(L, gemm_fn(L, m.entry), s_view, v_view, dest, k_total, dims[0], dims[1], accumulate)
    if scratch is not None:
        scratch.round_into(out_view, low)


class _Scratch:
    """An fp32 ``[M, N]`` heap block for a whole product stored to a narrower tensor: the gemm writes it, then
    :meth:`round_into` rounds every element once into the output, as the tiles' store does."""

    def __init__(self, L: KernelLowering, rows: int | ir.Value, cols: int | ir.Value) -> None:
        from codegen.irutil import PTR, intrinsic

        self.L = L
        b = L.cx.b
        self.rows, self.cols = (x if isinstance(x, ir.Value) else ci64(x) for x in (rows, cols))
        malloc = intrinsic(L.cx.module, "malloc", PTR, [I64])
        self.raw = b.call(malloc, [b.mul(b.mul(self.rows, self.cols), ci64(4))])
        self.view_strides = [self.cols, 1]

    def addr(self, cx: Any, idx: list[ir.Value]) -> ir.Value:
        """The element ``[i, j]``'s address (a gemm operand view, like ``lower_mmfuse.PtrView``)."""
        b = cx.b
        off = b.add(b.mul(idx[0], self.cols), idx[1])
        return b.gep(self.raw, [off], source_etype=F32, inbounds=True)

    def round_into(self, out: Any, dt: DType) -> None:
        from codegen.irutil import PTR, VOID, intrinsic
        from codegen.lowering.types import CT, from_compute

        cx = self.L.cx
        with cx.loop(ci64(0), self.rows, 1, "rnd.i") as i:
            with cx.loop(ci64(0), self.cols, 1, "rnd.j") as j:
                v = cx.b.load(self.addr(cx, [i, j]), typ=F32, align=4)
                cx.b.store(from_compute(cx, v, CT.F32, dt), out.addr(cx, [i, j]))
        free = intrinsic(cx.module, "free", VOID, [PTR])
        cx.b.call(free, [self.raw])
