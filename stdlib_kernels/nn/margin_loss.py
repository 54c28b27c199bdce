"""Margin losses, forward and backward: ``multi_margin_loss`` (p = 1 or 2, class weights) and
``multilabel_margin_loss`` (moved out of ``stdlib_kernels.nn.loss``, which imports this module).

A whole row (up to 8192 classes) is one SBUF tile; out-of-range targets set a flag the lowering reads to
decline, so torch's CPU kernel raises its own error.

Example:
    >>> import torch, torch.nn.functional as F
    >>> x = torch.randn(4, 5).to("trn")
    >>> F.multi_margin_loss(x, torch.tensor([0, 1, 2, 3]).to("trn"))   # doctest: +SKIP
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterator

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.nn.loss import _flt
from stdlib_kernels.tiling import row_tiles
from trnlang.device import decline, lowering

_NONE, _MEAN, _SUM = 0, 1, 2
_BAD_MARGIN = "input not non-empty float32 on trn (<= 2 dims, <= 8192 classes), or target not int of its size"


# ------------------------------------------------------------------------------------------ margin losses
#: Most classes a margin-loss row may have (a whole row is one SBUF tile).
_MAX_CLASSES = 8192


def _margin_tiles(x: Any, t: Any, bad: Any) -> Iterator[tuple[Any, Any, Any, Any, Any, Any]]:
    """Per tile of whole rows of ``x [N, C]`` (a real loop), with targets ``t [N, 1]``: ``(rows, mask, x tile (fp32),
    target [P, 1], target in range, is_target [P, C])``. ``bad [N, 1]`` gets 1.0 where the target is out of range."""
    c_dim = x.shape[1]
    cols = tl.arange(c_dim)[None, :]
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(x.shape[0]):
        xt = tl.load(x[rows, cols], mask=m).astype(tl.float32)
        ti = tl.load(t[rows, one], mask=m)
        inr = (ti >= 0) & (ti < c_dim)
        tl.store(bad[rows, one], tl.where(inr, 0.0, 1.0), mask=m)
        yield rows, m, xt, ti, inr, isa.iota(cols + 0 * rows, tl.int32) == ti


@dataclass(frozen=True)
class Margin:
    """What one :func:`multi_margin_fwd` / :func:`multi_margin_bwd` launch computes (a compile-time spec).

    Attributes:
        p: the hinge's power, 1 or 2.
        go_scalar: (backward) ``grad_output`` is one ``[1, 1]`` value (a reduced loss), else one per row.

    >>> Margin(2).go_scalar
    False
    """

    p: int
    go_scalar: bool = False


#: :class:`Margin` made once per distinct value (a warm launch builds no new instance).
_margin = functools.lru_cache(maxsize=16)(Margin)


def _class_weight(w: Any, ti: Any, inr: Any) -> Any:
    """``w[t]`` (fp32 ``[P, 1]``) of ``w [C, 1]`` at the targets ``ti`` (class 0 where out of range)."""
    return tl.load(w[tl.where(inr, ti, 0)[:, 0:1], tl.arange(1)[None, :]]).astype(tl.float32)


@trn.kernel
def multi_margin_fwd(x, t, w, loss, bad, spec, margin):
    """Per row of ``x [N, C]``: ``sum_{d != t} max(0, margin - x[t] + x[d])^p * w[t] / C`` into ``loss [N, 1]``;
    ``bad [N, 1]``: 1 where the target is out of range. ``spec``: a :class:`Margin` (``p``)."""
    one = tl.arange(1)[None, :]
    for rows, m, xt, ti, inr, is_t in _margin_tiles(x, t, bad):
        z = (margin - tl.sum(tl.where(is_t, xt, 0.0), axis=1, keepdims=True)) + xt
        h = z if spec.p == 1 else z * z
        if w is not None:
            h = h * _class_weight(w, ti, inr)
        tot = tl.sum(tl.where((z > 0.0) & ~is_t, h, 0.0), axis=1, keepdims=True)
        tl.store(loss[rows, one], tot / float(x.shape[1]), mask=m)


@trn.kernel
def multi_margin_bwd(x, t, w, go, out, bad, spec, margin, g):
    """Gradient of ``multi_margin_loss`` for ``x [N, C]``, ``t [N, 1]`` (int), ``w [C, 1]`` or None, ``go [N, 1]``
    (or ``[1, 1]`` when ``spec.go_scalar``; ``spec``: a :class:`Margin`): torch's CPU rule, ``h = g`` (p=1) or
    ``2 g z`` (p=2) where
    ``z = margin - x[t] + x[d] > 0`` (``d != t``), times ``w[t]``; ``out[t] = -sum(h)``; all times ``go``.
    ``bad [N, 1]``: 1 where the target is out of range."""
    cols = tl.arange(x.shape[1])[None, :]
    one = tl.arange(1)[None, :]
    for rows, m, xt, ti, inr, is_t in _margin_tiles(x, t, bad):
        x_t = tl.sum(tl.where(is_t, xt, 0.0), axis=1, keepdims=True)
        z = (margin - x_t) + xt
        h = tl.full(xt.shape, g, tl.float32) if spec.p == 1 else z * (2.0 * g)
        if w is not None:
            h = h * _class_weight(w, ti, inr)
        h = tl.where((z > 0.0) & ~is_t, h, 0.0)
        res = tl.where(is_t, -tl.sum(h, axis=1, keepdims=True), h)
        gv = tl.broadcast_to(tl.load(go[0:1, 0:1]).astype(tl.float32), (rows.shape[0], 1)) if spec.go_scalar else \
            tl.load(go[rows, one], mask=m).astype(tl.float32)
        tl.store(out[rows, cols], res * gv, mask=m)


@trn.kernel
def multilabel_margin(x, t, loss, is_tgt, gin, bad, g):
    """``multilabel_margin_loss`` per row of ``x [N, C]`` with targets ``t [N, C]`` (class ids, ended by -1):
    ``loss[n] = sum_{j valid} sum_{d not a target} max(0, 1 - x[t_j] + x[d]) / C``; ``is_tgt [N, C]`` (1.0 at
    target classes); ``gin`` (None, or the gradient ``[N, C]`` scaled by ``g`` before the grad_output product);
    ``bad [N, 1]``: 1 where a valid target is out of range."""
    n_dim, c_dim = x.shape
    cols = tl.arange(c_dim)[None, :]
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(n_dim):
        xt = tl.load(x[rows, cols], mask=m).astype(tl.float32)
        ti = tl.load(t[rows, cols], mask=m, other=-1)
        pos = isa.iota(cols + 0 * rows, tl.int32)
        posf = pos.astype(tl.float32)
        end = tl.min(tl.where(ti == -1, posf, float(c_dim)), axis=1, keepdims=True)  # first -1 (or C)
        tf = ti.astype(tl.float32)
        live = posf < end
        tl.store(bad[rows, one], tl.max(tl.where(live & ((tf < 0.0) | (tf >= float(c_dim))), 1.0, 0.0), axis=1,
                                        keepdims=True), mask=m)
        hit = tl.zeros(xt.shape, tl.float32)
        for j in tl.sequential_range(c_dim):  # is_target[d]: d is one of the live targets
            hit[...] = tl.maximum(hit, tl.where((posf == tf[:, j:j + 1]) & (posf[:, j:j + 1] < end), 1.0, 0.0))
        tl.store(is_tgt[rows, cols], hit, mask=m)
        tot = tl.zeros((rows.shape[0], 1), tl.float32)
        grad = tl.zeros(xt.shape, tl.float32)
        for j in tl.sequential_range(c_dim):
            sel = (posf == tf[:, j:j + 1]) & (posf[:, j:j + 1] < end)  # the one class of live target j
            x_t = tl.sum(tl.where(sel, xt, 0.0), axis=1, keepdims=True)
            z = (1.0 - x_t) + xt
            act = (z > 0.0) & (hit == 0.0) & (posf[:, j:j + 1] < end)
            tot[...] = tot + tl.sum(tl.where(act, z, 0.0), axis=1, keepdims=True)
            if gin is not None:
                cnt = tl.sum(tl.where(act, 1.0, 0.0), axis=1, keepdims=True)
                grad[...] = grad + tl.where(act, g, 0.0) - tl.where(sel, cnt * g, 0.0)
        tl.store(loss[rows, one], tot / float(c_dim), mask=m)
        if gin is not None:
            tl.store(gin[rows, cols], grad, mask=m)


def _margin_rows(self: Any, target: Any, same_shape: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``self`` as ``[N, C]`` and the target as ``[N, 1]`` (or ``[N, C]``), or None to decline."""
    if not (U.is_trn(self) and self.dtype == torch.float32 and not self.is_conj() and not self.is_neg()
            and U.is_trn(target) and target.dtype in (torch.int64, torch.int32)):
        return None
    if self.dim() > 2 or (self.numel() == 0 and (self.dim() != 2 or self.shape[1] == 0)):
        return None  # only an empty batch of a matrix is valid (torch raises for the others)
    x2 = self.reshape(-1, self.shape[-1]) if self.dim() else self.reshape(1, 1)
    n, c = x2.shape
    if c > _MAX_CLASSES:
        return None
    if same_shape:
        if target.shape != self.shape:
            return None
        return x2, target.reshape(n, c)
    if target.numel() != n:
        return None
    return x2, target.reshape(n, 1)


