"""The main demo (``make demo``): trnlang end to end on the default simulated NeuronCore.

1. the device table of the default target;
2. the tutorial kernels compiled (cold compile time) and checked against torch;
3. a small model on the ``trn`` torch device, forward and backward, against CPU, with the
   fallback count;
4. a profile summary of the hottest kernels on the simulated device;
5. a Chrome trace (open it at https://ui.perfetto.dev).

Run: ``python -m trnlang.demo [--trace PATH]``
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import time
import warnings
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _step(i: int, n: int, title: str) -> None:
    print(f"\n[{i}/{n}] {title}", flush=True)


def load_tutorial(name: str) -> Any:
    """Import ``tutorials/<name>.py`` of this checkout as a module (None when tutorials/ is not there)."""
    path = ROOT / "tutorials" / f"{name}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"trn_tutorial_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kernels_section() -> list[tuple[str, Any, tuple[Any, ...]]]:
    import torch

    g = torch.Generator().manual_seed(0)
    cases: list[tuple[str, Any, tuple[Any, ...], Any]] = []
    t01 = load_tutorial("01_vector_add")
    t02 = load_tutorial("02_fused_softmax")
    t04 = load_tutorial("04_layernorm")
    x = torch.randn(2048, 1024, generator=g)
    y = torch.randn(2048, 1024, generator=g)
    w = torch.randn(1, 1024, generator=g)
    b = torch.randn(1, 1024, generator=g)
    if t01 is not None:
        cases.append(("vector_add 2048x1024", t01.vector_add, (x, y, torch.empty_like(x)), lambda a: a[0] + a[1]))
    if t02 is not None:
        cases.append(("softmax 2048x1024", t02.softmax, (x, torch.empty_like(x)), lambda a: torch.softmax(a[0], -1)))
    if t04 is not None:
        cases.append(("layernorm 2048x1024", t04.layernorm, (x, w, b, torch.empty_like(x), 1e-5),
                      lambda a: torch.nn.functional.layer_norm(a[0], (1024,), a[1][0], a[2][0], 1e-5)))
        cases.append(("rmsnorm 2048x1024", t04.rmsnorm, (x, w, torch.empty_like(x), 1e-6),
                      lambda a: a[0] * torch.rsqrt(a[0].pow(2).mean(-1, keepdim=True) + 1e-6) * a[1]))
    if not cases:
        print("  (tutorials/ not found next to the package: run the demo from the repository)")
    out = []
    print(f"  {'kernel':<24}{'first call ms':>14}{'warm call ms':>14}{'max |err|':>12}")
    for name, k, args, ref in cases:
        t0 = time.perf_counter()
        k(*args)
        cold = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        k(*args)
        warm = (time.perf_counter() - t0) * 1e3
        err = (args[-2 if isinstance(args[-1], float) else -1] - ref(args)).abs().max().item()
        status = "ok" if err < 1e-4 else "MISMATCH"
        print(f"  {name:<24}{cold:>14.1f}{warm:>14.2f}{err:>12.2e}  {status}")
        if err >= 1e-4:
            raise SystemExit(f"demo: {name} does not match torch (max error {err})")
        out.append((name, k, args))
    return out


def _model_section() -> None:
    import torch
    from torch import nn

    import trnlang.device as tdev

    tdev.register()
    tdev.reset_fallback_stats()
    warnings.simplefilter("ignore", tdev.FallbackWarning)  # counted below instead
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.GELU(), nn.Linear(128, 10))
    dev = nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.GELU(), nn.Linear(128, 10))
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("trn")
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-2)
    opt_d = torch.optim.AdamW(dev.parameters(), lr=1e-2)
    x = torch.randn(256, 64)
    target = torch.randint(0, 10, (256,))
    print(f"  model: {cpu}".replace("\n", "\n  "))
    for step in range(3):
        lc = nn.functional.cross_entropy(cpu(x), target)
        opt_c.zero_grad()
        lc.backward()
        opt_c.step()
        ld = nn.functional.cross_entropy(dev(x.to("trn")), target.to("trn"))
        opt_d.zero_grad()
        ld.backward()
        opt_d.step()
        print(f"  step {step}: loss cpu {lc.item():.6f}  trn {ld.item():.6f}  |diff| {abs(lc.item() - ld.item()):.2e}")
    wdiff = max((a.detach().cpu() - b.detach()).abs().max().item() for a, b in zip(dev.parameters(),
                                                                                  cpu.parameters()))
    print(f"  max |weight difference| after 3 AdamW steps: {wdiff:.2e}")
    stats = tdev.fallback_stats()
    total = sum(stats.values()) if isinstance(stats, dict) else stats
    print(f"  CPU fallbacks: {total} call(s) over {len(stats) if isinstance(stats, dict) else '?'} op(s)")
    if isinstance(stats, dict) and stats:
        top = sorted(stats.items(), key=lambda kv: -kv[1])[:8]
        print("    " + ", ".join(f"{k} x{v}" for k, v in top))


def _profile_section(kernels: list[tuple[str, Any, tuple[Any, ...]]], trace_path: pathlib.Path) -> None:
    profiles = []
    for name, k, args in kernels:
        p = k.profile(*args)
        profiles.append((p.time_us, name, p))
    profiles.sort(key=lambda t: -t[0])
    print(f"  {'kernel':<24}{'sim time us':>12}{'MBU':>7}{'MFU':>7}   busiest engine")
    for t, name, p in profiles:
        eng = max(p.engines.values(), key=lambda e: e.busy_us)
        print(f"  {name:<24}{t:>12.1f}{p.mbu:>7.2f}{p.mfu:>7.2f}   {eng.name} {eng.utilization:.0%}")
    hottest = profiles[0]
    print(f"\n  hottest kernel: {hottest[1]}")
    print("  " + hottest[2].summary().replace("\n", "\n  "))
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    hottest[2].save_trace(str(trace_path))
    print(f"\n  Chrome trace written to {trace_path} (open it at https://ui.perfetto.dev)")


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit code."""
    from trnlang._version import __version__
    from trnlang.sim.targets import device_table, get_target

    ap = argparse.ArgumentParser(prog="python -m trnlang.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "build" / "demo_trace.json"), help="where to write the trace")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    n = 4
    print(f"trnlang {__version__} demo")
    _step(1, n, "the simulated device")
    print("  " + device_table(get_target()).replace("\n", "\n  "))
    _step(2, n, "tutorial kernels: compile, run on the host CPU through the JIT, check against torch")
    kernels = _kernels_section()
    _step(3, n, "a small model on device 'trn' (LayerNorm MLP, AdamW), against the same model on CPU")
    _model_section()
    _step(4, n, "profiles on the simulated device")
    _profile_section(kernels, pathlib.Path(args.trace))
    print(f"\ndemo finished in {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
