"""Scaled dot-product attention as flash-attention kernels, forward and backward.

On a PrivateUse1 device torch 2.13 picks the SDPA backend with a C++ dispatch stub that Python
cannot register, so ``F.scaled_dot_product_attention`` would take the math path. We register an
``AutogradPrivateUse1`` kernel for ``aten::scaled_dot_product_attention`` that calls
``aten::_scaled_dot_product_fused_attention_overrideable`` (which has an autograd formula calling
``..._overrideable_backward``) and lower both of those with flash kernels. Calls we do not handle
(dropout, head dim > 128, unusual ranks) take torch's math decomposition, whose pieces run natively.

- ``flash_fwd``: per (batch, head, 128-query block) an online softmax over 128-key blocks
  (running max ``m``, sum ``l``, un-normalised accumulator; see tutorial 05), ``q @ k.T`` and
  ``p @ v`` on the Tensor engine (fp32 accumulation), causal blocks above the diagonal skipped,
  a boolean or additive mask applied per block, ragged sequence lengths masked. Fully masked rows
  give 0 (as torch's CPU kernel). It also writes the row log-sum-exp for the backward.
- ``flash_bwd_kv``: per key block, loop over query blocks recomputing ``p = exp(s - lse)``;
  ``dV += p.T @ dO``, ``dS = p * (dO @ V.T - rowsum(dO * O))``, ``dK += dS.T @ Q * scale``.
- ``flash_bwd_q``: per query block, ``dQ += dS @ K * scale`` over key blocks (and ``dS`` itself,
  the gradient of an additive mask, when asked).

GQA (``enable_gqa`` with fewer key/value heads) maps query head ``h`` to key/value head
``h // (Hq // Hkv)`` inside the kernels; ``dK`` / ``dV`` are summed over the group.

Example:
    >>> import torch, torch.nn.functional as F
    >>> q = torch.randn(2, 4, 256, 64).to("trn")
    >>> o = F.scaled_dot_product_attention(q, q, q, is_causal=True)   # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import sympy
import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import decline, lowering, memory
from trnlang.device.registry import describe

BQ = 128
BK = 128
#: Longest key sequence whose transposed keys and values the forward stages in SBUF per head.
HOIST_MAX = 8192
_F = (torch.float32, torch.bfloat16, torch.float16)


def _blocks(n: Any, cap: int) -> Any:
    """``min(n, cap)`` key blocks as a loop bound (``cap`` 0: ``n``), so the bounds check proves that a
    block index stays inside a ``cap``-block staging buffer even when ``n`` is a runtime size."""
    e = n.expr if hasattr(n, "expr") else sympy.sympify(n)
    return sympy.Min(e, cap) if cap else e


class MaskKind(U.Mode):
    """The attention mask the kernels apply (a compile-time constant of the kernels)."""

    NONE = "none"    #: no mask (causal and the ragged last key block are separate fields of :class:`Flash`)
    BOOL = "bool"    #: ``attn_mask`` of bools: False drops the score
    FLOAT = "float"  #: an additive float bias


@dataclass(frozen=True)
class Flash:
    """What one flash-attention launch computes (a compile-time spec of :func:`flash_fwd`, :func:`flash_bwd_kv`
    and :func:`flash_bwd_q`: equal specs share a variant; the softmax ``scale`` is a separate argument).

    Attributes:
        mask: the kind of ``attn_mask`` applied to the scores.
        causal: a query sees only the keys at or before its position.
        kcap: (forward) key blocks the SBUF staging buffers hold: a power of two >= the key blocks, or 0 for
            no staging (keys and values streamed per block).
        ragged: (forward) the last key block is partial (its missing keys are masked).
        want_dbias: (:func:`flash_bwd_q`) also write ``dS``, the additive mask's gradient, into ``dbias``.

    >>> Flash(MaskKind.NONE, causal=True, kcap=2).ragged
    False
    """

    mask: MaskKind
    causal: bool
    kcap: int = 0
    ragged: bool = False
    want_dbias: bool = False


#: :class:`Flash` made once per distinct value (a warm launch builds no new instance).
_flash = functools.lru_cache(maxsize=256)(Flash)


def _mask_scores(s, m4, b, h, rq, kc, sq, sk, spec):
    """Scores with the causal / attention mask / ragged-key masks of ``spec`` (a :class:`Flash`) applied (-inf where
    masked)."""
    keep = kc < sk
    if spec.causal:
        keep = keep & (kc <= rq)
    if spec.mask is MaskKind.BOOL:
        mt = tl.load(m4[b, h, rq, kc], mask=(rq < sq) & (kc < sk))
        s = tl.where(mt.astype(tl.float32) != 0.0, s, -math.inf)
    elif spec.mask is MaskKind.FLOAT:
        s = s + tl.load(m4[b, h, rq, kc], mask=(rq < sq) & (kc < sk)).astype(tl.float32)
    return tl.where(keep, s, -math.inf)


def _heads(q, k):
    """The batch, kv-head and GQA-group loops of a backward kernel over ``q [B, Hq, ...]``, ``k [B, Hk, ...]``:
    yields ``(b, hkv, h)`` for query head ``h`` of kv head ``hkv``'s group."""
    nb, hq, hk = q.shape[0], q.shape[1], k.shape[1]
    grp = hq // hk
    for b in tl.affine_range(nb):
        for hkv in tl.affine_range(hk):
            for g in tl.affine_range(grp):
                yield b, hkv, hkv * grp + g


