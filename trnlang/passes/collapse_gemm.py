"""Pass ``collapse_gemm``: matmul tile loops the lowering replaces by one gemm call over the whole product.

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
This pass finds the loops that are one gemm (``codegen/lowering/gemm_collapse.py`` emits it):

**K loop.** The loop's body is only its ``nc_matmul`` C (accumulating into a region allocated
outside the loop) and C's operand loads (deferred to C by ``plan_matmul_operands``, or plain loads
read only by C), and one step of the loop variable moves every operand's access by exactly one tile
along its K axis and nothing else (checked symbolically on the access patterns): the loop is one
gemm ``acc += A[:, K0:K0 + n_k tk] @ V[K0:K0 + n_k tk, :]`` read in place.

**Nest.** In addition, the K loop sits in a tile body ``zero acc; K loop; store acc`` (no epilogue; a store
that adds, ``accumulate="add"``, only to an fp32 output), and each of one or two enclosing loops moves the
store by exactly one output tile along M or N, the stationary along M (or the moving operand along N) and the
other operand not at all: the whole nest is one gemm ``out[M0:, N0:] = A @ V`` (``+=`` for the adding store:
``addmm``'s bias, put in the output first) writing the output in place (each block of ``V`` is packed once for
all rows; the gemm's own cache blocking takes over).

The operands (and the nest's output) are read in place, so their tiles must have a unit column stride
known at compile time in this variant (``LowerPlan.static_strides``; the accumulator's PSUM view for
a K loop alone). An fp32 operand tile whose *rows* have the unit stride (``x @ w.T`` of ``nn.Linear``,
``x.T @ dy`` of its weight gradient) is read as its transpose instead: the stationary side then swaps
``gemm_nn`` and ``gemm_tn``, the moving side takes the ``_vt`` entries (``GemmCollapse.entry``).

Loads the verifier could not prove inside their tensors are still collapsed: the lowering checks them
at the corners of the collapsed range and runs the loops as written when a corner is outside (the same
error report as before). Every loop is considered, also loops inside a collapsed one (those are what that
fallback runs). Nothing in debug builds.

Decisions: ``plan.gemms`` (``id(loop)`` -> a :class:`GemmCollapse`).

Example:
    >>> import torch
    >>> from tests.passes.kernels import mm_tn
    >>> from trnlang.passes import plan_lowering
    >>> plan = plan_lowering(mm_tn.trace(torch.randn(256, 128), torch.randn(256, 256), torch.empty(128, 256)), (1,))
    >>> [(len(g.nest), g.store is None, g.k_tile) for g in plan.gemms.values()]  # the K loop: acc += A @ V
    [(0, True, 128)]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import sympy

from trnlang.ir.liveness import all_regions, no_mask, same_region
from trnlang.ir.nodes import Access, Instr, Loop, Region, Stmt, axis_sym
from trnlang.ir.ops import Alu, Op
from trnlang.ir.types import DType
from trnlang.passes.lowering import LowerPlan

__all__ = ["GemmCollapse", "collapse_gemm"]


@dataclass
class GemmCollapse:
    """A collapsible K loop (and nest): the ``nc_matmul`` C, its operand loads, the loops, the store."""

    c: Instr
    s_load: Instr            # the load of A [M, K] (a_nn) or of the stationary S [K, M]
    v_load: Instr            # the load of the moving V [K, N]
    a_nn: bool               # the gemm's nn entry (A [M, K]) rather than tn (the stationary [K, M])
    k_loop: Loop
    k_tile: int
    bf16: bool = False       # both operands bf16 on the host's bf16 gemm
    nest: list[tuple[Loop, int]] = field(default_factory=list)  # (loop, output axis it walks: 0 M, 1 N), outer first
    store: Instr | None = None  # the nest's store of the accumulator (None: a K loop adding to the PSUM tile)
    s_t: bool = False        # the stationary-side tile is read transposed (its rows have the unit stride)
    v_t: bool = False        # the moving tile is read transposed, as Vt [N, K] (the fp32 gemm's ``_vt`` entries)

    @property
    def entry(self) -> str:
        """The fp32 gemm library entry this product calls (``codegen.gemmlib``)."""
        return f"gemm_{'n' if self.a_nn != self.s_t else 't'}n{'_vt' if self.v_t else ''}"

    @property
    def loops(self) -> list[Loop]:
        """The collapsed loops, outer first (the nest's, then the K loop)."""
        return [x for x, _ in self.nest] + [self.k_loop]


def _int_step(lp: Loop) -> int | None:
    s = sympy.sympify(lp.step)
    return int(s) if s.is_Integer and int(s) > 0 else None


def _refs(plan: LowerPlan, buf: Any, role: str) -> list[Instr]:
    return [ins for ins, r in plan.buf_refs.get(id(buf), []) if r == role]


def _bf16(plan: LowerPlan, c: Instr) -> bool:
    return plan.bf16_gemm and all(isinstance(x, Region) and x.buf.dtype is DType.bfloat16 for x in c.ins[:2])


def _plain_load(plan: LowerPlan, ld: Instr, region: Any, reader: Instr, dt: DType) -> bool:
    """``ld`` is an unmasked 2-D ``dt`` HBM load into ``region``, whose buffer only ``reader`` reads."""
    if ld.op is not Op.DMA_COPY or ld.attrs.get("accumulate") or not isinstance(region, Region):
        return False
    src, dst = ld.ins[0], ld.outs[0]
    if not isinstance(src, Access) or src.gathers or len(src.shape) != 2 or not no_mask(src):
        return False
    if not isinstance(dst, Region) or not same_region(dst, region) or tuple(dst.shape) != tuple(region.shape):
        return False
    if src.tensor.dtype is not dt or region.buf.dtype is not dt:
        return False
    return _refs(plan, region.buf, "write") == [ld] and _refs(plan, region.buf, "read") == [reader]


def _operand_loads(plan: LowerPlan, lp: Loop, c: Instr) -> tuple[Instr, Instr, bool] | None:
    """``(stationary-side load, moving load, a_nn)`` of C when the body is only C, allocs and those loads."""
    mo = plan.mm_ops.get(id(c))
    body = [s for s in lp.body if not (isinstance(s, Instr) and s.op is Op.ALLOC)]
    if any(not isinstance(s, Instr) for s in body):
        return None
    if mo is not None:  # deferred to C by plan_matmul_operands: read in place
        if any(s is not c and plan.mm_defer.get(id(s)) is not c for s in body) or mo.v_load is None:
            return None
        if mo.transpose is not None:
            return (mo.a_load, mo.v_load, True) if mo.a_load is not None else None
        return (mo.s_load, mo.v_load, False) if mo.s_load is not None else None
    st, mv = c.ins[0], c.ins[1]
    dt = DType.bfloat16 if _bf16(plan, c) else DType.float32
    loads = [s for s in body if isinstance(s, Instr) and s is not c]
    if len(loads) != 2 or not isinstance(st, Region) or not isinstance(mv, Region) or st.buf is mv.buf:
        return None
    s_ld = next((x for x in loads if isinstance(x.outs[0], Region) and x.outs[0].buf is st.buf), None)
    v_ld = next((x for x in loads if isinstance(x.outs[0], Region) and x.outs[0].buf is mv.buf), None)
    if s_ld is None or v_ld is None or not _plain_load(plan, s_ld, st, c, dt) or \
            not _plain_load(plan, v_ld, mv, c, dt):
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


def _k_loop(plan: LowerPlan, lp: Loop) -> GemmCollapse | None:
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
            plan.region_checks.get(id(r)) for r in all_regions(c)):
        return None
    got = _operand_loads(plan, lp, c)
    if got is None:
        return None
    s_ld, v_ld, a_nn = got
    k_tile = int(cast(Region, c.ins[0]).shape[0])
    ok = all(isinstance(x.ins[0], Access) and x.ins[0].shape[ax] == k_tile
             and _moves(x.ins[0], lp.var, step, ax, k_tile) for x, ax in ((s_ld, 1 if a_nn else 0), (v_ld, 0)))
    return GemmCollapse(c, s_ld, v_ld, a_nn, lp, k_tile, _bf16(plan, c)) if ok else None


