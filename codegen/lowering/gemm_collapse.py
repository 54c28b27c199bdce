"""Tile loops of a matmul lowered to one gemm call over the whole product (code generation only).

The Tensor engine contracts at most 128 rows per ``nc_matmul`` and holds a 128 x 512 fp32 PSUM bank,
so a matmul written for it walks the product in tiles (the stdlib ``matmul``, ``bench_jit``'s kernel,
NKI samples)::

    for m in tl.affine_range(n_m):                                 # nest loops (optional)
        for n in tl.affine_range(n_n):
            acc = tl.zeros((tm, tn), tl.float32, buffer=tl.psum)   # alloc + memset 0
            for k in tl.affine_range(n_k):                         # the K loop
                at = tl.load(a[m * tm + rows, k * tk + cols])       #   dma_copy
                bt = tl.load(b[k * tk + rows, n * tn + cols])       #   dma_copy
                acc += tl.matmul(at, bt)                           #   [transpose, copy,] nc_matmul C
            tl.store(out[m * tm + rows, n * tn + cols], acc)        # [tensor_copy,] dma_copy

On the host, lowering that literally calls the gemm once per 128-deep step: it packs the operand
tiles and reloads the PSUM tile every step, and packs the same rows of ``b`` again for every ``m``.

**K loop.** When the loop's body is only its ``nc_matmul`` C (accumulating into a region allocated
outside the loop) and C's operand loads (deferred to C by ``trnlang.passes.plan_matmul_operands``, or plain loads
read only by C), and one step of the loop variable moves every operand's access by exactly one tile
along its K axis and nothing else (checked symbolically on the access patterns), the loop is one
gemm ``acc += A[:, K0:K0 + n_k tk] @ V[K0:K0 + n_k tk, :]`` read in place.

**Nest.** When, in addition, the K loop sits in a tile body ``zero acc; K loop; store acc`` (an fp32
output tensor, no epilogue), and each of one or two enclosing loops moves the store by exactly one
output tile along M or N, the stationary along M (or the moving operand along N) and the other
operand not at all, the whole nest is one gemm ``out[M0:, N0:] = A @ V`` writing the output in place:
each block of ``V`` is packed once for all rows, and the gemm's own cache blocking takes over.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import sympy
from llvmlite import ir

from codegen.lowering.ctx import F32, I1, I64, ci64
from codegen.lowering.expr import emit_int, is_true
from codegen.lowering.vals import axis_env
from trnlang.ir.liveness import all_regions, same_region
from trnlang.ir.nodes import Access, Instr, Loop, Region, axis_sym
from trnlang.ir.ops import Op
from trnlang.ir.types import DType

if TYPE_CHECKING:
    from codegen.lowering.kernel import KernelLowering

__all__ = ["try_collapse"]


@dataclass
class _Match:
    """A collapsible K loop (and nest): C, its operand loads, the gemm entry and the loops' extents."""

    c: Instr
    s_load: Instr            # the load of A [M, K] (a_nn) or of the stationary S [K, M]
    v_load: Instr            # the load of the moving V [K, N]
    a_nn: bool
    k_loop: Loop
    k_tile: int
    nest: list[tuple[Loop, int]] = field(default_factory=list)  # (loop, output axis it walks)
    store: Instr | None = None  # the nest's store of the accumulator


def _int_step(lp: Loop) -> int | None:
    s = sympy.sympify(lp.step)
    return int(s) if s.is_Integer and int(s) > 0 else None


def _refs(L: KernelLowering, buf: Any, role: str) -> list[Instr]:
    return [ins for ins, r in L.plan.buf_refs.get(id(buf), []) if r == role]


