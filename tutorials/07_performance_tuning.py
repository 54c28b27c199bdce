"""Tutorial 07: performance tuning with the profiler and ``trn.autotune``.

The simulator schedules every instruction of a kernel on the NeuronCore's
engines (Tensor, Vector, Scalar, GpSimd and 16 DMA engines) with a cost model of
the target, so a kernel's performance can be studied without hardware:

- ``kernel.profile(*args)`` runs the kernel and returns a :class:`trnlang.Profile`
  (``simulate_only=True`` schedules it without running it on the host);
- ``prof.time_us``, ``prof.mfu`` (Tensor-engine flops over the peak in that
  time) and ``prof.mbu`` (DMA bytes over the peak bandwidth) are the headline
  numbers; ``prof.summary()`` prints them with per-engine busy time;
- ``prof.by_line()`` attributes the busy time to *source lines* of the kernel,
  per engine, busiest first: the first place to look;
- ``prof.save_trace(path)`` writes a Chrome trace (one track per engine and per
  DMA engine); open it at https://ui.perfetto.dev (or chrome://tracing) to see
  what waits on what.

Then ``trn.autotune`` tries several compile-time configurations of a kernel and
keeps the fastest per problem shape (``key``), ranked by *simulated* time by
default (``metric="sim"``: each config is compiled and scheduled, nothing is
executed while tuning). Results are cached on disk under ``$TRN_CACHE_DIR``
(default ``~/.cache/trnlang``); this script points it at a temporary directory
so it leaves your cache alone.

The kernel is a bf16 matmul ``out = lhsT.T @ rhs`` (see tutorial 03) with two
knobs: ``BLOCK_N``, the width of the output tile (one PSUM bank holds 512 fp32
columns, so at most 512), and ``HOIST``, whether the moving operand's column
block is loaded once per ``n`` and reused by every row tile, or re-loaded for
every row tile. The profile of the naive configuration shows DMA-bound lines
(the two operand loads); the tuner finds the configuration that loads the least
and keeps the Tensor engine busiest. Note that the knobs interact: the
``lhsT`` tiles are 128 bf16 columns wide, 256 contiguous bytes per partition,
so each of their transfers runs at half the DMA engines' bandwidth whatever
``BLOCK_N`` is; hoisting removes the ``rhs`` reloads (200 -> 136 us at
``BLOCK_N=128``), wider tiles divide the ``lhsT`` reloads (200 -> 93 us without
hoisting), and only both together reach 54 us: a tuner tries combinations.

Run: ``python tutorials/07_performance_tuning.py``
"""

import os
import shutil
import tempfile

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl

K, M, N = 1024, 512, 2048
TRACE = os.path.join("build", "tutorial07_trace.json")


@trn.kernel
def matmul(lhsT, rhs, out, BLOCK_N, HOIST):
    """``out[M, N] = lhsT[K, M].T @ rhs[K, N]`` in 128 x BLOCK_N output tiles (fp32 accumulation in PSUM)."""
    k_dim, m_dim = lhsT.shape
    n_dim = rhs.shape[1]
    kt = k_dim // 128
    for n in tl.affine_range(n_dim // BLOCK_N):
        cols = slice(n * BLOCK_N, (n + 1) * BLOCK_N)
        if HOIST:  # the moving operand's column block, loaded once per n (multi-buffered by the planner)
            b = tl.ndarray((128, kt, BLOCK_N), rhs.dtype, buffer=tl.sbuf)
            for k in tl.affine_range(kt):
                isa.dma_copy(b[:, k, :], rhs[k * 128:(k + 1) * 128, cols])
        for m in tl.affine_range(m_dim // 128):
            acc = tl.zeros((128, BLOCK_N), tl.float32, buffer=tl.psum)
            for k in tl.affine_range(kt):
                a = tl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                bk = b[:, k, :] if HOIST else tl.load(rhs[k * 128:(k + 1) * 128, cols])
                acc += tl.matmul(a, bk, transpose_x=True)
            tl.store(out[m * 128:(m + 1) * 128, cols], tl.copy(acc, out.dtype))


CONFIGS = [trn.Config(BLOCK_N=bn, HOIST=h) for h in (False, True) for bn in (128, 256, 512)]
matmul_tuned = trn.autotune(configs=CONFIGS, key=["lhsT", "rhs"])(matmul)


def _check(name, lhsT, rhs, out):
    ref = (lhsT.float().T @ rhs.float()).bfloat16()
    torch.testing.assert_close(out.float(), ref.float(), atol=1e-2, rtol=2 ** -7)  # within a bf16 rounding
    print(f"{name} at K={K}, M={M}, N={N} matches torch")


def main() -> None:
    cache = tempfile.mkdtemp(prefix="trn-tutorial07-")
    os.environ["TRN_CACHE_DIR"] = cache  # keep the user's cache clean: the tuner saves here
    trn.config.refresh()  # the runtime reads TRN_* once (docs/config.md): re-read them
    try:
        g = torch.Generator().manual_seed(0)
        lhsT = torch.randn(K, M, generator=g).bfloat16()
        rhs = torch.randn(K, N, generator=g).bfloat16()

        # 1. profile a first version
        out = torch.empty(M, N, dtype=torch.bfloat16)
        base = matmul.profile(lhsT, rhs, out, 128, False)
        _check("matmul (BLOCK_N=128, HOIST=False)", lhsT, rhs, out)
        print(f"\n=== baseline: {base.time_us:,.2f} us simulated, MFU {base.mfu:.3f}, MBU {base.mbu:.3f} ===")
        print(base.summary(top=4))
        print("\nbusiest source lines (prof.by_line()):")
        for loc, engine, n_instr, busy_us in base.by_line()[:4]:
            print(f"  line {loc.lineno:<4} {engine:<7} {n_instr:>6} instrs {busy_us:>10,.2f} us busy   "
                  f"{loc.text.strip()}")
        os.makedirs(os.path.dirname(TRACE), exist_ok=True)
        base.save_trace(TRACE)
        print(f"\nwrote the Chrome trace {TRACE} ({os.path.getsize(TRACE) / 1e6:.1f} MB): open it at "
              "https://ui.perfetto.dev")

        # 2. autotune: every config is compiled and scheduled, the fastest simulated one wins
        out = torch.empty(M, N, dtype=torch.bfloat16)
        matmul_tuned(lhsT, rhs, out)  # tunes on the first call for this key, then launches the best config
        _check("autotuned matmul", lhsT, rhs, out)
        best = matmul_tuned.best_config(lhsT, rhs, out)
        (timings,) = matmul_tuned.timings.values()
        print("\nsimulated time per config:")
        for cfg, t in sorted(timings, key=lambda ct: ct[1]):
            print(f"  {cfg!r:<32} {t * 1e6:>10,.2f} us{'   <- chosen' if cfg == best else ''}")
        tuned = matmul_tuned.profile(lhsT, rhs, out, simulate_only=True)
        print(f"\nchosen config: {best!r}")
        print(f"before {base.time_us:,.2f} us (MFU {base.mfu:.3f}) -> after {tuned.time_us:,.2f} us "
              f"(MFU {tuned.mfu:.3f}): {base.time_us / tuned.time_us:.1f}x faster")
        print(tuned.summary(top=4))
        print(f"\ntuning results cached in {cache}: {os.listdir(os.path.join(cache, 'autotune'))}")
        assert tuned.time_us < base.time_us
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
