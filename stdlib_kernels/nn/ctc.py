"""CTC loss (``aten::_ctc_loss`` / ``_ctc_loss_backward``, both overloads): the forward-backward dynamic program over
time, as torch's CPU kernel computes it. Registered through :mod:`stdlib_kernels.nn.loss`.

Layout: batch rows on the partitions (tiles of 128), the ``W = 2 * S_max + 1`` states of the extended target
(``blank, t1, blank, t2, ..., blank``) on the free axis. Time is a sequential loop; one step updates every state of
every row at once: the three predecessors ``s, s - 1, s - 2`` are shifted copies of the previous row (free-axis
slices), combined by a max-shifted log-sum-exp exactly as torch writes it, plus ``log_probs[t, b, l'(s)]``.

* ``ctc_labels``: ``l'(b, s)`` (blank for even ``s``, the target for odd ``s``) by an indirect gather of the
  targets through a host-made position map (padded or concatenated targets), with a range check.
* ``ctc_emit``: ``lpe[t, b, s] = log_probs[t, b, l'(b, s)]`` for all steps (indirect gathers).
* ``ctc_alpha``: ``log_alpha [N, T, W]`` row by row and the negative log-likelihood; rows whose input has ended
  keep their last alpha (``where(t < input_length)``), states past ``2 * target_length`` stay ``-inf``.
* ``ctc_beta``: ``log_beta`` backwards in time (started at each row's last input step) and, per step,
  ``exp(log_alpha + log_beta + nll - lpe)`` scattered by label into an fp32 ``[T, N, C]`` accumulator
  (an accumulating indirect DMA: a label occurs at several states); ``ctc_grad`` finishes
  ``(exp(log_probs) - acc) * grad_out`` (zero past each input length, and for infinite losses with
  ``zero_infinity``).

Example:
    >>> import torch, torch.nn.functional as F
    >>> lp = torch.randn(50, 4, 20).log_softmax(2).to("trn")                         # doctest: +SKIP
    >>> tg = torch.randint(1, 20, (4, 10)).to("trn")                                  # doctest: +SKIP
    >>> F.ctc_loss(lp, tg, [50] * 4, [10, 9, 8, 7], reduction="none").shape          # doctest: +SKIP
    torch.Size([4])
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Sequence

import numpy as np
import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels.tiling import row_tiles
from trnlang.device import decline, lowering

_NEG = -math.inf
_MAX_STATES = 4096  # extended-target states of one row (free axis)


@trn.kernel
def ctc_labels(tflat, pos, lens, lab, bad, blank, n_cls):
    """``lab[b, s] = tflat[pos[b, s]]`` for odd ``s < 2 * len[b] + 1``, else ``blank`` (``tflat [1, S, 1]``,
    ``pos [N, W]`` int32, ``lens [N, 1]`` fp32, ``lab [N, W]`` int32); ``bad [N, 1]``: a label outside
    ``[0, n_cls)``."""
    n_dim, w_dim = pos.shape
    cols = tl.arange(w_dim)[None, :]
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(n_dim):
        s = isa.iota(cols + 0 * rows, tl.float32)
        ln = tl.load(lens[rows, one], mask=m)
        live = (tl.fmod(s, 2.0) == 1.0) & (s < ln * 2.0 + 1.0)
        pt = tl.where(live, tl.load(pos[rows, cols], mask=m), 0)
        v = tl.load(tflat[0, pt, 0], mask=m)
        v = tl.where(live, v, blank)
        tl.store(lab[rows, cols], v, mask=m)
        ok = (v >= 0) & (v < n_cls)
        tl.store(bad[rows, one], tl.max(tl.where(ok, 0.0, 1.0), axis=1, keepdims=True), mask=m)


@trn.kernel
def ctc_emit(lp3, lab, lpe, c_stride):
    """``lpe[t, b, s] = lp3[t, b * c_stride + lab[b, s], 0]`` (``lp3``: log_probs as ``[T, span, 1]`` with the
    class stride 1 along ``span``; ``lpe [T, N, W]`` fp32)."""
    t_dim = lpe.shape[0]
    n_dim, w_dim = lab.shape
    cols = tl.arange(w_dim)[None, :]
    for rows, m in row_tiles(n_dim):
        lin = tl.load(lab[rows, cols], mask=m) + isa.iota(rows * c_stride + 0 * cols, tl.int32)
        for t in tl.affine_range(t_dim):
            tl.store(lpe[t, rows, cols], tl.load(lp3[t, lin, 0], mask=m).astype(tl.float32), mask=m)


def _allow_skip(lab: Any, forward: bool) -> Any:
    """1.0 where the two-state skip is allowed: ``l'(s - 2) != l'(s)`` (forward) / ``l'(s + 2) != l'(s)``."""
    lf = lab.astype(tl.float32)
    w_dim = lab.shape[1]
    sh = tl.full(lab.shape, -1.0, tl.float32)
    if w_dim > 2:
        if forward:
            sh[:, 2:w_dim] = lf[:, 0:w_dim - 2]
        else:
            sh[:, 0:w_dim - 2] = lf[:, 2:w_dim]
    return tl.where((sh != lf) & (sh >= 0.0), 1.0, 0.0)


def _lse3(a: Any, b: Any, c: Any) -> Any:
    """torch's ``log(exp(a - m) + exp(b - m) + exp(c - m)) + m`` with ``m = max`` (0 when all are -inf)."""
    m = tl.maximum(tl.maximum(a, b), c)
    m = tl.where(m == _NEG, 0.0, m)
    return tl.log(tl.exp(a - m) + tl.exp(b - m) + tl.exp(c - m)) + m


