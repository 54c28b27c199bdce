"""Overhead of the ``trn`` torch device against the CPU op, for tiny tensors.

``python benchmarks/bench_device.py [--repeat 7] [--iters 300]``

Rows (each the median of ``--repeat`` timings of ``--iters`` calls, CPU and trn timed alternately
so both see the same machine load):

- ``x + y`` on 16-element float32 tensors: the native path (dispatch -> lowering -> kernel
  launch) vs the CPU op (target <= 5x);
- tensor-scalar ops on the same tensor (``x * 2.5``, ``x + 1``, ``x > 0.5``: the tensor-scalar fast lane,
  target <= 5x), and ``nll_loss`` on an 8 x 10 batch (mean reduction);
- ``x.to("trn")`` of a 16-element tensor (target <= 20 us), vs ``x.clone()`` on the CPU;
- ``.cpu()`` of a 16-element trn tensor, and ``torch.sin`` (a CPU-fallback op) for reference;
- the kernel launch alone with numpy arrays and with trn tensors (the runtime's share).

``--ops gpt2|llama [--infer]`` prints instead the per-op table of one eager training step (or inference) of
``benchmarks/bench_compile.py``'s model on trn and on the CPU: per ATen op (and autograd node) the calls and the
self time in ms (torch.profiler, CPU activity: on trn the lowering's host code and its kernels), sorted by the
trn - CPU difference, after two warm-up steps and the step times (wall and process CPU ms) of three more.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._host import print_host  # noqa: E402

_CLOCK = [time.perf_counter]


def _time(fn: Callable[[], Any], iters: int) -> float:
    clock = _CLOCK[0]
    t0 = clock()
    for _ in range(iters):
        fn()
    return (clock() - t0) / iters * 1e6


def _pair(cpu: Callable[[], Any], trn: Callable[[], Any], iters: int, repeat: int) -> tuple[float, float]:
    for f in (cpu, trn):
        for _ in range(20):
            f()
    cs, ts = [], []
    for _ in range(repeat):
        cs.append(_time(cpu, iters))
        ts.append(_time(trn, iters))
    return statistics.median(cs), statistics.median(ts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time (default; use a quiet machine) or this process's CPU time (robust on a "
                         "loaded machine: time slices given to other processes are not counted)")
    ap.add_argument("--ops", choices=("gpt2", "llama"), help="the per-op table of a model step instead")
    ap.add_argument("--infer", action="store_true", help="with --ops: inference instead of a training step")
    ap.add_argument("--top", type=int, default=30, help="with --ops: rows to print")
    args = ap.parse_args(argv)
    print_host()
    if args.ops:
        return op_table(args.ops, not args.infer, args.top)
    _CLOCK[0] = time.perf_counter if args.clock == "wall" else time.process_time
    import numpy as np
    import torch

    import trnlang as trn
    import trnlang.device as td
    import trnlang.language as tl

    @trn.kernel
    def add16(x, y, out):
        """The kernel the native ``x + y`` runs for 16 elements, reduced to its essence."""
        tl.store(out[0:16], tl.load(x[0:16]) + tl.load(y[0:16]))

    td.register()
    warnings.simplefilter("ignore", td.FallbackWarning)
    x, y = torch.randn(16), torch.randn(16)
    xt, yt = x.to("trn"), y.to("trn")
    ot = torch.empty(16, device="trn")
    xn, yn, on = x.numpy(), y.numpy(), np.empty(16, np.float32)
    before = td.fallback_stats()
    rows = []
    c, t = _pair(lambda: x + y, lambda: xt + yt, args.iters, args.repeat)
    rows.append(("x + y (16 x f32), native", c, t, 5.0))
    for name, cf, tf in (("x * 2.5", lambda: x * 2.5, lambda: xt * 2.5), ("x + 1", lambda: x + 1, lambda: xt + 1),
                         ("x > 0.5", lambda: x > 0.5, lambda: xt > 0.5)):
        c, t = _pair(cf, tf, args.iters, args.repeat)
        rows.append((f"{name} (16 x f32), native", c, t, 5.0))
    lp = torch.log_softmax(torch.randn(8, 10), 1)
    tg = torch.randint(0, 10, (8,))
    lpt, tgt = lp.to("trn"), tg.to("trn")
    nll = torch.nn.functional.nll_loss
    c, t = _pair(lambda: nll(lp, tg), lambda: nll(lpt, tgt), args.iters, args.repeat)
    rows.append(("nll_loss (8 x 10), native", c, t, 5.0))
    c, t = _pair(lambda: x.clone(), lambda: x.to("trn"), args.iters, args.repeat)
    rows.append(('x.to("trn") (16 x f32)', c, t, None))
    to_trn_us = t
    c, t = _pair(lambda: x.clone(), lambda: xt.cpu(), args.iters, args.repeat)
    rows.append(("x.cpu() (16 x f32)", c, t, None))
    c, t = _pair(lambda: torch.sin(x), lambda: torch.sin(xt), args.iters, args.repeat)
    rows.append(("torch.sin (CPU fallback)", c, t, None))
    c, t = _pair(lambda: x + y, lambda: add16(xn, yn, on), args.iters, args.repeat)
    rows.append(("  kernel launch, numpy args", c, t, None))
    c, t = _pair(lambda: x + y, lambda: add16(xt, yt, ot), args.iters, args.repeat)
    rows.append(("  kernel launch, trn args", c, t, None))
    native_ok = "aten::add.Tensor" not in td.fallback_stats() or \
        td.fallback_stats().get("aten::add.Tensor") == before.get("aten::add.Tensor")
    print(f"torch {torch.__version__}; trn device overhead, median of {args.repeat} x {args.iters} calls")
    print(f"{'operation':<30} | {'CPU us':>8} | {'trn us':>8} | {'trn/CPU':>8} | target")
    print("-" * 74)
    for name, cu, tu, target in rows:
        tgt = f"<= {target:g}x" if target else ""
        print(f"{name:<30} | {cu:>8.2f} | {tu:>8.2f} | {tu / cu:>7.1f}x | {tgt}")
    print("-" * 74)
    print(f'x.to("trn"): {to_trn_us:.1f} us (target <= 20 us); x + y ran natively: {native_ok}')
    return 0


def _model_step(model: Any, ids: Any, train: bool) -> Any:
    import torch

    if train:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        return loss
    with torch.no_grad():
        return model(input_ids=ids).logits


def _self_times(model: Any, ids: Any, train: bool) -> dict[str, list[float]]:
    """Per ATen op / autograd node of one step: [calls, self CPU ms] (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _model_step(model, ids, train)
    agg: dict[str, list[float]] = {}
    for e in prof.key_averages():
        if e.key.startswith(("aten::", "autograd::")):
            row = agg.setdefault(e.key, [0, 0.0])
            row[0] += e.count
            row[1] += e.self_cpu_time_total / 1e3
    return agg


def op_table(name: str, train: bool, top: int) -> int:
    """Print the per-op table (op, calls, trn ms, CPU ms) of one eager step of ``name`` on trn and on the CPU."""
    import copy

    import torch

    import trnlang.device as td
    from benchmarks.bench_compile import build

    td.register()
    warnings.simplefilter("ignore", td.FallbackWarning)
    base = build(name)
    if train:
        base.train()
    ids = torch.randint(0, 8192, (4, 128), generator=torch.Generator().manual_seed(0))
    runs = {"cpu": (copy.deepcopy(base), ids), "trn": (copy.deepcopy(base).to("trn"), ids.to("trn"))}
    for _ in range(2):
        for m, x in runs.values():
            _model_step(m, x, train)
    times: dict[str, list[str]] = {k: [] for k in runs}
    for _ in range(3):
        for k, (m, x) in runs.items():
            w0, c0 = time.perf_counter(), time.process_time()
            float(_model_step(m, x, train).float().sum().cpu())
            times[k].append(f"{(time.perf_counter() - w0) * 1e3:.0f}/{(time.process_time() - c0) * 1e3:.0f}")
    tabs = {k: _self_times(m, x, train) for k, (m, x) in runs.items()}
    print(f"{name} {'training step' if train else 'inference'}, 4 x 128 tokens; step ms wall/CPU: "
          + "; ".join(f"{k} {' '.join(v)}" for k, v in times.items()))
    zero = [0, 0.0]
    keys = sorted(set(tabs["trn"]) | set(tabs["cpu"]),
                  key=lambda k: tabs["cpu"].get(k, zero)[1] - tabs["trn"].get(k, zero)[1])
    print(f"{'op':<58} | {'calls':>5} | {'trn ms':>8} | {'CPU ms':>8} | {'trn-CPU':>8}")
    print("-" * 98)
    for k in keys[:top]:
        t, c = tabs["trn"].get(k, zero), tabs["cpu"].get(k, zero)
        print(f"{k[:58]:<58} | {int(t[0] or c[0]):>5} | {t[1]:>8.2f} | {c[1]:>8.2f} | {t[1] - c[1]:>8.2f}")
    tot = {k: sum(v[1] for v in tab.values()) for k, tab in tabs.items()}
    print("-" * 98)
    print(f"{'all ops (self time, profiler on)':<58} | {'':>5} | {tot['trn']:>8.1f} | {tot['cpu']:>8.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
