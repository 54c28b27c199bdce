"""torch.compile on trn: GPT-2- and Llama-style models, compiled trn vs eager trn vs eager CPU vs Inductor CPU.

``python benchmarks/bench_compile.py [--models gpt2,llama] [--modes infer,train] [--iters 5] [--clock wall|cpu]
[--no-inductor] [--compile-times]``

Each model has 4 layers, 512 wide, 8 heads, a batch of 4 x 128 tokens (vocabulary 8192, random weights,
no dropout). Rows: inference (forward under ``no_grad``) and a training step (forward, loss, backward).
Columns: median milliseconds per step of eager CPU, ``torch.compile`` on the CPU (Inductor's C++ backend),
eager trn and ``torch.compile`` on trn (the default backend, which routes trn graphs to trnlang), then the
ratios. The variants run interleaved (one step of each in turn, ``--iters`` rounds), so a change of the
machine's load hits all of them alike; every variant uses the same thread count (``torch.set_num_threads``
and ``TRN_NUM_THREADS``). ``compile`` is the first compiled-trn call of the row (wall and CPU seconds).

``--compile-times`` measures caching instead: per model and mode, a child process compiles and runs one
step (inference, or a training step) with empty caches (a fresh ``TRN_CACHE_DIR`` and Inductor cache
directory: cold), then a second child does the same with the caches the first one left (warm); each prints
its first call's wall and CPU seconds and the cache hits.
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

_CLOCK: list[Callable[[], float]] = [time.perf_counter]


def build(name: str) -> Any:
    """The model ``name`` ('gpt2' or 'llama') with random weights, in eval mode, on the CPU."""
    import torch
    import transformers

    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=8192, n_positions=128, n_embd=512, n_layer=4, n_head=8,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                      eos_token_id=0)
        model = transformers.GPT2LMHeadModel(cfg).eval()
    else:
        cfg = transformers.LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                                       num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=128)
        model = transformers.LlamaForCausalLM(cfg).eval()
    # the loss the model would pick anyway; named, because without it HF's loss_function property logs a
    # warning, and a logging call is a graph break in Dynamo, which then traces the forward three times
    # (on every backend, CPU Inductor included)
    model.loss_type = "ForCausalLM"
    return model


def _step(model: Any, ids: Any, train: bool) -> Callable[[], Any]:
    import torch

    if not train:
        def infer() -> Any:
            with torch.no_grad():
                return model(input_ids=ids).logits
        return infer

    def train_step() -> Any:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss
    return train_step


def _sync(out: Any) -> None:
    if out.device.type == "trn":
        out.cpu()


def run_row(name: str, base: Any, train: bool, iters: int, inductor: bool) -> dict[str, float]:
    """Median ms per step of each variant, measured interleaved; the compiled-trn first call's seconds."""
    import torch
    import torch._dynamo

    ids = torch.randint(0, 8192, (4, 128), generator=torch.Generator().manual_seed(1))
    trn_model = copy.deepcopy(base).to("trn")
    variants: list[tuple[str, Any, Any]] = [("cpu", base, ids)]
    if inductor:
        variants.append(("cpu_compiled", torch.compile(copy.deepcopy(base)), ids))
    variants += [("trn", trn_model, ids.to("trn")), ("trn_compiled", torch.compile(trn_model), ids.to("trn"))]
    res: dict[str, float] = {}
    steps = []
    for key, model, x in variants:
        fn = _step(model, x, train)
        t0, c0 = time.perf_counter(), time.process_time()
        _sync(fn())  # warm-up: compiles (graphs, kernels)
        if key == "trn_compiled":
            res["compile_wall"], res["compile_cpu"] = time.perf_counter() - t0, time.process_time() - c0
        _sync(fn())
        steps.append((key, model, fn))
    times: dict[str, list[float]] = {k: [] for k, _, _ in steps}
    for _ in range(iters):
        for key, model, fn in steps:
            t0 = _CLOCK[0]()
            _sync(fn())
            times[key].append((_CLOCK[0]() - t0) * 1e3)
            if train:
                model.zero_grad(set_to_none=True)
    res.update({k: statistics.median(v) for k, v in times.items()})
    torch._dynamo.reset()
    return res


