"""Pass ``layout_arena``: a byte offset in the per-instance scratch arena for every materialised buffer.

On the host an SBUF/PSUM buffer is memory in a scratch arena each program instance owns. Every
buffer the lowering materialises (not one whose producer ``fuse_elementwise`` inlined) gets a
64-byte aligned offset. Live ranges come from the shared liveness analysis
(:meth:`trnlang.ir.liveness.Liveness.interval`: to the last use, a use in a loop the ``ALLOC`` is
not in keeps the buffer live through that loop), with each use moved to where its instruction is
emitted (the consumer it is inlined into, or the ``nc_matmul`` it is deferred to). Buffers whose
ranges do not overlap share bytes (first fit in order of range start), except in debug builds,
where each buffer has its own bytes so that poisoning stays faithful.

Decisions: ``plan.offsets``, ``plan.sizes``, ``plan.live`` (per buffer) and ``plan.bufs_size``.

Example:
    >>> import torch
    >>> from tests.kernels import softmax
    >>> from trnlang.passes import plan_lowering
    >>> plan = plan_lowering(softmax.trace(torch.randn(128, 64), torch.empty(128, 64)), (1,))
    >>> plan.bufs_size >= max(plan.sizes.values())
    True
"""

from __future__ import annotations

from trnlang.passes.lowering import LowerPlan

__all__ = ["ALIGN", "layout_arena"]

#: Alignment (bytes) of every buffer's offset and size in the arena.
ALIGN = 64


def layout_arena(plan: LowerPlan) -> LowerPlan:
    """Fill ``plan.offsets``, ``plan.sizes``, ``plan.live`` and ``plan.bufs_size``; returns ``plan``."""
    fused_bufs = {key[1] for key in plan.producer}
    live, infos = plan.liveness, plan.infos

    def emitted(p: int) -> int:  # an inlined or deferred instruction reads its inputs where it is emitted
        return plan.info(plan.emitter(infos[p].instr)).id

    intervals: list[tuple[int, int, int, int]] = []  # (start, end, size, buf id)
    for bid, buf in plan.bufs.items():
        if bid in fused_bufs:
            continue
        lo, hi = live.interval(buf, emitted)
        n = 1
        for d in buf.shape:
            n *= int(d)
        size = max(ALIGN, -(-n * buf.dtype.itemsize // ALIGN) * ALIGN)
        intervals.append((lo, hi, size, bid))
    intervals.sort()
    placed: list[tuple[int, int, int, int]] = []  # (start, end, offset, size)
    top = 0
    for lo, hi, size, bid in intervals:
        if plan.debug:
            off = top
        else:
            busy = sorted((o, o + s) for (s0, e0, o, s) in placed if not (e0 < lo or s0 > hi))
            off = 0
            for used_lo, used_hi in busy:
                if off + size <= used_lo:
                    break
                off = max(off, used_hi)
        placed.append((lo, hi, off, size))
        plan.offsets[bid] = off
        plan.sizes[bid] = size
        plan.live[bid] = (lo, hi)
        top = max(top, off + size)
    plan.bufs_size = top
    return plan
