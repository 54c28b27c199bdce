"""all_reduce bus bandwidth on ``trn`` tensors (trnlang's c10d backend) vs gloo on CPU tensors.

``python benchmarks/bench_distributed.py [--world 2] [--repeat 15] [--max-mb 64] [--block-s 0.2]``

Starts ``--world`` processes on this machine (loopback, one ``cpu:gloo,trn:trn`` group). For each size
from 1 KiB to ``--max-mb`` MiB (float32, x4 per row) the processes time blocks of in-place ``all_reduce``
(SUM) calls on CPU tensors (torch's gloo), on ``trn`` tensors with the cross-rank agreement check
(``TRN_DIST_CHECK=1``, the default), without it (``=0``), through torch's own ``all_reduce`` (``kernel``:
the C++ dispatcher boxes ``c10d::allreduce_`` into trnlang's Python ``PrivateUse1`` kernel, the path
``dist.all_reduce`` took before trnlang's front door, and the one C++ callers such as DDP take) and through
torch's ``all_reduce`` to an empty Python kernel (``floor``: the least that dispatch costs, see
:class:`_Floor`). The five kinds of block alternate, in a rotating order, ``--repeat`` times, so they see the
same machine load; a block lasts about ``--block-s`` seconds (every rank uses the largest block length any
rank asks for). Rank 0 prints the median time per call of each kind and, as the ratio, the median over the
repetitions of (gloo block time / trn block time): each ratio compares blocks run back to back. Bus
bandwidth is nccl-tests' ``2 (n-1)/n * bytes / time``. The host's CPU model and the load average before and
after are printed with the table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._host import cpu_model, print_host  # noqa: E402

KINDS = ("cpu", "trn", "trn_nocheck", "kernel", "floor")


def _time(fn: Callable[[], Any], iters: int, cpu: list[float] | None = None) -> float:
    """Wall seconds per call of ``fn`` over ``iters`` calls; appends the process's CPU seconds per call
    (every thread: the caller's and gloo's) to ``cpu``."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(iters):
        fn()
    if cpu is not None:
        cpu.append((time.process_time() - c0) / iters)
    return (time.perf_counter() - t0) / iters


def _load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


