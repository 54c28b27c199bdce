"""The scheduler: in-order engine streams, semaphores on dependences, 16 DMA engines, steady-state extrapolation.

Model (DEVICE.md): every engine (Tensor, Vector, Scalar, GpSimd) executes
its own stream of instructions in order, one at a time. A DMA transfer is
split over the DMA engines that serve its tile's partitions (cost.py "DMA
model": 8 partitions per engine, so a 128-partition tile uses all 16), one
packet per engine; its packets move together once the transfer's latency
(``dma_fixed_cost_s`` after its inputs are ready) has passed and every one of
its engines is free, and each engine moves one packet at a time, so concurrent
transfers share the engines. Cross-engine waits are semaphores on the
dependences (they add no latency). The compiler decides the order of each
engine's stream by list scheduling: instructions are taken in program order
(the priority) and each is placed at the earliest time at which all the
instructions it depends on have finished and its engine (for a DMA: all its
DMA engines) is idle for its whole duration, which may be an idle gap before
instructions placed earlier (backfilling; a DMA engine thus serves transfers
roughly in the order they become ready, as its 16 hardware queues let a
waiting transfer be passed by a ready one).

Dependences are found on addresses, from the memory plan: every access is a
box (partitions x bytes) in SBUF or PSUM at the *current copy* of its
allocation (copies of multi-buffered allocations rotate per execution of the
ALLOC), so RAW, WAR and WAW hazards include those created by address reuse
between different buffers and between loop iterations. HBM tensors that the
kernel both reads and writes are tracked the same way with index boxes. An
instruction that reads the result of the instruction just before it on the same
engine waits ``dependent_stall_cycles`` (~100) extra; accumulating matmuls into
the same PSUM tile are pipelined and do not.

Grid instances run one after another on one NeuronCore: the grid is an outer
loop over the program ids, so instance ``i + 1``'s loads may overlap instance
``i``'s tail where dependences (including buffer reuse) allow.

Loops are not unrolled blindly: after each iteration of a loop with many
iterations the scheduler compares the last three groups of ``p`` iterations
(``p`` = 1..8). When they are identical up to a constant time shift (same
instructions, durations, relative starts, buffer rotation phase) and every
instruction in them was started by work of this loop (a dependence or the
previous instruction on its engine or queue from this loop, not from earlier
code), the schedule is periodic: the remaining iterations but a short tail are
generated as shifted copies (placed into the free intervals of the engines, DMA
engines included), the state (free intervals, dependence records, rotation
counters) is advanced
accordingly, and the tail is simulated explicitly (ragged last tiles have
other costs). ``extrapolate=False`` simulates every iteration; the tests check
both give the same schedule length.

Example:
    >>> import torch
    >>> from tests.kernels import vector_add
    >>> k = vector_add.trace(torch.randn(1000, 512), torch.randn(1000, 512), torch.empty(1000, 512))
    >>> s = schedule(k)
    >>> s.n, round(s.makespan * 1e6, 1) > 0
    (32, True)
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, TypeAlias, cast

import numpy as np

from trnlang.ir.nodes import Kernel
from trnlang.sim import cost
from trnlang.sim.program import ALLOC, DMA, ENGINES, SKIP, Aff, CLoop, HbmBox, OnChip, Program, Template, build
from trnlang.sim.targets import Target

__all__ = ["Schedule", "schedule"]

NE = len(ENGINES)
MIN_TRIPS = 12  # loops with fewer iterations are always simulated in full
MAX_PERIOD = 8
GIVE_UP = 64  # stop looking for a steady state after this many iterations
RECORD_CAP = 256  # dependence records per buffer copy before the oldest half is merged (conservatively)
PRECISE = 64  # extrapolated periods whose dependence records are kept exactly (older ones: one hull)
GAP_CAP = 64  # free intervals remembered per engine for backfilling (older ones are forgotten)
_INF = float("inf")
_EPS = 1e-15
_TOL = 1e-12  # time tolerance of the periodicity checks (seconds)

#: an on-chip access of an instruction instance: (buffer copy, box [p0, p1, b0, b1], its access spec)
_OnChipBox: TypeAlias = tuple[int, tuple[int, int, int, int], OnChip]
#: an HBM access of a DMA instance: (its box spec, the index box, whether it writes)
_HbmAccess: TypeAlias = tuple[HbmBox, tuple[tuple[int, int], ...], bool]


@dataclass
class Schedule:
    """The schedule of one launch: one row per executed instruction instance, in program (issue) order.

    ``res`` is the resource: ``0..3`` = Tensor, Vector, Scalar, GpSimd; ``4 + e`` = DMA engine ``e``, the first
    of the ``span`` DMA engines a transfer uses (``span`` is 1 for other instructions); a transfer occupies
    each of its engines for its whole ``dur``. Times are seconds from the launch (a DMA's start is when its
    bytes start moving, its latency after it was ready). ``nbytes`` is the HBM bytes a DMA moved (0 for other
    instructions).
    """

    program: Program
    tmpl: np.ndarray
    res: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    nbytes: np.ndarray
    span: np.ndarray
    extrapolated: int = 0
    accesses: list[list[tuple[Any, tuple[int, ...], bool]]] | None = None
    occ: np.ndarray | None = None

    @property
    def occupancy(self) -> np.ndarray:
        """Seconds each row holds its engine: ``dur`` for compute instructions; for a DMA transfer the time its
        packet keeps each of its DMA engines from starting another packet's bytes, ``max(setup, bytes)`` (the
        setup of a packet overlaps the previous packet's bytes on the same engine; cost.py "DMA model"). A
        transfer's occupancy is the last ``occupancy`` seconds of its ``dur``."""
        return self.dur if self.occ is None else self.occ

    @property
    def n(self) -> int:
        """Number of instruction instances."""
        return int(self.tmpl.shape[0])

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    @property
    def makespan(self) -> float:
        """Seconds from the launch to the end of the last instruction."""
        return float(self.end.max()) if self.n else 0.0

    @property
    def target(self) -> Target:
        return self.program.target

    @property
    def n_dma(self) -> int:
        """Number of DMA engines (resources ``NE .. NE + n_dma - 1``)."""
        return self.program.target.dma_engines

    @property
    def is_dma(self) -> np.ndarray:
        """Which rows are DMA transfers."""
        return self.res >= NE

    def busy(self) -> np.ndarray:
        """Busy seconds per resource (engines, then DMA engines: a transfer counts its :attr:`occupancy` on each
        engine it uses)."""
        size = NE + self.n_dma
        out = np.zeros(size)
        out += np.bincount(self.res[~self.is_dma], weights=self.dur[~self.is_dma], minlength=size)[:size]
        dma = self.is_dma
        occ = self.occupancy
        for sp in np.unique(self.span[dma]).tolist():
            rows = dma & (self.span == sp)
            for j in range(int(sp)):
                out += np.bincount(self.res[rows] + j, weights=occ[rows], minlength=size)[:size]
        return out

    def template_array(self, attr: str) -> np.ndarray:
        """A per-template attribute (``flops``, ``peak_s``, ...) as an array indexed by template id."""
        return np.array([getattr(t, attr) for t in self.program.templates], dtype=float)