def _length_tiles(ilen: Any, tlen: Any) -> Iterator[tuple[Any, Any, Any, Any]]:
    """Per tile of up to 128 batch rows (a real loop): ``(rows, mask, input length, target length)``, the lengths
    ``[P, 1]`` fp32 tiles of ``ilen`` / ``tlen [N, 1]``."""
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(ilen.shape[0]):
        yield rows, m, tl.load(ilen[rows, one], mask=m), tl.load(tlen[rows, one], mask=m)


@trn.kernel
def ctc_alpha(lpe, lab, ilen, tlen, alpha, nll):
    """``alpha [N, T, W]`` and ``nll [N, 1]`` (``ilen``/``tlen [N, 1]`` fp32 lengths)."""
    t_dim, _, w_dim = lpe.shape
    cols = tl.arange(w_dim)[None, :]
    one = tl.arange(1)[None, :]
    for rows, m, il, tg in _length_tiles(ilen, tlen):
        s = isa.iota(cols + 0 * rows, tl.float32)
        valid = s < tg * 2.0 + 1.0
        skip = _allow_skip(tl.load(lab[rows, cols], mask=m), True)
        e0 = tl.load(lpe[0, rows, cols], mask=m)
        la = tl.zeros(e0.shape, tl.float32)
        la[...] = tl.where((s == 0.0) | ((s == 1.0) & (tg > 0.0)), e0, _NEG)
        tl.store(alpha[rows, 0, cols], la, mask=m)
        for t in tl.sequential_range(1, t_dim):
            e = tl.load(lpe[t, rows, cols], mask=m)
            a2 = tl.full(la.shape, _NEG, tl.float32)
            a3 = tl.full(la.shape, _NEG, tl.float32)
            if w_dim > 1:
                a2[:, 1:w_dim] = la[:, 0:w_dim - 1]
            if w_dim > 2:
                a3[:, 2:w_dim] = la[:, 0:w_dim - 2]
            new = tl.where(valid, _lse3(la, a2, tl.where(skip != 0.0, a3, _NEG)) + e, _NEG)
            tv = isa.iota(0 * rows + t, tl.float32)
            la[...] = tl.where(tv < il, new, la)
            tl.store(alpha[rows, t, cols], la, mask=m)
        last = tl.where((s == tg * 2.0) | ((s == tg * 2.0 - 1.0) & (tg > 0.0)), la, _NEG)
        mx = tl.max(last, axis=1, keepdims=True)
        mx = tl.where(mx == _NEG, 0.0, mx)
        ll = tl.log(tl.sum(tl.exp(last - mx), axis=1, keepdims=True)) + mx
        ll = tl.where(il > 0.0, ll, tl.where(tg == 0.0, 0.0, _NEG))
        tl.store(nll[rows, one], -ll, mask=m)


