"""Pass ``plan_matmul_operands``: ``nc_matmul`` operands the host gemm reads where they come from, not staged tiles.

A Tensor-engine matmul in trnlang is written the way the engine needs it (NKI style)::

    a_t = tl.load(a[rows, ks])            # dma_copy      HBM -> SBUF   [M, K]
    b_t = tl.load(b[ks_rows, cols])        # dma_copy      HBM -> SBUF   [K, N]
    acc += tl.matmul(a_t, b_t)             # nc_transpose  SBUF -> PSUM  [K, M]
                                           # tensor_copy   PSUM -> SBUF  [K, M]
                                           # nc_matmul     stationary [K, M], moving [K, N]

On the host every one of those steps is a pass over memory before the gemm packs its operands
(again). This pass finds, per ``nc_matmul`` C:

- **the transpose chain** of the stationary operand: ``R4 = tensor_copy(R3)``, ``R3 =
  nc_transpose(R1)``, each buffer written once and read only by the next step, all fp32, ``R1``
  2-D ``[M, K]`` and not written between the transpose and C. The gemm then reads ``R1`` as
  ``A [M, K]`` (its ``nn`` entry) and the transpose and the copy are not emitted;
- **plain HBM loads** feeding the stationary's source, the stationary itself (no transpose chain: a
  kernel that loads ``[K, M]`` tiles and multiplies with ``transpose_x=True``) or the moving
  operand: an unmasked, in-bounds
  fp32 -> fp32 ``dma_copy`` of a 2-D tile whose indices are affine in the tile axes, into a buffer
  read only by the next step, with no store to the tensor (or one that may alias it) before C.
  The gemm then reads HBM directly (row stride from the access pattern) when the lowering can
  prove unit column stride (compile-time strides); otherwise the load is emitted just before C.

Instructions handled this way are *deferred* to C: the arena layout treats them as emitted at C
(their buffers stay live until then), and the lowering emits, just before C, those it cannot
consume directly. Debug builds (buffer poisoning) keep every instruction. On a host whose gemm takes bf16
operands (``plan.bf16_gemm``, set by codegen) the same plan applies to bf16 tiles.

Decisions: ``plan.mm_ops`` (per ``nc_matmul``, a :class:`MatmulOperands`) and ``plan.mm_defer``.

Example:
    >>> import torch
    >>> from tests.kernels import matmul_mk
    >>> from trnlang.passes.lowering import LowerPlan
    >>> from trnlang.passes.check_placement import check_placement
    >>> from trnlang.passes.fuse_elementwise import fuse_elementwise
    >>> k = matmul_mk.trace(torch.randn(128, 256), torch.randn(256, 64), torch.empty(128, 64))
    >>> plan = plan_matmul_operands(fuse_elementwise(check_placement(LowerPlan(k, (1,)))))
    >>> [(mo.a_region is not None, mo.v_load) for mo in plan.mm_ops.values()]  # masked loads stay staged
    [(True, None)]
"""

from __future__ import annotations

from typing import Any, cast

import sympy

from trnlang.ir.liveness import no_mask as _no_mask
from trnlang.ir.liveness import same_region
from trnlang.ir.liveness import stmt_instrs as _stmt_instrs
from trnlang.ir.nodes import Access, Instr, Loop, Region, Stmt, axis_sym
from trnlang.ir.ops import Op
from trnlang.ir.types import DType
from trnlang.passes.lowering import LowerPlan

__all__ = ["MatmulOperands", "plan_matmul_operands"]


class MatmulOperands:
    """What C's operands come from (see the module docstring); None fields: the staged tile."""

    __slots__ = ("copy", "transpose", "a_region", "a_load", "s_load", "v_load")

    def __init__(self) -> None:
        self.copy: Instr | None = None        # tensor_copy R3 -> R4 (stationary)
        self.transpose: Instr | None = None   # nc_transpose R1 -> R3
        self.a_region: Region | None = None   # R1: the stationary's transpose source, [M, K]
        self.a_load: Instr | None = None      # dma_copy HBM -> R1
        self.s_load: Instr | None = None      # dma_copy HBM -> the stationary [K, M] (no transpose chain)
        self.v_load: Instr | None = None      # dma_copy HBM -> the moving operand's region


def _affine_2d(acc: Access) -> bool:
    """Every index of ``acc`` is a polynomial of degree <= 1 in the two tile axes (no gathers)."""
    a0, a1 = axis_sym(0), axis_sym(1)
    for e in acc.index:
        ex = sympy.sympify(e)
        try:
            if not ex.is_polynomial(a0, a1) or sympy.Poly(ex, a0, a1).total_degree() > 1:
                return False
        except sympy.PolynomialError:
            return False
    return True


