"""Matmul on this host, trnlang vs torch CPU in one process, at 1 thread and at every thread.

``python benchmarks/bench_matmul.py [--sizes 1024] [--repeat 5] [--threads 1 2]``

Rows (GFLOP/s, median of ``--repeat`` rounds, trnlang and torch timed alternately at the same thread
count, ratio > 1: trnlang faster):

- ``kernel fp32``: the ``matmul`` kernel of ``bench_jit.py`` (grid of 128-row blocks, 128x512x128
  ``nc_matmul`` tiles accumulated in PSUM) vs ``torch.matmul(a_t.T, b)``;
- ``trn mm fp32`` / ``trn mm bf16``: ``a @ b`` on the ``trn`` device vs the same op on CPU tensors
  (torch's bf16 path uses AMX or AVX512-BF16 where the host has them);
- ``gemm fp32``: ``codegen.mathlib.gemm``'s ``sgemm`` called directly (one thread) vs ``torch.matmul``;
- ``gemm bf16 <kind>``: ``codegen.mathlib.gemm_bf16`` (AMX tiles or ``vdpbf16ps``, fp32 out) called directly (one
  thread) vs ``torch.matmul`` of the bf16 tensors, for every bf16 kind the host runs (``--bf16-kinds``).

``TRN_ISA=avx512bf16|avx512|...`` runs the whole benchmark on a narrower path (the header says which).

``--clock cpu`` times the 1-thread rows in process CPU time, which a shared machine's other processes
do not inflate (at more threads, CPU time would sum the threads: those rows stay wall time).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._host import print_host  # noqa: E402

_CLOCK = [time.perf_counter]


def _secs(fn: Callable[[], Any], min_time: float) -> float:
    """Seconds per call over at least ``min_time`` of calls (after one warm-up call)."""
    clock = _CLOCK[0]
    fn()
    n, t0 = 0, clock()
    while True:
        fn()
        n += 1
        dt = clock() - t0
        if dt >= min_time:
            return dt / n


def _pair(ours: Callable[[], Any], theirs: Callable[[], Any], repeat: int, min_time: float) -> tuple[float, float]:
    """Median seconds per call of ``ours`` and ``theirs``, timed alternately."""
    a, b = [], []
    for _ in range(repeat):
        a.append(_secs(ours, min_time))
        b.append(_secs(theirs, min_time))
    return statistics.median(a), statistics.median(b)


def _set_threads(n: int) -> None:
    import torch

    import trnlang.config as config

    os.environ["TRN_NUM_THREADS"] = str(n)
    config.refresh()
    torch.set_num_threads(n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1024])
    ap.add_argument("--threads", type=int, nargs="*", default=sorted({1, os.cpu_count() or 1}))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--no-device", action="store_true", help="skip the trn device rows")
    ap.add_argument("--cases", nargs="*", default=None,
                    help="only the rows whose name starts with one of these (e.g. 'trn mm' 'gemm bf16')")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="1-thread rows: wall time (default; use a quiet machine) or this process's CPU time (robust "
                         "on a shared machine); rows at more threads always use wall time")
    args = ap.parse_args(argv)
    print_host()
    import torch

    from benchmarks.bench_jit import matmul as mm_kernel
    from codegen.mathlib.gemm import default_gemm
    from codegen.mathlib.gemm_bf16 import default_gemm_bf16, runnable_kinds

    if not args.no_device:
        import trnlang.device as td

        td.register()
        warnings.simplefilter("ignore", td.FallbackWarning)
    g = torch.Generator().manual_seed(0)
    print(f"{'case':<28}{'thr':>4}{'trnlang':>10}{'torch':>10}{'ratio':>8}{'load':>7}   (GFLOP/s; load: 1-min "
          f"load average on {os.cpu_count()} cores after the row)")
    for s in args.sizes:
        flop = 2.0 * s ** 3 / 1e9
        a, b = torch.randn(s, s, generator=g), torch.randn(s, s, generator=g)
        o = torch.empty(s, s)
        an, bn, on = a.numpy(), b.numpy(), o.numpy()
        cases: list[tuple[str, Callable[[], Any], Callable[[], Any], bool]] = [
            (f"kernel fp32 {s}", lambda: mm_kernel[max(1, s // 128)](a, b, o), lambda: torch.matmul(a.T, b), True),
            (f"gemm fp32 {s}", lambda: default_gemm().matmul(an, bn, on), lambda: torch.matmul(a, b), False),
        ]
        ah, bh = a.bfloat16(), b.bfloat16()
        for kind in runnable_kinds():
            cases.append((f"gemm bf16 {kind} {s}", functools.partial(default_gemm_bf16(kind).matmul, ah, bh, on),
                          lambda: torch.matmul(ah, bh), False))
        if not args.no_device:
            at, bt = a.to("trn"), b.to("trn")
            aht, bht = ah.to("trn"), bh.to("trn")
            cases += [(f"trn mm fp32 {s}", lambda: at @ bt, lambda: a @ b, True),
                      (f"trn mm bf16 {s}", lambda: aht @ bht, lambda: ah @ bh, True)]
        for name, ours, theirs, threaded in cases:
            if args.cases and not name.startswith(tuple(args.cases)):
                continue
            for n in args.threads if threaded else [1]:
                _set_threads(n)
                _CLOCK[0] = time.process_time if args.clock == "cpu" and n == 1 else time.perf_counter
                t_o, t_t = _pair(ours, theirs, args.repeat, args.min_time)
                print(f"{name:<28}{n:>4}{flop / t_o:>10.1f}{flop / t_t:>10.1f}{t_t / t_o:>8.2f}"
                      f"{os.getloadavg()[0]:>7.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
