"""``trn.Profile``: what a launch costs on the simulated NeuronCore, computed from its schedule.

Every number here is derived from the :class:`~trnlang.sim.schedule.Schedule`
the scheduler built for the compiled kernel: the time is the end of the last
instruction, an engine's busy time is the sum of its instructions' durations,
MFU is the Tensor engine's useful flops over what its peak (for the inputs'
dtype) would do in that time, MBU the DMA bytes over the peak bandwidth times
that time.

Example:
    >>> import torch
    >>> from tests.kernels import softmax
    >>> x = torch.randn(512, 256)
    >>> p = softmax.profile(x, torch.empty_like(x))
    >>> p.time_us > 0, 0 <= p.mbu <= 1, p.engines["tensor"].instructions
    (True, True, 0)
"""

from __future__ import annotations

import json
import os
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trnlang.ir.nodes import Kernel, SourceLoc
from trnlang.passes.plan_memory import allocs as alloc_instrs
from trnlang.passes.plan_memory import footprint
from trnlang.sim.program import ENGINES
from trnlang.sim.schedule import Schedule, schedule
from trnlang.sim.targets import Target

__all__ = ["EngineStat", "InstrRecord", "Profile", "Roofline"]

_ENGINE_NAMES = [e.value for e in ENGINES]
_SCHEDULES: weakref.WeakKeyDictionary[Kernel, dict[Any, Schedule]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class EngineStat:
    """Busy time of one engine (or of all DMA queues together) over the kernel's time."""

    name: str
    instructions: int
    busy_us: float
    utilization: float


@dataclass(frozen=True)
class InstrRecord:
    """One executed instruction: engine, start and duration, source line, IR text, bytes and flops.

    For a DMA transfer (``engine == "dma"``) ``queue`` is the first DMA engine it uses and ``dma_engines`` how
    many (consecutive) engines it is split over; ``nbytes`` is the HBM bytes it moved.
    """

    engine: str
    queue: int | None
    start_us: float
    duration_us: float
    line: SourceLoc | None
    op: str
    dma_engines: int = 0
    nbytes: float = 0.0
    flops: float = 0.0


@dataclass(frozen=True)
class Roofline:
    """Roofline coordinates of the launch: arithmetic intensity (flop per DMA byte) against achieved FLOP/s.

    ``ridge`` is the intensity where the bandwidth roof meets the compute roof; ``bound`` says which roof the
    kernel sits under.
    """

    flops: float
    bytes: float
    intensity: float
    achieved_flops_per_s: float
    peak_flops_per_s: float
    peak_bytes_per_s: float
    ridge: float
    bound: str

    @property
    def attainable_flops_per_s(self) -> float:
        """The roof at this intensity: ``min(peak flops, intensity * peak bandwidth)``."""
        return min(self.peak_flops_per_s, self.intensity * self.peak_bytes_per_s)


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _short(loc: SourceLoc | None) -> str:
    if loc is None:
        return "<unknown>"
    return f"{os.path.basename(loc.filename)}:{loc.lineno}"


@dataclass
class Profile:
    """The profile of one launch (see the module docstring). Build it with ``kernel.profile(*args)``.

    Attributes:
        kernel: the kernel's name.
        target: the simulated target.
        grid: the launch grid (instances run back to back on one NeuronCore).
        time_us: kernel time in microseconds.
        cycles: the time in Tensor-engine cycles.
        engines: per engine (``tensor``, ``vector``, ``scalar``, ``gpsimd``, ``dma``) its :class:`EngineStat`;
            the ``dma`` entry counts transfers; its busy time sums every DMA engine's and its utilisation is over
            all of them (busy / (16 x time)).
        mfu: Tensor-engine flops / (peak flops for the inputs' dtype x time), in [0, 1].
        mbu: DMA bytes / (peak DMA bandwidth x time), in [0, 1].
        flops: useful matmul flops; dma_bytes: HBM bytes moved.
        sbuf_peak_bytes, psum_peak_bytes: bytes per partition reserved by the memory plan.
        multi_buffered: ``(buffer, copies, source line)`` chosen by the planner.
        result: what the launch returned (``None`` with ``simulate_only``).
        schedule: the raw schedule.
    """

    kernel: str
    target: Target
    grid: tuple[int, ...]
    time_us: float
    cycles: int
    engines: dict[str, EngineStat]
    mfu: float
    mbu: float
    flops: float
    dma_bytes: float
    sbuf_peak_bytes: int
    psum_peak_bytes: int
    multi_buffered: list[tuple[str, int, SourceLoc | None]]
    schedule: Schedule
    result: Any = None
    _instructions: list[InstrRecord] | None = field(default=None, repr=False)

    # --- construction -------------------------------------------------------------------------------------
    @classmethod
    def simulate(cls, k: Kernel, grid: tuple[int, ...] | None = None, result: Any = None,
                 extrapolate: bool = True) -> Profile:
        """Schedule a planned kernel IR (memoised per kernel object and grid) and summarise it.

        Example:
            >>> import torch
            >>> from tests.kernels import vector_add
            >>> x = torch.randn(256, 64)
            >>> p = Profile.simulate(vector_add.trace(x, x, torch.empty_like(x)))
            >>> p.engines["vector"].instructions, p.engines["dma"].instructions
            (2, 6)
        """
        g = tuple(int(x) for x in (grid if grid is not None else k.grid)) or (1,)
        memo = _SCHEDULES.setdefault(k, {})
        sched = memo.get((g, extrapolate))
        if sched is None:
            sched = memo[(g, extrapolate)] = schedule(k, g, extrapolate=extrapolate)
        return cls.from_schedule(sched, g, result)

    @classmethod
    def from_schedule(cls, s: Schedule, grid: tuple[int, ...], result: Any = None) -> Profile:
        """Summarise a schedule."""
        t = s.target
        k = s.program.kernel
        time_s = s.makespan
        busy = s.busy()
        counts = np.bincount(s.res, minlength=len(busy))
        engines: dict[str, EngineStat] = {}
        for i, name in enumerate(_ENGINE_NAMES):
            engines[name] = EngineStat(name, int(counts[i]), busy[i] * 1e6, busy[i] / time_s if time_s else 0.0)
        nq = s.n_dma
        dma_busy = float(busy[len(ENGINES):].sum())
        engines["dma"] = EngineStat("dma", int(s.is_dma.sum()), dma_busy * 1e6,
                                    dma_busy / (nq * time_s) if time_s else 0.0)
        peak_s = float(s.template_array("peak_s")[s.tmpl].sum()) if s.n else 0.0
        flops = float(s.template_array("flops")[s.tmpl].sum()) if s.n else 0.0
        nbytes = float(s.nbytes.sum())
        sb, ps = footprint(k, t)
        multi = [(a.outs[0].name, int(a.attrs.get("bufs", 1)), a.loc or a.outs[0].loc) for a in alloc_instrs(k)
                 if int(a.attrs.get("bufs", 1)) > 1]
        return cls(
            kernel=k.name, target=t, grid=grid, time_us=time_s * 1e6, cycles=int(round(time_s * t.tensor.clock_hz)),
            engines=engines, mfu=peak_s / time_s if time_s else 0.0,
            mbu=nbytes / (t.dma_bandwidth_bytes_per_s * time_s) if time_s else 0.0, flops=flops, dma_bytes=nbytes,
            sbuf_peak_bytes=sb, psum_peak_bytes=ps, multi_buffered=multi, schedule=s, result=result)

    # --- views --------------------------------------------------------------------------------------------
    @property
    def instructions(self) -> list[InstrRecord]:
        """Every executed instruction, in issue order (built on first use)."""
        if self._instructions is None:
            s = self.schedule
            tps = s.program.templates
            ne = len(ENGINES)
            out = []
            for tm, rs, st, du, sp, nb in zip(s.tmpl.tolist(), s.res.tolist(), s.start.tolist(), s.dur.tolist(),
                                              s.span.tolist(), s.nbytes.tolist()):
                tp = tps[tm]
                if rs < ne:
                    out.append(InstrRecord(_ENGINE_NAMES[rs], None, st * 1e6, du * 1e6, tp.loc, tp.text,
                                           flops=tp.flops))
                else:
                    out.append(InstrRecord("dma", rs - ne, st * 1e6, du * 1e6, tp.loc, tp.text, sp, nb))
            self._instructions = out
        return self._instructions

    def by_line(self) -> list[tuple[SourceLoc | None, str, int, float]]:
        """``(source line, engine, instructions, busy us)`` per line and engine, busiest first."""
        s = self.schedule
        tps = s.program.templates
        agg: dict[tuple[Any, str], list[float]] = defaultdict(lambda: [0, 0.0])
        per_t = np.bincount(s.tmpl, weights=s.dur, minlength=len(tps))
        cnt_t = np.bincount(s.tmpl, minlength=len(tps))
        for i, tp in enumerate(tps):
            if cnt_t[i] == 0:
                continue
            eng = "dma" if tp.res < 0 else _ENGINE_NAMES[tp.res]
            key = ((tp.loc.filename, tp.loc.lineno, tp.loc.func) if tp.loc else None, eng)
            agg[key][0] += int(cnt_t[i])
            agg[key][1] += float(per_t[i]) * 1e6
        rows = [(SourceLoc(*key[0]) if key[0] else None, key[1], int(v[0]), v[1]) for key, v in agg.items()]
        rows.sort(key=lambda r: -r[3])
        return rows

    def roofline(self) -> Roofline:
        """Roofline coordinates (peaks: Tensor engine for the dominant matmul dtype, aggregate DMA bandwidth)."""
        t = self.target
        time_s = self.time_us * 1e-6
        peak = self.flops / sum(self.schedule.template_array("peak_s")[self.schedule.tmpl]) \
            if self.flops else t.tensor.peak_bf16_flops
        bw = t.dma_bandwidth_bytes_per_s
        intensity = self.flops / self.dma_bytes if self.dma_bytes else float("inf")
        ridge = peak / bw
        return Roofline(self.flops, self.dma_bytes, intensity, self.flops / time_s if time_s else 0.0, peak, bw, ridge,
                        "compute" if intensity >= ridge else "memory")

    def summary(self, top: int = 8) -> str:
        """A readable table: time, MFU/MBU, memory, per-engine busy time and utilisation, busiest source lines."""
        t = self.target
        lines = [f"profile of {self.kernel} on {t.name} ({t.core}), grid {self.grid}",
                 f"  time {self.time_us:,.2f} us = {self.cycles:,} cycles at the Tensor engine's "
                 f"{t.tensor.clock_hz / 1e9:g} GHz",
                 f"  MFU {self.mfu:.3f}  ({self.flops / 1e9:,.2f} GFLOP on the Tensor engine)",
                 f"  MBU {self.mbu:.3f}  ({_fmt_bytes(self.dma_bytes)} of DMA at "
                 f"{t.dma_bandwidth_bytes_per_s / 1e9:g} GB/s peak)",
                 f"  SBUF {self.sbuf_peak_bytes / 1024:.1f} / {t.sbuf_bytes_per_partition // 1024} KiB per partition, "
                 f"PSUM {self.psum_peak_bytes // t.psum_bank_bytes} / {t.psum_banks} banks"]
        if self.multi_buffered:
            mb = ", ".join(f"{n} x{b} ({_short(loc)})" for n, b, loc in self.multi_buffered[:6])
            more = f" (+{len(self.multi_buffered) - 6} more)" if len(self.multi_buffered) > 6 else ""
            lines.append(f"  multi-buffered: {mb}{more}")
        lines.append(f"  {'engine':<12}{'instrs':>9}{'busy us':>12}{'util':>9}")
        for name, st in self.engines.items():
            label = f"dma ({self.schedule.n_dma} e)" if name == "dma" else name
            lines.append(f"  {label:<12}{st.instructions:>9,}{st.busy_us:>12,.2f}{st.utilization * 100:>8.1f}%")
        rows = self.by_line()[:top]
        if rows:
            lines.append("  busiest source lines:")
            for loc, eng, n, us in rows:
                text = loc.text.strip() if loc is not None else ""
                text = text if len(text) <= 60 else text[:57] + "..."
                lines.append(f"    {_short(loc):<20}{eng:<8}{n:>7,}{us:>12,.2f} us  {text}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    # --- export -------------------------------------------------------------------------------------------
    def trace_events(self, max_events: int | None = None) -> list[dict[str, Any]]:
        """Chrome-trace events: one track (tid) per engine and per DMA engine; one ``"X"`` event per instruction
        and, for a DMA transfer, one per DMA engine it is split over (``max_events`` counts instructions)."""
        s = self.schedule
        tps = s.program.templates
        ne = len(ENGINES)
        pid = 1
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "ts": 0, "dur": 0, "pid": pid, "tid": 0,
             "args": {"name": f"{self.kernel} on {self.target.name}"}}]
        for i, name in enumerate(_ENGINE_NAMES):
            events.append({"name": "thread_name", "ph": "M", "ts": 0, "dur": 0, "pid": pid, "tid": i + 1,
                           "args": {"name": name.capitalize() if name != "gpsimd" else "GpSimd"}})
        for q in range(s.n_dma):
            events.append({"name": "thread_name", "ph": "M", "ts": 0, "dur": 0, "pid": pid, "tid": 100 + q,
                           "args": {"name": f"DMA engine {q}"}})
        n = s.n if max_events is None else min(s.n, max_events)
        for tm, rs, st, du, sp, nb in zip(s.tmpl[:n].tolist(), s.res[:n].tolist(), s.start[:n].tolist(),
                                          s.dur[:n].tolist(), s.span[:n].tolist(), s.nbytes[:n].tolist()):
            tp = tps[tm]
            args = {"line": str(tp.loc) if tp.loc else "", "source": tp.loc.text.strip() if tp.loc else "",
                    "instr": tp.text}
            if rs < ne:
                if tp.flops:
                    args["flops"] = tp.flops
                events.append({"name": tp.ins.op.value, "cat": _ENGINE_NAMES[rs], "ph": "X", "ts": st * 1e6,
                               "dur": du * 1e6, "pid": pid, "tid": rs + 1, "args": args})
                continue
            args["bytes"] = nb
            args["dma_engines"] = sp
            for e in range(rs - ne, rs - ne + sp):
                events.append({"name": tp.ins.op.value, "cat": "dma", "ph": "X", "ts": st * 1e6, "dur": du * 1e6,
                               "pid": pid, "tid": 100 + e, "args": args})
        return events

    def save_trace(self, path: str | os.PathLike[str], max_events: int | None = None) -> None:
        """Write a Chrome trace JSON (``{"traceEvents": [...]}``; open it in Perfetto or chrome://tracing)."""
        with open(path, "w") as f:
            json.dump({"traceEvents": self.trace_events(max_events), "displayTimeUnit": "ns"}, f)

    def save_html(self, path: str | os.PathLike[str], max_instructions: int = 200_000) -> None:
        """Write one self-contained HTML page (no network): zoomable engine/DMA timeline with hover details
        (instruction, source line, bytes or flops), per-engine utilisation bars and the roofline point.

        Example:
            >>> import os, tempfile, torch
            >>> from tests.kernels import vector_add
            >>> x = torch.randn(256, 64)
            >>> p = vector_add.profile(x, x, torch.empty_like(x), simulate_only=True)
            >>> path = os.path.join(tempfile.mkdtemp(), "profile.html")
            >>> p.save_html(path)
            >>> "vector_add" in open(path).read()
            True
        """
        from trnlang.sim.html import render_html

        page = render_html([(f"{self.kernel} grid {self.grid}", self)], f"{self.kernel} on {self.target.name}",
                           max_instructions)
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)

    def save_png(self, path: str | os.PathLike[str]) -> None:
        """Draw the engine/DMA timeline to a PNG (needs matplotlib: ``pip install 'trnlang[plot]'``)."""
        from trnlang.sim.html import save_png

        save_png(self, path)

    def plot_roofline(self, path: str | os.PathLike[str]) -> None:
        """Plot the roofline and this kernel's point to an image file (needs matplotlib: ``pip install
        trnlang[plot]``)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("plot_roofline needs matplotlib (pip install 'trnlang[plot]')") from e
        r = self.roofline()
        xs = np.logspace(-2, 4, 200)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.loglog(xs, np.minimum(r.peak_flops_per_s, xs * r.peak_bytes_per_s) / 1e12, label="roof")
        if np.isfinite(r.intensity) and r.achieved_flops_per_s > 0:
            ax.loglog([r.intensity], [r.achieved_flops_per_s / 1e12], "o", label=self.kernel)
        ax.set_xlabel("arithmetic intensity (flop / DMA byte)")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{self.kernel} on {self.target.name}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)

