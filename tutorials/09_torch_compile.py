"""Tutorial 09: torch.compile on trn.

``torch.compile(model)`` on a model on the ``trn`` device turns each forward and backward graph into
trnlang kernels: runs of pointwise ops and the row reductions between them (softmax, RMS/layer norm,
SiLU/GELU and their backward formulas) become one generated ``@trn.kernel`` each, while matmuls,
attention and embeddings stay the device's own kernels (docs/compile.md). This script:

1. compiles a small Llama (random config, nothing downloaded) and checks its logits and a training
   step's gradients against the same model in eager mode on the CPU;
2. prints one generated kernel's trnlang source (``TRN_DUMP=compile`` prints them all to stderr,
   ``TORCH_LOGS=output_code`` logs them with the rewritten graphs);
3. profiles that kernel on the simulated NeuronCore (``trn profile tutorials/09_torch_compile.py`` shows
   every generated kernel's simulated timeline, named ``trn_fused_<the ops it fused>``);
4. times eager trn against compiled trn (one run; numbers depend on the machine and its load).

A second run of this script takes the fusion plans and the kernels' machine code from the disk cache
(``graph_cache_hits`` below; docs/compile.md, "Caching across processes"). For the 512-wide GPT-2 and
Llama-style models, ``benchmarks/bench_compile.py`` compares compiled trn with eager trn, eager CPU and
Inductor on the CPU; its measured numbers are in docs/compile.md.

Run: ``python tutorials/09_torch_compile.py`` (needs ``transformers``, part of the test extras)
"""

import copy
import os
import time

os.environ.setdefault("TRN_FALLBACK", "error")  # any op without a native lowering raises

import torch  # noqa: E402

import trnlang  # noqa: E402
import trnlang.compile  # noqa: E402

try:
    import transformers  # noqa: E402
except ImportError:  # pragma: no cover - transformers is in the test extras
    raise SystemExit("this tutorial needs `pip install transformers`") from None


def build_model() -> torch.nn.Module:
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def main() -> None:
    cpu_model = build_model()
    trn_model = copy.deepcopy(cpu_model).to("trn")
    compiled = torch.compile(trn_model)  # the default backend; backend="trn" is the same thing
    ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))

    # 1. logits and one training step's gradients, against eager CPU
    loss_t = compiled(input_ids=ids.to("trn"), labels=ids.to("trn")).loss
    loss_c = cpu_model(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(loss_t.cpu(), loss_c, atol=2e-4, rtol=2e-4)
    loss_t.backward()
    loss_c.backward()
    for (name, pc), (_, pt) in zip(cpu_model.named_parameters(), trn_model.named_parameters()):
        torch.testing.assert_close(pt.grad.cpu(), pc.grad, atol=2e-4, rtol=2e-4, msg=name)
    print(f"compiled Llama on trn matches eager CPU: loss {loss_t.item():.5f}, "
          f"{sum(1 for _ in trn_model.parameters())} gradients")
    stats = trnlang.compile.compile_stats()
    print(f"graphs compiled {stats['graphs']}, kernels generated {stats['generated_kernels']}, "
          f"graph nodes fused into them {stats['fused_nodes']}, fusion plans from the disk cache "
          f"{stats['graph_cache_hits']} of {stats['graph_cache_hits'] + stats['graph_cache_misses']}")

    # 2. one generated kernel: the RMS norm, read as trnlang source
    kernels = trnlang.compile.generated_kernels()
    name, source, _ = next((k for k in kernels if "rsqrt" in k[0]), kernels[0])
    print(f"\nkernel {name}:\n{source}")

    # 3. a generated kernel on the simulated NeuronCore: RMS norm compiled on its own, profiled on CPU inputs
    def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    x, w = torch.randn(512, 64), torch.randn(64)
    out = torch.compile(rms_norm, backend="trn")(x.to("trn"), w.to("trn"))
    torch.testing.assert_close(out.cpu(), rms_norm(x, w), atol=1e-5, rtol=1e-5)
    launcher = trnlang.compile.launchers()[-1]
    print(f"{launcher.name} matches rms_norm; simulated profile on [512, 64]:")
    print(launcher.profile(x, w))

    # 4. eager vs compiled inference, one run each after warm-up
    def infer(model: torch.nn.Module) -> float:
        with torch.no_grad():
            model(input_ids=ids.to("trn"))
            t0 = time.perf_counter()
            for _ in range(3):
                model(input_ids=ids.to("trn")).logits.cpu()
        return (time.perf_counter() - t0) / 3 * 1e3

    eager_ms, compiled_ms = infer(trn_model), infer(compiled)
    print(f"\ninference, batch 2 x 32: eager trn {eager_ms:.1f} ms, compiled trn {compiled_ms:.1f} ms "
          f"(x{eager_ms / compiled_ms:.2f}); see benchmarks/bench_compile.py for the 512-wide models")


if __name__ == "__main__":
    main()