def _epilogue_copy(plan: LowerPlan, cp: Instr, acc: Region, st: Instr) -> Region | None:
    """The tile body's ``tensor_copy`` of the accumulator to an fp32 tile only the store reads: its output."""
    if cp.op is not Op.TENSOR_COPY or cp.attrs.get("reshape") or not isinstance(cp.ins[0], Region) \
            or not same_region(cp.ins[0], acc) or not isinstance(cp.outs[0], Region) \
            or cp.outs[0].buf.dtype is not DType.float32 or tuple(cp.outs[0].shape) != tuple(acc.shape):
        return None
    return cp.outs[0] if _refs(plan, cp.outs[0].buf, "read") == [st] else None


def _tile_body(plan: LowerPlan, lp: Loop) -> GemmCollapse | None:
    """``lp``'s body is ``zero acc; K loop; [copy;] store`` of one fp32 output tile: the match, else None."""
    k_loops = [s for s in lp.body if isinstance(s, Loop)]
    if len(k_loops) != 1:
        return None
    m = _k_loop(plan, k_loops[0])
    if m is None:
        return None
    acc = cast(Region, m.c.outs[0])
    rest = [s for s in lp.body if isinstance(s, Instr) and s.op is not Op.ALLOC]
    if len(rest) not in (2, 3) or rest[0].op is not Op.MEMSET or lp.body.index(rest[0]) > lp.body.index(m.k_loop):
        return None
    zero, *mid, st = rest
    if not isinstance(zero.outs[0], Region) or not same_region(zero.outs[0], acc) or zero.attrs.get("value") != 0:
        return None
    src = acc
    if mid:
        cp_out = _epilogue_copy(plan, mid[0], acc, st)
        if cp_out is None:
            return None
        src = cp_out
    if lp.body.index(st) < lp.body.index(m.k_loop) or st.op is not Op.DMA_COPY:
        return None
    dst = st.outs[0]
    adds = st.attrs.get("accumulate")
    if adds is not None and (adds is not Alu.add or not isinstance(dst, Access)
                             or dst.tensor.dtype is not DType.float32):
        return None  # only an fp32 output adds the product (the gemm's accumulate: out += A @ V)
    if not isinstance(dst, Access) or dst.gathers or not no_mask(dst) or not dst.tensor.dtype.is_float \
            or tuple(dst.shape) != tuple(acc.shape) or not isinstance(st.ins[0], Region) \
            or not same_region(st.ins[0], src):
        return None
    if sorted(map(id, _refs(plan, acc.buf, "read"))) != sorted(map(id, [m.c, mid[0] if mid else st])) or \
            sorted(map(id, _refs(plan, acc.buf, "write"))) != sorted(map(id, [zero, m.c])):
        return None
    for ld in (m.s_load, m.v_load):
        if plan.tensors_alias(dst.tensor, cast(Access, ld.ins[0]).tensor):
            return None
    if any(sympy.sympify(e).has(m.k_loop.var) for e in dst.index):
        return None
    m.store = st
    return m


