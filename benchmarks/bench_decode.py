"""A decode loop on ``trn``: what does a new sequence length cost?

``python benchmarks/bench_decode.py [--warmup 3] [--lengths 60] [--start 16]``

One query token attends to a KV cache that grows by one per step (``scaled_dot_product_attention``,
then ``softmax`` and ``mul`` + ``sum`` on the result), the shape pattern of autoregressive generation.
After ``--warmup`` lengths, each of ``--lengths`` new lengths is run twice: the first call of a length
("new") and the second ("warm"). Printed: median new and warm step times on trn, their ratio (issue 15's
bar: <= 2x), the same step on the CPU, and how many native compilations the new lengths caused
(``trn.compile_stats()``, every kernel of the process; bar: <= 3) and kernel traces (``KernelFn.compile_stats``
of the standard library's kernels).

The disk cache is pointed at a fresh temporary directory, so compilations are real.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

H, D = 8, 64


def _kernels() -> list:
    """Every ``KernelFn`` object reachable from the standard library's modules."""
    from trnlang.runtime.kernel import KernelFn

    seen: dict[int, KernelFn] = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("stdlib_kernels") or mod is None:
            continue
        for v in vars(mod).values():
            if isinstance(v, KernelFn):
                seen[id(v)] = v
    return list(seen.values())


def _traces() -> dict[str, int]:
    return {k.fn.__name__: k.compile_stats()["traces"] for k in _kernels()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--lengths", type=int, default=60)
    ap.add_argument("--start", type=int, default=16, help="first cache length")
    args = ap.parse_args(argv)
    os.environ.setdefault("TRN_CACHE_DIR", tempfile.mkdtemp(prefix="trn-bench-decode-"))

    import torch
    import torch.nn.functional as F

    import trnlang.device  # noqa: F401  (registers the trn device)
    from benchmarks._host import print_host

    print_host()
    torch.manual_seed(0)

    def step(dev: str, length: int) -> float:
        q = torch.randn(1, H, 1, D).to(dev)
        k = torch.randn(1, H, length, D).to(dev)
        v = torch.randn(1, H, length, D).to(dev)
        o = F.scaled_dot_product_attention(q, k, v)
        s = torch.softmax(o * 0.5, dim=-1)
        return float((s * o).sum().cpu())

    def timed(dev: str, length: int) -> float:
        t = time.perf_counter()
        step(dev, length)
        return time.perf_counter() - t

    lengths = range(args.start, args.start + args.warmup)
    for n in lengths:
        step("trn", n)
    import trnlang as trn

    before = _traces()
    stats0 = trn.compile_stats()
    new, warm, cpu = [], [], []
    first = args.start + args.warmup
    for n in range(first, first + args.lengths):
        new.append(timed("trn", n))
        warm.append(timed("trn", n))
        timed("cpu", n)
        cpu.append(timed("cpu", n))
    after = _traces()
    stats1 = trn.compile_stats()
    native = sum(stats1[e] - stats0[e] for e in ("compiles", "disk_hits"))
    by_kernel = {k: c - before.get(k, 0) for k, c in after.items() if c - before.get(k, 0)}
    traced = sum(by_kernel.values())
    mn, mw, mc = (statistics.median(x) * 1e3 for x in (new, warm, cpu))
    print(f"decode loop, {H} heads x {D}, cache lengths {first}..{first + args.lengths - 1} after "
          f"{args.warmup} warm-up lengths")
    print(f"  new length  {mn:9.2f} ms  (median of {args.lengths})")
    print(f"  warm step   {mw:9.2f} ms  -> new / warm = {mn / mw:.2f}x (bar <= 2x)")
    print(f"  CPU step    {mc:9.2f} ms  (second call of each length) -> trn warm / CPU = {mw / mc:.2f}x")
    print(f"  native compilations (trn.compile_stats(): compiles + disk hits) during the new lengths: {native} "
          f"(bar: <= 3)")
    print(f"  kernel traces during the new lengths: {traced}"
          + (f": {', '.join(f'{k} {c}' for k, c in sorted(by_kernel.items()))}" if by_kernel else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
