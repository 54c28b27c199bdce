"""Pass ``rematerialize``: a cheap load read by a few consumers is evaluated again in each of them.

A producer P read by several consumers cannot be inlined into one of them (``fuse_elementwise``):
its tile would have to be staged in the scratch arena, written once and read back by each
consumer. When P is cheap, a plain HBM load (no gathers, unit step along the innermost tile axis),
possibly through casts (``tensor_copy``) of such a load, of at most :data:`REMAT_MAX_BYTES`, read
by at most :data:`REMAT_MAX_READERS` consumers, it is instead inlined into every one of them: the
tile is re-read (from memory, then from the host caches) instead of staged. On the host, the stores
to the arena would also queue behind the streaming output stores of the previous tile.

Every consumer must qualify as a single one would for ``fuse_elementwise`` (the same rules: it reads
exactly P's region elementwise, nothing between P and it overwrites what P reads, with aliasing
arguments no HBM store at all, P needs no run-time check, a store consumer does not write P's
tensor); otherwise P is staged. A cast's own load is inlined into the cast (one reader) when the cast
is rematerialised.

This pass runs before ``fuse_elementwise``, which then sees the loads inlined here as part of each
consumer's expression (so a consumer is not moved past a store to the tensor it re-reads).

Decisions: ``plan.remat`` (the producers evaluated in several consumers), with ``plan.fused`` (P ->
its last consumer) and ``plan.producer`` ((C, B) -> P) as for fusion.

Example:
    >>> import torch
    >>> from tests.passes.kernels import exp_chain
    >>> from trnlang.passes.lowering import LowerPlan
    >>> from trnlang.passes.check_placement import check_placement
    >>> plan = rematerialize(check_placement(LowerPlan(exp_chain.trace(torch.randn(256, 64), torch.empty(256, 64)),
    ...                                                (1,))))
    >>> [(plan.fused[p].op.value, plan.info(plan.fused[p]).id) for p in plan.remat]  # the load, into 2 readers
    [('tensor_tensor', 7)]
"""

from __future__ import annotations

import sympy

from trnlang.ir.nodes import Access, HbmTensor, Instr, Loop, Region, Stmt, axis_sym
from trnlang.ir.ops import Op
from trnlang.passes.fuse_elementwise import try_inline
from trnlang.passes.lowering import LowerPlan

__all__ = ["REMAT_MAX_BYTES", "REMAT_MAX_READERS", "rematerialize"]

#: Largest HBM load (bytes) re-evaluated in each of several consumers instead of staged. A tile past the host's L2
#: does not stay there between its copy and its readers either, so staging it only adds a write and a read at the
#: level the HBM tile is re-read from: tutorial 02's softmax at 4096 x 4096 (2 MiB row tiles) ran 13.2 -> 10.0 ms
#: when the limit went from 1 MiB to this (2 threads, Intel Xeon with 2 MiB L2 per core, 2026-12-03). The limit
#: is an SBUF's 24 MiB rounded up: no tile is larger.
REMAT_MAX_BYTES = 1 << 25
#: Most consumers a load is re-evaluated in.
REMAT_MAX_READERS = 4


def _plain_load(p: Instr) -> bool:
    """A ``dma_copy`` of a plain HBM tile of at most :data:`REMAT_MAX_BYTES`: no gathers, unit step along the
    innermost tile axis, which no other tile axis moves."""
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


class _Remat:
    """The pass over one kernel: decides each producer of several readers in program order."""

    def __init__(self, plan: LowerPlan) -> None:
        self.plan = plan
        self.tensors: dict[int, HbmTensor] = {id(t): t for t in plan.kernel.tensors}

    def cheap(self, stmts: list[Stmt], p: Instr, readers: int) -> bool:
        """P is cheap to evaluate in each of its ``readers`` consumers: a plain load, or a cast whose source's
        producer is (inlined into the cast, as ``fuse_elementwise`` would, when it is not yet) cheap."""
        if readers > REMAT_MAX_READERS:
            return False
        if p.op is Op.DMA_COPY:
            return _plain_load(p)
        if p.op is not Op.TENSOR_COPY or p.attrs.get("reshape"):
            return False
        srcs = [x for x in p.ins if isinstance(x, Region)]
        if len(srcs) != 1:
            return False
        q = self.plan.producer.get((id(p), id(srcs[0].buf)))
        if q is not None:
            return self.cheap(stmts, q, 1)
        # the cast's source: cheap itself (its own source inlined first), then inlined into the cast (its one
        # reader) as fuse_elementwise would
        iq = next((k for k, s in enumerate(stmts) if isinstance(s, Instr) and s.outs and
                   isinstance(s.outs[0], Region) and s.outs[0].buf is srcs[0].buf), None)
        if iq is None:
            return False
        src = stmts[iq]
        assert isinstance(src, Instr)
        return self.cheap(stmts, src, 1) and try_inline(self.plan, stmts, iq, self.tensors)

    def walk(self, stmts: list[Stmt]) -> None:
        plan = self.plan
        for i, p in enumerate(stmts):
            if isinstance(p, Loop):
                self.walk(p.body)
                continue
            nf, npr = len(plan.fused), len(plan.producer)
            if not try_inline(plan, stmts, i, self.tensors, lambda q, n: self.cheap(stmts, q, n)) \
                    and len(plan.fused) > nf:  # a cast's source inlined on trial: left to fuse_elementwise
                for k in list(plan.fused)[nf:]:
                    del plan.fused[k]
                for key in list(plan.producer)[npr:]:
                    del plan.producer[key]


def rematerialize(plan: LowerPlan) -> LowerPlan:
    """Fill ``plan.remat`` (with ``plan.fused`` / ``plan.producer``; see the module docstring); returns ``plan``."""
    _Remat(plan).walk(plan.kernel.body)
    return plan
