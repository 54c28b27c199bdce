"""Every stdlib family on the ``trn`` device against the torch CPU op, in one run.

``python benchmarks/bench_stdlib.py [--quick] [--only FAMILY,...] [--repeat 5]``

Each family module in ``benchmarks/families/`` lists its cases (see that package's docstring).
CPU and trn are timed alternately (median of ``--repeat`` rounds) with torch at the same thread
count as the trnlang runtime, so the ratio compares like with like; ratio > 1 means trn is faster.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._host import print_host  # noqa: E402


def _time(fn: Callable[[], Any], min_time: float) -> float:
    """Seconds per call (at least ``min_time`` of calls, at least one)."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return dt / n


def families() -> list[str]:
    """Names of the family modules in ``benchmarks/families``."""
    import benchmarks.families as fam

    return sorted(m.name for m in pkgutil.iter_modules(fam.__path__))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one round (a smoke run)")
    ap.add_argument("--only", default="", help="comma-separated family names")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    print_host()
    import torch

    import trnlang.device as td

    td.register()
    warnings.simplefilter("ignore", td.FallbackWarning)
    threads = int(os.environ.get("TRN_NUM_THREADS", "0")) or (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    wanted = [f for f in args.only.split(",") if f] or families()
    repeat = 1 if args.quick else args.repeat
    min_time = 0.01 if args.quick else 0.2
    print(f"stdlib families vs torch CPU ({threads} thread(s)); ratio = cpu time / trn time (> 1: trn faster)")
    print(f"{'family':<16} {'case':<44} {'cpu':>11} {'trn':>11} {'ratio':>7}  fallbacks  load (1-min load average, "
          f"{os.cpu_count()} cores)")
    for fam in wanted:
        mod = importlib.import_module(f"benchmarks.families.{fam}")
        for name, cpu, trn in mod.cases(args.quick):
            td.reset_fallback_stats()
            cpu(), trn(), cpu(), trn()
            fb = sum(td.fallback_stats().values())
            cs, ts = [], []
            for _ in range(repeat):
                cs.append(_time(cpu, min_time))
                ts.append(_time(trn, min_time))
            c, t = statistics.median(cs), statistics.median(ts)
            print(f"{fam:<16} {name:<44} {c * 1e3:>8.3f} ms {t * 1e3:>8.3f} ms {c / t:>6.2f}x  {fb:>9} "
                  f"{os.getloadavg()[0]:>5.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