@trn.kernel
def ctc_beta(lpe, lab, ilen, tlen, alpha, nll, acc3, n_cls):
    """``log_beta`` backwards in time and ``acc[t, b, l'(s)] += exp(alpha + beta + nll - lpe)`` (``acc3``: the fp32
    ``[T, N * C]`` accumulator as ``[T, N * C, 1]``, zeroed)."""
    t_dim, _, w_dim = lpe.shape
    cols = tl.arange(w_dim)[None, :]
    one = tl.arange(1)[None, :]
    for rows, m, il, tg in _length_tiles(ilen, tlen):
        z = tl.load(nll[rows, one], mask=m)
        s = isa.iota(cols + 0 * rows, tl.float32)
        valid = s < tg * 2.0 + 1.0
        labt = tl.load(lab[rows, cols], mask=m)
        skip = _allow_skip(labt, False)
        lin = labt + isa.iota(rows * n_cls + 0 * cols, tl.int32)
        init = (s == tg * 2.0) | ((s == tg * 2.0 - 1.0) & (tg > 0.0))
        lb = tl.full(labt.shape, _NEG, tl.float32)
        for k in tl.sequential_range(t_dim):
            t = t_dim - 1 - k
            e = tl.load(lpe[t, rows, cols], mask=m)
            b2 = tl.full(lb.shape, _NEG, tl.float32)
            b3 = tl.full(lb.shape, _NEG, tl.float32)
            if w_dim > 1:
                b2[:, 0:w_dim - 1] = lb[:, 1:w_dim]
            if w_dim > 2:
                b3[:, 0:w_dim - 2] = lb[:, 2:w_dim]
            rec = tl.where(valid, _lse3(lb, b2, tl.where(skip != 0.0, b3, _NEG)) + e, _NEG)
            tv = isa.iota(0 * rows + t, tl.float32)
            lb[...] = tl.where(tv == il - 1.0, tl.where(init, e, _NEG), tl.where(tv < il - 1.0, rec, _NEG))
            la = tl.load(alpha[rows, t, cols], mask=m)
            v = tl.where(valid & (tv < il), tl.exp(la + lb + z - e), 0.0)
            tl.store(acc3[t, lin, 0], v, mask=m, accumulate="add")


@trn.kernel
def ctc_grad(lp, acc, go, ilen, nll, out, zero_inf):
    """``out[t, b, c] = (exp(lp) - acc) * go[b]`` for ``t < ilen[b]`` (else 0; also 0 for an infinite loss with
    ``zero_inf``); ``lp``/``acc``/``out [T, N, C]``."""
    t_dim, n_dim, c_dim = lp.shape
    cols = tl.arange(c_dim)[None, :]
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(n_dim):
        il = tl.load(ilen[rows, one], mask=m)
        g = tl.load(go[rows, one], mask=m).astype(tl.float32)
        if zero_inf:  # an infinite loss has a zero gradient (not NaN)
            il = tl.where(tl.load(nll[rows, one], mask=m) == math.inf, 0.0, il)
        for t in tl.affine_range(t_dim):
            x = tl.load(lp[t, rows, cols], mask=m).astype(tl.float32)
            a = tl.load(acc[t, rows, cols], mask=m)
            tv = isa.iota(0 * rows + t, tl.float32)
            tl.store(out[t, rows, cols], tl.where(tv < il, (tl.exp(x) - a) * g, 0.0), mask=m)


