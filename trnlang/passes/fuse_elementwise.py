"""Pass ``fuse_elementwise``: elementwise producers inlined into their single consumer.

A producer P (an elementwise instruction writing region R of buffer B) is inlined into its consumer
C (evaluated per element inside C's loop, B never materialised) when B is written only by P and
read only by C, C is later in the same statement list, C reads exactly R with the identity element
mapping (same region, no broadcasting), no statement between P and C writes anything P reads
(on-chip buffers, or HBM tensors that may alias in this variant), P needs no run-time check
(``check_placement``), and C is not an HBM store to a tensor P loads from (or may alias).

Producers read by several consumers are the ``rematerialize`` pass's (it runs first: a cheap load
re-evaluated in each of its readers); this pass leaves them alone, and sees the loads already
inlined into a producer as part of its expression (what it reads, so what must not be overwritten
before its consumer). :func:`try_inline` is the shared step of both passes.

Decisions: ``plan.fused`` (P -> its consumer) and ``plan.producer`` ((C, B) -> P).

Example:
    >>> import torch
    >>> from tests.kernels import softmax
    >>> from trnlang.passes.lowering import LowerPlan
    >>> from trnlang.passes.check_placement import check_placement
    >>> from trnlang.passes.rematerialize import rematerialize
    >>> plan = check_placement(LowerPlan(softmax.trace(torch.randn(128, 64), torch.empty(128, 64)), (1,)))
    >>> sorted({p.op.value for p in fuse_elementwise(plan).producer.values()})  # the load has several readers
    ['tensor_scalar']
    >>> plan = check_placement(LowerPlan(softmax.trace(torch.randn(128, 64), torch.empty(128, 64)), (1,)))
    >>> sorted({p.op.value for p in fuse_elementwise(rematerialize(plan)).producer.values()})
    ['dma_copy', 'tensor_scalar']
"""

from __future__ import annotations

from collections.abc import Callable

from trnlang.ir.liveness import (
    hbm_read,
    hbm_written,
    is_store,
    no_mask,
    regions_read,
    regions_written,
    same_region,
    stmt_instrs,
)
from trnlang.ir.nodes import Access, HbmTensor, Instr, Loop, Region, Stmt
from trnlang.ir.ops import Op
from trnlang.passes.lowering import LowerPlan

__all__ = ["fuse_elementwise", "try_inline"]

_PRODUCERS = {Op.TENSOR_TENSOR, Op.TENSOR_SCALAR, Op.ACTIVATION, Op.TENSOR_COPY, Op.SELECT, Op.IOTA, Op.MEMSET,
              Op.AFFINE_SELECT, Op.DMA_COPY}
_CONSUMERS = {Op.TENSOR_TENSOR, Op.TENSOR_SCALAR, Op.ACTIVATION, Op.TENSOR_COPY, Op.SELECT, Op.AFFINE_SELECT,
              Op.TENSOR_REDUCE, Op.BN_STATS, Op.DMA_COPY}


def _producer_ok(plan: LowerPlan, p: Instr) -> bool:
    if p.op not in _PRODUCERS or len(p.outs) != 1 or not isinstance(p.outs[0], Region):
        return False
    if p.op is Op.ACTIVATION and p.attrs.get("reduce_op") is not None:
        return False
    if p.op is Op.DMA_COPY:
        src = p.ins[0]
        if isinstance(src, Access):
            if not no_mask(src) and p.attrs.get("other") is None:
                return False
        elif not isinstance(src, Region):
            return False
    return not plan.needs_checks(p)


def _consumer_reads_ok(c: Instr, r: Region) -> bool:
    """C reads buffer r.buf only as region r, with the identity element mapping."""
    if c.op not in _CONSUMERS:
        return False
    buf = r.buf
    if c.op is Op.DMA_COPY:
        dst, src = c.outs[0], c.ins[0]
        if isinstance(dst, Access):
            if any(g.buf is buf for g in dst.gathers) or not isinstance(src, Region):
                return False
            return same_region(src, r) and tuple(src.shape) == tuple(dst.shape)
        if isinstance(dst, Region) and isinstance(src, Region):
            return same_region(src, r) and tuple(src.shape) == tuple(dst.shape)
        return False
    if c.op in (Op.TENSOR_REDUCE, Op.BN_STATS):
        return isinstance(c.ins[0], Region) and same_region(c.ins[0], r)
    if c.op is Op.TENSOR_COPY and c.attrs.get("reshape"):
        return False
    shape = tuple(c.outs[0].shape)
    operands = [x for x in c.ins if isinstance(x, Region)]
    scale = c.attrs.get("scale")
    if isinstance(scale, Region):
        operands.append(scale)
    seen = False
    for x in operands:
        if x.buf is buf:
            if not same_region(x, r) or tuple(x.shape) != shape:
                return False
            seen = True
    return seen


