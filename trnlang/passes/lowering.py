"""The lowering plan: the decisions the JIT's codegen reads, made by the lowering passes.

A compiled variant of a kernel is lowered for one launch grid, one aliasing mode (whether a written
argument may overlap another) and one debug mode, and on a host whose gemm may or may not take bf16
operands natively. The passes that depend on those (``LOWERING`` in ``trnlang.passes``) therefore do
not write IR attributes: each fills its part of a :class:`LowerPlan`, an object built per variant on
top of the (unchanged) kernel IR, and ``codegen`` only emits what the plan says. ``TRN_DUMP=<pass>``
prints the IR with the plan's decisions so far as comments (:func:`plan_notes`), and
:func:`verify_plan` checks the decisions (the tests run it after every pass).

Instructions are named by position (``#p``: the pre-order index of :class:`trnlang.ir.liveness.Liveness`).

Example:
    >>> import torch
    >>> from tests.kernels import softmax
    >>> from trnlang.passes import plan_lowering
    >>> plan = plan_lowering(softmax.trace(torch.randn(128, 64), torch.empty(128, 64)), (1,))
    >>> plan.passes
    ['check_placement', 'rematerialize', 'fuse_elementwise', 'plan_matmul_operands', 'collapse_gemm', 'layout_arena']
    >>> verify_plan(plan)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy

from trnlang.ir.liveness import Liveness, all_regions, regions_read, regions_written
from trnlang.ir.nodes import Access, Buf, HbmTensor, Instr, Kernel, Loop, Stmt

__all__ = ["InstrInfo", "LowerPlan", "PlanError", "plan_notes", "verify_plan"]


@dataclass
class InstrInfo:
    """An instruction with its position and enclosing loops (outer first)."""

    id: int
    instr: Instr
    loops: tuple[Loop, ...]


class PlanError(AssertionError):
    """A lowering plan that breaks one of :func:`verify_plan`'s rules (a bug in a pass)."""


@dataclass(eq=False)
class LowerPlan:
    """Every decision the lowering of one variant needs (``id(...)`` keys name IR objects of ``kernel``).

    The analysis (positions, def-use) is made on construction; the decisions are empty until the passes run:

    - ``check_placement``: ``access_checks`` (HBM accesses checked at run time: the dimensions) and
      ``region_checks`` (on-chip regions whose start is checked: the dimensions);
    - ``rematerialize``: ``remat`` (cheap producers inlined into each of several consumers), with their
      ``fused`` / ``producer`` entries;
    - ``fuse_elementwise``: ``fused`` (producer -> the last consumer it is inlined into) and ``producer``
      ((consumer, buffer) -> the producer evaluated in its place);
    - ``plan_matmul_operands``: ``mm_ops`` (an ``nc_matmul``'s operands read where they come from) and
      ``mm_defer`` (instructions emitted at, or consumed by, that ``nc_matmul``);
    - ``collapse_gemm``: ``gemms`` (a matmul's tile loops lowered as one gemm call: per loop, a
      ``trnlang.passes.collapse_gemm.GemmCollapse``);
    - ``layout_arena``: ``offsets`` / ``sizes`` / ``live`` (arena bytes and live positions per buffer)
      and ``bufs_size``.

    ``layouts`` is the variant's compiled layout of each kernel tensor (``kernel.tensors`` order): True
    (C-contiguous), or per dimension 0 / 1 when that stride is known to be 0 / 1 element and None when it
    is read at run time (``trnlang.runtime.jit.layout_of``); None: every tensor contiguous.
    """

    kernel: Kernel
    grid: tuple[int, ...]
    may_alias: bool = False
    debug: bool = False
    bf16_gemm: bool = False
    layouts: tuple[Any, ...] | None = None
    infos: list[InstrInfo] = field(default_factory=list)
    by_instr: dict[int, InstrInfo] = field(default_factory=dict)
    buf_refs: dict[int, list[tuple[Instr, str]]] = field(default_factory=dict)  # id(Buf) -> (instr, role)
    bufs: dict[int, Buf] = field(default_factory=dict)
    access_checks: dict[int, tuple[int, ...]] = field(default_factory=dict)   # id(Access) -> runtime dims
    region_checks: dict[int, list[int]] = field(default_factory=dict)         # id(Region) -> dims to check
    fused: dict[int, Instr] = field(default_factory=dict)                     # id(P) -> consumer C
    producer: dict[tuple[int, int], Instr] = field(default_factory=dict)      # (id(C), id(B)) -> P
    remat: set[int] = field(default_factory=set)                              # id(P) inlined into several Cs
    mm_ops: dict[int, Any] = field(default_factory=dict)                      # id(nc_matmul) -> MatmulOperands
    mm_defer: dict[int, Instr] = field(default_factory=dict)                  # id(P) -> nc_matmul P is deferred to
    gemms: dict[int, Any] = field(default_factory=dict)                       # id(Loop) -> GemmCollapse
    offsets: dict[int, int] = field(default_factory=dict)                     # id(Buf) -> arena byte offset
    sizes: dict[int, int] = field(default_factory=dict)                       # id(Buf) -> arena bytes
    live: dict[int, tuple[int, int]] = field(default_factory=dict)            # id(Buf) -> live positions
    bufs_size: int = 0
    passes: list[str] = field(default_factory=list)                           # the passes run so far

    def __post_init__(self) -> None:
        self.liveness = live = Liveness(self.kernel)
        for pos, (ins, loops) in enumerate(zip(live.instrs, live.loops_of)):
            info = InstrInfo(pos, ins, loops)
            self.infos.append(info)
            self.by_instr[id(ins)] = info
        for info in self.infos:
            ins = info.instr
            if ins.op.value == "alloc":
                self._ref(ins.outs[0], ins, "alloc")
                continue
            for r in regions_written(ins):
                self._ref(r.buf, ins, "write")
            for r in regions_read(ins):
                self._ref(r.buf, ins, "read")

    def _ref(self, buf: Buf, ins: Instr, role: str) -> None:
        self.bufs[id(buf)] = buf
        self.buf_refs.setdefault(id(buf), []).append((ins, role))

    def info(self, ins: Instr) -> InstrInfo:
        """The position and loops of ``ins``."""
        return self.by_instr[id(ins)]

    def needs_checks(self, ins: Instr) -> bool:
        """True if any access or region of ``ins`` is checked at run time."""
        for x in (*ins.outs, *ins.ins):
            if isinstance(x, Access) and id(x) in self.access_checks:
                return True
        return any(id(r) in self.region_checks for r in all_regions(ins))

    def tensors_alias(self, a: HbmTensor, b: HbmTensor) -> bool:
        """Whether two kernel tensors may share memory in this variant."""
        return a is b or self.may_alias

    def static_strides(self, t: HbmTensor) -> list[int | None]:
        """The strides (elements) of kernel tensor ``t`` known at compile time in this variant; None: read at
        run time. A contiguous tensor's stride is known where every later dimension's size is."""
        k = next(i for i, x in enumerate(self.kernel.tensors) if x is t)
        lay = True if self.layouts is None else self.layouts[k]
        nd = len(t.shape)
        if lay is True:
            out: list[int | None] = []
            acc: int | None = 1
            for d in range(nd - 1, -1, -1):
                out.append(acc)
                s = t.shape[d]
                acc = acc * int(s) if acc is not None and isinstance(s, int | sympy.Integer) else None
            return out[::-1]
        known = lay if isinstance(lay, tuple) and len(lay) == nd else (None,) * nd
        return [None if x is None else int(x) for x in known]

    def emitter(self, ins: Instr) -> Instr:
        """The instruction whose code evaluates ``ins`` (itself, the last consumer it is inlined into, or the
        ``nc_matmul`` it is deferred to)."""
        while True:
            nxt = self.fused.get(id(ins)) or self.mm_defer.get(id(ins))
            if nxt is None:
                return ins
            ins = nxt

    def fused_buf(self, buf: Buf) -> bool:
        """The buffer is never materialised (its producer is inlined into its readers)."""
        return any(key[1] == id(buf) for key in self.producer)


