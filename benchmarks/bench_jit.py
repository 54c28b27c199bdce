"""JIT benchmarks: trnlang kernels (compiled through llvmlite) side by side with torch CPU in one process.

Prints one table of times and ratios (ratio > 1: trnlang is faster). Run:
``.venv/bin/python benchmarks/bench_jit.py [--quick]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

import trnlang as trn
import trnlang.language as tl
from trnlang.demo import load_tutorial

# The tutorials' kernels, measured as users write them.
_T01 = load_tutorial("01_vector_add")
_T02 = load_tutorial("02_fused_softmax")
_T04 = load_tutorial("04_layernorm")
vector_add, softmax = _T01.vector_add, _T02.softmax
layernorm, rmsnorm = _T04.layernorm, _T04.rmsnorm


@trn.kernel
def gelu_fma(a, b, c, out):
    n, d = a.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        m = rows < n
        t = tl.load(a[rows, cols], mask=m) * tl.load(b[rows, cols], mask=m) + tl.load(c[rows, cols], mask=m)
        tl.store(out[rows, cols], tl.gelu(t), mask=m)


@trn.kernel
def matmul(a_t, b, out):
    """out[M, N] = a_t[K, M].T @ b[K, N]; one program instance per 128-row block of M."""
    k_dim, m_dim = a_t.shape
    _, n_dim = b.shape
    m = tl.program_id(0)
    im = m * 128 + tl.arange(128)[None, :]
    om = m * 128 + tl.arange(128)[:, None]
    for n in tl.affine_range(tl.cdiv(n_dim, 512)):
        jn = n * 512 + tl.arange(512)[None, :]
        acc = tl.zeros((128, 512), tl.float32, buffer=tl.psum)
        for k in tl.affine_range(tl.cdiv(k_dim, 128)):
            ik = k * 128 + tl.arange(128)[:, None]
            acc += tl.matmul(tl.load(a_t[ik, im]), tl.load(b[ik, jn]), transpose_x=True)
        tl.store(out[om, jn], acc)


@trn.kernel
def tiny_add(x, y, out):
    tl.store(out[0:1, 0:16], tl.load(x[0:1, 0:16]) + tl.load(y[0:1, 0:16]))


def bench(fn: Callable[[], Any], min_time: float = 0.3, min_reps: int = 3) -> float:
    """Median seconds per call."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) > 10000:
            break
    times.sort()
    return times[len(times) // 2]


def pair(ours: Callable[[], Any], theirs: Callable[[], Any], rounds: int = 5,
         min_time: float = 0.1) -> tuple[float, float]:
    """Median seconds per call of ``ours`` and ``theirs``, timed alternately (``rounds`` rounds of
    :func:`bench`), so both see the same machine load."""
    a, b = [], []
    for _ in range(rounds):
        a.append(bench(ours, min_time))
        b.append(bench(theirs, min_time))
    a.sort()
    b.sort()
    return a[rounds // 2], b[rounds // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._host import print_host

    print_host()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    rows: list[tuple[str, str, float, float, str]] = []

    def row(name: str, unit: str, ours: float, theirs: float, target: str) -> None:
        rows.append((name, unit, ours, theirs, target))
        print(f"  measured {name}", flush=True)

    n = 2048 if args.quick else 4096
    x = torch.randn(n, 4096, generator=g)
    y = torch.randn(n, 4096, generator=g)
    o = torch.empty_like(x)
    gb = 3 * x.numel() * 4 / 1e9
    row(f"vector add {n}x4096 (GB/s)", "GB/s", gb / bench(lambda: vector_add(x, y, o)),
        gb / bench(lambda: torch.add(x, y, out=o)), ">= 0.9x")
    # row kernels: torch at all threads (the tutorial kernels' bars are against torch's full CPU), the two
    # timed alternately so both see the same machine load
    torch.set_num_threads(os.cpu_count() or 1)
    row(f"fused softmax {n}x4096 ({torch.get_num_threads()} thr)", "ms",
        *(t * 1e3 for t in pair(lambda: softmax(x, o), lambda: torch.softmax(x, -1))), ">= 2x")
    xl = torch.randn(4096, 1024, generator=g)
    ol = torch.empty_like(xl)
    w = torch.randn(1, 1024, generator=g)
    b = torch.randn(1, 1024, generator=g)
    row("layernorm 4096x1024", "ms", *(t * 1e3 for t in pair(
        lambda: layernorm(xl, w, b, ol, 1e-5),
        lambda: torch.nn.functional.layer_norm(xl, (1024,), w[0], b[0], 1e-5))), ">= 1.5x")
    row("rmsnorm 4096x1024", "ms", *(t * 1e3 for t in pair(
        lambda: rmsnorm(xl, w, ol, 1e-6),
        lambda: xl * torch.rsqrt(xl.pow(2).mean(-1, keepdim=True) + 1e-6) * w)), ">= 1.5x")
    a2, b2, c2 = (torch.randn(4096, 1024, generator=g) for _ in range(3))
    row("gelu(a*b+c) 4096x1024", "ms", *(t * 1e3 for t in pair(
        lambda: gelu_fma(a2, b2, c2, ol), lambda: torch.nn.functional.gelu(a2 * b2 + c2))), ">= 2x")
    torch.set_num_threads(1)
    for s in ((512, 1024) if args.quick else (512, 1024, 2048)):
        at = torch.randn(s, s, generator=g)
        bm = torch.randn(s, s, generator=g)
        om = torch.empty(s, s)
        flops = 2 * s ** 3 / 1e9
        launch = matmul[s // 128]
        for threads in (1, 2):
            torch.set_num_threads(threads)
            os.environ["TRN_NUM_THREADS"] = str(threads)
            trn.config.refresh()
            ours, theirs = pair(lambda: launch(at, bm, om), lambda: torch.matmul(at.T, bm))
            row(f"matmul fp32 {s} ({threads} thr, GFLOP/s)", "GFLOP/s", flops / ours, flops / theirs,
                ">= 0.9x at 1024")
        torch.set_num_threads(1)
    # compile / cache / launch
    saved = os.environ.get("TRN_CACHE_DIR")
    with tempfile.TemporaryDirectory() as d:
        os.environ["TRN_CACHE_DIR"] = d
        trn.config.refresh()
        xs = torch.randn(1000, 512)
        os_ = torch.empty_like(xs)
        k_cold = trn.kernel(softmax.fn)
        t0 = time.perf_counter()
        k_cold(xs, os_)
        cold = (time.perf_counter() - t0) * 1e3
        k_disk = trn.kernel(softmax.fn)
        t0 = time.perf_counter()
        k_disk(xs, os_)
        disk = (time.perf_counter() - t0) * 1e3
        run = bench(lambda: softmax(xs, os_)) * 1e3
    if saved is None:  # back to the user's cache (the rows below must not write into the deleted directory)
        os.environ.pop("TRN_CACHE_DIR", None)
    else:
        os.environ["TRN_CACHE_DIR"] = saved
    trn.config.refresh()
    rows.append(("softmax cold compile, empty cache (incl. trace)", "ms", cold, 150.0, "<= 150 ms"))
    rows.append(("softmax disk-cache hit (incl. trace + run)", "ms", disk, 5.0 + run, "<= 5 ms + run"))
    xt, yt, ot = torch.randn(1, 16), torch.randn(1, 16), torch.empty(1, 16)
    rows.append(("warm launch, 16 elements", "us", bench(lambda: tiny_add(xt, yt, ot)) * 1e6,
                 bench(lambda: torch.add(xt, yt, out=ot)) * 1e6, "<= 3x torch.add"))

    print(f"\n{'benchmark':<48}{'trnlang':>12}{'torch':>12}{'speedup':>10}   target")
    for name, unit, ours, theirs, target in rows:
        higher_better = unit in ("GB/s", "GFLOP/s")
        ratio = ours / theirs if higher_better else theirs / ours
        print(f"{name:<48}{ours:>10.2f} {unit if len(unit) < 3 else '':<1}{theirs:>11.2f}{ratio:>10.2f}x  {target}")
    print("\n(speedup > 1: trnlang is faster; times are medians; torch at all threads for the softmax/norm/gelu "
          "rows and at the row's count for matmul, those rows timed alternately with torch; for the compile and "
          "cache rows the 'torch' column is the target)")
    print("load average (1, 5, 15 min): {:.1f} {:.1f} {:.1f} on {} cores".format(*os.getloadavg(), os.cpu_count()))


if __name__ == "__main__":
    main()