def _leaves(plan: LowerPlan, p: Instr) -> tuple[set[int], set[int]]:
    """(buffer ids, tensor ids) that P's inlined expression reads, through producers fused into P."""
    bufs: set[int] = set()
    tensors: set[int] = set()
    for r in regions_read(p):
        q = plan.producer.get((id(p), id(r.buf)))
        if q is not None:
            qb, qt = _leaves(plan, q)
            bufs |= qb
            tensors |= qt
        else:
            bufs.add(id(r.buf))
    for t in hbm_read(p):
        tensors.add(id(t))
    return bufs, tensors


def _fusable_consumers(plan: LowerPlan, stmts: list[Stmt], i: int, p: Instr, r: Region,
                       several: Callable[[Instr, int], bool] | None
                       ) -> tuple[list[Instr], dict[int, int], set[int], set[int]] | None:
    """The readers of producer ``p = stmts[i]`` (its only writer) in program order, with the positions of the
    statements after it and ``p``'s leaf buffers and tensors; None when ``p`` cannot be inlined into them (no
    reader, reads its own output, readers elsewhere, one reader when ``several`` is given, else several; or
    ``several(p, n)`` says ``p`` is not cheap enough to evaluate again in each of its ``n`` readers)."""
    refs = plan.buf_refs.get(id(r.buf), [])
    if any(role == "write" and ins is not p for ins, role in refs):
        return None
    readers = {id(ins): ins for ins, role in refs if role == "read"}
    if not readers or id(p) in readers or (len(readers) > 1) != (several is not None):
        return None
    if several is not None and not several(p, len(readers)):
        return None
    pos = {id(s): k for k, s in enumerate(stmts) if k > i}
    if any(x not in pos for x in readers):
        return None
    lb, lt = _leaves(plan, p)
    if len(readers) > 1 and lb:
        return None
    return sorted(readers.values(), key=lambda c: pos[id(c)]), pos, lb, lt


def _consumer_ok(plan: LowerPlan, stmts: list[Stmt], i: int, j: int, c: Instr, r: Region, lb: set[int],
                 lt: set[int], tensors: dict[int, HbmTensor]) -> bool:
    """The producer ``stmts[i]`` (output ``r``, leaf buffers ``lb`` and tensors ``lt``) can be evaluated where
    consumer ``c = stmts[j]`` reads it: ``c`` reads ``r`` elementwise, nothing in between overwrites a leaf
    buffer or an HBM tensor aliasing a leaf tensor, and a store consumer does not write such a tensor."""
    if not _consumer_reads_ok(c, r):
        return False
    for s in stmts[i + 1:j]:
        for ins in stmt_instrs(s):
            if any(id(w.buf) in lb for w in regions_written(ins)):
                return False
            for t in hbm_written(ins):
                if any(plan.tensors_alias(t, tensors.get(x, t)) for x in lt):
                    return False
    if is_store(c):
        t = c.outs[0].tensor
        if any(plan.tensors_alias(t, tensors[x]) for x in lt if x in tensors):
            return False
    return True


def try_inline(plan: LowerPlan, stmts: list[Stmt], i: int, tensors: dict[int, HbmTensor],
               several: Callable[[Instr, int], bool] | None = None) -> bool:
    """Inline producer ``stmts[i]`` into its reader (``several``: into each of its several readers, when
    ``several(p, n)`` allows) if every rule of the module docstring holds; records the decision, returns it."""
    p = stmts[i]
    if not isinstance(p, Instr) or id(p) in plan.fused or not _producer_ok(plan, p):
        return False
    r = p.outs[0]
    assert isinstance(r, Region)
    got = _fusable_consumers(plan, stmts, i, p, r, several)
    if got is None:
        return False
    consumers, pos, lb, lt = got
    if not all(_consumer_ok(plan, stmts, i, pos[id(c)], c, r, lb, lt, tensors) for c in consumers):
        return False
    plan.fused[id(p)] = consumers[-1]
    if len(consumers) > 1:
        plan.remat.add(id(p))
    for c in consumers:
        plan.producer[(id(c), id(r.buf))] = p
    return True


def _fuse_list(plan: LowerPlan, stmts: list[Stmt], tensors: dict[int, HbmTensor]) -> None:
    for i, p in enumerate(stmts):
        if isinstance(p, Loop):
            _fuse_list(plan, p.body, tensors)
        else:
            try_inline(plan, stmts, i, tensors)


def fuse_elementwise(plan: LowerPlan) -> LowerPlan:
    """Fill ``plan.fused`` and ``plan.producer`` for single-reader producers (module docstring); returns ``plan``."""
    _fuse_list(plan, plan.kernel.body, {id(t): t for t in plan.kernel.tensors})
    return plan