def _plain_load(L: KernelLowering, ld: Instr, region: Any, reader: Instr, dt: DType) -> bool:
    """``ld`` is an unmasked 2-D ``dt`` HBM load into ``region``, whose buffer only ``reader`` reads."""
    if ld.op is not Op.DMA_COPY or ld.attrs.get("accumulate") or not isinstance(region, Region):
        return False
    src, dst = ld.ins[0], ld.outs[0]
    if not isinstance(src, Access) or src.gathers or len(src.shape) != 2 or not is_true(src.mask):
        return False
    if not isinstance(dst, Region) or not same_region(dst, region) or tuple(dst.shape) != tuple(region.shape):
        return False
    if src.tensor.dtype is not dt or region.buf.dtype is not dt:
        return False
    return _refs(L, region.buf, "write") == [ld] and _refs(L, region.buf, "read") == [reader]


def _operand_loads(L: KernelLowering, lp: Loop, c: Instr) -> tuple[Instr, Instr, bool] | None:
    """``(stationary-side load, moving load, a_nn)`` of C when the body is only C, allocs and those loads."""
    from codegen.lowering.gemm_bf16 import native_bf16

    mo = L.plan.mm_ops.get(id(c))
    body = [s for s in lp.body if not (isinstance(s, Instr) and s.op is Op.ALLOC)]
    if any(not isinstance(s, Instr) for s in body):
        return None
    if mo is not None:  # deferred to C by plan_matmul_operands: read in place unless lower_mmfuse cannot
        if any(s is not c and L.plan.mm_defer.get(id(s)) is not c for s in body) or mo.v_load is None:
            return None
        if mo.transpose is not None:
            return (mo.a_load, mo.v_load, True) if mo.a_load is not None else None
        return (mo.s_load, mo.v_load, False) if mo.s_load is not None else None
    st, mv = c.ins[0], c.ins[1]
    dt = DType.bfloat16 if native_bf16(c) else DType.float32
    loads = [s for s in body if isinstance(s, Instr) and s is not c]
    if len(loads) != 2 or not isinstance(st, Region) or not isinstance(mv, Region) or st.buf is mv.buf:
        return None
    s_ld = next((x for x in loads if isinstance(x.outs[0], Region) and x.outs[0].buf is st.buf), None)
    v_ld = next((x for x in loads if isinstance(x.outs[0], Region) and x.outs[0].buf is mv.buf), None)
    if s_ld is None or v_ld is None or not _plain_load(L, s_ld, st, c, dt) or not _plain_load(L, v_ld, mv, c, dt):
        return None
    return s_ld, v_ld, False


def _moves(acc: Access, var: Any, step: int, axis: int | None, tile: int) -> bool:
    """One step of ``var`` moves ``acc`` by exactly ``tile`` along its tile axis ``axis`` (None: not at all)."""
    if not all(sympy.diff(sympy.sympify(e), var).is_Integer for e in acc.index):
        return False
    for e in acc.index:
        ex = sympy.sympify(e)
        along = tile * sympy.diff(ex, axis_sym(axis)) if axis is not None else 0
        if sympy.expand(step * sympy.diff(ex, var) - along) != 0:
            return False
    return True


def _k_loop(L: KernelLowering, lp: Loop) -> _Match | None:
    """The K-loop match of ``lp`` (module docstring), or None."""
    step = _int_step(lp)
    mms = [s for s in lp.body if isinstance(s, Instr) and s.op is Op.MATMUL]
    if step is None or len(mms) != 1 or not mms[0].attrs.get("accumulate"):
        return None
    c = mms[0]
    out = c.outs[0]
    if not isinstance(out, Region) or out.buf.dtype is not DType.float32 or len(out.shape) != 2:
        return None
    if any(isinstance(s, Instr) and s.op is Op.ALLOC and s.outs[0] is out.buf for s in lp.body):
        return None
    if any(sympy.sympify(e).has(lp.var) for e in out.starts) or any(
            L.plan.region_checks.get(id(r)) for r in all_regions(c)):
        return None
    got = _operand_loads(L, lp, c)
    if got is None:
        return None
    s_ld, v_ld, a_nn = got
    k_tile = int(cast(Region, c.ins[0]).shape[0])
    ok = all(isinstance(x.ins[0], Access) and x.ins[0].shape[ax] == k_tile
             and _moves(x.ins[0], lp.var, step, ax, k_tile) for x, ax in ((s_ld, 1 if a_nn else 0), (v_ld, 0)))
    return _Match(c, s_ld, v_ld, a_nn, lp, k_tile) if ok else None