@lowering("aten::multi_margin_loss", dtypes=None)
def multi_margin_loss(self: torch.Tensor, target: torch.Tensor, p: Any = 1, margin: Any = 1,
                      weight: torch.Tensor | None = None, reduction: int = _MEAN) -> Any:
    """Multi-class hinge loss (p = 1 or 2, optional class weights); per-row losses, then torch's reduction."""
    rows = _margin_rows(self, target, False)
    if rows is None or p not in (1, 2) or reduction not in (0, 1, 2):
        return decline(_BAD_MARGIN + ", p not 1 or 2, or an unknown reduction")
    x2, t2 = rows
    n, c = x2.shape
    if weight is not None and (not U.is_trn(weight) or weight.dtype != torch.float32 or weight.numel() != c):
        return decline("weight not a float32 trn tensor of the class count")
    loss = torch.empty((n, 1), dtype=torch.float32, device="trn")
    bad = torch.zeros((n, 1), dtype=torch.float32, device="trn")
    if n:  # an empty batch: no losses (their mean is NaN; the CPU leaves that result unset)
        multi_margin_fwd(x2, t2, weight.reshape(-1, 1) if weight is not None else None, loss, bad,
                         _margin(int(p), False), float(margin))
    if bad.sum().item() > 0:
        return decline("a target out of range: torch raises")  # the CPU raises torch's target-out-of-range error
    if reduction == _NONE:
        return loss.view(n) if target.dim() > 0 else loss.view(())
    tot = loss.sum()
    return tot / n if reduction == _MEAN else tot