_CHILD = """
import json, os, sys, time
sys.path.insert(0, {root!r})
import torch, trnlang, trnlang.compile
from benchmarks.bench_compile import build
torch.set_num_threads({threads})
model = build({name!r}).to("trn")
ids = torch.randint(0, 8192, (4, 128), generator=torch.Generator().manual_seed(1)).to("trn")
run = torch.compile(model)
t0, c0 = time.perf_counter(), time.process_time()
if {train!r}:
    loss = run(input_ids=ids, labels=ids).loss
    loss.backward()
    float(loss.detach())
else:
    with torch.no_grad():
        run(input_ids=ids).logits.cpu()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
s, k = trnlang.compile.compile_stats(), trnlang.compile_stats()
print(json.dumps({{"wall": wall, "cpu": cpu, "plan_hits": s["graph_cache_hits"], "plan_misses": s["graph_cache_misses"],
                  "backend_s": s["compile_seconds"], "traces": k["traces"], "jit_compiles": k["compiles"],
                  "disk_hits": k["disk_hits"]}}))
"""


def compile_times(models: list[str], modes: list[str], threads: int) -> None:
    """Cold then warm first-call times of each model and mode, each in a new process sharing one fresh cache."""
    print(f"{'model':6} {'mode':6} {'caches':6} {'wall s':>7} {'cpu s':>7} {'backend s':>9} {'plans hit/miss':>14} "
          f"{'traces':>6} {'jit compiles':>12} {'disk hits':>9}")
    for name, mode in [(n, m) for n in models for m in modes]:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, TRN_CACHE_DIR=os.path.join(tmp, "cache"), TRN_NUM_THREADS=str(threads),
                       TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
            env.pop("TRN_JIT_NO_DISK_CACHE", None)
            for label in ("cold", "warm"):
                code = _CHILD.format(root=str(ROOT), threads=threads, name=name, train=mode == "train")
                r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"{name:6} {mode:6} {label:6} failed: {r.stderr[-800:]}", flush=True)
                    break
                d = json.loads(r.stdout.strip().splitlines()[-1])
                print(f"{name:6} {mode:6} {label:6} {d['wall']:7.1f} {d['cpu']:7.1f} {d['backend_s']:9.2f} "
                      f"{d['plan_hits']:>6}/{d['plan_misses']:<7} {d['traces']:6} {d['jit_compiles']:12} "
                      f"{d['disk_hits']:9}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--modes", default="infer,train")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time (default; a quiet machine) or this process's CPU time over all its threads "
                         "(robust to other processes' load, but it counts work, not elapsed time)")
    ap.add_argument("--no-inductor", action="store_true", help="skip torch.compile on the CPU")
    ap.add_argument("--compile-times", action="store_true", help="cold and warm compile times in child processes")
    args = ap.parse_args(argv)
    os.environ["TRN_NUM_THREADS"] = str(args.threads)
    print_host()
    print("load average %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    if args.compile_times:
        compile_times(args.models.split(","), args.modes.split(","), args.threads)
        print("load average %.2f %.2f %.2f" % os.getloadavg())
        return 0
    import torch

    import trnlang  # noqa: F401  (the trn device and its torch.compile backend)
    import trnlang.config

    trnlang.config.refresh()
    torch.set_num_threads(args.threads)
    _CLOCK[0] = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"threads {args.threads}, clock {args.clock}, median of {args.iters} interleaved rounds; batch 4 x 128 "
          "tokens, 4 layers, 512 wide, 8 heads, vocab 8192")
    cols = ["cpu", "cpu_compiled", "trn", "trn_compiled"]
    print(f"{'model':6} {'mode':6} " + " ".join(f"{c:>12}" for c in cols)
          + f" {'vs trn':>7} {'vs cpu':>7} {'vs ind.':>7} {'compile wall/cpu s':>18} {'load':>5}")
    for name in args.models.split(","):
        base = build(name)
        for mode in args.modes.split(","):
            r = run_row(name, base, mode == "train", args.iters, not args.no_inductor)
            ms = " ".join(f"{r[c]:12.1f}" if c in r else f"{'n/a':>12}" for c in cols)
            tc = r["trn_compiled"]
            ind = f"{r['cpu_compiled'] / tc:7.2f}" if "cpu_compiled" in r else f"{'n/a':>7}"
            comp = f"{r['compile_wall']:.1f}/{r['compile_cpu']:.1f}"
            print(f"{name:6} {mode:6} {ms} {r['trn'] / tc:7.2f} {r['cpu'] / tc:7.2f} {ind} {comp:>18} "
                  f"{os.getloadavg()[0]:5.1f}", flush=True)
    print("ratios: time of the other variant / time of compiled trn (> 1: compiled trn is faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