def _tile_body(L: KernelLowering, lp: Loop) -> _Match | None:
    """``lp``'s body is ``zero acc; K loop; [copy;] store`` of one fp32 output tile: the match, else None."""
    k_loops = [s for s in lp.body if isinstance(s, Loop)]
    if len(k_loops) != 1:
        return None
    m = _k_loop(L, k_loops[0])
    if m is None:
        return None
    acc = m.c.outs[0]
    rest = [s for s in lp.body if isinstance(s, Instr) and s.op is not Op.ALLOC]
    if len(rest) not in (2, 3) or rest[0].op is not Op.MEMSET or lp.body.index(rest[0]) > lp.body.index(m.k_loop):
        return None
    zero, *mid, st = rest
    if not isinstance(zero.outs[0], Region) or not same_region(zero.outs[0], acc) or zero.attrs.get("value") != 0:
        return None
    src = acc
    if mid:
        cp = mid[0]
        if cp.op is not Op.TENSOR_COPY or cp.attrs.get("reshape") or not isinstance(cp.ins[0], Region) \
                or not same_region(cp.ins[0], acc) or not isinstance(cp.outs[0], Region) \
                or cp.outs[0].buf.dtype is not DType.float32 or tuple(cp.outs[0].shape) != tuple(acc.shape):
            return None
        src = cp.outs[0]
        if _refs(L, src.buf, "read") != [st]:
            return None
    if lp.body.index(st) < lp.body.index(m.k_loop) or st.op is not Op.DMA_COPY or st.attrs.get("accumulate"):
        return None
    dst = st.outs[0]
    if not isinstance(dst, Access) or dst.gathers or not is_true(dst.mask) or not dst.tensor.dtype.is_float \
            or tuple(dst.shape) != tuple(acc.shape) or not isinstance(st.ins[0], Region) \
            or not same_region(st.ins[0], src):
        return None
    if sorted(map(id, _refs(L, acc.buf, "read"))) != sorted(map(id, [m.c, mid[0] if mid else st])) or \
            sorted(map(id, _refs(L, acc.buf, "write"))) != sorted(map(id, [zero, m.c])):
        return None
    for ld in (m.s_load, m.v_load):
        if L.plan._tensors_alias(dst.tensor, cast(Access, ld.ins[0]).tensor):
            return None
    if any(sympy.sympify(e).has(m.k_loop.var) for e in dst.index):
        return None
    m.store = st
    return m


def _walks(m: _Match, lp: Loop) -> int | None:
    """The output axis (0: M, 1: N) one step of nest loop ``lp`` walks by one tile, or None."""
    step = _int_step(lp)
    if step is None or m.store is None:
        return None
    dst = m.store.outs[0]
    tm, tn = (int(x) for x in dst.shape)
    for e in (m.k_loop.start, m.k_loop.stop):
        if sympy.sympify(e).has(lp.var):
            return None
    s_acc, v_acc = cast(Access, m.s_load.ins[0]), cast(Access, m.v_load.ins[0])
    s_m_axis = 0 if m.a_nn else 1
    if _moves(dst, lp.var, step, 0, tm) and _moves(s_acc, lp.var, step, s_m_axis, tm) \
            and _moves(v_acc, lp.var, step, None, 0):
        return 0
    if _moves(dst, lp.var, step, 1, tn) and _moves(v_acc, lp.var, step, 1, tn) \
            and _moves(s_acc, lp.var, step, None, 0):
        return 1
    return None