_FIELDS = ("tmpl", "res", "start", "dur", "nbytes", "bind", "span", "occ")
_NP = {"i": np.int32, "d": np.float64, "q": np.int64}


@dataclass
class _Log:
    tmpl: array = field(default_factory=lambda: array("i"))
    res: array = field(default_factory=lambda: array("i"))
    start: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    nbytes: array = field(default_factory=lambda: array("d"))
    bind: array = field(default_factory=lambda: array("q"))  # producer token that determined the start, or -1
    span: array = field(default_factory=lambda: array("i"))  # DMA engines a transfer uses (1 otherwise)
    occ: array = field(default_factory=lambda: array("d"))  # seconds the row holds its engine(s) (see Schedule)

    def __len__(self) -> int:
        return len(self.tmpl)

    def block(self, a: int, b: int) -> tuple[np.ndarray, ...]:
        return tuple(np.asarray(getattr(self, f)[a:b]) for f in _FIELDS)

    def extend(self, arrays: tuple[np.ndarray, ...]) -> None:
        for f, arr in zip(_FIELDS, arrays):
            getattr(self, f).frombytes(np.ascontiguousarray(arr, dtype=_NP[getattr(self, f).typecode]).tobytes())


def _overlap(a: tuple[int, ...], r: list[Any]) -> bool:
    return a[0] < r[1] and r[0] < a[1] and a[2] < r[3] and r[2] < a[3]


def _inside(r: list[Any], a: tuple[int, ...]) -> bool:
    return a[0] <= r[0] and r[1] <= a[1] and a[2] <= r[2] and r[3] <= a[3]


def _carve(gaps: list[list[Any]], a: float, b: float, token: int) -> bool:
    """Occupy ``[a, b)`` in a free-interval list (searching from the end); False if no interval holds it."""
    for gi in range(len(gaps) - 1, -1, -1):
        s, e, tb = gaps[gi]
        if s <= a + _TOL and b <= e + _TOL:
            new = []
            if a - s > _EPS:
                new.append([s, a, tb])
            if e - b > _EPS:
                new.append([b, e, token])
            gaps[gi:gi + 1] = new
            if len(gaps) > GAP_CAP:
                del gaps[:len(gaps) - GAP_CAP]
            return True
        if e < a:
            return False
    return False


