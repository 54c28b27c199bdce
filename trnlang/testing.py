"""Benchmark helpers in the style of ``triton.testing``: ``do_bench``, ``do_sim``, ``Benchmark``, ``perf_report``.

trnlang kernels have two clocks: the *host* (the JIT-compiled code really runs on the CPU; :func:`do_bench`
measures its wall time) and the *target* (the simulated NeuronCore; :func:`do_sim` reads the time of the
kernel's schedule). A :func:`perf_report` sweep records both: the benchmarked function returns the host time,
or a ``(host_ms, sim_ms)`` pair, per point; ``.run()`` prints a table with a column per line and clock and
plots host wall time and simulated target time side by side (matplotlib optional).

Example (runnable; ``docs/benchmarking.md`` has a longer one):
    >>> import torch
    >>> import trnlang.testing as tt
    >>> from tests.kernels import vector_add
    >>> @tt.perf_report(tt.Benchmark(x_names=["n"], x_vals=[128, 256], line_arg="provider",
    ...                              line_vals=["trn"], line_names=["trnlang"], plot_name="vector-add",
    ...                              ylabel="ms"))
    ... def bench(n, provider):
    ...     x = torch.randn(n, 64)
    ...     out = torch.empty_like(x)
    ...     host = tt.do_bench(lambda: vector_add(x, x, out), warmup=1, rep=5)
    ...     return host, tt.do_sim(vector_add, x, x, out)
    >>> rows = bench.run(print_data=False)
    >>> [r["n"] for r in rows], sorted(rows[0])
    ([128, 256], ['n', 'trnlang (host ms)', 'trnlang (sim ms)'])
"""

from __future__ import annotations

import csv
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Benchmark", "Mark", "do_bench", "do_sim", "format_table", "perf_report"]


