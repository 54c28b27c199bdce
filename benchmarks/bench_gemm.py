"""JIT fp32 and bf16 gemm vs torch.matmul, single thread.

``python benchmarks/bench_gemm.py [--sizes 512 1024 2048] [--repeat 5]``

Prints GFLOP/s of ``codegen.mathlib.gemm`` (``sgemm``: C = A @ B, and ``gemm_tn``:
out = S^T @ V) and of ``torch.matmul`` with ``torch.set_num_threads(1)``, best
of ``--repeat`` runs each, timed alternately so both see the same machine load.
Also prints the gemm module's compile and object-reload times, and then, for every bf16 kind the host
runs (``codegen.mathlib.gemm_bf16``: ``amx``, ``avx512bf16``), GFLOP/s of the bf16 gemm (fp32 out) vs
``torch.matmul`` of the bf16 tensors.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._host import print_host  # noqa: E402
from codegen import llvm  # noqa: E402
from codegen.mathlib.gemm import Gemm, config_for, gemm_module  # noqa: E402


def _best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[512, 1024, 2048])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    print_host()

    t0 = time.perf_counter()
    obj = llvm.compile_ir(gemm_module())
    t1 = time.perf_counter()
    llvm.load_object(obj)
    t2 = time.perf_counter()
    print(f"gemm module ({config_for()}): compile {1e3 * (t1 - t0):.1f} ms, "
          f"reload from object {1e3 * (t2 - t1):.2f} ms ({len(obj)} bytes)")
    g = Gemm()
    rng = np.random.default_rng(0)
    shapes = [(n, n, n) for n in args.sizes] + [(128, 512, 128)]
    print(f"{'M x N x K':>18} | {'sgemm':>8} | {'gemm_tn':>8} | {'torch':>8} | {'sgemm/torch':>11} | {'tn/torch':>8}")
    print("-" * 78)
    for M, N, K in shapes:
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        s = np.ascontiguousarray(a.T)
        c = np.empty((M, N), np.float32)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        g.matmul(a, b, c)
        g.gemm_tn(c, s, b)
        torch.matmul(ta, tb)
        rep = args.repeat if M * N * K >= 1 << 27 else args.repeat * 20
        t_jit = t_tn = t_torch = float("inf")
        for _ in range(2):  # alternate to share machine noise
            t_jit = min(t_jit, _best(lambda: g.matmul(a, b, c), rep))
            t_tn = min(t_tn, _best(lambda: g.gemm_tn(c, s, b), rep))
            t_torch = min(t_torch, _best(lambda: torch.matmul(ta, tb), rep))
        flop = 2.0 * M * N * K
        gj, gt, gr = flop / t_jit / 1e9, flop / t_tn / 1e9, flop / t_torch / 1e9
        print(f"{f'{M}x{N}x{K}':>18} | {gj:8.1f} | {gt:8.1f} | {gr:8.1f} | {gj / gr:11.2f} | {gt / gr:8.2f}")
    _bf16(shapes, args.repeat)


def _bf16(shapes: list[tuple[int, int, int]], repeat: int) -> None:
    import torch

    from codegen.mathlib.gemm_bf16 import default_gemm_bf16, runnable_kinds

    kinds = list(runnable_kinds())
    if not kinds:
        return
    print(f"\n{'bf16 M x N x K':>18} | " + " | ".join(f"{k:>10}" for k in kinds) + f" | {'torch':>8} | ratios")
    g = torch.Generator().manual_seed(0)
    for M, N, K in shapes:
        a, b = torch.randn(M, K, generator=g).bfloat16(), torch.randn(K, N, generator=g).bfloat16()
        c = np.empty((M, N), np.float32)
        rep = repeat if M * N * K >= 1 << 27 else repeat * 20
        ts = {k: float("inf") for k in kinds}
        t_torch = float("inf")
        for _ in range(2):
            for k in kinds:
                gk = default_gemm_bf16(k)
                gk.matmul(a, b, out=c)
                ts[k] = min(ts[k], _best(lambda gk=gk: gk.matmul(a, b, out=c), rep))
            t_torch = min(t_torch, _best(lambda: torch.matmul(a, b), rep))
        flop = 2.0 * M * N * K / 1e9
        print(f"{f'{M}x{N}x{K}':>18} | " + " | ".join(f"{flop / ts[k]:10.1f}" for k in kinds)
              + f" | {flop / t_torch:8.1f} | " + " ".join(f"{t_torch / ts[k]:.2f}" for k in kinds))


if __name__ == "__main__":
    main()
