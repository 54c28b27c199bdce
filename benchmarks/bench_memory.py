"""Resident memory over many new shapes: is compiled code evicted (``TRN_MAX_LOADED_KERNELS``)?

``python benchmarks/bench_memory.py [--mode kernel|expr] [--sizes 1000] [--cap 64] [--cold]``

Runs ``--sizes`` new shapes of one workload in a child process and prints the growth of its resident
set (``/proc/self/statm``) after a warm-up, with the number of loaded native modules:

- ``kernel``: a user ``@trn.kernel`` whose column count is a compile-time constant (a new variant per size);
- ``tiled``: a user kernel written the ordinary way (128-row tiles, ``tl.cdiv`` trip counts, masked ragged
  tiles) over ``[n, 40]`` for each new ``n``: shape-polymorphic, so new sizes share a few compiled variants;
- ``expr``: ``(torch.ones(n, device="trn") * 2 + 1).sum()`` (several stdlib kernels per size).

By default the shapes' object code is put in a private disk cache by a first child, so the measured
child loads code (what an eviction costs again); ``--cold`` measures compiling too (LLVM's optimiser,
through llvmlite, leaks tens of KiB per compiled module: not bounded by the cap).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARMUP = 20


def rss_mib() -> float:
    """This process's resident set in MiB, after a garbage collection."""
    import gc

    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def workload(mode: str) -> object:
    """``run(i)``: one launch of size ``i`` (checked against the expected result)."""
    import numpy as np
    import torch

    import trnlang as trn
    import trnlang.device as td
    import trnlang.language as tl

    td.register()

    @trn.kernel
    def scale(x, out):
        d = x.shape[1]
        cols = tl.arange(d)[None, :]
        rows = tl.arange(2)[:, None]
        tl.store(out[rows, cols], tl.load(x[rows, cols]) * 2.0 + 1.0)

    def run_kernel(i: int) -> None:
        x = np.arange(2 * i, dtype=np.float32).reshape(2, i)
        o = np.empty_like(x)
        scale(x, o)
        assert o[-1, -1] == 2 * (2 * i - 1) + 1, (i, o[-1, -1])

    @trn.kernel
    def tiled(x, out):
        n, d = x.shape
        cols = tl.arange(64)[None, :]
        for i in tl.affine_range(tl.cdiv(n, 128)):
            rows = i * 128 + tl.arange(128)[:, None]
            m = (rows < n) & (cols < d)
            tl.store(out[rows, cols], tl.load(x[rows, cols], mask=m) * 2.0 + 1.0, mask=m)

    def run_tiled(i: int) -> None:
        x = np.arange(40 * i, dtype=np.float32).reshape(i, 40)
        o = np.empty_like(x)
        tiled(x, o)
        assert o[-1, -1] == 2 * (40 * i - 1) + 1, (i, o[-1, -1])

    def run_expr(i: int) -> None:
        r = (torch.ones(i, device="trn") * 2 + 1).sum().item()
        assert r == 3 * i, (r, i)

    return {"kernel": run_kernel, "tiled": run_tiled, "expr": run_expr}[mode]


def child(mode: str, sizes: int) -> dict[str, float]:
    """Measure in this process (run by :func:`measure` in a child)."""
    import ctypes

    from codegen import llvm

    try:
        from trnlang.runtime import codecache

        stats = codecache.stats
    except ImportError:  # a trnlang without the cap (before/after comparisons)
        def stats() -> dict[str, int]:
            return {"loaded": -1, "evicted": 0, "max": 0}

    def trim() -> None:
        ctypes.CDLL(None).malloc_trim(0)

    run = workload(mode)
    for i in range(1, WARMUP + 1):
        run(i)
    trim()
    r0 = rss_mib()
    t0 = time.perf_counter()
    for i in range(WARMUP + 1, WARMUP + 1 + sizes):
        run(i)
    trim()
    r1 = rss_mib()
    live = llvm.live_modules() if hasattr(llvm, "live_modules") else len(llvm._live)
    return {"rss0_mib": r0, "rss1_mib": r1, "growth_mib": r1 - r0, "seconds": time.perf_counter() - t0,
            "live_modules": live, **stats()}


def measure(mode: str, sizes: int, cap: int | None, cache_dir: str, timeout: float = 3600) -> dict[str, float]:
    """Run :func:`child` in a fresh interpreter with ``TRN_MAX_LOADED_KERNELS=cap`` and ``TRN_CACHE_DIR``."""
    env = dict(os.environ, TRN_CACHE_DIR=cache_dir)
    env.pop("TRN_JIT_NO_DISK_CACHE", None)
    if cap is not None:
        env["TRN_MAX_LOADED_KERNELS"] = str(cap)
    root = os.environ.get("TRN_BENCH_ROOT", str(ROOT))  # another checkout (before/after comparisons)
    code = (f"import sys, json; sys.path.insert(0, {root!r}); sys.path.insert(1, {str(ROOT / 'benchmarks')!r}); "
            f"from bench_memory import child; print(json.dumps(child({mode!r}, {sizes})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                         cwd=root)
    if out.returncode:
        raise RuntimeError(f"child failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("kernel", "tiled", "expr"), default="kernel")
    ap.add_argument("--sizes", type=int, default=1000)
    ap.add_argument("--cap", type=int, default=64, help="TRN_MAX_LOADED_KERNELS (0: leave unset)")
    ap.add_argument("--cold", action="store_true", help="measure compiles too (no warm disk cache)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks._host import print_host

    print_host()
    with tempfile.TemporaryDirectory() as d:
        if not args.cold:
            measure(args.mode, args.sizes, 100_000, d)  # fill the disk cache
        r = measure(args.mode, args.sizes, args.cap or None, d)
    print(f"{args.mode}: {args.sizes} new sizes, cap {args.cap or 'default'}{' (cold)' if args.cold else ''}: "
          f"RSS {r['rss0_mib']:.1f} -> {r['rss1_mib']:.1f} MiB (+{r['growth_mib']:.1f} MiB, "
          f"{r['growth_mib'] * 1024 / args.sizes:.1f} KiB/size); loaded {r['loaded']:.0f}, live modules "
          f"{r['live_modules']:.0f}, evicted {r['evicted']:.0f}; {r['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