def _quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted data (``q`` in [0, 1])."""
    if not sorted_xs:
        return math.nan
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100, quantiles: Sequence[float] | None = None,
             return_mode: str = "mean", min_runs: int = 5, max_runs: int = 10_000) -> float | list[float]:
    """Wall time of ``fn()`` on the host in milliseconds, as ``triton.testing.do_bench`` reports it.

    ``fn`` first runs once (compiling kernels, filling caches), then for about ``warmup`` ms; then it is timed
    call by call (``time.perf_counter``) for about ``rep`` ms (at least ``min_runs`` and at most ``max_runs``
    calls). Kernels run synchronously on the host, so no device synchronisation is needed.

    Args:
        fn: the callable to time (no arguments).
        warmup: milliseconds of warm-up runs.
        rep: milliseconds of timed runs.
        quantiles: if given, return these quantiles (each in [0, 1]) of the per-call times instead.
        return_mode: ``"mean"``, ``"median"``, ``"min"``, ``"max"`` or ``"all"`` (every timing).
        min_runs, max_runs: bounds on the number of timed calls.

    Returns:
        Milliseconds: one number, the requested quantiles, or every timing (``"all"``).

    Raises:
        ValueError: for an unknown ``return_mode`` or a quantile outside [0, 1].

    Example:
        >>> ms = do_bench(lambda: sum(range(1000)), warmup=1, rep=5)
        >>> ms > 0
        True
        >>> lo, med, hi = do_bench(lambda: sum(range(1000)), warmup=1, rep=5, quantiles=[0.2, 0.5, 0.8])
        >>> lo <= med <= hi
        True
    """
    if return_mode not in ("mean", "median", "min", "max", "all"):
        raise ValueError(f"return_mode must be mean, median, min, max or all, not {return_mode!r}")
    if quantiles is not None and any(not 0.0 <= q <= 1.0 for q in quantiles):
        raise ValueError(f"quantiles must lie in [0, 1], got {list(quantiles)}")
    fn()  # the first call compiles
    end = time.perf_counter() + warmup * 1e-3
    while time.perf_counter() < end:
        fn()
    times: list[float] = []
    stop = time.perf_counter() + rep * 1e-3
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() < stop):
        a = time.perf_counter()
        fn()
        times.append((time.perf_counter() - a) * 1e3)
    times.sort()
    if quantiles is not None:
        return [_quantile(times, q) for q in quantiles]
    if return_mode == "all":
        return times
    if return_mode == "median":
        return float(statistics.median(times))
    return {"mean": statistics.fmean(times), "min": times[0], "max": times[-1]}[return_mode]


def do_sim(kernel: Any, *args: Any, grid: Any = (1,), **kwargs: Any) -> float:
    """Simulated time of one launch of a ``@trn.kernel`` on its target, in milliseconds (nothing is run).

    Example:
        >>> import torch
        >>> from tests.kernels import vector_add
        >>> x = torch.randn(256, 64)
        >>> do_sim(vector_add, x, x, torch.empty_like(x)) > 0
        True
    """
    return float(kernel.profile(*args, grid=grid, simulate_only=True, **kwargs).time_us * 1e-3)


@dataclass
class Benchmark:
    """One sweep: ``x_names`` take each value of ``x_vals``; one line per value of ``line_arg`` in ``line_vals``.

    Attributes:
        x_names: argument names set from each x value (all to the same value, as in Triton).
        x_vals: the x values (numbers, or tuples giving one value per name in ``x_names``).
        line_arg: the argument that selects the line (e.g. ``"provider"``).
        line_vals: its values, one per line; ``line_names``: their labels in the table and the legend.
        plot_name: title of the plot and file name stem of the saved CSV / PNG.
        args: fixed keyword arguments of every call.
        xlabel, ylabel: axis labels; x_log, y_log: logarithmic axes; styles: matplotlib ``(color, linestyle)``.
    """

    x_names: list[str]
    x_vals: list[Any]
    line_arg: str
    line_vals: list[Any]
    line_names: list[str]
    plot_name: str
    args: dict[str, Any] = field(default_factory=dict)
    xlabel: str = ""
    ylabel: str = "ms"
    x_log: bool = False
    y_log: bool = False
    styles: list[tuple[str, str]] | None = None


_CLOCKS = (("host", "host ms"), ("sim", "sim ms"))


class Mark:
    """A function decorated with :func:`perf_report`: call ``.run()`` to sweep its benchmarks."""

    def __init__(self, fn: Callable[..., Any], benchmarks: Benchmark | list[Benchmark]) -> None:
        self.fn = fn
        self.benchmarks = benchmarks if isinstance(benchmarks, list) else [benchmarks]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def _sweep(self, bench: Benchmark) -> list[dict[str, Any]]:
        rows = []
        for x in bench.x_vals:
            xs = x if isinstance(x, (tuple, list)) else (x,) * len(bench.x_names)
            xargs = dict(zip(bench.x_names, xs))
            row: dict[str, Any] = dict(xargs)
            for val, name in zip(bench.line_vals, bench.line_names):
                got = self.fn(**xargs, **{bench.line_arg: val}, **bench.args)
                host, sim = got if isinstance(got, (tuple, list)) else (got, None)
                row[f"{name} (host ms)"] = None if host is None else float(host)
                if sim is not None:
                    row[f"{name} (sim ms)"] = float(sim)
            rows.append(row)
        return rows

    def run(self, show_plots: bool = False, print_data: bool = False, save_path: str = "") -> list[dict[str, Any]]:
        """Sweep every benchmark; returns the rows of the last one (one dict per x value).

        Args:
            show_plots: show the plots (``plt.show()``; needs matplotlib).
            print_data: print each benchmark's table.
            save_path: a directory to write ``<plot_name>.csv`` and, with matplotlib, ``<plot_name>.png``
                (host wall time and simulated target time side by side).
        """
        rows: list[dict[str, Any]] = []
        for bench in self.benchmarks:
            rows = self._sweep(bench)
            if print_data:
                print(f"{bench.plot_name}:")
                print(format_table(rows))
            if save_path:
                os.makedirs(save_path, exist_ok=True)
                with open(os.path.join(save_path, f"{bench.plot_name}.csv"), "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
                    w.writeheader()
                    w.writerows(rows)
            if save_path or show_plots:
                _plot(bench, rows, save_path, show_plots)
        return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """An aligned text table of sweep rows (what ``run(print_data=True)`` prints).

    Example:
        >>> print(format_table([{"size": 128, "a (host ms)": 0.5}, {"size": 4096, "a (host ms)": 1.25}]))
        size  a (host ms)
         128        0.500
        4096        1.250
    """
    if not rows:
        return "(no data)"
    cols = list(rows[0])
    for r in rows[1:]:
        cols += [c for c in r if c not in cols]

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)

    cells = [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(f"{c:>{w}}" for c, w in zip(cols, widths))]
    lines += ["  ".join(f"{v:>{w}}" for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _plot(bench: Benchmark, rows: list[dict[str, Any]], save_path: str, show: bool) -> None:
    try:
        import matplotlib

        if not show:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{bench.plot_name}: not plotted (matplotlib is not installed: pip install 'trnlang[plot]')")
        return
    clocks = [(key, label) for key, label in _CLOCKS
              if any(r.get(f"{name} ({label})") is not None for r in rows for name in bench.line_names)]
    fig, axes = plt.subplots(1, len(clocks), figsize=(5.5 * len(clocks), 4), squeeze=False)
    xs = [r[bench.x_names[0]] for r in rows]
    for ax, (key, label) in zip(axes[0], clocks):
        for i, name in enumerate(bench.line_names):
            ys = [r.get(f"{name} ({label})") for r in rows]
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            if not pts:
                continue
            color, ls = bench.styles[i] if bench.styles and i < len(bench.styles) else (None, "-")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color, linestyle=ls, label=name)
        ax.set_title(f"{bench.plot_name}: {'host wall time' if key == 'host' else 'simulated target time'}")
        ax.set_xlabel(bench.xlabel or bench.x_names[0])
        ax.set_ylabel(f"{bench.ylabel} ({'host' if key == 'host' else 'target, simulated'})")
        if bench.x_log:
            ax.set_xscale("log")
        if bench.y_log:
            ax.set_yscale("log")
        ax.legend()
    fig.tight_layout()
    if save_path:
        fig.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
    if show:
        plt.show()
    plt.close(fig)


def perf_report(benchmarks: Benchmark | list[Benchmark]) -> Callable[[Callable[..., Any]], Mark]:
    """Decorate a benchmark function: ``fn(**x, **{line_arg: value}, **args)`` returns host ms or
    ``(host_ms, sim_ms)``; the result has ``.run(show_plots, print_data, save_path)`` (see the module example)."""
    return lambda fn: Mark(fn, benchmarks)
