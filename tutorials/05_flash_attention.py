"""Tutorial 05: flash attention (single-head forward, causal and non-causal).

``out = softmax(q @ k.T * scale [+ causal mask]) @ v`` without ever materialising
the ``[S, S]`` score matrix: for every 128-row block of queries we stream the
keys and values in 128-row blocks and keep an *online softmax* (Milakov &
Gimelshein; Dao et al.'s FlashAttention):

- ``m``: the running row max of the scores seen so far, ``[128, 1]``;
- ``l``: the running row sum of ``exp(s - m)``, ``[128, 1]``;
- ``acc``: the running, un-normalised ``sum_j exp(s_j - m) v_j``, ``[128, d]``.

When a new block raises the max from ``m`` to ``m_new``, the old ``l`` and
``acc`` are rescaled by ``alpha = exp(m - m_new)``; at the end ``out = acc / l``.

How this maps to the NeuronCore:

- The key loop is a ``tl.sequential_range``: iteration ``j + 1`` reads the state
  iteration ``j`` wrote. The state lives in SBUF buffers allocated *before* the
  loop (``tl.full`` / ``tl.zeros``) and is updated in place with ``buf[...] = ...``
  (a loop-carried buffer). An ``affine_range`` would promise the compiler that
  the iterations are independent, which they are not.
- Both matmuls run on the Tensor engine and accumulate into PSUM. The engine
  contracts over the partition dimension, so ``q @ k.T`` takes ``q.T [d, 128]``
  and ``k.T [d, 128]``; ``p @ v`` takes ``p.T`` and ``v``. There are two ways to
  get a transposed tile: a transposing DMA (``tl.load_transpose2d``, element-wise
  strided access, slow) or a contiguous load followed by a Tensor-engine
  transpose (``tl.transpose``, a matmul against the identity, nearly free). The
  kernel takes the choice as a compile-time argument and the profile shows the
  difference: the transposing DMAs of ``k`` dominate the first version, and the
  second is several times faster.
- The causal mask is an affine predicate on the row and column indices:
  ``tl.where(kc <= rq, s, -inf)``. Key blocks entirely above the diagonal are
  not visited at all: for query block ``qi`` the key loop runs ``qi + 1`` times,
  which halves the work.
- ``exp`` runs on the Scalar engine, the row max / row sum on the Vector engine.

We check against ``torch.nn.functional.scaled_dot_product_attention`` with
``is_causal`` both ways and print the simulated profile.

Run: ``python tutorials/05_flash_attention.py``
"""

import math

import torch
import torch.nn.functional as F

import trnlang as trn
import trnlang.language as tl

S, D = 512, 64  # sequence length and head dim (S a multiple of 128, D <= 128)


@trn.kernel
def flash_attention(q, k, v, out, scale, causal, dma_transpose=False):
    """Single-head attention forward over 128-query x 128-key blocks (S % 128 == 0, d <= 128)."""
    s_len, d = q.shape
    cd = tl.arange(d)[None, :]
    for qi in tl.affine_range(s_len // 128):
        rq = qi * 128 + tl.arange(128)[:, None]                      # query (row) index, [128, 1]
        q_blk = q[qi * 128:(qi + 1) * 128, :]
        q_t = tl.load_transpose2d(q_blk) if dma_transpose else tl.transpose(tl.load(q_blk))  # [d, 128]
        m_i = tl.full((128, 1), -math.inf, tl.float32)               # loop-carried state, in SBUF
        l_i = tl.zeros((128, 1), tl.float32)
        acc = tl.zeros((128, d), tl.float32)
        n_blocks = qi + 1 if causal else s_len // 128                # causal: skip blocks above the diagonal
        for kj in tl.sequential_range(n_blocks):
            kc = kj * 128 + tl.arange(128)[None, :]                  # key (column) index, [1, 128]
            k_blk = k[kj * 128:(kj + 1) * 128, :]
            k_t = tl.load_transpose2d(k_blk) if dma_transpose else tl.transpose(tl.load(k_blk))  # [d, 128]
            v_t = tl.load(v[kj * 128:(kj + 1) * 128, :])             # [128, d]
            s = tl.copy(tl.matmul(q_t, k_t, transpose_x=True)) * scale  # [128q, 128k], PSUM -> SBUF
            if causal:
                s = tl.where(kc <= rq, s, -math.inf)
            m_new = tl.maximum(m_i, tl.max(s, axis=1, keepdims=True))
            p = tl.exp(s - m_new)
            alpha = tl.exp(m_i - m_new)
            l_i[...] = l_i * alpha + tl.sum(p, axis=1, keepdims=True)
            pv = tl.matmul(tl.transpose(p), v_t, transpose_x=True)   # [128q, d] in PSUM
            acc[...] = acc * alpha + pv
            m_i[...] = m_new
        tl.store(out[rq, cd], acc / l_i)


def main() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(S, D, generator=g) for _ in range(3))
    scale = 1.0 / math.sqrt(D)
    slow = flash_attention.profile(q, k, v, torch.empty(S, D), scale, False, True, simulate_only=True)
    print(f"=== first version, q and k transposed by the DMA (non-causal): {slow.time_us:,.2f} us simulated ===")
    print(slow.summary(top=3))
    print()
    profiles = {}
    for causal in (False, True):
        out = torch.empty(S, D)
        prof = flash_attention.profile(q, k, v, out, scale, causal)
        ref = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal)[0]
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        print(f"flash_attention (causal={causal}) at S={S}, d={D} matches "
              f"torch.nn.functional.scaled_dot_product_attention(is_causal={causal})")
        profiles[causal] = prof

    for causal, prof in profiles.items():
        print(f"\n=== causal={causal}: {prof.time_us:,.2f} us simulated, MFU {prof.mfu:.3f} ===")
        print(prof.summary(top=6))
    print(f"\nTensor-engine transposes instead of transposing DMAs: {slow.time_us:,.2f} us -> "
          f"{profiles[False].time_us:,.2f} us ({slow.time_us / profiles[False].time_us:.1f}x)")
    print(f"skipping the key blocks above the diagonal: causal {profiles[True].time_us:,.2f} us vs "
          f"non-causal {profiles[False].time_us:,.2f} us")


if __name__ == "__main__":
    main()
