"""torch.compile on trn: GPT-2- and Llama-style models, compiled trn vs eager trn vs eager CPU vs Inductor CPU.

``python benchmarks/bench_compile.py [--models gpt2,llama] [--iters 5] [--clock wall|cpu] [--no-inductor]``

Each model has 4 layers, 512 wide, 8 heads, a batch of 4 x 128 tokens (vocabulary 8192, random weights,
no dropout). Rows: inference (forward under ``no_grad``) and a training step (forward, loss, backward).
Columns: median milliseconds per step of eager CPU, ``torch.compile`` on the CPU (Inductor's C++ backend),
eager trn and ``torch.compile`` on trn (the default backend, which routes trn graphs to trnlang), then the
ratios. Every variant uses the same thread count (``torch.set_num_threads`` and ``TRN_NUM_THREADS``).
The first compiled call of each model is timed separately (compile time, cold or warm disk caches).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
        return transformers.GPT2LMHeadModel(cfg).eval()
    cfg = transformers.LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


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


def _median_ms(fn: Callable[[], Any], iters: int, sync: Callable[[Any], Any]) -> float:
    times = []
    for _ in range(iters):
        t0 = _CLOCK[0]()
        sync(fn())
        times.append((_CLOCK[0]() - t0) * 1e3)
    return statistics.median(times)


def run_model(name: str, iters: int, inductor: bool) -> list[tuple[str, dict[str, float]]]:
    """Rows (mode, {variant: ms}) for one model, plus the trn compile times under 'compile_s'."""
    import torch
    import torch._dynamo

    ids = torch.randint(0, 8192, (4, 128), generator=torch.Generator().manual_seed(1))
    base = build(name)
    rows = []
    for train in (False, True):
        res: dict[str, float] = {}
        variants: list[tuple[str, Any, Any]] = [("cpu", base, ids)]
        if inductor:
            variants.append(("cpu_compiled", torch.compile(copy.deepcopy(base)), ids))
        trn_model = copy.deepcopy(base).to("trn")
        variants += [("trn", trn_model, ids.to("trn")), ("trn_compiled", torch.compile(trn_model), ids.to("trn"))]
        for key, model, x in variants:
            fn = _step(model, x, train)
            t0 = time.perf_counter()
            fn()  # warm-up: compiles (graphs, kernels)
            first = time.perf_counter() - t0
            fn()
            if key == "trn_compiled":
                res["compile_s"] = first
            res[key] = _median_ms(fn, iters, lambda out: out.cpu() if out.device.type == "trn" else out)
            model.zero_grad(set_to_none=True)
        torch._dynamo.reset()
        rows.append(("train" if train else "infer", res))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time (default; a quiet machine) or this process's CPU time over all its threads "
                         "(robust to other processes' load, but it counts work, not elapsed time)")
    ap.add_argument("--no-inductor", action="store_true", help="skip torch.compile on the CPU")
    args = ap.parse_args(argv)
    os.environ["TRN_NUM_THREADS"] = str(args.threads)
    import torch

    import trnlang  # noqa: F401  (the trn device and its torch.compile backend)

    torch.set_num_threads(args.threads)
    _CLOCK[0] = time.perf_counter if args.clock == "wall" else time.process_time
    print_host()
    print(f"threads {args.threads}, clock {args.clock}, median of {args.iters}; batch 4 x 128 tokens, "
          "4 layers, 512 wide, 8 heads, vocab 8192")
    cols = ["cpu", "cpu_compiled", "trn", "trn_compiled"]
    print(f"{'model':6} {'mode':6} " + " ".join(f"{c:>13}" for c in cols)
          + f" {'vs trn':>7} {'vs cpu':>7} {'vs ind.':>7} {'compile s':>9}")
    for name in args.models.split(","):
        for mode, r in run_model(name, args.iters, not args.no_inductor):
            ms = " ".join(f"{r[c]:13.1f}" if c in r else f"{'n/a':>13}" for c in cols)
            tc = r["trn_compiled"]
            ind = f"{r['cpu_compiled'] / tc:7.2f}" if "cpu_compiled" in r else f"{'n/a':>7}"
            print(f"{name:6} {mode:6} {ms} {r['trn'] / tc:7.2f} {r['cpu'] / tc:7.2f} {ind} {r['compile_s']:9.1f}",
                  flush=True)
    print("ratios: time of the other variant / time of compiled trn (> 1: compiled trn is faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