# ------------------------------------------------------------------------------------------ host side
def _lengths(v: Any) -> list[int] | None:
    if isinstance(v, torch.Tensor):
        if v.dtype.is_floating_point or v.dim() > 1:
            return None
        return [int(x) for x in v.tolist()]  # lengths shape the program (host metadata): one small read
    try:
        return [int(x) for x in v]
    except TypeError:
        return None


def _plan(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int) -> Any:
    """``(il, tl, pos map, W)``, or a string: why the call is declined (the CPU then raises torch's errors)."""
    if not (isinstance(log_probs, torch.Tensor) and log_probs.device.type == "trn"
            and log_probs.dtype == torch.float32 and log_probs.dim() == 3 and isinstance(targets, torch.Tensor)
            and targets.device.type == "trn" and targets.dtype in (torch.int64, torch.int32)):
        return "log_probs not a 3-D float32 trn tensor, or targets not an int32/int64 trn tensor"
    t_dim, n_dim, c_dim = log_probs.shape
    il, tln = _lengths(input_lengths), _lengths(target_lengths)
    if il is None or tln is None or len(il) != n_dim or len(tln) != n_dim:
        return "lengths that are not integer sequences of the batch size"
    if n_dim == 0 or t_dim == 0:
        return "an empty batch or no time steps"
    if not 0 <= blank < c_dim or min(il) < 0 or max(il) > t_dim or min(tln) < 0:
        return "blank or lengths out of range"
    s_max = max(tln)
    w_dim = 2 * s_max + 1
    if w_dim > _MAX_STATES:
        return "targets longer than 2047 labels"
    if targets.dim() == 1:
        if sum(tln) != targets.shape[0]:
            return "target_lengths do not sum to the 1-D targets' length"
        starts = np.concatenate([[0], np.cumsum(tln)[:-1]]).astype(np.int64) * targets.stride(0)
        step = targets.stride(0)
    elif targets.dim() == 2:
        if targets.shape[0] != n_dim or targets.shape[1] < s_max:
            return "2-D targets of the wrong shape"
        starts = np.arange(n_dim, dtype=np.int64) * targets.stride(0)
        step = targets.stride(1)
    else:
        return "targets of more than 2 dims"
    pos = starts[:, None] + (np.arange(w_dim) // 2)[None, :] * step + targets.storage_offset()
    pos = np.where(np.arange(w_dim)[None, :] < 2 * np.array(tln)[:, None] + 1, pos, 0)
    return il, tln, torch.from_numpy(pos.astype(np.int32)).to("trn"), w_dim


def _f32col(v: Sequence[int]) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.float32).view(-1, 1).to("trn")