class _Finder:
    def __init__(self, plan: LowerPlan) -> None:
        self.p = plan
        self.ops: dict[int, MatmulOperands] = {}
        self.defer: dict[int, Instr] = {}

    def only(self, buf: Any, role: str) -> list[Instr]:
        return [ins for ins, r in self.p.buf_refs.get(id(buf), []) if r == role]

    def run(self, stmts: list[Stmt]) -> None:
        for j, c in enumerate(stmts):
            if isinstance(c, Loop):
                self.run(c.body)
            elif c.op is Op.MATMUL and not self.p.needs_checks(c):
                self.matmul(stmts, j, c)

    def chained(self, stmts: list[Stmt], j: int, region: Any, reader: Instr, op: Op) -> tuple[Instr, int] | None:
        """The single writer of ``region``'s buffer (an ``op`` earlier in ``stmts``), read only by ``reader``."""
        if not isinstance(region, Region):
            return None
        writers = self.only(region.buf, "write")
        readers = self.only(region.buf, "read")
        if len(writers) != 1 or len(readers) != 1 or readers[0] is not reader:
            return None
        w = writers[0]
        if w.op is not op or id(w) in self.p.fused or id(w) in self.defer or self.p.needs_checks(w):
            return None
        i = next((k for k in range(j) if stmts[k] is w), None)
        if i is None or not isinstance(w.outs[0], Region):
            return None
        out = w.outs[0]
        if not same_region(out, region) or tuple(out.shape) != tuple(region.shape):
            return None
        return w, i

    def written_between(self, stmts: list[Stmt], i: int, j: int, buf: Any = None, tensor: Any = None) -> bool:
        for s in stmts[i + 1:j]:
            for ins in _stmt_instrs(s):
                if buf is not None and any(r.buf is buf for r in ins.outs if isinstance(r, Region)):
                    return True
                if tensor is not None:
                    for x in ins.outs:
                        if isinstance(x, Access) and self.p.tensors_alias(x.tensor, tensor):
                            return True
        return False

    def load(self, stmts: list[Stmt], j: int, region: Any, reader: Instr, until: int,
             dt: DType = DType.float32) -> Instr | None:
        """A plain ``dt`` HBM load of a 2-D tile feeding ``region`` (read only by ``reader``, at ``stmts[j]``)
        that may move to ``stmts[until]`` (C): no store to its tensor in between."""
        got = self.chained(stmts, j, region, reader, Op.DMA_COPY)
        if got is None:
            return None
        ld, i = got
        src = ld.ins[0]
        if not isinstance(src, Access) or src.gathers or len(src.shape) != 2 or ld.attrs.get("accumulate"):
            return None
        if not _no_mask(src) or src.tensor.dtype is not dt or region.buf.dtype is not dt:
            return None
        if not _affine_2d(src) or self.written_between(stmts, i, until, tensor=src.tensor):
            return None
        return ld

    def matmul(self, stmts: list[Stmt], j: int, c: Instr) -> None:
        st, mv = cast(tuple[Region, Region], c.ins)
        out_buf = c.outs[0].buf if isinstance(c.outs[0], Region) else None
        mo = MatmulOperands()
        # bf16 operands on a bf16 gemm (codegen.lowering.gemm_bf16): the same plan on bf16 tiles; the transpose
        # chain bf16 -> fp32 PSUM -> bf16 is exact, so reading its bf16 source instead changes nothing
        bf16 = self.p.bf16_gemm and all(isinstance(x, Region) and x.buf.dtype is DType.bfloat16 for x in c.ins[:2])
        dt = DType.bfloat16 if bf16 else DType.float32
        cp = self.chained(stmts, j, st, c, Op.TENSOR_COPY)
        if cp is not None and not cp[0].attrs.get("reshape") and isinstance(cp[0].ins[0], Region) \
                and st.buf.dtype is dt:
            copy, ic = cp
            copy_src = cast(Region, copy.ins[0])  # a Region (checked above)
            tr = self.chained(stmts, ic, copy.ins[0], copy, Op.TRANSPOSE)
            if tr is not None:
                t, it = tr
                src = t.ins[0]
                if isinstance(src, Region) and src.buf.dtype is dt and src.buf is not out_buf \
                        and copy_src.buf.dtype is DType.float32 and len(src.shape) == 2 \
                        and tuple(copy_src.shape) == (src.shape[1], src.shape[0]) \
                        and not self.written_between(stmts, it, j, buf=src.buf):
                    mo.copy, mo.transpose, mo.a_region = copy, t, src
                    mo.a_load = self.load(stmts, it, src, t, j, dt)
        if mo.copy is None and isinstance(st, Region) and st.buf is not out_buf and st.buf is not mv.buf:
            mo.s_load = self.load(stmts, j, st, c, j, dt)
        mo.v_load = self.load(stmts, j, mv, c, j, dt) if isinstance(mv, Region) and mv.buf is not out_buf else None
        if mo.copy is None and mo.s_load is None and mo.v_load is None:
            return
        self.ops[id(c)] = mo
        for ins in (mo.copy, mo.transpose, mo.a_load, mo.s_load, mo.v_load):
            if ins is not None:
                self.defer[id(ins)] = c


def plan_matmul_operands(plan: LowerPlan) -> LowerPlan:
    """Fill ``plan.mm_ops`` and ``plan.mm_defer`` (see the module docstring); returns ``plan``."""
    if plan.debug:
        return plan
    f = _Finder(plan)
    f.run(plan.kernel.body)
    plan.mm_ops, plan.mm_defer = f.ops, f.defer
    return plan
