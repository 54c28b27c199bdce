"""Tutorial 06: contributing a lowering to the ``trn`` PyTorch device.

Every ATen op that reaches the ``trn`` device either has a *lowering* (a Python
function that launches trnlang kernels, registered in
``trnlang.device.REGISTRY``) or runs through the *CPU fallback*: the op runs on
the host on zero-copy views of device memory, correct but slow, with a
``FallbackWarning`` and a count in ``trnlang.fallback_stats()``. The coverage
report (``docs/op_compatibility.md``, written by ``trn coverage``) lists the
ops still falling back. This tutorial writes one lowering from scratch, for
``logaddexp``: the standard library has its own, so the script first asks the
device to leave it out (``TRN_STDLIB_EXCLUDE=aten::logaddexp``, set before
``import torch`` loads the device; the same switch bisects a suspect stdlib
lowering against the CPU), which makes ``logaddexp`` an op without a lowering:

1. Observe the fallback: ``torch.logaddexp(a, b)`` on ``trn`` tensors counts
   one ``aten::logaddexp.out``. That is *trap 1* of the device notes
   (docs/trn_device.md): functional ops usually reach the backend as their
   ``.out`` variant (torch's structured kernels allocate the output and call
   ``logaddexp.out``), so that is the overload a lowering must catch.
2. Write the kernel: ``log(exp(a) + exp(b))`` overflows for large inputs, so
   the kernel computes the stable form ``max(a, b) + log1p(exp(-|a - b|))``
   (Vector engine for max/abs/subtract, Scalar engine for exp/log1p); rows are
   tiled by 128 partitions and the free axis by chunks.
3. Register it with ``@trnlang.device.lowering("aten::logaddexp", dtypes=...)``.
   Registering the functional op also routes its ``out=`` variant
   (``logaddexp.out``) to the same function unless it has a lowering of its
   own; because our function takes an ``out`` keyword it gets the destination
   tensor directly instead of allocating one. Broadcasting and strided inputs
   are made dense first with ``expand(...).contiguous()`` (a view and a native
   copy kernel). What the lowering handles is *declared* next to it:
   ``dtypes=`` and ``accepts=td.Accepts(tensors=("self", "other"))`` (both
   operands ``trn`` tensors; ``Accepts`` can also require contiguity and bound
   sizes and ranks). Calls outside the declaration (another dtype, a Python
   number or CPU tensor as ``other``) never reach the function: they run
   through the CPU fallback with the rule as their reason. What only the code
   can decide is declined inside it with ``trn.decline("why")`` (here: an
   ``out=`` of another layout). Either way the reason shows in the fallback
   warning, in the ``TRN_FALLBACK=error`` message, in
   ``trn.fallback_reasons()`` and in ``trn coverage``'s report. A kernel with
   choices (which way to move rows, which optional operands exist, a
   variant of the op) takes them as one compile-time *spec*: an enum member
   or a frozen dataclass of constants (``stdlib_kernels.indexing.engine.Spec``,
   ``stdlib_kernels.nn.batchnorm.BnFinish``), read while tracing, not a row of
   positional flags or a string compared in the kernel body; equal specs
   share a compiled variant. ``logaddexp`` has no choices, so its kernel
   takes none.
4. Check: no fallback is counted any more, the result matches the CPU, and the
   registry entry (what ``trn coverage`` reads, ``trnlang.device.registry_table()``)
   says ``kind: kernel`` with the source location of our function.

Registration is process-global (torch.library kernels cannot be removed), which
is fine in a script; a real contribution goes into its family's sub-package of
``stdlib_kernels/`` (``elementwise/``, ``reduction/``, ``nn/``, ...; a new module is
added to ``FAMILIES`` in ``stdlib_kernels/__init__.py``, imported when the device
registers) with tests, and the full coverage report is
regenerated with ``trn coverage`` (``trn coverage --ops logaddexp --no-md``
checks a single OpInfo in a few seconds; it runs in its own process, so it only
sees lowerings in ``stdlib_kernels/``; here we call the same
``run_coverage`` in-process instead).

Run: ``python tutorials/06_contributing_a_lowering.py``
"""

import json
import os
import warnings

# the standard library's logaddexp stays out of this process: we write our own (read when `import torch` loads
# the trn device, so it is set first)
os.environ["TRN_STDLIB_EXCLUDE"] = "aten::logaddexp"

import torch  # noqa: E402

import trnlang as trn
import trnlang.device as td
import trnlang.language as tl
from trnlang.device.coverage import run_coverage, summary_table

CHUNK = 2048  # free-axis elements per tile (fp32: 8 KiB per partition)


