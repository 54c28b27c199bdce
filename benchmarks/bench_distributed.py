"""all_reduce bus bandwidth on ``trn`` tensors (trnlang's c10d backend) vs gloo on CPU tensors.

``python benchmarks/bench_distributed.py [--world 2] [--repeat 5] [--max-mb 64]``

Starts ``--world`` processes on this machine (loopback, one ``cpu:gloo,trn:trn`` group). For each size
from 1 KiB to ``--max-mb`` MiB (float32, x4 per row) rank 0 prints the median time of an in-place
``all_reduce`` (SUM) on CPU tensors (torch's gloo), on ``trn`` tensors with the cross-rank agreement check
(``TRN_DIST_CHECK=1``, the default) and without it (``=0``), the three timed alternately so they see the
same machine load. Bus bandwidth is nccl-tests' ``2 (n-1)/n * bytes / time``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._host import print_host  # noqa: E402


def cpu_model() -> str:
    """The host CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _time(fn: Callable[[], Any], iters: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def worker(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("cpu:gloo,trn:trn", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    rows = []
    nbytes = 1024
    while nbytes <= args.max_mb * 2**20:
        n = nbytes // 4
        cpu = torch.ones(n)
        trn = torch.ones(n, device="trn")

        def run_trn(check: str, t: torch.Tensor = trn) -> None:
            os.environ["TRN_DIST_CHECK"] = check
            dist.all_reduce(t)

        fns = {"cpu": lambda c=cpu: dist.all_reduce(c), "trn": lambda: run_trn("1"),
               "trn_nocheck": lambda: run_trn("0")}
        iters = max(2, min(200, (4 * 2**20) // nbytes))
        for f in fns.values():
            f()
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.repeat):
            for k, f in fns.items():
                times[k].append(_time(f, iters))
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append((nbytes, med))
        nbytes *= 4
    os.environ["TRN_DIST_CHECK"] = "1"
    # every rank computed its own medians; rank 0's are printed (all ranks move the same bytes)
    if rank == 0:
        factor = 2 * (world - 1) / world
        print(f"all_reduce (SUM, float32), {world} processes on one host, loopback; "
              f"host CPU: {cpu_model()} ({os.cpu_count()} logical CPUs); torch {torch.__version__}")
        print(f"{'size':>8} | {'gloo CPU us':>11} {'GB/s':>7} | {'trn us':>9} {'GB/s':>7} {'ratio':>6} | "
              f"{'trn nocheck us':>14} {'GB/s':>7} {'ratio':>6}")
        for nbytes, med in rows:
            bw = {k: factor * nbytes / v / 1e9 for k, v in med.items()}
            size = f"{nbytes // 1024} KiB" if nbytes < 2**20 else f"{nbytes // 2**20} MiB"
            print(f"{size:>8} | {med['cpu'] * 1e6:>11.1f} {bw['cpu']:>7.3f} | {med['trn'] * 1e6:>9.1f} "
                  f"{bw['trn']:>7.3f} {bw['trn'] / bw['cpu']:>5.2f}x | {med['trn_nocheck'] * 1e6:>14.1f} "
                  f"{bw['trn_nocheck']:>7.3f} {bw['trn_nocheck'] / bw['cpu']:>5.2f}x")
        print("ratio = trn bus bandwidth / gloo-on-CPU bus bandwidth (1.00x: the trn backend adds nothing)")
        sys.stdout.flush()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--max-mb", type=float, default=64, help="largest size in MiB (e.g. 0.0625: up to 64 KiB)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds before the processes are killed")
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank is not None:
        worker(args.rank, args.world, args.port, args)
        return 0
    print_host()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, TRN_FALLBACK=os.environ.get("TRN_FALLBACK", "error"))
    base = [sys.executable, __file__, "--world", str(args.world), "--repeat", str(args.repeat), "--max-mb",
            str(args.max_mb), "--port", str(port)]
    procs = [subprocess.Popen(base + ["--rank", str(r)], env=env, cwd=str(ROOT)) for r in range(args.world)]
    deadline = time.monotonic() + args.timeout
    rc = 0
    for p in procs:
        try:
            rc |= p.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            rc = 1
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return rc


if __name__ == "__main__":
    sys.exit(main())
