"""Memory planner: an address (partition range, byte offset) for every SBUF / PSUM buffer.

The pass annotates every ``ALLOC`` with two attributes (printed and parsed like
any other attribute, so ``parse(print(k))`` still round-trips):

- ``addr = (partition_start, byte_offset)``: where copy 0 of the buffer lives.
  Buffers occupy partitions ``[partition_start, partition_start + shape[0])``;
  the planner packs along the byte axis only and starts every buffer at
  partition 0, which is legal for any partition count and is exactly what the
  verifier's capacity rule counts (bytes per partition). PSUM offsets are bank
  aligned (``bank * 2 KiB``).
- ``bufs = n``: the number of rotating copies. Copy ``c`` (``c = execution
  count of the alloc mod n``) lives at ``byte_offset + c * slot_bytes(buf)``.

Liveness (the verifier's rule, so both agree on what fits): a buffer is live
from its ``ALLOC`` to its last use in program order; a use inside a loop the
alloc is not in keeps it live to the end of the outermost such loop. Two
buffers whose live intervals are disjoint may share addresses (an interval
graph; offsets come from a greedy "largest first, lowest fitting offset"
assignment with a program-order first-fit fallback).

PSUM is counted in banks (2 KiB per partition each, 8 banks): a PSUM tile
occupies whole banks, so a matmul output never straddles a bank.

Reuse has a price (a buffer placed where another died must wait for that
buffer's last reader), so once the placement with multi-buffering is known,
intervals are padded (no reuse at all if that fits, else reuse only of space
freed 256, 64, 16 or 4 instructions earlier) when the space allows.

Multi-buffering: the allocations made directly in an ``affine_range`` body may
get ``n`` = 3 or 2 copies (never more than the trip count) so that iteration
``i + 1`` can load into a fresh copy while iteration ``i`` still computes. A
multi-buffered body owns its copies for the whole body (their intervals span
it). The planner tries innermost loops first, SBUF and PSUM separately, 2
copies for every loop before 3 for any, and keeps a choice only if everything
still fits. Then *deep buffering*: a body whose SBUF tiles are moved by DMA
but hold less than the DMA's latency worth of bytes per partition
(``dma_fixed_cost_s`` x aggregate bandwidth / 128 partitions, ~3.7 KiB on
trn2) cannot keep enough transfers in flight with 3 copies (a 256-byte-row
tile refilled 3 at a time waits ~1.3 us per 3 tiles); its SBUF allocations get
4, then 8 copies (up to ``max_bufs``) while that is still short and everything
fits. The scheduler (``trnlang.sim``) reads ``addr`` and ``bufs`` to find
the true dependences between iterations.

Overflow (live bytes beyond capacity, or no placement because of
fragmentation) raises ``SbufOverflowError`` at the alloc that could not be
placed, listing the allocations holding the space and their source lines.

Example:
    >>> import torch
    >>> from tests.kernels import matmul_kn
    >>> k = matmul_kn.trace(torch.randn(256, 128), torch.randn(256, 64), torch.empty(128, 64))
    >>> [(a.outs[0].name, a.attrs["bufs"]) for a in allocs(k)]
    [('t0', 1), ('t1', 2), ('t2', 2), ('t4', 1)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trnlang.frontend.errors import SbufOverflowError
from trnlang.ir.bounds import const_int
from trnlang.ir.liveness import Liveness
from trnlang.ir.nodes import Buf, Instr, Kernel, Loop, Region, SourceLoc, Stmt
from trnlang.ir.ops import Op
from trnlang.ir.types import Space
from trnlang.sim.targets import Target, get_target

__all__ = ["MAX_BUFS", "MAX_DMA_BUFS", "Placement", "allocs", "footprint", "plan_memory", "slot_bytes", "slot_units"]

#: The most copies a multi-buffered allocation gets (DEVICE.md: double or triple buffering) ...
MAX_BUFS = 3
#: ... except small DMA tiles, which get up to this many to keep the DMA latency covered (deep buffering).
MAX_DMA_BUFS = 8
#: Padding of live intervals (in instructions) tried, in order, once the required placement is known.
REUSE_SLACKS = (1 << 30, 256, 64, 16, 4)


def slot_units(buf: Buf, t: Target) -> int:
    """Size of one copy of ``buf`` in planning units: bytes per partition (SBUF) or banks (PSUM).

    Example:
        >>> from trnlang.ir.types import DType
        >>> slot_units(Buf("acc", (128, 600), DType.float32, Space.PSUM), get_target("trn2"))
        2
    """
    n = buf.nbytes_per_partition
    if buf.space is Space.PSUM and buf.blocks:  # NKI block dimensions: one block is placed at a time
        n //= math.prod(buf.shape[1:1 + buf.blocks])
    return -(-n // t.psum_bank_bytes) if buf.space is Space.PSUM else n


def slot_bytes(buf: Buf, t: Target) -> int:
    """Bytes per partition between consecutive copies of a multi-buffered ``buf`` (whole banks in PSUM)."""
    n = slot_units(buf, t)
    return n * t.psum_bank_bytes if buf.space is Space.PSUM else n


def allocs(k: Kernel) -> list[Instr]:
    """Every ALLOC instruction of the kernel, in program order."""
    out: list[Instr] = []

    def rec(stmts: list[Stmt]) -> None:
        for s in stmts:
            if isinstance(s, Loop):
                rec(s.body)
            elif s.op is Op.ALLOC:
                out.append(s)

    rec(k.body)
    return out


@dataclass(eq=False)
class _Rec:
    """One allocation: its live interval in program order and its placement."""

    ins: Instr
    buf: Buf
    pos: int
    loops: tuple[Loop, ...]
    end: int = -1
    bufs: int = 1
    offset: int = 0
    dma: bool = False  # a DMA transfer reads or writes it

    @property
    def loc(self) -> SourceLoc | None:
        return self.ins.loc or self.buf.loc


@dataclass
class Placement:
    """The result of :func:`plan_memory` (also written into the ALLOC attributes).

    ``footprint`` is the reserved bytes per partition (SBUF) and banks (PSUM);
    ``multi_buffered`` lists ``(buffer name, copies, source line)``.
    """

    sbuf_bytes: int = 0
    psum_banks: int = 0
    multi_buffered: list[tuple[str, int, SourceLoc | None]] = field(default_factory=list)


class _Liveness:
    """The allocation records of the kernel's SBUF/PSUM buffers, on the shared liveness analysis
    (:class:`trnlang.ir.liveness.Liveness`: positions, loop spans, live intervals)."""

    def __init__(self, k: Kernel) -> None:
        live = Liveness(k)
        self.pos = len(live.instrs)
        self.recs: list[_Rec] = []
        self.by_buf: dict[Buf, _Rec] = {}
        self.span = live.loop_span  # id(loop) -> (first, last) position in its body
        self.loops: dict[int, Loop] = {id(lp): lp for lp in live.loops}
        self.direct: dict[int, list[_Rec]] = {id(lp): [] for lp in live.loops}  # allocations directly in a body
        self.depth = live.depth
        for b, pos in live.alloc_pos.items():
            if b.space not in (Space.SBUF, Space.PSUM):
                continue
            loops = live.loops_of[pos]
            rec = _Rec(live.instrs[pos], b, pos, loops, end=live.interval(b)[1])
            self.recs.append(rec)
            self.by_buf[b] = rec
            if loops:
                self.direct[id(loops[-1])].append(rec)
        self.recs.sort(key=lambda r: r.pos)
        for ins in live.instrs:  # buffers a DMA transfer moves (deep buffering)
            if ins.op is Op.DMA_COPY:
                for x in (*ins.outs, *ins.ins):
                    used = self.by_buf.get(x.buf) if isinstance(x, Region) else None
                    if used is not None:
                        used.dma = True


def _interval(r: _Rec, live: _Liveness, slack: int = 0) -> tuple[int, int]:
    if r.bufs > 1 and r.loops:  # a multi-buffered body owns its copies for the whole body
        s, e = live.span[id(r.loops[-1])]
    else:
        s, e = r.pos, r.end
    return s, e + slack


def _assign(recs: list[_Rec], live: _Liveness, t: Target, align_of: Any, slack: int = 0,
            ) -> tuple[int, dict[_Rec, int]] | None:
    """Offsets for ``recs`` (one space); returns (footprint, offsets) of the better of two greedy orders."""
    best: tuple[int, dict[_Rec, int]] | None = None
    items = [(r, *_interval(r, live, slack), slot_units(r.buf, t) * r.bufs) for r in recs]
    for order in (sorted(items, key=lambda it: (-it[3], it[1], it[0].pos)), sorted(items, key=lambda it: it[1])):
        placed: list[tuple[int, int, int, int]] = []  # (start, end, offset, size)
        offs: dict[_Rec, int] = {}
        top = 0
        for r, s, e, size in order:
            a = align_of(r)
            busy = sorted((o, o + n) for (s2, e2, o, n) in placed if s2 <= e and s <= e2)
            off = 0
            for lo, hi in busy:
                if off + size <= lo:
                    break
                off = max(off, -(-hi // a) * a)
            offs[r] = off
            placed.append((s, e, off, size))
            top = max(top, off + size)
        if best is None or top < best[0]:
            best = (top, offs)
    return best


def _capacity(space: Space, t: Target) -> int:
    return t.sbuf_bytes_per_partition if space is Space.SBUF else t.psum_banks


def _align(t: Target) -> Any:
    return lambda r: 1 if r.buf.space is Space.PSUM else max(1, r.buf.dtype.itemsize)


def _fits(recs: list[_Rec], live: _Liveness, t: Target, space: Space, slack: int = 0) -> dict[_Rec, int] | None:
    res = _assign([r for r in recs if r.buf.space is space], live, t, _align(t), slack)
    if res is None:
        return {}
    top, offs = res
    return offs if top <= _capacity(space, t) else None


def _trip_count(lp: Loop) -> int | None:
    start, stop, step = const_int(lp.start), const_int(lp.stop), const_int(lp.step)
    if start is None or stop is None or step is None or step <= 0:
        return None
    return max(0, -(-(stop - start) // step))


def _overflow(recs: list[_Rec], live: _Liveness, t: Target, space: Space) -> SbufOverflowError:
    """The error for a space that cannot be planned: the allocations live at the worst point."""
    mine = [r for r in recs if r.buf.space is space]
    worst, worst_total, worst_live = mine[0], -1, [mine[0]]
    for r in mine:
        s = _interval(r, live)[0]
        here = [q for q in mine if _interval(q, live)[0] <= s <= _interval(q, live)[1]]
        total = sum(slot_units(q.buf, t) * q.bufs for q in here)
        if total > worst_total:
            worst, worst_total, worst_live = r, total, here
    cap = _capacity(space, t)
    worst_live.sort(key=lambda r: (-r.buf.nbytes_per_partition, r.pos))
    lines = []
    for r in worst_live:
        units = slot_units(r.buf, t)
        extra = f" = {units} bank{'s' * (units > 1)}" if space is Space.PSUM else ""
        shape = "[" + ", ".join(str(x) for x in r.buf.shape) + "]"
        lines.append(f"    {r.buf.name} {shape} {r.buf.dtype.name.rstrip('_')}: {r.buf.nbytes_per_partition} B per "
                     f"partition{extra}, allocated at {r.loc or '<unknown line>'}")
    if space is Space.SBUF:
        head = (f"SBUF overflow: the live SBUF allocations need {worst_total} bytes per partition "
                f"({worst_total / 1024:.1f} KiB) but {t.name} has {cap} ({cap // 1024} KiB) per partition")
    else:
        head = (f"PSUM overflow: the live PSUM buffers need {worst_total} banks of {t.psum_bank_bytes // 1024} KiB per "
                f"partition but {t.name} has {cap} ({t.psum_bytes_per_partition // 1024} KiB per partition)")
    if worst_total <= cap:
        head += (f"; they fit in total ({worst_total} <= {cap}) but no placement without overlap exists "
                 f"(fragmentation): allocate the largest tiles first or reuse them")
    msg = head + "\n  live allocations (largest first):\n" + "\n".join(lines)
    return SbufOverflowError(msg, loc=worst.loc)


def _dma_short(group: list[_Rec], t: Target, copies: int) -> bool:
    """Whether ``copies - 1`` copies of a body's DMA-moved SBUF tiles hold less than the DMA latency's worth of
    bytes per partition (then transfers in flight cannot cover the latency: deep buffering helps)."""
    per_iter = sum(slot_bytes(r.buf, t) for r in group if r.dma)
    in_flight = t.dma_fixed_cost_s * t.dma_bandwidth_bytes_per_s / t.pmax
    return 0 < per_iter and (copies - 1) * per_iter < in_flight


def _multi_buffer(recs: list[_Rec], live: _Liveness, t: Target, plans: dict[Space, dict[_Rec, int]],
                  max_bufs: int) -> None:
    """Multi-buffering: innermost affine loops first; 2 copies everywhere, then 3 where that still fits; then 4
    and 8 (up to ``max_bufs``) for bodies whose DMA tiles are too small to cover the DMA latency with fewer
    (deep buffering). Sets ``bufs`` on the records and keeps ``plans`` the placement of the last choice that
    fit."""
    cands = sorted((lid for lid, lp in live.loops.items() if lp.kind == "affine" and live.direct.get(lid)),
                   key=lambda lid: (-live.depth[lid], live.span[lid][0]))
    for want in (w for w in (2, 3, 4, 8) if w <= max_bufs):
        for lid in cands:
            trips = _trip_count(live.loops[lid])
            n = want if trips is None else min(want, trips)
            for space in (Space.SBUF, Space.PSUM):
                group = [r for r in live.direct[lid] if r.buf.space is space]
                if not group or n <= group[0].bufs:
                    continue
                if want > MAX_BUFS and (space is Space.PSUM or not _dma_short(group, t, group[0].bufs)):
                    continue
                old = [r.bufs for r in group]
                for r in group:
                    r.bufs = n
                offs = _fits(recs, live, t, space)
                if offs is None:
                    for r, b in zip(group, old):
                        r.bufs = b
                else:
                    plans[space] = offs


def plan_memory(k: Kernel, target: str | Target | None = None, max_bufs: int = MAX_DMA_BUFS) -> Placement:
    """Plan SBUF/PSUM addresses and multi-buffering for ``k``, writing ``addr`` / ``bufs`` onto its ALLOCs.

    Args:
        k: the kernel (mutated in place: ALLOC attributes are replaced).
        target: a target or its name; default ``k.target``.
        max_bufs: the most copies of a multi-buffered allocation (1 turns multi-buffering off).

    Returns:
        The footprints and the multi-buffering choices.

    Raises:
        SbufOverflowError: the buffers cannot be placed; the message lists the live allocations and their lines.

    Example:
        >>> from trnlang.ir.nodes import Kernel
        >>> plan_memory(Kernel("empty", [], (1,), [])).sbuf_bytes
        0
    """
    t = target if isinstance(target, Target) else get_target(target or k.target)
    live = _Liveness(k)
    recs = live.recs
    plans: dict[Space, dict[_Rec, int]] = {}
    for space in (Space.SBUF, Space.PSUM):
        if not any(r.buf.space is space for r in recs):
            plans[space] = {}
            continue
        offs = _fits(recs, live, t, space)
        if offs is None:
            raise _overflow(recs, live, t, space)
        plans[space] = offs
    _multi_buffer(recs, live, t, plans, max_bufs)
    # Reuse costs time (a buffer placed where another one died must wait for its last reader), so when there is
    # room the final placement keeps freed space unused for a while: live intervals padded by the first slack
    # (in instructions; huge = no reuse at all) that still fits.
    for space in (Space.SBUF, Space.PSUM):
        for slack in REUSE_SLACKS:
            offs = _fits(recs, live, t, space, slack) if plans[space] else None
            if offs is not None:
                plans[space] = offs
                break
    placement = Placement()
    for r in recs:
        r.offset = plans[r.buf.space].get(r, 0)
        byte_off = r.offset * t.psum_bank_bytes if r.buf.space is Space.PSUM else r.offset
        attrs = {key: v for key, v in r.ins.attrs.items() if key not in ("addr", "bufs")}
        attrs["addr"] = (0, byte_off)
        attrs["bufs"] = r.bufs
        r.ins.attrs = attrs
        top = r.offset + slot_units(r.buf, t) * r.bufs
        if r.buf.space is Space.SBUF:
            placement.sbuf_bytes = max(placement.sbuf_bytes, top)
        else:
            placement.psum_banks = max(placement.psum_banks, top)
        if r.bufs > 1:
            placement.multi_buffered.append((r.buf.name, r.bufs, r.loc))
    return placement


def footprint(k: Kernel, target: str | Target | None = None) -> tuple[int, int]:
    """(SBUF bytes per partition, PSUM bytes per partition) reserved by a planned kernel's ALLOC attributes."""
    t = target if isinstance(target, Target) else get_target(target or k.target)
    sb = ps = 0
    for a in allocs(k):
        b = a.outs[0]
        if "addr" not in a.attrs:
            continue
        top = a.attrs["addr"][1] + slot_bytes(b, t) * int(a.attrs.get("bufs", 1))
        if b.space is Space.SBUF:
            sb = max(sb, top)
        else:
            ps = max(ps, top)
    return sb, ps