# --- step 2: the kernel ------------------------------------------------------------------------------------
@trn.kernel
def logaddexp_kernel(a, b, out):
    """``out = log(exp(a) + exp(b))`` for 2-D ``[n, d]`` tensors, in the overflow-free form."""
    n, d = a.shape
    f = min(d, CHUNK)
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        for j in tl.affine_range(tl.cdiv(d, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = (rows < n) & (cols < d)
            x = tl.load(a[rows, cols], mask=m)
            y = tl.load(b[rows, cols], mask=m)
            tl.store(out[rows, cols], tl.maximum(x, y) + tl.log1p(tl.exp(-tl.abs(x - y))), mask=m)


# --- step 3: the lowering ----------------------------------------------------------------------------------
def register_logaddexp_lowering() -> None:
    @td.lowering("aten::logaddexp", dtypes=(torch.float32,), accepts=td.Accepts(tensors=("self", "other")))
    def logaddexp(self, other, *, out=None):
        """``aten::logaddexp`` on ``trn`` (and, routed, ``logaddexp.out``) for float32 tensors."""
        shape = torch.broadcast_shapes(self.shape, other.shape)
        if out is None:
            out = torch.empty(shape, dtype=self.dtype, device=self.device)
        elif out.shape != shape or out.dtype != self.dtype or not out.is_contiguous():
            return trn.decline("out= of another shape, dtype or layout")
        if out.numel() == 0:
            return out
        # broadcast and make dense: expand is a view, contiguous() a native copy kernel on trn
        a, b = (t.expand(shape).contiguous() for t in (self, other))
        d = shape[-1] if len(shape) else 1
        logaddexp_kernel(a.view(-1, d), b.view(-1, d), out.view(-1, d))  # 2-D views, no copies
        return out


def _coverage(title: str) -> None:
    rep = run_coverage(ops=["logaddexp"], dtypes=[torch.float32], backward=False, progress=False)
    print(f"{title}:\n{summary_table(rep)}")


def main() -> None:
    os.environ.setdefault("TRN_FALLBACK", "silent")  # we count fallbacks ourselves; no warnings
    warnings.simplefilter("ignore", td.FallbackWarning)
    a, b = torch.randn(300, 1000) * 30, torch.randn(300, 1000) * 30  # large values: the naive form overflows
    ref = torch.logaddexp(a, b)

    # step 1: before registering, logaddexp runs on the CPU through the fallback
    assert "aten::logaddexp.out" not in td.REGISTRY, "logaddexp already has a lowering: pick another op"
    at, bt = a.to("trn"), b.to("trn")
    trn.reset_fallback_stats()
    before = torch.logaddexp(at, bt).cpu()
    stats = trn.fallback_stats()
    print("before registering: fallback_stats() =", stats)
    assert stats.get("aten::logaddexp.out", 0) == 1
    torch.testing.assert_close(before, ref)
    _coverage("coverage of logaddexp before (forward, float32)")

    # step 3: register
    register_logaddexp_lowering()

    # step 4: no fallback, same result as the CPU
    trn.reset_fallback_stats()
    after = torch.logaddexp(at, bt).cpu()
    dest = torch.empty_like(at)
    torch.logaddexp(at, bt, out=dest)  # the out= variant, routed too (our function receives `out`)
    stats = trn.fallback_stats()
    print("\nafter registering: fallback_stats() =", stats)
    assert not any("logaddexp" in k for k in stats), stats
    torch.testing.assert_close(after, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dest.cpu(), ref, atol=1e-5, rtol=1e-5)
    print(f"logaddexp on trn (functional and out=) at {tuple(a.shape)} matches the CPU with no fallback")

    # broadcasting and transposed inputs are handled too; a dtype outside `dtypes` falls back (counted)
    trn.reset_fallback_stats()
    t = torch.logaddexp(at.t(), bt[:1].t()).cpu()
    torch.testing.assert_close(t, torch.logaddexp(a.t(), b[:1].t()), atol=1e-5, rtol=1e-5)
    print("transposed and broadcast inputs -> fallback_stats() =", trn.fallback_stats())
    h = torch.logaddexp(at.bfloat16(), bt.bfloat16()).cpu()
    torch.testing.assert_close(h, torch.logaddexp(a.bfloat16(), b.bfloat16()))
    print("a bfloat16 call (not in dtypes) runs through the fallback -> fallback_stats() =", trn.fallback_stats())
    # a call outside the declaration says why: here a CPU tensor as `other`
    torch.testing.assert_close(torch.logaddexp(at, torch.tensor(2.0)).cpu(), torch.logaddexp(a, torch.tensor(2.0)))
    why = trn.fallback_reasons().get("aten::logaddexp", {})
    print("why those calls left the device -> fallback_reasons() =", why)
    assert why.get("other not a trn tensor") == 1 and why.get("dtype bfloat16 not among the lowering's dtypes") == 1

    # what `trn coverage` reads: the registry as data
    table = td.registry_table()
    print("\nregistry entries:")
    for name in sorted(k for k in table if "logaddexp" in k and "2" not in k):
        print(f"  {name}: {json.dumps(table[name])}")
    _coverage("\ncoverage of logaddexp after (forward, float32)")


if __name__ == "__main__":
    main()
