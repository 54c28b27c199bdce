"""Pass ``fuse_elementwise``: elementwise producers inlined into their consumers, cheap loads rematerialised.

A producer P (an elementwise instruction writing region R of buffer B) is inlined into its consumer
C (evaluated per element inside C's loop, B never materialised) when B is written only by P and
read only by C, C is later in the same statement list, C reads exactly R with the identity element
mapping (same region, no broadcasting), no statement between P and C writes anything P reads
(on-chip buffers, or HBM tensors that may alias in this variant), P needs no run-time check
(``check_placement``), and C is not an HBM store to a tensor P loads from (or may alias).

*Rematerialisation*: a cheap P (a plain HBM load, possibly through fused casts, of at most
:data:`REMAT_MAX_BYTES`) read by up to :data:`REMAT_MAX_READERS` consumers is inlined into each of
them when every one of them qualifies: the tile is re-read (from memory, then from cache) instead of
staged in the arena.

Decisions: ``plan.fused`` (P -> its last consumer), ``plan.producer`` ((C, B) -> P) and ``plan.remat``.

Example:
    >>> import torch
    >>> from tests.kernels import softmax
    >>> from trnlang.passes.lowering import LowerPlan
    >>> from trnlang.passes.check_placement import check_placement
    >>> plan = fuse_elementwise(check_placement(LowerPlan(softmax.trace(torch.randn(128, 64),
    ...                                                                    torch.empty(128, 64)), (1,))))
    >>> sorted({p.op.value for p in plan.producer.values()})
    ['dma_copy', 'tensor_scalar']
"""

from __future__ import annotations

import sympy

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
from trnlang.ir.nodes import Access, HbmTensor, Instr, Loop, Region, Stmt, axis_sym
from trnlang.ir.ops import Op
from trnlang.passes.lowering import LowerPlan

__all__ = ["REMAT_MAX_BYTES", "REMAT_MAX_READERS", "fuse_elementwise"]

#: Largest HBM load (bytes) re-evaluated in each of several consumers instead of staged (see ``_remat_ok``).
REMAT_MAX_BYTES = 1 << 20
#: Most consumers a load is re-evaluated in.
REMAT_MAX_READERS = 4

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


def _remat_ok(plan: LowerPlan, p: Instr, readers: int) -> bool:
    """P is cheap to evaluate again in each of its ``readers`` consumers instead of staging its tile.

    A plain HBM load (no gathers, unit step along the innermost tile axis), possibly through casts
    fused into P, of at most :data:`REMAT_MAX_BYTES`: re-reading it from the host caches costs less
    than writing the tile to the arena and reading it back (on the host, stores to the arena also
    queue behind the streaming output stores of the previous tile).
    """
    if readers > REMAT_MAX_READERS:
        return False
    if p.op is Op.DMA_COPY:
        src = p.ins[0]
        if not isinstance(src, Access) or src.gathers or not src.shape:
            return False
        n = 1
        for d in src.shape:
            n *= int(d)
        if n * src.tensor.dtype.itemsize > REMAT_MAX_BYTES:
            return False
        last = sympy.sympify(src.index[-1])
        inner = axis_sym(len(src.shape) - 1)
        if sympy.diff(last, inner) != 1:
            return False
        return not any(a != inner and a.name.startswith("_a") for a in last.free_symbols)
    if p.op is Op.TENSOR_COPY and not p.attrs.get("reshape"):
        srcs = [x for x in p.ins if isinstance(x, Region)]
        if len(srcs) != 1:
            return False
        q = plan.producer.get((id(p), id(srcs[0].buf)))
        return q is not None and _remat_ok(plan, q, 1)
    return False


def _fusable_consumers(plan: LowerPlan, stmts: list[Stmt], i: int, p: Instr, r: Region
                       ) -> tuple[list[Instr], dict[int, int], set[int], set[int]] | None:
    """The readers of producer ``p = stmts[i]`` (its only writer) in program order, with the positions of the
    statements after it and ``p``'s leaf buffers and tensors; None when ``p`` cannot be inlined into them (no
    reader, reads its own output, readers elsewhere, or several readers of a producer that cannot be
    recomputed)."""
    refs = plan.buf_refs.get(id(r.buf), [])
    if any(role == "write" and ins is not p for ins, role in refs):
        return None
    readers = {id(ins): ins for ins, role in refs if role == "read"}
    if not readers or id(p) in readers:
        return None
    if len(readers) > 1 and not _remat_ok(plan, p, len(readers)):
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


def _fuse_list(plan: LowerPlan, stmts: list[Stmt], tensors: dict[int, HbmTensor]) -> None:
    for i, p in enumerate(stmts):
        if isinstance(p, Loop):
            _fuse_list(plan, p.body, tensors)
            continue
        if not _producer_ok(plan, p):
            continue
        r = p.outs[0]
        got = _fusable_consumers(plan, stmts, i, p, r)
        if got is None:
            continue
        consumers, pos, lb, lt = got
        if not all(_consumer_ok(plan, stmts, i, pos[id(c)], c, r, lb, lt, tensors) for c in consumers):
            continue
        plan.fused[id(p)] = consumers[-1]
        if len(consumers) > 1:
            plan.remat.add(id(p))
        for c in consumers:
            plan.producer[(id(c), id(r.buf))] = p


def fuse_elementwise(plan: LowerPlan) -> LowerPlan:
    """Fill ``plan.fused``, ``plan.producer`` and ``plan.remat`` (see the module docstring); returns ``plan``."""
    _fuse_list(plan, plan.kernel.body, {id(t): t for t in plan.kernel.tensors})
    return plan