def _labels_emit(log_probs: torch.Tensor, targets: torch.Tensor, plan: Any, blank: int) -> Any:
    il, tln, pos, w_dim = plan
    t_dim, n_dim, c_dim = log_probs.shape
    flat = torch.as_strided(targets, (1, targets.untyped_storage().nbytes() // targets.element_size(), 1), (0, 1, 1), 0)
    lab = torch.empty((n_dim, w_dim), dtype=torch.int32, device="trn")
    bad = torch.empty((n_dim, 1), dtype=torch.float32, device="trn")
    ctc_labels(flat, pos, _f32col(tln), lab, bad, int(blank), int(c_dim))
    if bad.sum().item() > 0:
        return None  # a target outside the classes: torch's CPU kernel decides what happens
    lp = log_probs if log_probs.stride(2) == 1 else log_probs.contiguous()
    span = (n_dim - 1) * lp.stride(1) + c_dim
    lp3 = torch.as_strided(lp, (t_dim, span, 1), (lp.stride(0), 1, 1), lp.storage_offset())
    lpe = torch.empty((t_dim, n_dim, w_dim), dtype=torch.float32, device="trn")
    ctc_emit(lp3, lab, lpe, int(lp.stride(1)))
    return lab, lpe


def _forward(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int,
             zero_infinity: bool) -> Any:
    plan = _plan(log_probs, targets, input_lengths, target_lengths, blank)
    if isinstance(plan, str):
        return decline(plan)
    il, tln, _, w_dim = plan
    t_dim, n_dim, _ = log_probs.shape
    le = _labels_emit(log_probs, targets, plan, blank)
    if le is None:
        return decline("a target label outside [0, classes)")
    lab, lpe = le
    alpha = torch.empty((n_dim, t_dim, w_dim), dtype=log_probs.dtype, device="trn")
    nll = torch.empty((n_dim, 1), dtype=log_probs.dtype, device="trn")
    ctc_alpha(lpe, lab, _f32col(il), _f32col(tln), alpha, nll)
    return nll.view(n_dim), alpha


def _backward(grad: Any, log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, nll: Any, alpha: Any,
              blank: int, zero_infinity: bool) -> Any:
    plan = _plan(log_probs, targets, input_lengths, target_lengths, blank)
    if isinstance(plan, str):
        return decline(plan)
    if not all(isinstance(x, torch.Tensor) and x.device.type == "trn" and x.dtype == torch.float32
               for x in (grad, nll, alpha)):
        return decline("grad, nll or alpha not a float32 trn tensor")
    il, tln, _, w_dim = plan
    t_dim, n_dim, c_dim = log_probs.shape
    if alpha.dim() != 3 or alpha.shape[0] != n_dim or alpha.shape[1] != t_dim or alpha.shape[2] < w_dim or \
            grad.numel() != n_dim or nll.numel() != n_dim:
        return decline("alpha, grad or nll of the wrong shape")
    le = _labels_emit(log_probs, targets, plan, blank)
    if le is None:
        return decline("a target label outside [0, classes)")
    lab, lpe = le
    acc = torch.zeros((t_dim, n_dim, c_dim), dtype=torch.float32, device="trn")
    nll2 = nll.reshape(n_dim, 1)
    ilc = _f32col(il)
    ctc_beta(lpe, lab, ilc, _f32col(tln), alpha[:, :, :w_dim], nll2, acc.view(t_dim, n_dim * c_dim, 1), int(c_dim))
    out = torch.empty((t_dim, n_dim, c_dim), dtype=log_probs.dtype, device="trn")
    ctc_grad(log_probs, acc, grad.reshape(n_dim, 1), ilc, nll2, out, bool(zero_infinity))
    return out


@lowering("aten::_ctc_loss", dtypes=None)
def ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Sequence[int],
             target_lengths: Sequence[int], blank: int = 0, zero_infinity: bool = False) -> Any:
    """``(neg_log_likelihood [N], log_alpha [N, T, 2 * S + 1])`` of ``log_probs [T, N, C]`` (fp32)."""
    return _forward(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)


@lowering("aten::_ctc_loss.Tensor", dtypes=None)
def ctc_loss_tensor(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
                    target_lengths: torch.Tensor, blank: int = 0, zero_infinity: bool = False) -> Any:
    """``_ctc_loss`` with the lengths as tensors."""
    return _forward(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)


@lowering("aten::_ctc_loss_backward", dtypes=None)
def ctc_loss_backward(grad: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor,
                      input_lengths: Sequence[int], target_lengths: Sequence[int], neg_log_likelihood: torch.Tensor,
                      log_alpha: torch.Tensor, blank: int, zero_infinity: bool = False) -> Any:
    """Gradient of the CTC loss with respect to ``log_probs``."""
    return _backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank,
                     zero_infinity)


@lowering("aten::_ctc_loss_backward.Tensor", dtypes=None)
def ctc_loss_backward_tensor(grad: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor,
                             input_lengths: torch.Tensor, target_lengths: torch.Tensor,
                             neg_log_likelihood: torch.Tensor, log_alpha: torch.Tensor, blank: int,
                             zero_infinity: bool = False) -> Any:
    """``_ctc_loss_backward`` with the lengths as tensors."""
    return _backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank,
                     zero_infinity)