@lowering("aten::multi_margin_loss_backward", dtypes=None)
def multi_margin_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, p: Any,
                               margin: Any, weight: torch.Tensor | None = None, reduction: int = _MEAN) -> Any:
    """Gradient of ``multi_margin_loss`` (p = 1 or 2, optional class weights), as torch's CPU kernel."""
    rows = _margin_rows(self, target, False)
    if rows is None or p not in (1, 2) or reduction not in (0, 1, 2) or not _flt(grad_output):
        return decline(_BAD_MARGIN + ", p not 1 or 2, bad reduction or grad")
    x2, t2 = rows
    n, c = x2.shape
    if weight is not None and (not U.is_trn(weight) or weight.dtype != torch.float32 or weight.numel() != c):
        return decline("weight not a float32 trn tensor of the class count")
    go_scalar = reduction != _NONE or grad_output.dim() == 0
    if go_scalar and grad_output.numel() != 1 or not go_scalar and grad_output.numel() != n:
        return decline("grad_output of the wrong size")
    out = torch.empty((n, c), dtype=self.dtype, device="trn")
    if n == 0:
        return out.view(self.shape)
    g = 1.0 / (n * c) if reduction == _MEAN else 1.0 / c
    g = float(torch.tensor(g, dtype=torch.float32))  # torch rounds g to the input dtype first
    bad = torch.empty((n, 1), dtype=torch.float32, device="trn")
    go = grad_output.reshape(1, 1) if go_scalar else grad_output.reshape(n, 1)
    wv = weight.reshape(-1, 1) if weight is not None else None
    multi_margin_bwd(x2, t2, wv, go, out, bad, _margin(int(p), go_scalar), float(margin), g)
    if bad.sum().item() > 0:
        return decline("a target out of range: torch raises")  # the CPU raises torch's target-out-of-range error
    return out.view(self.shape)


