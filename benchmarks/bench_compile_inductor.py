"""torch.compile on trn, the two routes side by side: Inductor device backend vs the custom FX backend.

``python benchmarks/bench_compile_inductor.py [--models mlp,gpt2] [--modes infer,train] [--iters 5]
[--layers 4] [--width 512] [--seq 128] [--batch 4] [--warm-cache]``

Variants, run interleaved in one process (one step of each in turn, ``--iters`` rounds, medians): eager
CPU, eager trn, ``torch.compile`` on trn through the custom FX backend (the default route) and through
Inductor (``TRN_COMPILE=inductor``, :mod:`trnlang.compile.inductor`). The route is chosen when a variant
compiles (its first call), so the two compiled variants are separate copies of the model. ``compile`` is
the first call's wall seconds. The GPT-2 model is ``benchmarks/bench_compile.py``'s, with ``--layers``,
``--width`` and ``--seq`` to shrink it on a loaded machine.

``--warm-cache`` measures the Inductor route's caches instead: a child process compiles and runs one
training step of the MLP/GPT-2 with fresh Inductor and trnlang cache directories (cold), then a second child
does the same with the caches the first left (warm).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._host import print_host  # noqa: E402


def build(name: str, layers: int, width: int, seq: int) -> Any:
    """'mlp' (LayerNorm/GELU, 4 blocks of ``width``) or 'gpt2' (bench_compile's, resized), eval mode, CPU."""
    import torch

    torch.manual_seed(0)
    if name == "mlp":
        blocks: list[Any] = []
        for _ in range(layers):
            blocks += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()]
        return torch.nn.Sequential(*blocks, torch.nn.Linear(width, 10)).eval()
    import transformers

    cfg = transformers.GPT2Config(vocab_size=8192, n_positions=seq, n_embd=width, n_layer=layers, n_head=8,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                  eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _inputs(name: str, batch: int, seq: int, width: int) -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(1)
    if name == "mlp":
        return torch.randn(batch * seq, width, generator=g), torch.randint(0, 10, (batch * seq,), generator=g)
    ids = torch.randint(0, 8192, (batch, seq), generator=g)
    return ids, ids


def _step(name: str, model: Any, x: Any, y: Any, train: bool) -> Callable[[], Any]:
    import torch

    def forward() -> Any:
        if name == "mlp":
            out = model(x)
            return torch.nn.functional.cross_entropy(out, y) if train else out
        return model(input_ids=x, labels=y).loss if train else model(input_ids=x).logits

    if not train:
        def infer() -> Any:
            with torch.no_grad():
                return forward()
        return infer

    def train_step() -> Any:
        loss = forward()
        loss.backward()
        return loss
    return train_step


def _zero_grad(model: Any) -> None:
    for p in model.parameters():
        p.grad = None


def _route(inductor: bool) -> None:
    import trnlang.config

    os.environ["TRN_COMPILE"] = "inductor" if inductor else ""
    trnlang.config.refresh()


def _compiled(model: Any, tag: str) -> Any:
    """``torch.compile`` of a call of ``model`` through a function of its own: Dynamo caches graphs per code
    object and does not guard on which module instance runs, so the two routes' copies must not share one."""
    import torch

    ns: dict[str, Any] = {"model": model}
    exec(f"def run_{tag}(*a, **k):\n    return model(*a, **k)\n", ns)  # noqa: S102 - a fresh code object
    return torch.compile(ns[f"run_{tag}"])


def run_row(name: str, base: Any, train: bool, iters: int, args: argparse.Namespace) -> dict[str, float]:
    """Median ms per step of each variant (interleaved) and each compiled variant's first-call seconds."""
    import torch
    import torch._dynamo

    x, y = _inputs(name, args.batch, args.seq, args.width)
    xt, yt = x.to("trn"), y.to("trn")
    mods = {"cpu": base, "trn": copy.deepcopy(base).to("trn"), "custom": copy.deepcopy(base).to("trn"),
            "inductor": copy.deepcopy(base).to("trn")}
    variants: list[tuple[str, Any, Any, Any, bool | None]] = [
        ("cpu", base, x, y, None), ("trn", mods["trn"], xt, yt, None),
        ("custom", _compiled(mods["custom"], f"custom_{train}"), xt, yt, False),
        ("inductor", _compiled(mods["inductor"], f"inductor_{train}"), xt, yt, True)]
    from trnlang.compile import inductor

    res: dict[str, float] = {}
    steps = []
    for key, model, a, b, route in variants:
        fn = _step(name, model, a, b, train)
        if route is not None:
            _route(route)
            res[f"{key}_graphs_before"] = inductor.STATS["graphs"]
        t0 = time.perf_counter()
        out = fn()
        float(out.detach().float().sum())
        if route is not None:
            res[f"{key}_compile_s"] = time.perf_counter() - t0
        if train:
            _zero_grad(mods[key])
        steps.append((key, model, fn))
    _route(False)
    times: dict[str, list[float]] = {k: [] for k, _, _ in steps}
    for _ in range(iters):
        for key, model, fn in steps:
            t0 = time.perf_counter()
            out = fn()
            float(out.detach().float().sum())
            times[key].append((time.perf_counter() - t0) * 1e3)
            if train:
                _zero_grad(mods[key])
    res.update({k: statistics.median(v) for k, v in times.items()})
    res["inductor_graphs"] = inductor.STATS["graphs"] - res["inductor_graphs_before"]
    torch._dynamo.reset()
    return res


_CHILD = """
import json, os, sys, time
sys.path.insert(0, {root!r})
import torch, trnlang, trnlang.compile
from benchmarks.bench_compile_inductor import build, _inputs, _step
from torch._dynamo.utils import counters
model = build({name!r}, {layers}, {width}, {seq}).to("trn")
x, y = _inputs({name!r}, {batch}, {seq}, {width})
fn = _step({name!r}, torch.compile(model), x.to("trn"), y.to("trn"), True)
t0, c0 = time.perf_counter(), time.process_time()
float(fn())
k = trnlang.compile_stats()
print(json.dumps({{"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "fxgraph_hit": counters["inductor"]["fxgraph_cache_hit"],
                  "fxgraph_miss": counters["inductor"]["fxgraph_cache_miss"],
                  "jit_compiles": k["compiles"], "disk_hits": k["disk_hits"]}}))
"""


def warm_cache(args: argparse.Namespace) -> None:
    """Cold then warm child process, Inductor route, fresh cache directories for the pair."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TRN_COMPILE="inductor", TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor",
                   TRN_CACHE_DIR=f"{tmp}/trn")
        for name in args.models.split(","):
            code = _CHILD.format(root=str(ROOT), name=name, layers=args.layers, width=args.width, seq=args.seq,
                                 batch=args.batch)
            for label in ("cold", "warm"):
                out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
                if out.returncode:
                    print(f"{name} {label}: failed\n{out.stderr[-2000:]}")
                    break
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"{name:5s} {label}: first training step {r['wall']:7.1f} s wall, {r['cpu']:7.1f} s cpu; "
                      f"FX graph cache hits {r['fxgraph_hit']} misses {r['fxgraph_miss']}; "
                      f"JIT compiles {r['jit_compiles']}, disk hits {r['disk_hits']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", default="mlp,gpt2")
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--warm-cache", action="store_true")
    args = ap.parse_args(argv)
    import torch

    import trnlang  # noqa: F401

    print_host()
    print(f"load average {os.getloadavg()}; torch threads {torch.get_num_threads()}; "
          f"layers {args.layers} width {args.width} batch {args.batch} x {args.seq}", flush=True)
    if args.warm_cache:
        warm_cache(args)
        return 0
    print(f"{'model':6s} {'mode':5s} {'cpu ms':>9s} {'trn ms':>9s} {'custom':>9s} {'inductor':>9s} "
          f"{'ind/cus':>8s} {'ind/trn':>8s} {'ind/cpu':>8s} {'cus/cpu':>8s} {'compile s cus/ind':>18s}", flush=True)
    for name in args.models.split(","):
        base = build(name, args.layers, args.width, args.seq)
        for mode in args.modes.split(","):
            r = run_row(name, base, mode == "train", args.iters, args)
            print(f"{name:6s} {mode:5s} {r['cpu']:9.1f} {r['trn']:9.1f} {r['custom']:9.1f} {r['inductor']:9.1f} "
                  f"{r['custom'] / r['inductor']:8.2f} {r['trn'] / r['inductor']:8.2f} "
                  f"{r['cpu'] / r['inductor']:8.2f} {r['cpu'] / r['custom']:8.2f} "
                  f"{r['custom_compile_s']:8.1f}/{r['inductor_compile_s']:<8.1f} "
                  f"load {os.getloadavg()[0]:.1f}; graphs compiled by Inductor {r['inductor_graphs']:.0f}", flush=True)
            if not r["inductor_graphs"]:
                print("  INVALID inductor column: no graph went through Inductor (Dynamo reused graphs the custom "
                      "route compiled for shared code objects, e.g. after a graph break)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