def _notes_of(plan: LowerPlan, ins: Instr) -> list[str]:
    pos = {id(ins): plan.by_instr[id(ins)].id}
    out = [f"#{pos[id(ins)]}"]
    dims = [f"{x.tensor.name}:{','.join(map(str, plan.access_checks[id(x)]))}" for x in (*ins.outs, *ins.ins)
            if isinstance(x, Access) and id(x) in plan.access_checks]
    if dims:
        out.append("check access " + " ".join(dims))
    regs = [f"{r.buf.name}:{','.join(map(str, plan.region_checks[id(r)]))}" for r in all_regions(ins)
            if id(r) in plan.region_checks]
    if regs:
        out.append("check region " + " ".join(regs))
    if id(ins) in plan.fused:
        readers = sorted({plan.by_instr[c].id for (c, _b), p in plan.producer.items() if p is ins})
        out.append(("remat into " if id(ins) in plan.remat else "fused into ") + ",".join(f"#{r}" for r in readers))
    if id(ins) in plan.mm_defer:
        out.append(f"deferred to #{plan.info(plan.mm_defer[id(ins)]).id}")
    mo = plan.mm_ops.get(id(ins))
    if mo is not None:
        parts = [name for name in ("a_region", "a_load", "s_load", "v_load") if getattr(mo, name) is not None]
        out.append("operands in place: " + " ".join(parts))
    gemms = [g for g in plan.gemms.values() if g.c is ins]
    if gemms:
        out += ["[one gemm: " + ", ".join([f"{lp.var} {'MN'[ax]}" for lp, ax in g.nest] + [f"{g.k_loop.var} K"]) + "]"
                for g in gemms]
    if ins.op.value == "alloc" and id(ins.outs[0]) in plan.offsets:
        b = id(ins.outs[0])
        lo, hi = plan.live[b]
        out.append(f"arena {plan.offsets[b]}+{plan.sizes[b]} live #{lo}..#{hi}")
    return out


