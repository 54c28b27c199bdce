"""Tutorial 08: a HuggingFace transformer on the ``trn`` device.

``model.to("trn")`` is all it takes: every ATen op the model reaches runs as a
trnlang kernel from ``stdlib_kernels/`` (embedding gathers, RMSNorm, the
attention matmuls through ``scaled_dot_product_attention``'s flash-attention
kernel, SiLU, rotary embeddings, cross-entropy, and every backward op), or
through torch's decomposition into such ops. This script builds a small Llama
from a random config (nothing is downloaded) and:

1. runs it with ``TRN_FALLBACK=error``, so a single op without a native
   lowering would stop the script with an error naming it;
2. checks the logits against the same model on the CPU;
3. trains both copies for a few AdamW steps on the same batch and checks that
   losses and weights stay equal (tied weights and the optimizer keep working
   because ``module.to("trn")`` keeps the ``Parameter`` objects);
4. counts the kernel specializations the device compiled for it.

To see what the model costs on the simulated NeuronCore, run it under the
profiler: ``trn profile tutorials/08_huggingface_model.py --trace build/llama.json``
prints the simulated time of every kernel the model launched and writes one
Chrome trace of them all (open it in https://ui.perfetto.dev).

The first run compiles a few hundred kernel specializations (tens of seconds);
they are cached on disk (``$TRN_CACHE_DIR``), so later runs take seconds.

Run: ``python tutorials/08_huggingface_model.py`` (needs ``transformers``, part of the test extras)
"""

import copy
import os
import time

os.environ["TRN_FALLBACK"] = "error"  # any op without a native lowering raises

import torch  # noqa: E402

import trnlang  # noqa: E402

try:
    import transformers  # noqa: E402
except ImportError:  # pragma: no cover - transformers is in the test extras
    raise SystemExit("this tutorial needs `pip install transformers`") from None


def build_model() -> torch.nn.Module:
    """A 2-layer Llama with grouped-query attention (4 query heads, 2 key/value heads), random weights."""
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def compiled_specializations() -> tuple[int, int]:
    """(kernels used, specializations compiled) in this process, over the stdlib's kernels."""
    import sys

    from trnlang.runtime.kernel import KernelFn

    kernels = {id(v): v for name, mod in list(sys.modules.items()) if name.startswith("stdlib_kernels.")
               for v in vars(mod).values() if isinstance(v, KernelFn)}
    used = [k for k in kernels.values() if len(k._cache)]
    return len(used), sum(len(k._cache) for k in used)


def main() -> None:
    cpu_model = build_model()
    trn_model = copy.deepcopy(cpu_model).to("trn")
    tied = trn_model.lm_head.weight is trn_model.model.embed_tokens.weight
    print(f"Llama: {sum(p.numel() for p in cpu_model.parameters())} parameters, on {trn_model.device}; "
          f"embedding and lm_head still tied: {tied}")
    assert tied

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (2, 16), generator=g)
    labels = torch.randint(0, 256, (2, 16), generator=g)

    # 1-2: inference, compared with the CPU
    t0 = time.perf_counter()
    with torch.no_grad():
        logits_trn = trn_model(input_ids=ids.to("trn")).logits
        logits_cpu = cpu_model(input_ids=ids).logits
    err = (logits_trn.cpu() - logits_cpu).abs().max().item()
    print(f"forward on trn: {time.perf_counter() - t0:.1f} s (compiles included); "
          f"max |logits_trn - logits_cpu| = {err:.2e}")
    torch.testing.assert_close(logits_trn.cpu(), logits_cpu, rtol=1e-4, atol=1e-4)

    # 3: training steps, compared with the CPU
    opt_trn = torch.optim.AdamW(trn_model.parameters(), lr=1e-3)
    opt_cpu = torch.optim.AdamW(cpu_model.parameters(), lr=1e-3)
    ids_t, labels_t = ids.to("trn"), labels.to("trn")
    trnlang.reset_fallback_stats()
    for step in range(3):
        t0 = time.perf_counter()
        loss_trn = trn_model(input_ids=ids_t, labels=labels_t).loss
        loss_trn.backward()
        opt_trn.step()
        opt_trn.zero_grad()
        dt = time.perf_counter() - t0
        loss_cpu = cpu_model(input_ids=ids, labels=labels).loss
        loss_cpu.backward()
        opt_cpu.step()
        opt_cpu.zero_grad()
        print(f"step {step}: loss trn {loss_trn.item():.6f}  cpu {loss_cpu.item():.6f}  ({dt:.2f} s on trn)")
        torch.testing.assert_close(loss_trn.cpu(), loss_cpu, rtol=1e-4, atol=1e-5)
    worst = max((pt.detach().cpu() - pc.detach()).abs().max().item()
                for pt, pc in zip(trn_model.parameters(), cpu_model.parameters()))
    print(f"after 3 AdamW steps: max weight difference {worst:.2e}; CPU fallbacks: {trnlang.fallback_stats()}")
    assert worst < 1e-4 and trnlang.fallback_stats() == {}

    # 4: what the device compiled
    n_kernels, n_specs = compiled_specializations()
    print(f"the device ran {n_kernels} stdlib kernels for this model, compiled into {n_specs} specializations "
          "(one per shape/layout/dtype combination)")
    print("the Llama model on trn matches the CPU (forward, 3 training steps), with no CPU fallback")


if __name__ == "__main__":
    main()