def _fit(gaps: list[list[Any]], t: float, dur: float) -> float:
    """Earliest start >= ``t`` of an interval of length ``dur`` inside one of the free intervals."""
    for s, e, _ in gaps:
        if e <= t:
            continue
        a = t if t > s else s
        if a + dur <= e + _EPS:
            return a
    raise AssertionError("the open-ended free interval always fits")  # pragma: no cover


def _merge_oldest(lst: list[list[Any]]) -> None:
    """Replace the older half of a record list (by finish time) by one record covering it (conservative)."""
    lst.sort(key=lambda r: r[4])
    half = lst[:len(lst) // 2]
    merged = [min(r[0] for r in half), max(r[1] for r in half), min(r[2] for r in half), max(r[3] for r in half),
              half[-1][4], max(r[5] for r in half), None]
    lst[:len(half)] = [merged]


def _hbox_overlap(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    return all(x[0] <= y[1] and y[0] <= x[1] for x, y in zip(a, b))


def _hbox_inside(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    return all(y[0] <= x[0] and x[1] <= y[1] for x, y in zip(a, b))


class _Sim:
    """The scheduler's state and its walk over the program."""

    def __init__(self, prog: Program, extrapolate: bool = True, record: bool = False) -> None:
        t = prog.target
        self.p, self.t = prog, t
        self.extrapolate, self.record = extrapolate, record
        self.nd = t.dma_engines
        # free intervals of each engine and DMA engine, sorted: [start, end, token of the instruction ending at
        # start]; the last one is open-ended (the engine's stream is free from its start on)
        self.gaps: list[list[list[Any]]] = [[[0.0, _INF, -1]] for _ in range(NE + self.nd)]
        self.stall = [t.dependent_stall_cycles / cost.clock_hz(e, t) for e in ENGINES]
        self.allocs = prog.allocs
        self.count = [0] * len(prog.allocs)
        self.cur = [a.slot0 for a in prog.allocs]
        # dependence records per buffer copy, writes and reads apart: [p0, p1, b0, b1, end, token, spec]
        self.wrecs: list[list[list[Any]]] = [[] for _ in range(prog.n_slots)]
        self.rrecs: list[list[list[Any]]] = [[] for _ in range(prog.n_slots)]
        self.hrecs: list[list[list[Any]]] = [[] for _ in prog.tensors]  # [box, end, token, w, spec]
        self.log = _Log()
        self.extrapolated = 0
        self.fixed = t.dma_fixed_cost_s
        self.ppe = t.dma_partitions_per_engine
        self.pkt: dict[tuple[int, int, int], tuple[int, int, float]] = {}  # (tmpl, p0, p_len) -> lo, n, s/byte
        self.accesses: list[list[tuple[Any, tuple[int, ...], bool]]] = []

    # --- one instruction --------------------------------------------------------------------------------
    def box(self, r: Any, env: list[int]) -> tuple[int, tuple[int, int, int, int]]:
        info = self.allocs[r.alloc]
        slot = self.cur[r.alloc]
        p0 = r.p_lo(env)
        b0 = info.base + (slot - info.slot0) * info.stride + r.b_lo(env)
        return slot, (p0, p0 + r.p_len, b0, b0 + r.b_len)

    def issue(self, tp: Template, env: list[int]) -> None:
        kind = tp.kind
        if kind == ALLOC:
            self.rotate(tp.alloc)
            return
        if kind == SKIP:
            return
        ready, bind, raw, rboxes, wboxes = self.deps(tp, env)
        hb = tp.hbm_read if tp.hbm_read is not None else tp.hbm_write
        hacc = None
        if hb is not None:
            hacc, ready, bind = self.hbm_deps(hb, tp.hbm_write is not None, env, ready, bind)
        token = len(self.log)
        span = 1
        if kind == DMA:
            start, dur, occ, moved, res, span, bind = self.transfer(tp, env, ready, bind, token)
        else:
            res = tp.res
            dur = occ = tp.dur
            moved = 0
            start, prev = self.place(res, ready, dur, raw, token)
            if prev is not None:
                bind = prev
        end = start + dur
        log = self.log
        log.tmpl.append(tp.idx)
        log.res.append(res)
        log.start.append(start)
        log.dur.append(dur)
        log.nbytes.append(moved)
        log.bind.append(bind if start > 0.0 else -1)  # what determined the start (dependence or predecessor)
        log.span.append(span)
        log.occ.append(occ)
        if self.record:
            self.note_accesses(rboxes, wboxes, hacc)
        self.remember(rboxes, wboxes, end, token)
        if hacc is not None:
            self.remember_hbm(hacc, end, token)

    def rotate(self, a: int) -> None:
        """An ALLOC: the next copy of a multi-buffered allocation becomes current."""
        info = self.allocs[a]
        c = self.count[a]
        self.count[a] = c + 1
        self.cur[a] = info.slot0 + c % info.bufs

    def deps(self, tp: Template, env: list[int]) -> tuple[float, int, set[int], list[_OnChipBox], list[_OnChipBox]]:
        """The on-chip dependences of an instruction: the time its inputs are ready (RAW) and its outputs' earlier
        readers and writers are done (WAR, WAW), the token of the producer that sets it, the RAW producers (not the
        accumulating matmul's own output) and the boxes it reads and writes."""
        wrecs, rrecs, overlaps = self.wrecs, self.rrecs, self.p.overlaps
        ready = 0.0
        bind = -1  # token of the producer that sets `ready`
        raw: set[int] = set()
        rboxes = []
        n_reads = len(tp.reads)
        for j, r in enumerate(tp.reads):
            slot, bx = self.box(r, env)
            rboxes.append((slot, bx, r))
            own = tp.acc_self and j == n_reads - 1
            for s2 in overlaps[slot]:
                for rec in wrecs[s2]:  # RAW
                    if _overlap(bx, rec):
                        if rec[4] > ready:
                            ready, bind = rec[4], rec[5]
                        if not own:
                            raw.add(rec[5])
        wboxes = []
        for w in tp.writes:
            slot, bx = self.box(w, env)
            wboxes.append((slot, bx, w))
            for s2 in overlaps[slot]:
                for lst in (wrecs[s2], rrecs[s2]):  # WAW, WAR
                    for rec in lst:
                        if rec[4] > ready and _overlap(bx, rec):
                            ready, bind = rec[4], rec[5]
        return ready, bind, raw, rboxes, wboxes

    def hbm_deps(self, hb: HbmBox, is_w: bool, env: list[int], ready: float, bind: int
                 ) -> tuple[_HbmAccess, float, int]:
        """The dependences of a DMA on earlier accesses to an HBM tensor the kernel both reads and writes."""
        hbx = hb.box(env)
        for rec in self.hrecs[hb.tensor]:
            if (is_w or rec[3]) and rec[1] > ready and _hbox_overlap(hbx, rec[0]):
                ready, bind = rec[1], rec[2]
        return (hb, hbx, is_w), ready, bind

    def transfer(self, tp: Template, env: list[int], ready: float, bind: int, token: int
                 ) -> tuple[float, float, float, int, int, int, int]:
        """A DMA: its packets go to the DMA engines of its tile's partitions and move together once its latency
        has passed and all those engines are free. Each packet is a setup then its bytes; the setup overlaps the
        previous packet's bytes on the engine (a two-stage pipeline per engine), so the packet holds its engines
        for ``max(setup, bytes)``, the last part of its ``setup + bytes``. Returns start, duration, occupancy,
        bytes moved, first engine's resource, number of engines and binding token."""
        mask = tp.mask
        assert mask is not None  # every DMA template counts its elements
        moved = mask(env) * tp.elem_bytes
        part = tp.part
        p0, pl = (part.p_lo(env), part.p_len) if part is not None else (0, self.t.pmax)
        key = (tp.idx, p0, pl)
        info = self.pkt.get(key)
        if info is None:
            lo, n = cost.dma_engines_of(p0, pl, self.t)
            ppe = self.ppe
            first = min(p0 + pl, (lo + 1) * ppe) - p0
            last = p0 + pl - max(p0, (lo + n - 1) * ppe)
            busiest = max(first, last, ppe if n >= 3 else 0)
            per_byte = busiest / pl / (cost.dma_engine_rate(n, self.t) * cost.dma_efficiency(tp.run_bytes, self.t))
            info = self.pkt[key] = (lo, n, per_byte)
        lo, n, per_byte = info
        setup, data = self.t.dma_packet_setup_s, moved * per_byte
        occ = max(setup, data)
        off = setup + data - occ
        held, prev = self.place_dma(lo, n, ready + self.fixed + off, occ, token)
        if prev is not None:
            bind = prev
        return held - off, setup + data, occ, moved, NE + lo, n, bind

    def place_dma(self, lo: int, n: int, ready: float, dur: float, token: int) -> tuple[float, int | None]:
        """Earliest start >= ready at which DMA engines ``lo .. lo + n - 1`` are all free for ``dur``; occupies
        them. Returns the start and, when an engine (not the dependence) determined it, the token before it."""
        res = range(NE + lo, NE + lo + n)
        t0 = ready
        while True:
            t1 = t0
            for e in res:
                a = _fit(self.gaps[e], t1, dur)
                if a > t1:
                    t1 = a
            if t1 <= t0:
                break
            t0 = t1
        prev = None
        for e in res:
            gaps = self.gaps[e]
            if prev is None and t0 > ready:
                for s_, e_, tb in gaps:
                    if abs(s_ - t0) <= _EPS and tb >= 0:
                        prev = tb
                        break
            ok = _carve(gaps, t0, t0 + dur, token)
            assert ok, "a fitted interval is free"
        return t0, prev

    def note_accesses(self, rboxes: list[_OnChipBox], wboxes: list[_OnChipBox], hacc: _HbmAccess | None) -> None:
        """``record=True``: the boxes an instruction instance touched (for the overlap checks)."""
        space = ("sbuf", "psum")
        acc: list[tuple[Any, tuple[int, ...], bool]] = [
            (space[self.allocs[r.alloc].space], bx, False) for _, bx, r in rboxes]
        acc += [(space[self.allocs[w.alloc].space], bx, True) for _, bx, w in wboxes]
        if hacc is not None:
            acc.append((("hbm", hacc[0].tensor), tuple(v for lohi in hacc[1] for v in lohi), hacc[2]))
        self.accesses.append(acc)

    def remember(self, rboxes: list[_OnChipBox], wboxes: list[_OnChipBox], end: float, token: int) -> None:
        """Dependence records of an instruction: reads first, then writes (a write dominates what it covers)."""
        wrecs, rrecs, overlaps = self.wrecs, self.rrecs, self.p.overlaps
        for slot, bx, spec in rboxes:
            lst = rrecs[slot]
            lst[:] = [rec for rec in lst if rec[4] > end or not _inside(rec, bx)]
            lst.append([bx[0], bx[1], bx[2], bx[3], end, token, spec])
            if len(lst) > RECORD_CAP:
                _merge_oldest(lst)
        for slot, bx, spec in wboxes:
            for s2 in overlaps[slot]:
                for lst in (wrecs[s2], rrecs[s2]):
                    lst[:] = [rec for rec in lst if not _inside(rec, bx)]
            lst = wrecs[slot]
            lst.append([bx[0], bx[1], bx[2], bx[3], end, token, spec])
            if len(lst) > RECORD_CAP:
                _merge_oldest(lst)

    def remember_hbm(self, hacc: _HbmAccess, end: float, token: int) -> None:
        """The dependence record of a DMA's access to a tracked HBM tensor."""
        hb, hbx, is_w = hacc
        lst = self.hrecs[hb.tensor]
        if is_w:
            lst[:] = [rec for rec in lst if not _hbox_inside(rec[0], hbx)]
        else:
            lst[:] = [rec for rec in lst if rec[3] or rec[1] > end or not _hbox_inside(rec[0], hbx)]
        lst.append([hbx, end, token, is_w, hb])
        if len(lst) > RECORD_CAP:
            self.hmerge(hb.tensor)

    def place(self, e: int, ready: float, dur: float, raw: set[int], token: int) -> tuple[float, int | None]:
        """Earliest start >= ready in a free interval of engine ``e`` that fits ``dur`` (list scheduling with
        backfilling: the engine's stream is the instructions in start order). Pays the dependent stall when the
        instruction just before it on the engine produced one of its inputs. Returns the start and, when the engine
        (not a dependence) determined it, the token of the instruction before it on the engine."""
        gaps = self.gaps[e]
        stall = self.stall[e]
        for gi, (s, g_end, tb) in enumerate(gaps):
            if g_end <= ready:
                continue
            a, prev = (ready, None) if ready > s else (s, tb)
            if tb in raw and a < s + stall:
                a, prev = s + stall, tb
            b = a + dur
            if b > g_end + _EPS:
                continue
            new = []
            if a - s > _EPS:
                new.append([s, a, tb])
            if g_end - b > _EPS:
                new.append([b, g_end, token])
            gaps[gi:gi + 1] = new
            if len(gaps) > GAP_CAP:
                del gaps[:len(gaps) - GAP_CAP]
            return a, prev
        raise AssertionError("the open-ended free interval always fits")  # pragma: no cover

    def hmerge(self, ti: int) -> None:
        """Merge the older half of a tensor's HBM records (by finish time) into one per kind (conservative)."""
        lst = self.hrecs[ti]
        lst.sort(key=lambda r: r[1])
        half, rest = lst[:len(lst) // 2], lst[len(lst) // 2:]
        out = []
        for w in (False, True):
            group = [r for r in half if r[3] == w]
            if group:
                box = tuple((min(r[0][d][0] for r in group), max(r[0][d][1] for r in group))
                            for d in range(len(group[0][0])))
                out.append([box, max(r[1] for r in group), max(r[2] for r in group), w, None])
        self.hrecs[ti] = out + rest

    # --- the walk -------------------------------------------------------------------------------------------
    def run(self, body: list[Any], env: list[int]) -> None:
        for node in body:
            if type(node) is CLoop:
                self.loop(node, env)
            else:
                self.issue(node, env)

    def mark(self) -> tuple[int, tuple[float, ...], tuple[int, ...]]:
        return len(self.log), tuple(g[-1][0] for g in self.gaps), tuple(self.count)

    def loop(self, lp: CLoop, env: list[int]) -> None:
        start, stop, step = lp.start(env), lp.stop(env), lp.step(env)
        if step <= 0:
            raise ValueError(f"loop step must be positive, got {step}")
        n = len(range(start, stop, step))
        slot = lp.slot
        if not self.extrapolate or n < MIN_TRIPS:
            for v in range(start, stop, step):
                env[slot] = v
                self.run(lp.body, env)
            return
        marks = [self.mark()]
        i, done = 0, False
        while i < n:
            env[slot] = start + i * step
            self.run(lp.body, env)
            i += 1
            if done:
                continue
            marks.append(self.mark())
            if i > GIVE_UP:
                done = True
            elif i >= 3:
                found = self.detect(marks, i)
                if found is not None:
                    p, dt = found
                    k = (n - i - max(2, p)) // p
                    if k >= 1 and self.jump(marks, i, p, dt, k, slot, step):
                        i += k * p
                        done = True

    def _rot(self, counts: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(c % a.bufs for c, a in zip(counts, self.allocs))

    def detect(self, marks: list[Any], i: int) -> tuple[int, float] | None:
        for p in range(1, min(MAX_PERIOD, i // 3) + 1):
            m = [marks[i - 3 * p], marks[i - 2 * p], marks[i - p], marks[i]]
            pos = [x[0] for x in m]
            size = pos[3] - pos[2]
            if size == 0 or pos[2] - pos[1] != size or pos[1] - pos[0] != size:
                continue
            rots = [self._rot(x[2]) for x in m]
            if not rots[0] == rots[1] == rots[2] == rots[3]:
                continue
            tm, _, st, du, nb, bd, _, _ = self.log.block(pos[0], pos[3])
            if bd.size and (bd[bd >= 0] < marks[0][0]).any():
                continue  # paced by work from before this loop: not (yet) a steady state of its own
            tm, st, du, nb = (a.reshape(3, size) for a in (tm, st, du, nb))
            if not (np.array_equal(tm[0], tm[1]) and np.array_equal(tm[1], tm[2])):
                continue
            if not (np.array_equal(du[0], du[1]) and np.array_equal(du[1], du[2]) and np.array_equal(nb[0], nb[2])):
                continue
            dt = float(st[2, 0] - st[1, 0])
            tol = 1e-12 + 1e-9 * abs(st[2, -1])
            if dt <= 0 or np.abs(st[1] - st[0] - dt).max() > tol or np.abs(st[2] - st[1] - dt).max() > tol:
                continue
            ok = True
            for e in range(len(self.gaps)):
                d1, d2 = m[2][1][e] - m[1][1][e], m[3][1][e] - m[2][1][e]
                if (d2 != 0 and abs(d2 - dt) > tol) or (d1 != 0 and abs(d1 - dt) > tol):
                    ok = False
            if ok:
                return p, dt
        return None

    def jump(self, marks: list[Any], i: int, p: int, dt: float, k: int, slot: int, step: int) -> bool:
        """Append ``k`` shifted copies of the last ``p`` iterations and advance the state; False if infeasible."""
        b2, b3 = marks[i - p][0], marks[i][0]
        size = b3 - b2
        tm, rs, st, du, nb, bd, sp, oc = self.log.block(b2, b3)
        if self._pending(set(tm.tolist()), marks[i - 3 * p][0], float(st.min()) + dt):
            return False
        if k > 2 and self._place(rs, st, du, sp, oc, dt, 2, len(self.log)) is None:  # cheap trial before the full one
            return False
        placed = self._place(rs, st, du, sp, oc, dt, k, len(self.log))
        if placed is None:
            return False
        st_all, new_gaps = placed
        tm_all, rs_all, du_all, nb_all, sp_all, oc_all = (np.tile(a, k) for a in (tm, rs, du, nb, sp, oc))
        bd_all = (np.where(bd >= 0, bd, -1)[None, :] + np.where(bd >= 0, 1, 0)[None, :] * size
                  * np.arange(1, k + 1)[:, None]).ravel()
        # commit
        for e, g in new_gaps.items():
            self.gaps[e] = g
        self.log.extend((tm_all, rs_all, st_all, du_all, nb_all, bd_all, sp_all, oc_all))
        self.extrapolated += k * size
        before, now = marks[i - p], marks[i]
        for a in range(len(self.count)):
            self.count[a] += k * (now[2][a] - before[2][a])
        u = step * p  # loop-variable change per period
        for s_, lists in ((s_, (self.wrecs[s_], self.rrecs[s_])) for s_ in range(len(self.wrecs))):
            for lst in lists:
                lst[:] = self._advance_chip(lst, s_, slot, u, b2, b3, k, dt, size)
                if len(lst) > RECORD_CAP:
                    _merge_oldest(lst)
        for ti, lst in enumerate(self.hrecs):
            lst[:] = self._advance_hbm(lst, ti, slot, u, b2, b3, k, dt, size)
            if len(lst) > RECORD_CAP:
                self.hmerge(ti)
        return True

    def _place(self, rs: np.ndarray, st: np.ndarray, du: np.ndarray, sp: np.ndarray, oc: np.ndarray, dt: float,
               k: int, base: int) -> tuple[np.ndarray, dict[int, list[list[Any]]]] | None:
        """Starts of ``k`` shifted copies of a block and the free intervals of every engine (DMA engines: each
        one a transfer uses) after placing them, in program order; None if they do not fit. A row holds its
        engines for the last ``oc`` seconds of its ``du``."""
        st_all = (st[None, :] + dt * np.arange(1, k + 1)[:, None]).ravel()
        du_all = np.tile(oc, k)
        hold_all = st_all + np.tile(du - oc, k)
        rs_all = np.tile(rs, k)
        sp_all = np.tile(sp, k)
        new_gaps: dict[int, list[list[Any]]] = {}
        for e in range(len(self.gaps)):
            if e < NE:
                idx = np.nonzero(rs_all == e)[0]
            else:
                idx = np.nonzero((rs_all >= NE) & (rs_all <= e) & (rs_all + sp_all > e))[0]
            if idx.size == 0:
                continue
            gaps = [list(g) for g in self.gaps[e]]
            for j, a, d in zip(idx.tolist(), hold_all[idx].tolist(), du_all[idx].tolist()):
                if not _carve(gaps, a, a + d, base + j):
                    return None
            new_gaps[e] = gaps
        return st_all, new_gaps

    def _pending(self, tmpls: set[int], window: int, t0: float) -> bool:
        """Whether work from before the compared periods (token < ``window``) that the copied instructions may
        depend on (their buffers, any copy, and what shares their addresses; their HBM tensors) ends after ``t0``,
        the first copied start: then the copies' starts are not known from the periods alone."""
        tps = self.p.templates
        allocs = {r.alloc for t in tmpls for r in (*tps[t].reads, *tps[t].writes)}
        slots = {s2 for a in allocs for s in range(self.allocs[a].slot0, self.allocs[a].slot0 + self.allocs[a].bufs)
                 for s2 in self.p.overlaps[s]}
        for s in slots:
            for lst in (self.wrecs[s], self.rrecs[s]):
                for rec in lst:
                    if rec[4] > t0 + _TOL and rec[5] < window:
                        return True
        tensors = {h.tensor for t in tmpls for h in (tps[t].hbm_read, tps[t].hbm_write) if h is not None}
        for ti in tensors:
            for rec in self.hrecs[ti]:
                if rec[1] > t0 + _TOL and rec[2] < window:
                    return True
        return False

    def _advance_chip(self, lst: list[list[Any]], s: int, slot: int, u: int, b2: int, b3: int, k: int, dt: float,
                      size: int) -> list[list[Any]]:
        """The records after ``k`` more periods: block B's records stand for the copies' (shifted in time, and
        in address when they depend on the loop variable: the last PRECISE copies exactly, older ones as a hull)."""
        out = []
        for rec in lst:
            if not b2 <= rec[5] < b3:
                out.append(rec)
                continue
            spec = rec[6]
            cp = spec.p_lo.coef(slot) if spec is not None else None
            cb = spec.b_lo.coef(slot) if spec is not None else None
            if cp is None or cb is None:  # unknown dependence on the loop variable: the whole buffer copy
                for a in self.allocs:
                    if a.slot0 <= s < a.slot0 + a.bufs:
                        lo = a.base + (s - a.slot0) * a.stride
                        out.append([0, a.partitions, lo, lo + a.stride, rec[4] + k * dt, rec[5] + k * size, None])
                continue
            if cp == 0 and cb == 0:
                rec[4] += k * dt
                rec[5] += k * size
                out.append(rec)
                continue
            out.append(rec)
            dp, db = cp * u, cb * u
            first = max(1, k - PRECISE + 1)
            if first > 1:
                j = first - 1
                out.append([min(rec[0] + dp, rec[0] + dp * j), max(rec[1] + dp, rec[1] + dp * j),
                            min(rec[2] + db, rec[2] + db * j), max(rec[3] + db, rec[3] + db * j),
                            rec[4] + j * dt, rec[5] + j * size, None])
            for j in range(first, k + 1):
                out.append([rec[0] + dp * j, rec[1] + dp * j, rec[2] + db * j, rec[3] + db * j, rec[4] + j * dt,
                            rec[5] + j * size, spec])
        return out

    def _advance_hbm(self, lst: list[list[Any]], ti: int, slot: int, u: int, b2: int, b3: int, k: int, dt: float,
                     size: int) -> list[list[Any]]:
        """:meth:`_advance_chip` for HBM index boxes."""
        out = []
        whole = tuple((0, int(n) - 1) for n in self.p.tensors[ti].shape)
        for rec in lst:
            if not b2 <= rec[2] < b3:
                out.append(rec)
                continue
            spec = rec[4]
            cs = [None if spec is None or d is None else d[0].coef(slot) for d in (spec.dims if spec else [None])]
            if spec is None or any(c is None for c in cs):
                out.append([whole, rec[1] + k * dt, rec[2] + k * size, rec[3], None])
                continue
            coefs = cast(list[int], cs)  # all known (checked above)
            if all(c == 0 for c in coefs):
                rec[1] += k * dt
                rec[2] += k * size
                out.append(rec)
                continue
            out.append(rec)
            first = max(1, k - PRECISE + 1)
            if first > 1:
                j = first - 1
                box = tuple((min(lo + c * u, lo + c * u * j), max(hi + c * u, hi + c * u * j))
                            for (lo, hi), c in zip(rec[0], coefs))
                out.append([box, rec[1] + j * dt, rec[2] + j * size, rec[3], None])
            for j in range(first, k + 1):
                box = tuple((lo + c * u * j, hi + c * u * j) for (lo, hi), c in zip(rec[0], coefs))
                out.append([box, rec[1] + j * dt, rec[2] + j * size, rec[3], spec])
        return out


def _grid_body(prog: Program, grid: tuple[int, ...]) -> list[Any]:
    body: list[Any] = prog.body
    for a in reversed(range(len(grid))):
        body = [CLoop(None, a, Aff(0, {}), Aff(int(grid[a]), {}), Aff(1, {}), body)]
    return body


def schedule(k: Kernel | Program, grid: tuple[int, ...] | None = None, target: Target | None = None,
             extrapolate: bool = True, record: bool = False) -> Schedule:
    """Schedule a (planned) kernel: every instruction instance of every grid instance, with its start and duration.

    Args:
        k: the kernel (its memory is planned first if needed) or an already built :class:`Program`.
        grid: the launch grid (default ``k.grid``).
        target: default ``k.target``.
        extrapolate: generate the steady state of long loops as shifted copies (see the module docstring).
        record: keep each instance's accessed boxes in ``Schedule.accesses``: ``(space, box, is_write)`` with
            space ``"sbuf"`` / ``"psum"`` (box: partition start/stop, absolute byte start/stop) or
            ``("hbm", tensor index)`` (box: inclusive index bounds per dimension, flattened). For tests.

    Example:
        >>> import torch
        >>> from tests.kernels import softmax
        >>> s = schedule(softmax.trace(torch.randn(256, 64), torch.empty(256, 64)))
        >>> sorted({int(r) for r in s.res})[:3]
        [1, 2, 4]
    """
    prog = k if isinstance(k, Program) else build(k, target)
    g = tuple(int(x) for x in (grid if grid is not None else prog.kernel.grid)) or (1,)
    sim = _Sim(prog, extrapolate=extrapolate, record=record)
    env = [0] * (3 + 64)
    sim.run(_grid_body(prog, g), env)
    log = sim.log
    tm, rs, st, du, nb, _, sp, oc = log.block(0, len(log))
    sched = Schedule(prog, tm.astype(np.int32), rs.astype(np.int32), st, du, nb, sp.astype(np.int32),
                     sim.extrapolated, occ=oc)
    if record:
        sched.accesses = sim.accesses
    return sched