def plan_notes(plan: LowerPlan) -> Any:
    """A ``notes`` callback for ``trnlang.ir.printer.print_kernel``: each instruction's position and decisions."""
    return lambda ins: " ".join(_notes_of(plan, ins)) if id(ins) in plan.by_instr else ""


def _same_list(stmts: list[Stmt], a: Instr, b: Instr) -> bool:
    """``a`` and ``b`` are in one statement list, ``a`` first (searched through every loop body)."""
    ia = next((k for k, s in enumerate(stmts) if s is a), None)
    if ia is not None:
        return any(s is b for s in stmts[ia + 1:])
    return any(_same_list(s.body, a, b) for s in stmts if isinstance(s, Loop))


def _check_fusion(plan: LowerPlan) -> None:
    for (cid, bid), p in plan.producer.items():
        c = plan.by_instr[cid].instr if cid in plan.by_instr else None
        if c is None or not _same_list(plan.kernel.body, p, c):
            raise PlanError(f"producer {p.op.value} #{plan.info(p).id} is inlined into an instruction that is not "
                            f"after it in its statement list")
        if not any(r.buf is plan.bufs.get(bid) for r in regions_read(c)):
            raise PlanError(f"#{plan.info(c).id} does not read the buffer of the producer inlined into it")
        if plan.needs_checks(p):
            raise PlanError(f"producer #{plan.info(p).id} needs run-time checks but is inlined")
        if id(p) not in plan.fused:
            raise PlanError(f"producer #{plan.info(p).id} inlined but not marked fused")


def _check_defer(plan: LowerPlan) -> None:
    for pid, c in plan.mm_defer.items():
        p = plan.by_instr[pid].instr
        if c.op.value != "nc_matmul" or id(c) not in plan.mm_ops or not _same_list(plan.kernel.body, p, c):
            raise PlanError(f"#{plan.info(p).id} is deferred to #{plan.info(c).id}, which is not a later nc_matmul "
                            f"with planned operands in its statement list")


def _check_arena(plan: LowerPlan) -> None:
    items = sorted((plan.live[b], plan.offsets[b], plan.sizes[b], b) for b in plan.offsets)
    for k, ((lo, hi), off, size, b) in enumerate(items):
        if off % 64 or off + size > plan.bufs_size:
            raise PlanError(f"buffer {plan.bufs[b].name} at arena offset {off}+{size} is misaligned or beyond "
                            f"{plan.bufs_size}")
        for (lo2, hi2), off2, size2, b2 in items[k + 1:]:
            if lo2 > hi:
                break
            if off < off2 + size2 and off2 < off + size:
                raise PlanError(f"buffers {plan.bufs[b].name} and {plan.bufs[b2].name} are live together "
                                f"(#{lo}..#{hi}, #{lo2}..#{hi2}) but share arena bytes")
    for b in plan.bufs:
        if b not in plan.offsets and "layout_arena" in plan.passes and not plan.fused_buf(plan.bufs[b]) \
                and plan.buf_refs.get(b):
            raise PlanError(f"buffer {plan.bufs[b].name} is materialised but has no arena offset")


def _check_gemms(plan: LowerPlan) -> None:
    for lid, g in plan.gemms.items():
        root = g.nest[0][0] if g.nest else g.k_loop
        c = g.c
        if id(root) != lid or plan.debug or c.op.value != "nc_matmul" or not any(s is c for s in g.k_loop.body):
            raise PlanError(f"a gemm collapse of loop {root.var} is not rooted at its loop, or its nc_matmul is not "
                            f"in its K loop (or a debug build collapses)")
        loops = plan.info(c).loops
        if any(not any(x is lp for x in loops) for lp in g.loops) or \
                any(not any(s is ld for s in g.k_loop.body) for ld in (g.s_load, g.v_load)):
            raise PlanError(f"the gemm of #{plan.info(c).id} collapses a loop that does not enclose it, or its "
                            f"operand loads are not in its K loop")
        if any(plan.region_checks.get(id(r)) for r in all_regions(c)):
            raise PlanError(f"#{plan.info(c).id} is collapsed into a gemm but its regions are checked at run time")


def verify_plan(plan: LowerPlan) -> None:
    """Check the plan's decisions against the kernel (the pass contract; tests run it after every pass).

    Rules: an inlined producer precedes its consumers in one statement list, is read by them, and needs
    no run-time check; a deferred instruction precedes a planned ``nc_matmul`` in its list; arena
    offsets are 64-byte aligned, inside ``bufs_size``, and two buffers live at the same position never
    share bytes (no buffer shares any in debug builds); every materialised buffer has an offset; a
    collapsed gemm is rooted at its outermost loop, whose loops enclose its ``nc_matmul`` and whose
    K loop holds it and its operand loads, with no run-time region check (none in debug builds).

    Raises:
        PlanError: the first broken rule.
    """
    _check_fusion(plan)
    _check_defer(plan)
    _check_arena(plan)
    _check_gemms(plan)
    if plan.debug and plan.offsets:
        spans = sorted((plan.offsets[b], plan.offsets[b] + plan.sizes[b]) for b in plan.offsets)
        if any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
            raise PlanError("a debug build shares arena bytes between buffers")