@trn.kernel(dynamic=True)
def flash_fwd(q, k, v, m4, out, lse, scale, spec):
    """``out = softmax(q @ k.T * scale + mask) @ v`` over ``[B, H, S, D]``; ``lse [B, H, Sq, 1]``.

    Shape-polymorphic in the batch, head and sequence sizes (a decode loop whose key length grows by one
    per step reuses one compiled variant): the host passes what needs a compile-time value in ``spec``
    (a :class:`Flash`: the mask, causal, the staging capacity ``kcap`` and whether the last key block is ragged).
    Per (batch, kv head) the transposed keys and the values are staged in SBUF once (when they fit,
    ``Sk <= HOIST_MAX``) and shared by every query block of the GQA group.
    """
    nb, hq, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    grp = hq // hk
    cd = tl.arange(d)[None, :]
    one = tl.arange(1)[None, :]
    nkb = tl.cdiv(sk, BK)
    kcap = spec.kcap
    for b in tl.affine_range(nb):
        for hkv in tl.affine_range(hk):
            if kcap:
                k_all = tl.ndarray((d, kcap * BK), tl.float32)
                v_all = tl.ndarray((BK, kcap, d), tl.float32)
                for c in tl.affine_range(_blocks(nkb, kcap)):
                    rk = c * BK + tl.arange(BK)[:, None]
                    k_all[:, c * BK:(c + 1) * BK] = tl.transpose(
                        tl.load(k[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32))
                    v_all[:, c, :] = tl.load(v[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32)
            for g in tl.affine_range(grp):
                h = hkv * grp + g
                for qi in tl.affine_range(tl.cdiv(sq, BQ)):
                    rq = qi * BQ + tl.arange(BQ)[:, None]
                    q_t = tl.transpose(tl.load(q[b, h, rq, cd], mask=rq < sq).astype(tl.float32) * scale)  # [d, BQ]
                    m_i = tl.full((BQ, 1), -math.inf, tl.float32)
                    l_i = tl.zeros((BQ, 1), tl.float32)
                    acc = tl.zeros((BQ, d), tl.float32)
                    n_blocks = qi + 1 if spec.causal else nkb                 # causal: skip blocks above the diagonal
                    for kj in tl.sequential_range(_blocks(n_blocks, kcap)):
                        kc = kj * BK + tl.arange(BK)[None, :]
                        if kcap:
                            k_t = k_all[:, kj * BK:(kj + 1) * BK]
                            v_t = v_all[:, kj, :]
                        else:
                            rk = kj * BK + tl.arange(BK)[:, None]
                            k_t = tl.transpose(tl.load(k[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32))
                            v_t = tl.load(v[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32)
                        s = tl.copy(tl.matmul(q_t, k_t, transpose_x=True))
                        if spec.causal or spec.mask is not MaskKind.NONE or spec.ragged:
                            s = _mask_scores(s, m4, b, h, rq, kc, sq, sk, spec)
                        m_new = tl.maximum(m_i, tl.max(s, axis=1, keepdims=True))
                        m_safe = tl.where(m_new == -math.inf, 0.0, m_new)
                        p = tl.exp(s - m_safe)
                        alpha = tl.exp(m_i - m_safe)
                        l_i[...] = l_i * alpha + tl.sum(p, axis=1, keepdims=True)
                        acc[...] = acc * alpha + tl.matmul(tl.transpose(p), v_t, transpose_x=True)
                        m_i[...] = m_new
                    empty = l_i == 0.0
                    inv = tl.where(empty, 0.0, 1.0 / tl.where(empty, 1.0, l_i))
                    tl.store(out[b, h, rq, cd], acc * inv, mask=rq < sq)
                    tl.store(lse[b, h, rq, one], tl.where(empty, math.inf, m_i + tl.log(tl.where(empty, 1.0, l_i))),
                             mask=rq < sq)


@trn.kernel
def flash_bwd_kv(q, k, v, m4, do, lse, dsum, dk, dv, scale, spec):
    """``dK``, ``dV`` per key block (``[B, Hq, Sk, D]`` fp32: the caller sums GQA groups); ``spec``: a
    :class:`Flash` (its mask and causal)."""
    sq, d, sk = q.shape[2], q.shape[3], k.shape[2]
    cd = tl.arange(d)[None, :]
    one = tl.arange(1)[None, :]
    nqb = tl.cdiv(sq, BQ)
    for b, hkv, h in _heads(q, k):
        for kj in tl.affine_range(tl.cdiv(sk, BK)):
            rk = kj * BK + tl.arange(BK)[:, None]
            kc = kj * BK + tl.arange(BK)[None, :]
            k_t = tl.transpose(tl.load(k[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32))   # [d, BK]
            v_t = tl.transpose(tl.load(v[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32))
            dk_acc = tl.zeros((BK, d), tl.float32)
            dv_acc = tl.zeros((BK, d), tl.float32)
            for qi in tl.sequential_range(nqb):
                rq = qi * BQ + tl.arange(BQ)[:, None]
                qt = tl.load(q[b, h, rq, cd], mask=rq < sq).astype(tl.float32)
                dot = tl.load(do[b, h, rq, cd], mask=rq < sq).astype(tl.float32)
                ls = tl.load(lse[b, h, rq, one], mask=rq < sq, other=math.inf)
                di = tl.load(dsum[b, h, rq, one], mask=rq < sq)
                s = tl.copy(tl.matmul(tl.transpose(qt), k_t, transpose_x=True)) * scale
                p = tl.exp(_mask_scores(s, m4, b, h, rq, kc, sq, sk, spec) - ls)          # [BQ, BK]
                dv_acc[...] = dv_acc + tl.matmul(p, dot, transpose_x=True)
                dp = tl.copy(tl.matmul(tl.transpose(dot), v_t, transpose_x=True))
                dk_acc[...] = dk_acc + tl.matmul(p * (dp - di), qt, transpose_x=True)
            tl.store(dk[b, h, rk, cd], dk_acc * scale, mask=rk < sk)
            tl.store(dv[b, h, rk, cd], dv_acc, mask=rk < sk)


@trn.kernel
def flash_bwd_q(q, k, v, m4, do, lse, dsum, dq, dbias, scale, spec):
    """``dQ`` per query block (and ``dS``, the additive mask's gradient, into ``dbias`` when ``spec.want_dbias``);
    ``spec``: a :class:`Flash`."""
    sq, d, sk = q.shape[2], q.shape[3], k.shape[2]
    cd = tl.arange(d)[None, :]
    one = tl.arange(1)[None, :]
    nkb = tl.cdiv(sk, BK)
    for b, hkv, h in _heads(q, k):
        for qi in tl.affine_range(tl.cdiv(sq, BQ)):
            rq = qi * BQ + tl.arange(BQ)[:, None]
            q_t = tl.transpose(tl.load(q[b, h, rq, cd], mask=rq < sq).astype(tl.float32))
            do_t = tl.transpose(tl.load(do[b, h, rq, cd], mask=rq < sq).astype(tl.float32))
            ls = tl.load(lse[b, h, rq, one], mask=rq < sq, other=math.inf)
            di = tl.load(dsum[b, h, rq, one], mask=rq < sq)
            dq_acc = tl.zeros((BQ, d), tl.float32)
            for kj in tl.sequential_range(nkb):
                rk = kj * BK + tl.arange(BK)[:, None]
                kc = kj * BK + tl.arange(BK)[None, :]
                kt = tl.load(k[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32)
                v_t = tl.transpose(tl.load(v[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32))
                s = tl.copy(tl.matmul(q_t, tl.transpose(kt), transpose_x=True)) * scale
                p = tl.exp(_mask_scores(s, m4, b, h, rq, kc, sq, sk, spec) - ls)
                ds = p * (tl.copy(tl.matmul(do_t, v_t, transpose_x=True)) - di)
                if spec.want_dbias:
                    tl.store(dbias[b, h, rq, kc], ds, mask=(rq < sq) & (kc < sk))
                dq_acc[...] = dq_acc + tl.matmul(tl.transpose(ds), kt, transpose_x=True)
            tl.store(dq[b, h, rq, cd], dq_acc * scale, mask=rq < sq)


@trn.kernel
def flash_bwd_one(q, k, v, m4, do, o, lse, dq, dk, dv, dbias, scale, spec):
    """The whole backward when the queries and the keys are one block each (``Sq, Sk <= 128``): per head ``P`` is
    computed once (:func:`flash_bwd_q` and :func:`flash_bwd_kv` each recompute it) and FlashAttention-2's
    ``D = rowsum(dO * O)`` in the same pass. ``dk`` / ``dv`` are per query head, as :func:`flash_bwd_kv`'s."""
    sq, d, sk = q.shape[2], q.shape[3], k.shape[2]
    cd = tl.arange(d)[None, :]
    one = tl.arange(1)[None, :]
    rq = tl.arange(BQ)[:, None]
    rk = tl.arange(BK)[:, None]
    kc = tl.arange(BK)[None, :]
    for b, hkv, h in _heads(q, k):
        qt = tl.load(q[b, h, rq, cd], mask=rq < sq).astype(tl.float32)                  # [BQ, d]
        dot = tl.load(do[b, h, rq, cd], mask=rq < sq).astype(tl.float32)
        di = tl.sum(dot * tl.load(o[b, h, rq, cd], mask=rq < sq).astype(tl.float32), axis=1, keepdims=True)
        ls = tl.load(lse[b, h, rq, one], mask=rq < sq, other=math.inf)
        kt = tl.load(k[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32)                # [BK, d]
        vt = tl.load(v[b, hkv, rk, cd], mask=rk < sk).astype(tl.float32)
        s = tl.copy(tl.matmul(tl.transpose(qt), tl.transpose(kt), transpose_x=True)) * scale  # [BQ, BK]
        p = tl.exp(_mask_scores(s, m4, b, h, rq, kc, sq, sk, spec) - ls)
        dp = tl.copy(tl.matmul(tl.transpose(dot), tl.transpose(vt), transpose_x=True))
        ds = p * (dp - di)
        if spec.want_dbias:
            tl.store(dbias[b, h, rq, kc], ds, mask=(rq < sq) & (kc < sk))
        tl.store(dv[b, h, rk, cd], tl.matmul(p, dot, transpose_x=True), mask=rk < sk)
        tl.store(dk[b, h, rk, cd], tl.matmul(ds, qt, transpose_x=True) * scale, mask=rk < sk)
        tl.store(dq[b, h, rq, cd], tl.matmul(tl.transpose(ds), kt, transpose_x=True) * scale, mask=rq < sq)


@trn.kernel
def flash_bwd_dsum(do, o, dsum):
    """``dsum [B, H, Sq, 1] = rowsum(do * o)`` in fp32 (FlashAttention-2's ``D``, the backward's preprocessing) over
    any strides: ``do`` usually arrives as the transpose of a ``[B, S, H, D]`` gradient."""
    nb, nh, sq, d = do.shape
    cd = tl.arange(d)[None, :]
    one = tl.arange(1)[None, :]
    for b in tl.affine_range(nb):
        for h in tl.affine_range(nh):
            for qi in tl.affine_range(tl.cdiv(sq, BQ)):
                rq = qi * BQ + tl.arange(BQ)[:, None]
                x = tl.load(do[b, h, rq, cd], mask=rq < sq).astype(tl.float32) \
                    * tl.load(o[b, h, rq, cd], mask=rq < sq).astype(tl.float32)
                tl.store(dsum[b, h, rq, one], tl.sum(x, axis=1, keepdims=True), mask=rq < sq)


# ------------------------------------------------------------------------------------------ host side


def _mask_kind(mask: torch.Tensor | None, dtype: torch.dtype) -> MaskKind | None:
    if mask is None:
        return MaskKind.NONE
    if mask.dtype == torch.bool:
        return MaskKind.BOOL
    if mask.dtype in _F:
        return MaskKind.FLOAT
    return None


def _expand_mask(mask: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    if mask is None:
        return q
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return mask.expand(shape)


def _supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> bool:
    if not all(t.device.type == "trn" and t.dtype in _F and t.dim() == 4 for t in (q, k, v)):
        return False
    if q.dtype != k.dtype or q.dtype != v.dtype or k.shape != v.shape:
        return False
    b, hq, sq, d = q.shape
    if k.shape[0] != b or k.shape[3] != d or d > 128 or d == 0 or hq % max(k.shape[1], 1) or k.shape[1] == 0:
        return False
    if sq == 0 or k.shape[2] == 0 or b == 0:
        return False
    if mask is not None:
        if mask.device.type != "trn" or _mask_kind(mask, q.dtype) is None:
            return False
        try:
            if torch.broadcast_shapes(mask.shape, (b, hq, sq, k.shape[2])) != (b, hq, sq, k.shape[2]):
                return False
        except RuntimeError:
            return False
    return True


#: Smallest attention (``B * Hq * Sq * Sk * D`` multiply-adds) split across threads.
SPLIT_MIN_MACS = 1 << 22


def _split_run(kern: Any, args: list[Any], kinds: str, *consts: Any) -> None:
    """``kern(*args, *consts)``, or one launch per thread on blocks of batches (else of kv heads) when big.

    ``kinds[i]``: ``"q"`` for a ``[B, Hq, ...]`` argument, ``"k"`` for a ``[B, Hk, ...]`` one (a kv-head
    block ``[lo, hi)`` takes query heads ``[lo * grp, hi * grp)``: the GQA groups stay whole).
    """
    q, k = args[0], args[1]
    b, hq, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    threads = U.num_threads()
    if threads == 1 or b * hq * sq * sk * d < SPLIT_MIN_MACS or (b < 2 and hk < 2):
        kern(*args, *consts)
        return
    grp = hq // hk

    def heads(t: torch.Tensor, kind: str, lo: int, hi: int) -> Any:
        f = grp if kind == "q" else 1
        st = t.stride()
        shape = (t.shape[0], (hi - lo) * f, *t.shape[2:])
        return U.piece(t, shape, st, t.storage_offset() + lo * f * st[1])

    def make() -> list[Any]:
        if b >= 2:
            parts = [[U.rows_piece(t, slice(lo, hi)) for t in args] for lo, hi in U.chunks(b, threads, 1)]
        else:
            parts = [[heads(t, kd, lo, hi) for t, kd in zip(args, kinds)] for lo, hi in U.chunks(hk, threads, 1)]
        return [U.launch(kern, *p, *consts) for p in parts]

    # the launches' plan keys are the tensors' layouts: kept per layout and addresses (a repeat skips the binds)
    key = (kern, threads, kinds, consts, *[(t.dtype, tuple(t.shape), t.stride(), t.data_ptr()) for t in args])
    U.run_parallel(_SPLITS.get(key, make))


_SPLITS = U.BoundLaunches()


def _scale(scale: float | None, d: int) -> float:
    return float(scale) if scale is not None else 1.0 / math.sqrt(d)


@lowering("aten::_scaled_dot_product_fused_attention_overrideable", dtypes=None)
def sdpa_overrideable(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attn_bias: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                      return_debug_mask: bool = False, *, scale: float | None = None) -> Any:
    """Flash-attention forward -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, seed, offset, debug)."""
    if dropout_p != 0.0 or return_debug_mask or not _supported(query, key, value, attn_bias):
        return decline("dropout, a debug mask, or q/k/v/mask it does not take (4-D, one float dtype, head dim <= 128)")
    b, h, sq, d = query.shape
    sk = key.shape[2]
    if is_causal and sq > sk:
        return decline("is_causal with more queries than keys")
    kind = _mask_kind(attn_bias, query.dtype)
    out = memory.empty(tuple(query.shape), query.dtype)
    lse = memory.empty((b, h, sq, 1), torch.float32)
    nkb = -(-sk // BK)
    kcap = 1 << (max(nkb, 1) - 1).bit_length() if nkb * BK <= HOIST_MAX else 0  # staging: a power-of-two bucket
    _split_run(flash_fwd, [query, key, value, _expand_mask(attn_bias, query, key), out, lse], "qkkqqq",
               _scale(scale, d), _flash(kind, bool(is_causal), kcap, sk % BK != 0, False))
    empty = memory.empty((0,), torch.int64)
    seed = memory.empty((), torch.int64)
    return (out, lse.view(b, h, sq), empty, empty, sq, sk, seed, seed, memory.empty((0,), query.dtype))


@lowering("aten::_scaled_dot_product_fused_attention_overrideable_backward", dtypes=None)
def sdpa_overrideable_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               attn_bias: torch.Tensor | None, grad_input_mask: Any, out: torch.Tensor,
                               logsumexp: torch.Tensor, cum_seq_q: Any, cum_seq_k: Any, max_q: int, max_k: int,
                               dropout_p: float, is_causal: bool, philox_seed: Any, philox_offset: Any, *,
                               scale: float | None = None) -> Any:
    """Flash-attention backward -> (grad_query, grad_key, grad_value, grad_attn_bias)."""
    if attn_bias is not None and attn_bias.numel() == 0:
        attn_bias = None
    if dropout_p != 0.0 or not _supported(query, key, value, attn_bias):
        return decline("dropout, or q/k/v/mask the kernel does not take (4-D, one float dtype, head dim <= 128)")
    b, hq, sq, d = query.shape
    hk, sk = key.shape[1], key.shape[2]
    if is_causal and sq > sk:
        return decline("is_causal with more queries than keys")
    kind = _mask_kind(attn_bias, query.dtype)
    sc = _scale(scale, d)
    lse = logsumexp.reshape(b, hq, sq, 1)
    m4 = _expand_mask(attn_bias, query, key)
    want = list(grad_input_mask) + [False] * (4 - len(grad_input_mask))
    dq = memory.empty(tuple(query.shape), query.dtype)
    want_db = bool(want[3]) and kind is MaskKind.FLOAT
    dbias = memory.empty((b, hq, sq, sk), torch.float32) if want_db else dq
    grp = hq // hk
    kv_dt = torch.float32 if grp > 1 else key.dtype
    dk = memory.empty((b, hq, sk, d), kv_dt)
    dv = memory.empty((b, hq, sk, d), kv_dt)
    if sq <= BQ and sk <= BK:  # one block each: one pass
        _split_run(flash_bwd_one, [query, key, value, m4, grad_out, out, lse, dq, dk, dv, dbias], "qkkqqqqqqqq",
                   sc, _flash(kind, bool(is_causal), 0, False, want_db))
    else:
        dsum = memory.empty((b, hq, sq, 1), torch.float32)
        U.launch(flash_bwd_dsum, grad_out, out, dsum)()
        _split_run(flash_bwd_q, [query, key, value, m4, grad_out, lse, dsum, dq, dbias], "qkkqqqqqq", sc,
                   _flash(kind, bool(is_causal), 0, False, want_db))
        _split_run(flash_bwd_kv, [query, key, value, m4, grad_out, lse, dsum, dk, dv], "qkkqqqqqq", sc,
                   _flash(kind, bool(is_causal), 0, False, False))
    if grp > 1:
        dk = dk.view(b, hk, grp, sk, d).sum(2).to(key.dtype)
        dv = dv.view(b, hk, grp, sk, d).sum(2).to(value.dtype)
    db = None
    if want_db:
        red = [i for i in range(4) if attn_bias.dim() - 4 + i < 0 or attn_bias.shape[attn_bias.dim() - 4 + i] == 1]
        g = dbias.sum(red, keepdim=True) if red else dbias
        db = g.reshape(attn_bias.shape).to(attn_bias.dtype)
    return dq, dk, dv, db


# ------------------------------------------------------------------------------------------ routing


def _sdpa_autograd(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
                   dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                   enable_gqa: bool = False) -> torch.Tensor:
    """``aten::scaled_dot_product_attention`` on trn: the fused op when supported, else torch's math path."""
    op = torch.ops.aten.scaled_dot_product_attention.default
    ok = dropout_p == 0.0 and not (is_causal and attn_mask is not None) and query.dim() in (3, 4)
    if ok and query.dim() == 3:
        ok = key.dim() == 3 and value.dim() == 3
    if ok:
        q4, k4, v4 = (t if t.dim() == 4 else t.unsqueeze(0) for t in (query, key, value))
        m = attn_mask
        if m is not None and m.dim() < 4:
            m = m.reshape((1,) * (4 - m.dim()) + tuple(m.shape))
        if k4.shape[1] != q4.shape[1] and not enable_gqa:
            ok = False
        ok = ok and _supported(q4, k4, v4, m) and k4.shape[2] == v4.shape[2]
        if ok and is_causal and q4.shape[2] > k4.shape[2]:
            ok = False
    if not ok:
        return op.decompose(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if m is not None and m.dtype != torch.bool and m.dtype != q4.dtype:
        m = m.to(q4.dtype)
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q4, k4, v4, m, 0.0, bool(is_causal),
                                                                         False, scale=scale)[0]
    return out if query.dim() == 4 else out.squeeze(0)


_LIB = torch.library.Library("aten", "IMPL")
_LIB.impl("scaled_dot_product_attention", _sdpa_autograd, "AutogradPrivateUse1")
describe("aten::scaled_dot_product_attention", _sdpa_autograd)