def _multilabel(self: Any, target: Any, reduction: int, grad_output: Any = None) -> Any:
    rows = _margin_rows(self, target, True)
    if rows is None or reduction not in (0, 1, 2):
        return None
    x2, t2 = rows
    n, c = x2.shape
    loss = torch.empty((n, 1), dtype=torch.float32, device="trn")
    is_t = torch.empty((n, c), dtype=self.dtype, device="trn")
    bad = torch.empty((n, 1), dtype=torch.float32, device="trn")
    gin = torch.empty((n, c), dtype=torch.float32, device="trn") if grad_output is not None else None
    if n == 0:  # an empty batch
        return loss, is_t, gin
    g = 1.0 / (n * c) if reduction == _MEAN else 1.0 / c
    multilabel_margin(x2, t2, loss, is_t, gin, bad, float(torch.tensor(g, dtype=torch.float32)))
    if bad.sum().item() > 0:
        return None
    return loss, is_t, gin


@lowering("aten::multilabel_margin_loss_forward", dtypes=None)
def multilabel_margin_loss_forward(self: torch.Tensor, target: torch.Tensor, reduction: int) -> Any:
    """``(loss, is_target)`` of ``multilabel_margin_loss`` (targets: class ids per row, ended by -1)."""
    r = _multilabel(self, target, reduction)
    if r is None:
        return decline(_BAD_MARGIN + ", an unknown reduction, or a target out of range")
    loss, is_t, _ = r
    if reduction == _NONE:
        out = loss.view(()) if self.dim() <= 1 else loss.view(-1)
    else:
        out = loss.sum()
        if reduction == _MEAN:
            out = out / loss.shape[0]
    return out, is_t.view(self.shape)


@lowering("aten::multilabel_margin_loss_backward", dtypes=None)
def multilabel_margin_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                                    reduction: int, is_target: torch.Tensor) -> Any:
    """Gradient of ``multilabel_margin_loss``: ``+g`` at every active non-target class, ``-g`` per activation at
    its target, times ``grad_output``."""
    if not _flt(grad_output):
        return decline("grad_output not a float trn tensor")
    r = _multilabel(self, target, reduction, grad_output)
    if r is None:
        return decline(_BAD_MARGIN + ", an unknown reduction, or a target out of range")
    gin = r[2]
    n = gin.shape[0]
    if reduction != _NONE or grad_output.dim() == 0:
        if grad_output.numel() != 1:
            return decline("grad_output of the wrong size")
        res = gin * grad_output.reshape(1, 1)
    else:
        if grad_output.numel() != n:
            return decline("grad_output of the wrong size")
        res = gin * grad_output.reshape(n, 1)
    return res.to(self.dtype).view(self.shape)


from stdlib_kernels.nn import ctc as _ctc  # noqa: E402,F401 - the CTC loss registers with this family
