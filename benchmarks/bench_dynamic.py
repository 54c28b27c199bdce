"""Issue 15's "done when" figures for shape-polymorphic kernels, each from a fresh process with an empty cache.

``python benchmarks/bench_dynamic.py [--procs 5] [--lengths 60] [--reps 7] [--skip a,b,c,warm,gpt2]``

(a) tutorial 02's softmax kernel over 24 shapes (rows 1, 7, 128, 300, 1000, 1024, 2048, 2049 x columns 64, 781,
    1024): native compilations (bar: <= 6), checked against ``torch.softmax``;
(b) the decode loop (``scaled_dot_product_attention`` + ``softmax`` + ``mul`` on ``trn``, one query token, a KV
    cache one longer per step): compilations over ``--lengths`` new lengths after 3 warm-up lengths (bar: <= 3)
    and the median first call of a new length over the median warm step (bar: <= 2x), wall and CPU time;
(c) cold compile of tutorial 02's softmax on a 1000 x 512 input (trace + compile + first run, empty cache): the
    median over ``--procs`` fresh processes, once with LLVM's one-time start-up inside the figure ("process
    cold") and once after a tiny unrelated kernel paid it ("kernel cold", what ``bench_jit.py`` reports) (bar:
    <= 150 ms). Wall and CPU time are both printed: on a shared machine the wall time includes waiting for a
    core (at load 7-15 on 2 cores: 536 ms wall for 109 ms CPU), so the CPU time is the compile's own cost.
    Where it goes (docs/specialization.md, "The cold compile"): about three quarters in LLVM (O3 module
    pipeline, then machine code), the rest tracing, verifying and lowering; codegen's ``vecmath`` module is
    imported with the lowering, a one-time cost of the process, not of the first kernel that calls ``exp``;
(warm) warm embedding, group norm and batch norm launches with the exact-size kernels and with the runtime row
    count ones, interleaved in one process (CPU time, medians of ``--reps`` rounds of 20-30 calls; issue 15: no
    warm-path regression);
(gpt2) compilations per new length of a small GPT-2 (random config, 2 layers, 128 wide, no download) generating
    on ``trn`` without a KV cache, per kernel name (no bar: shows which families still compile per length).

Every figure comes from a child process (``TRN_CACHE_DIR`` a new temporary directory), so the disk cache and the
in-memory caches start empty. The header prints the CPU model and the load average: on a shared machine the
absolute times are noise, the compile counts are not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROWS = (1, 7, 128, 300, 1000, 1024, 2048, 2049)
COLS = (64, 781, 1024)


def _child_shapes() -> dict[str, Any]:
    import torch

    import trnlang as trn
    from trnlang.demo import load_tutorial

    softmax = load_tutorial("02_fused_softmax").softmax
    trn.reset_compile_stats()
    for n in ROWS:
        for d in COLS:
            x = torch.randn(n, d)
            out = torch.empty_like(x)
            softmax(x, out)
            torch.testing.assert_close(out, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)
    s = trn.compile_stats()
    ks = softmax.compile_stats()
    return {"shapes": len(ROWS) * len(COLS), "compiles": s["compiles"], "disk_hits": s["disk_hits"],
            "traces": ks["traces"], "variants": ks["variants"]}


def _child_decode(lengths: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    import trnlang as trn
    import trnlang.device  # noqa: F401  (registers the trn device)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    heads, dim = 8, 64

    def step(dev: str, length: int) -> tuple[float, float]:
        q, k, v = (torch.randn(1, heads, n, dim) for n in (1, length, length))
        t, c = time.perf_counter(), time.process_time()
        q, k, v = q.to(dev), k.to(dev), v.to(dev)
        o = F.scaled_dot_product_attention(q, k, v)
        s = torch.softmax(o * 0.5, dim=-1)
        float((s * o).sum().cpu())
        return time.perf_counter() - t, time.process_time() - c

    start, warmup = 16, 3
    for n in range(start, start + warmup):
        step("trn", n)
    s0 = trn.compile_stats()
    new, warm, cpu = [], [], []
    for n in range(start + warmup, start + warmup + lengths):
        new.append(step("trn", n))
        warm.append(step("trn", n))
        cpu.append(step("cpu", n))
    s1 = trn.compile_stats()
    per = {k: v["compiles"] + v["disk_hits"] - s0["kernels"].get(k, {}).get("compiles", 0)
           - s0["kernels"].get(k, {}).get("disk_hits", 0) for k, v in s1["kernels"].items()}

    def med(xs: list[tuple[float, float]], i: int) -> float:
        return statistics.median(x[i] for x in xs) * 1e3

    return {"lengths": lengths, "compiles": s1["compiles"] + s1["disk_hits"] - s0["compiles"] - s0["disk_hits"],
            "by_kernel": {k: v for k, v in per.items() if v},
            "new_ms": med(new, 0), "warm_ms": med(warm, 0), "cpu_ms": med(cpu, 0),
            "new_cpu_ms": med(new, 1), "warm_cpu_ms": med(warm, 1)}


def _child_cold(prewarm: bool) -> dict[str, Any]:
    import torch

    import trnlang as trn
    import trnlang.language as tl
    from trnlang.demo import load_tutorial

    softmax = load_tutorial("02_fused_softmax").softmax
    if prewarm:  # LLVM's target set-up and the JIT engine's first use are paid here, not in the figure
        @trn.kernel
        def tiny(x, out):  # a runtime size too: sympy's lazily imported modules are loaded here
            n = x.shape[0]
            for i in tl.affine_range(tl.cdiv(n, 128)):
                r = i * 128 + tl.arange(128)[:, None]
                c = tl.arange(4)[None, :]
                tl.store(out[r, c], tl.load(x[r, c], mask=r < n) + 1.0, mask=r < n)

        tiny(torch.zeros(3, 4), torch.empty(3, 4))
    x = torch.randn(1000, 512)
    out = torch.empty_like(x)
    t, c = time.perf_counter(), time.process_time()
    softmax(x, out)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    torch.testing.assert_close(out, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)
    return {"wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3, "compiles": trn.compile_stats()["compiles"]}


def _child_gpt2(lengths: int) -> dict[str, Any]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    import trnlang as trn
    import trnlang.device  # noqa: F401  (registers the trn device)

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256, bos_token_id=0,
                     eos_token_id=0)
    ref = GPT2LMHeadModel(cfg).eval()
    model = GPT2LMHeadModel(cfg).eval()
    model.load_state_dict(ref.state_dict())
    model = model.to("trn")
    ids = torch.randint(0, 1000, (1, 8))

    def logits(m: Any, dev: str, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return m(ids.to(dev), use_cache=False).logits[:, -1].cpu()

    for _ in range(3):  # warm-up lengths
        ids = torch.cat([ids, logits(model, "trn", ids).argmax(-1, keepdim=True)], 1)
    rows = []
    for _ in range(lengths):
        s0 = trn.compile_stats()
        out = logits(model, "trn", ids)
        s1 = trn.compile_stats()
        torch.testing.assert_close(out, logits(ref, "cpu", ids), atol=1e-3, rtol=1e-3)
        per = {k: v["compiles"] + v["disk_hits"] - s0["kernels"].get(k, {}).get("compiles", 0)
               - s0["kernels"].get(k, {}).get("disk_hits", 0) for k, v in s1["kernels"].items()}
        rows.append({"length": ids.shape[1], "by_kernel": {k: v for k, v in per.items() if v}})
        ids = torch.cat([ids, out.argmax(-1, keepdim=True)], 1)
    return {"rows": rows}


def _child_warm(reps: int) -> dict[str, Any]:
    """Warm embedding launches, exact-size kernel against the runtime-``K`` one, interleaved in one process."""
    import torch
    import torch.nn.functional as F

    import trnlang.device  # noqa: F401  (registers the trn device)
    from stdlib_kernels.indexing import engine as I

    torch.set_num_threads(1)
    poly = I._polymorphic
    rows = []
    for v, c, k in ((1000, 128, 37), (1000, 128, 256), (1000, 128, 300), (5000, 768, 100), (1000, 64, 1000)):
        w = torch.randn(v, c).to("trn")
        ids = torch.randint(0, v, (k,)).to("trn")
        got: dict[str, list[float]] = {"exact": [], "runtime": []}
        for _ in range(reps):
            for name, choice in (("exact", lambda layout, kdim: False), ("runtime", poly)):
                I._polymorphic = choice
                F.embedding(ids, w)
                t = time.process_time()
                for _ in range(30):
                    F.embedding(ids, w)
                got[name].append((time.process_time() - t) / 30 * 1e6)
        I._polymorphic = poly
        rows.append({"case": f"embedding {v}x{c}, {k} ids", "exact_us": statistics.median(got["exact"]),
                     "runtime_us": statistics.median(got["runtime"])})
    return {"rows": rows + _warm_norms(reps)}


def _warm_norms(reps: int) -> list[dict[str, Any]]:
    """Warm group / batch norm, exact-size row kernels against runtime row counts, interleaved."""
    import torch
    import torch.nn.functional as F

    import trnlang as trn
    from stdlib_kernels import tiling as T
    from stdlib_kernels.nn import batchnorm as B
    from stdlib_kernels.nn import norm as N

    names = ("row_moments", "row_dots", "row_affine", "row_affine2")
    kinds: dict[str, dict[str, Any]] = {"runtime": {n: getattr(N, n) for n in names}}
    kinds["runtime"]["gn_fwd"] = N.gn_fwd
    kinds["exact"] = {n: T.RowLaunch(trn.kernel(dynamic=False)(getattr(N, n).kernel.fn)) for n in names}
    kinds["exact"]["gn_fwd"] = trn.kernel(dynamic=False)(N.gn_fwd.fn)

    def use(kind: str) -> None:
        for n, k in kinds[kind].items():
            setattr(N, n, k)
            if hasattr(B, n):
                setattr(B, n, k)

    x1, w1 = torch.randn(6, 32, 7, 7).to("trn"), torch.randn(32).to("trn")
    x2, w2 = torch.randn(4, 64, 30, 30).to("trn"), torch.randn(64).to("trn")
    x3, w3 = torch.randn(7, 64, 12, 12).to("trn").requires_grad_(), torch.randn(64).to("trn").requires_grad_()
    g3 = torch.randn(7, 64, 12, 12).to("trn")
    cases = [("group_norm 6x32x7x7 (gn_fwd)", lambda: F.group_norm(x1, 8, w1, w1)),
             ("group_norm 4x64x30x30 (256-row affine)", lambda: F.group_norm(x2, 2, w2, w2)),
             ("batch_norm fwd+bwd 7x64x12x12",
              lambda: F.batch_norm(x3, None, None, w3, w3, training=True).backward(g3))]
    rows = []
    for name, f in cases:
        got: dict[str, list[float]] = {"exact": [], "runtime": []}
        for _ in range(reps):
            for kind in ("exact", "runtime"):
                use(kind)
                f()
                t = time.process_time()
                for _ in range(20):
                    f()
                got[kind].append((time.process_time() - t) / 20 * 1e6)
        use("runtime")
        rows.append({"case": name, "exact_us": statistics.median(got["exact"]),
                     "runtime_us": statistics.median(got["runtime"])})
    return rows


def _spawn(what: str, *extra: str) -> dict[str, Any]:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="trn-bench-dynamic-") as d:
        env["TRN_CACHE_DIR"] = d
        r = subprocess.run([sys.executable, __file__, "--child", what, *extra], env=env, capture_output=True,
                           text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"child {what} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=5, help="fresh processes for the cold-compile median")
    ap.add_argument("--lengths", type=int, default=60, help="new decode lengths")
    ap.add_argument("--gpt2-lengths", type=int, default=4, help="new GPT-2 generation lengths")
    ap.add_argument("--reps", type=int, default=7, help="interleaved rounds of the warm comparison")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: a, b, c, gpt2, warm")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--prewarm", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        res = {"shapes": _child_shapes, "decode": lambda: _child_decode(args.lengths),
               "cold": lambda: _child_cold(args.prewarm), "gpt2": lambda: _child_gpt2(args.gpt2_lengths),
               "warm": lambda: _child_warm(args.reps)}[args.child]()
        print(json.dumps(res))
        return 0
    from benchmarks._host import print_host

    print_host()
    print(f"load average at start: {_load()}")
    skip = set(filter(None, args.skip.split(",")))
    if "a" not in skip:
        a = _spawn("shapes")
        print(f"(a) tutorial 02 softmax, {a['shapes']} shapes, fresh process, empty cache: {a['compiles']} "
              f"compilations, {a['variants']} variants, {a['traces']} traces (bar: <= 6 compilations)")
    if "b" not in skip:
        b = _spawn("decode", "--lengths", str(args.lengths))
        print(f"(b) decode loop, {b['lengths']} new lengths after 3 warm-up lengths: {b['compiles']} compilations "
              f"(bar: <= 3){' ' + str(b['by_kernel']) if b['by_kernel'] else ''}")
        print(f"    new length {b['new_ms']:.2f} ms, warm step {b['warm_ms']:.2f} ms: "
              f"{b['new_ms'] / b['warm_ms']:.2f}x wall (bar: <= 2x); CPU time {b['new_cpu_ms']:.2f} / "
              f"{b['warm_cpu_ms']:.2f} ms = "
              f"{b['new_cpu_ms'] / b['warm_cpu_ms']:.2f}x; CPU device step {b['cpu_ms']:.2f} ms (medians)")
    if "c" not in skip:
        for prewarm, label in ((False, "process cold (incl. LLVM start-up)"),
                               (True, "kernel cold (LLVM and sympy warm)")):
            runs = [_spawn("cold", *(["--prewarm"] if prewarm else [])) for _ in range(args.procs)]
            w = statistics.median(r["wall_ms"] for r in runs)
            c = statistics.median(r["cpu_ms"] for r in runs)
            each = ", ".join(f"{r['wall_ms']:.0f}" for r in runs)
            print(f"(c) softmax 1000x512 cold compile, {label}: median of {len(runs)} fresh processes "
                  f"{w:.1f} ms wall, {c:.1f} ms CPU (each: {each} ms wall; bar: <= 150 ms)")
    if "gpt2" not in skip:
        g = _spawn("gpt2", "--gpt2-lengths", str(args.gpt2_lengths))
        print("(gpt2) GPT-2 2x128 generation on trn without KV cache, compilations per new length:")
        for r in g["rows"]:
            total = sum(r["by_kernel"].values())
            print(f"    length {r['length']}: {total} {json.dumps(r['by_kernel'], sort_keys=True)}")
    if "warm" not in skip:
        rows = _spawn("warm", "--reps", str(args.reps))["rows"]
        print("(warm) trn ops, exact-size kernels vs runtime row counts, interleaved, CPU time medians:")
        for r in rows:
            print(f"    {r['case']:<38} exact {r['exact_us']:8.1f} us, runtime {r['runtime_us']:8.1f} us, "
                  f"{r['runtime_us'] / r['exact_us']:.2f}x")
    print(f"load average at end: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