def _walks(m: GemmCollapse, lp: Loop) -> int | None:
    """The output axis (0: M, 1: N) one step of nest loop ``lp`` walks by one tile, or None."""
    step = _int_step(lp)
    if step is None or m.store is None:
        return None
    dst = cast(Access, m.store.outs[0])
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


def _match(plan: LowerPlan, lp: Loop) -> GemmCollapse | None:
    """The largest collapsible structure rooted at ``lp``: a nest of one or two tile loops, or a K loop."""
    inner = lp.body[0] if len(lp.body) == 1 and isinstance(lp.body[0], Loop) else None
    if inner is not None:
        m = _tile_body(plan, inner)
        if m is not None:
            a_out, a_in = _walks(m, lp), _walks(m, inner)
            if a_out is not None and a_in is not None and a_out != a_in and not any(
                    sympy.sympify(e).has(lp.var) for e in (inner.start, inner.stop)):
                m.nest = [(lp, a_out), (inner, a_in)]
                return m
    m = _tile_body(plan, lp)
    if m is not None:
        ax = _walks(m, lp)
        if ax is not None:
            m.nest = [(lp, ax)]
            return m
    return _k_loop(plan, lp)


def unit_columns(plan: LowerPlan, acc: Access, transposed: bool = False) -> bool:
    """The 2-D tile of HBM access ``acc`` has a unit column stride known at compile time in this variant (so the
    gemm can read it in place): its indices are affine in the tile axes with integer coefficients, and the
    strides of the dimensions the column axis moves along are compile-time constants summing to one element.
    ``transposed``: the same for the tile's rows (its transpose has unit columns)."""
    strides = plan.static_strides(acc.tensor)
    a0, a1 = axis_sym(0), axis_sym(1)
    if transposed:
        a0, a1 = a1, a0
    col = 0
    for e, st in zip(acc.index, strides):
        ex = sympy.sympify(e)
        c0, c1 = sympy.diff(ex, a0), sympy.diff(ex, a1)
        if not (c0.is_Integer and c1.is_Integer):
            return False
        if int(c1):
            if st is None:
                return False
            col += int(c1) * st
    return col == 1


def _layout(plan: LowerPlan, acc: Access, may_transpose: bool) -> bool | None:
    """How the gemm reads operand tile ``acc`` in place: False as it is (unit columns), True transposed (unit rows,
    when ``may_transpose``), None not at all."""
    if unit_columns(plan, acc):
        return False
    if may_transpose and unit_columns(plan, acc, transposed=True):
        return True
    return None


def _in_place(plan: LowerPlan, m: GemmCollapse) -> bool:
    """The gemm can read (and write) its operands where they are (module docstring); records whether the operand
    tiles are read transposed (the fp32 gemm only: the bf16 library has no transposed entries)."""
    s_t = _layout(plan, cast(Access, m.s_load.ins[0]), not m.bf16)
    v_t = _layout(plan, cast(Access, m.v_load.ins[0]), not m.bf16)
    if s_t is None or v_t is None:
        return False
    m.s_t, m.v_t = s_t, v_t
    if m.store is not None:
        return unit_columns(plan, cast(Access, m.store.outs[0]))
    vs = cast(Region, m.c.outs[0]).view_strides
    return not (len(vs) == 2 and vs[-1] != 1)


def _walk(plan: LowerPlan, stmts: list[Stmt]) -> None:
    for s in stmts:
        if isinstance(s, Loop):
            m = _match(plan, s)
            if m is not None and _in_place(plan, m):
                plan.gemms[id(s)] = m
            _walk(plan, s.body)


def collapse_gemm(plan: LowerPlan) -> LowerPlan:
    """Fill ``plan.gemms`` (see the module docstring); returns ``plan``."""
    if not plan.debug:
        _walk(plan, plan.kernel.body)
    return plan