class _Floor:
    """The least any Python ``PrivateUse1`` kernel of ``c10d::allreduce_`` can do: hand a CPU view made once
    to gloo's all-reduce and return its work (no check, no view per call, no group lookup). Installed over
    trnlang's kernel for the ``floor`` blocks only: what torch's dispatch to a Python kernel costs."""

    def __init__(self, trn: Any) -> None:
        import torch.distributed as dist

        from trnlang.device import memory
        from trnlang.distributed import c10d

        self.view = [memory.cpu_view(trn)]
        world: Any = dist.group.WORLD
        self.gloo = c10d._group_of(world.boxed())[0].gloo
        self.opts = dist.AllreduceOptions()
        self.opts.reduceOp = dist.ReduceOp.SUM  # type: ignore[assignment]  # torch converts a RedOpType
        self.opts.asyncOp = False
        self.lib: Any = None

    def kernel(self, tensors: Any, pg: Any, op: Any, sparse: Any = None, async_op: bool = True,
               timeout: int = -1) -> Any:
        return tensors, self.gloo.allreduce(self.view, self.opts).boxed()

    def __enter__(self) -> None:
        import warnings

        import torch

        self.lib = torch.library.Library("c10d", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.lib.impl("allreduce_", self.kernel, "PrivateUse1")

    def __exit__(self, *exc: Any) -> None:
        self.lib._destroy()  # trnlang's kernel is the PrivateUse1 kernel again


def _measure(nbytes: int, args: argparse.Namespace) -> dict[str, list[float]]:
    """Per kind, the time per call of each of ``args.repeat`` blocks, the kinds alternating."""
    import contextlib

    import torch
    import torch.distributed as dist

    n = nbytes // 4
    cpu = torch.ones(n)
    trn = torch.ones(n, device="trn")
    floor = _Floor(trn)

    # torch's own all_reduce: through the C++ dispatcher to a PrivateUse1 kernel (trnlang's, or the floor's)
    torch_all_reduce = getattr(dist.all_reduce, "__wrapped__", dist.all_reduce)

    def run_trn(check: str, fn: Callable[[Any], Any] = dist.all_reduce) -> None:
        os.environ["TRN_DIST_CHECK"] = check
        fn(trn)

    fns: dict[str, Callable[[], Any]] = {"cpu": lambda: dist.all_reduce(cpu), "trn": lambda: run_trn("1"),
                                         "trn_nocheck": lambda: run_trn("0"),
                                         "kernel": lambda: run_trn("1", torch_all_reduce),
                                         "floor": lambda: torch_all_reduce(trn)}

    def ctx(k: str) -> Any:
        return floor if k == "floor" else contextlib.nullcontext()

    warm = {}
    for k, f in fns.items():
        with ctx(k):
            warm[k] = _time(f, 3)
    # a block of about --block-s seconds; every rank runs the same number of calls (the largest asked for)
    want = torch.tensor([max(2, min(1000, int(args.block_s / max(warm.values()))))])
    dist.all_reduce(want, op=dist.ReduceOp.MAX)
    iters = int(want.item())
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    for k in KINDS:
        times[k + "_cpu"] = []
    for rep in range(args.repeat):
        for j in range(len(KINDS)):
            k = KINDS[(rep + j) % len(KINDS)]  # rotate the order: no kind always runs first
            with ctx(k):
                times[k].append(_time(fns[k], iters, times[k + "_cpu"]))
    os.environ["TRN_DIST_CHECK"] = "1"
    return times


def worker(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("cpu:gloo,trn:trn", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=600))
    load_before = _load()
    rows = []
    nbytes = 1024
    while nbytes <= args.max_mb * 2**20:
        rows.append((nbytes, _measure(nbytes, args)))
        nbytes *= 4
    # every rank computed its own times; rank 0's are printed (all ranks move the same bytes)
    if rank == 0:
        factor = 2 * (world - 1) / world
        print(f"all_reduce (SUM, float32), {world} processes on one host, loopback; host CPU: {cpu_model()} "
              f"({os.cpu_count()} logical CPUs); torch {torch.__version__}; {args.repeat} alternating blocks "
              f"per kind; {load_before} (start), {_load()} (end)")
        print(f"{'size':>8} | {'gloo CPU us':>11} {'GB/s':>7} | {'trn us':>9} {'GB/s':>7} {'ratio':>6} | "
              f"{'trn nocheck us':>14} {'ratio':>6} | {'kernel us':>9} {'ratio':>6} | {'floor us':>9} {'ratio':>6} | "
              "CPU us/call: gloo  trn  nocheck  kernel  floor")
        for nbytes, times in rows:
            med = {k: statistics.median(v) for k, v in times.items()}
            bw = {k: factor * nbytes / med[k] / 1e9 for k in KINDS}
            ratio = {k: statistics.median(c / t for c, t in zip(times["cpu"], times[k])) for k in KINDS[1:]}
            size = f"{nbytes // 1024} KiB" if nbytes < 2**20 else f"{nbytes // 2**20} MiB"
            print(f"{size:>8} | {med['cpu'] * 1e6:>11.1f} {bw['cpu']:>7.3f} | {med['trn'] * 1e6:>9.1f} "
                  f"{bw['trn']:>7.3f} {ratio['trn']:>5.2f}x | {med['trn_nocheck'] * 1e6:>14.1f} "
                  f"{ratio['trn_nocheck']:>5.2f}x | {med['kernel'] * 1e6:>9.1f} {ratio['kernel']:>5.2f}x | "
                  f"{med['floor'] * 1e6:>9.1f} {ratio['floor']:>5.2f}x | "
                  f"{med['cpu_cpu'] * 1e6:>15.0f} {med['trn_cpu'] * 1e6:>4.0f} {med['trn_nocheck_cpu'] * 1e6:>8.0f} "
                  f"{med['kernel_cpu'] * 1e6:>7.0f} {med['floor_cpu'] * 1e6:>6.0f}")
        print("ratio = median over the repetitions of gloo-on-CPU block time / trn block time "
              "(= trn bus bandwidth / gloo's; 1.00x: the trn backend adds nothing); trn = dist.all_reduce "
              "(trnlang's front door); kernel = torch's all_reduce through the C++ dispatcher to trnlang's "
              "PrivateUse1 kernel (the path before the front door, and DDP's); floor = the same dispatch to an "
              "empty Python kernel (gloo's all-reduce on a view made once, no check); "
              "CPU us/call: rank 0's process CPU time (all threads) per call, median")
        sys.stdout.flush()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--max-mb", type=float, default=64, help="largest size in MiB (e.g. 0.0625: up to 64 KiB)")
    ap.add_argument("--block-s", type=float, default=0.2, help="seconds per timed block (about)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds before the processes are killed")
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
            str(args.max_mb), "--block-s", str(args.block_s), "--port", str(port)]
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
