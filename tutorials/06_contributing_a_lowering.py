"""Tutorial 06: contributing a lowering to the ``trn`` PyTorch device.

Every ATen op that reaches the ``trn`` device either has a *lowering* (a Python
function that launches trnlang kernels, registered in
``trnlang.device.REGISTRY``) or runs through the *CPU fallback*: the op runs on
the host on zero-copy views of device memory, correct but slow, with a
``FallbackWarning`` and a count in ``trnlang.fallback_stats()``. The coverage
report (``docs/op_compatibility.md``, written by ``trn coverage``) lists the
ops still falling back; ``nn.functional.gelu`` is one of them. This tutorial
gives it a native lowering:

1. Observe the fallback: ``F.gelu(x.to("trn"))`` counts one ``aten::gelu.out``.
   That is *trap 1* of the device notes (docs/trn_device.md): functional ops
   usually reach the backend as their ``.out`` variant (torch's structured
   kernels allocate the output and call ``gelu.out``), so that is the overload
   a lowering must catch.
2. Write the kernel: ``tl.gelu`` / ``tl.gelu_tanh`` are Scalar-engine activation
   functions; rows are tiled by 128 partitions and the free axis by chunks.
3. Register it with ``@trnlang.device.lowering("aten::gelu", dtypes=...)``.
   Registering the functional op also routes its in-place (``gelu_``) and
   ``out=`` (``gelu.out``) variants to the same function unless they have
   lowerings of their own; because our function takes an ``out`` keyword it
   gets the destination tensor directly instead of allocating one. Inputs the
   kernel does not handle (other dtypes, non-contiguous views, 0-dim tensors)
   are declined by returning ``NotImplemented``, which sends that one call
   through the CPU fallback.
   Once ``aten::gelu`` itself has a ``trn`` kernel, the functional call
   dispatches to it directly; ``gelu.out`` (explicit ``out=`` calls and
   other composite paths) is still covered through the routed entry (the
   script calls ``torch.ops.aten.gelu.out`` to show it).
4. Check: no fallback is counted any more, the result matches the CPU, and the
   registry entry (what ``trn coverage`` reads, ``trnlang.device.registry_table()``)
   says ``kind: kernel`` with the source location of our function.

Registration is process-global (torch.library kernels cannot be removed), which
is fine in a script; a real contribution goes into ``stdlib_kernels/`` (imported
when the device registers) with tests, and the full coverage report is
regenerated with ``trn coverage`` (``trn coverage --ops nn.functional.gelu --no-md``
checks a single OpInfo in a few seconds; it runs in its own process, so it only
sees lowerings in ``stdlib_kernels/``; here we call the same
``run_coverage`` in-process instead).

Run: ``python tutorials/06_contributing_a_lowering.py``
"""

import json
import os
import warnings

import torch
import torch.nn.functional as F

import trnlang as trn
import trnlang.device as td
import trnlang.language as tl
from trnlang.device.coverage import run_coverage, summary_table

CHUNK = 2048  # free-axis elements per tile (fp32: 8 KiB per partition)


# --- step 2: the kernel ------------------------------------------------------------------------------------
@trn.kernel
def gelu_kernel(x, out, approximate):
    """``out = gelu(x)`` for a 2-D ``[n, d]`` tensor (``approximate``: ``"none"`` (erf) or ``"tanh"``)."""
    n, d = x.shape
    f = min(d, CHUNK)
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        for j in tl.affine_range(tl.cdiv(d, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = (rows < n) & (cols < d)
            t = tl.load(x[rows, cols], mask=m)
            y = tl.gelu_tanh(t) if approximate == "tanh" else tl.gelu(t)
            tl.store(out[rows, cols], y, mask=m)


# --- step 3: the lowering ----------------------------------------------------------------------------------
def register_gelu_lowering() -> None:
    @td.lowering("aten::gelu", dtypes=(torch.float32,))
    def gelu(self, *, approximate="none", out=None):
        """``aten::gelu`` on ``trn`` (and, routed, ``gelu_`` and ``gelu.out``): contiguous fp32, >= 1-D."""
        if approximate not in ("none", "tanh") or self.dim() == 0 or not self.is_contiguous():
            return NotImplemented  # -> this call runs through the CPU fallback
        if out is None:
            out = torch.empty_like(self)
        elif out.shape != self.shape or out.dtype != self.dtype or not out.is_contiguous():
            return NotImplemented
        if self.numel() == 0:
            return out
        x2, o2 = self.reshape(-1, self.shape[-1]), out.view(-1, self.shape[-1])  # views, no copies
        gelu_kernel(x2, o2, approximate)
        return out


def _coverage(title: str) -> None:
    rep = run_coverage(ops=["nn.functional.gelu"], dtypes=[torch.float32], backward=False, progress=False)
    print(f"{title}:\n{summary_table(rep)}")


def main() -> None:
    os.environ.setdefault("TRN_FALLBACK", "silent")  # we count fallbacks ourselves; no warnings
    warnings.simplefilter("ignore", td.FallbackWarning)
    x = torch.randn(300, 1000)
    ref = F.gelu(x)

    # step 1: before registering, gelu runs on the CPU through the fallback
    assert "aten::gelu.out" not in td.REGISTRY, "gelu already has a lowering: pick another op"
    trn.reset_fallback_stats()
    before = F.gelu(x.to("trn")).cpu()
    stats = trn.fallback_stats()
    print("before registering: fallback_stats() =", stats)
    assert stats.get("aten::gelu.out", 0) == 1
    torch.testing.assert_close(before, ref)
    _coverage("coverage of nn.functional.gelu before (forward, float32)")

    # step 3: register
    register_gelu_lowering()

    # step 4: no fallback, same result as the CPU
    xt = x.to("trn")
    trn.reset_fallback_stats()
    after = F.gelu(xt).cpu()
    after_tanh = F.gelu(xt, approximate="tanh").cpu()
    inplace = xt.clone()
    torch.ops.aten.gelu_(inplace)  # the in-place variant, routed to the same function (out=self)
    dest = torch.empty_like(xt)
    torch.ops.aten.gelu.out(xt, out=dest)  # the out= variant, routed too (our function receives `out`)
    stats = trn.fallback_stats()
    print("\nafter registering: fallback_stats() =", stats)
    assert not any("gelu" in k for k in stats), stats
    torch.testing.assert_close(after, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(after_tanh, F.gelu(x, approximate="tanh"), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(inplace.cpu(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dest.cpu(), ref, atol=1e-5, rtol=1e-5)
    print(f"gelu on trn (approximate='none' and 'tanh', functional, in-place and out=) at {tuple(x.shape)} "
          "matches the CPU with no fallback")

    # a non-contiguous input is declined and falls back (counted), still correct
    trn.reset_fallback_stats()
    t = F.gelu(xt.t()).cpu()
    torch.testing.assert_close(t, ref.t(), atol=1e-5, rtol=1e-5)
    print("a transposed (non-contiguous) input is declined -> fallback_stats() =", trn.fallback_stats())

    # what `trn coverage` reads: the registry as data
    table = td.registry_table()
    print("\nregistry entries:")
    for name in sorted(k for k in table if "gelu" in k and "backward" not in k):
        print(f"  {name}: {json.dumps(table[name])}")
    _coverage("\ncoverage of nn.functional.gelu after (forward, float32)")


if __name__ == "__main__":
    main()