def _match(L: KernelLowering, lp: Loop) -> _Match | None:
    """The largest collapsible structure rooted at ``lp``: a nest of one or two tile loops, or a K loop."""
    inner = lp.body[0] if len(lp.body) == 1 and isinstance(lp.body[0], Loop) else None
    if inner is not None:
        m = _tile_body(L, inner)
        if m is not None:
            a_out, a_in = _walks(m, lp), _walks(m, inner)
            if a_out is not None and a_in is not None and a_out != a_in and not any(
                    sympy.sympify(e).has(lp.var) for e in (inner.start, inner.stop)):
                m.nest = [(lp, a_out), (inner, a_in)]
                return m
    m = _tile_body(L, lp)
    if m is not None:
        ax = _walks(m, lp)
        if ax is not None:
            m.nest = [(lp, ax)]
            return m
    return _k_loop(L, lp)


def _trip_count(L: KernelLowering, lp: Loop) -> ir.Value:
    """``max(0, ceil((stop - start) / step))`` as i64 (``step`` a positive constant)."""
    b = L.cx.b
    step = _int_step(lp)
    assert step is not None
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
    lasts = [b.add(f, b.mul(b.sub(n, ci64(1)), ci64(_int_step(lp) or 1))) for f, n, lp in zip(firsts, trips, loops)]
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


def _store_view(L: KernelLowering, st: Instr) -> Any:
    from codegen.lowering.mmfuse import _hbm_view

    return _hbm_view(L, Instr(Op.DMA_COPY, (), (st.outs[0],)))  # the store's tile, read like a load's


def try_collapse(L: KernelLowering, lp: Loop, plain: Callable[[Loop], None]) -> bool:
    """Emit ``lp`` as one gemm call when it is a collapsible K loop or tile nest (module docstring); loads
    that need run-time checks are checked at the range's corners, with ``plain(lp)`` (the loops as
    written) run when one fails. False: nothing emitted that matters, the caller lowers ``lp``."""
    if L.debug:
        return False
    m = _match(L, lp)
    if m is None:
        return False
    from codegen.lowering.mmfuse import _hbm_view

    cx = L.cx
    loops = [x for x, _ in m.nest] + [m.k_loop]
    saved = {x.var: cx.env.get(x.var) for x in loops}
    try:
        for x in loops:
            cx.env[x.var] = emit_int(cx, x.start)  # the first tiles: every loop's first iteration
        s_view, v_view = _hbm_view(L, m.s_load), _hbm_view(L, m.v_load)
        if m.store is not None:
            out_view = _store_view(L, m.store)
        else:
            out_view = L.view(m.c.outs[0])
            if len(out_view.view_strides) == 2 and out_view.view_strides[-1] != 1:
                return False
        if s_view is None or v_view is None or out_view is None:
            return False  # strides not provably unit: the loops as written (the IR emitted here is dead)
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


def _emit(L: KernelLowering, m: _Match, s_view: Any, v_view: Any, out_view: Any, trips: list[ir.Value]) -> None:
    from codegen.lowering.gemm import call_gemm, gemm_fn
    from codegen.lowering.gemm_bf16 import gemm_bf16, native_bf16

    b = L.cx.b
    tm, tn = (int(x) for x in m.c.outs[0].shape)
    dims: list[int | ir.Value] = [tm, tn]
    for (_, ax), n in zip(m.nest, trips):
        dims[ax] = b.mul(n, ci64((tm, tn)[ax]))
    k_total = b.mul(trips[-1], ci64(m.k_tile))
    if m.store is None:
        out_view.prepare(L.cx)
    accumulate = m.store is None  # the K loop adds to the PSUM tile; the nest writes the output
    low = m.store.outs[0].tensor.dtype if m.store is not None else DType.float32
    scratch = _Scratch(L, dims[0], dims[1]) if low is not DType.float32 else None
    dest = scratch if scratch is not None else out_view
    if native_bf16(m.c):
        gemm_bf16(L, s_view, v_view, dest, k_total, dims[0], dims[1], accumulate, m.a_nn)
    else:
        call_gemm(L, gemm_fn(L, "gemm_nn" if m.a_nn else "gemm_tn"), s_view, v_view, dest, k_total, dims[0],
                  dims[1], accumulate)
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
