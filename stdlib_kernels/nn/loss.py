"""Losses, forward and backward: nll_loss (1-D/2-D and the 4-D ``nll_loss2d``), mse, l1-style, bce.

``cross_entropy`` composes ``_log_softmax`` (softmax family) with ``nll_loss``; its label-smoothing and
class-probability variants compose natively from pointwise ops and sums.

- ``nll_fwd``: rows (samples) on partitions; the picked log-probability ``x[n, t[n]]`` is a gather
  through an index tile (``n * stride_n + t * stride_c``) from a flat view of ``x``, the class
  weight another gather. It writes the per-sample loss, the per-sample weight and an
  out-of-range-target flag; sums and the mean run as native ``sum`` / ``div``. A bad target
  makes the lowering decline, so torch's CPU kernel raises its own error.
- ``nll_bwd``: the gradient is dense (zero except one column per row), so it is written in one
  pass as ``where(col == t, -w[t] * g, 0)`` over column chunks.
- ``pw_loss`` / ``pw_loss_bwd``: elementwise losses (mse, l1, smooth_l1, huber, bce,
  bce-with-logits) over a flat ``[R, L]`` view, writing either the elementwise loss or per-row
  partial sums (``sum`` / ``mean`` reductions), and their input gradients.

Example:
    >>> import torch, torch.nn.functional as F
    >>> x = torch.randn(4, 5).to("trn")
    >>> F.cross_entropy(x, torch.tensor([0, 1, 2, 3]).to("trn"))   # doctest: +SKIP
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.tiling import col_chunks, row_tiles
from trnlang.device import decline, lowering

CHUNK = 4096
FLAT = 2048
_NONE, _MEAN, _SUM = 0, 1, 2

#: Decline reasons shared by several lowerings.
_BAD_NLL = "input/weight not float or target not int on trn, weight not 1-D, or input of the wrong rank"
_BAD_MARGIN = "input not non-empty float32 on trn (<= 2 dims, <= 8192 classes), or target not int of its size"


@dataclass(frozen=True)
class Nll:
    """What one :func:`nll_fwd` / :func:`nll_bwd` launch computes (a compile-time spec: equal specs share a
    variant).

    Attributes:
        ignore: the target class that contributes nothing (torch's ``ignore_index``).
        weighted: class weights are read from ``wf`` (else every class weighs 1).
        g_scalar: (backward) the incoming gradient is one ``[1, 1]`` value (a reduced loss), else one per sample.

    >>> Nll(-100, weighted=True).g_scalar
    False
    """

    ignore: int
    weighted: bool
    g_scalar: bool = False


#: :class:`Nll` made once per distinct value (a warm launch builds no new instance).
_nll = functools.lru_cache(maxsize=1024)(Nll)


@trn.kernel
def nll_fwd(xf, t, wf, loss, wsum, bad, rows_n, n_cls, s_n, s_c, spec):
    """Per sample ``n < rows_n``: ``loss = -w[t] * x[n, t]``, ``wsum = w[t]`` (0 when ignored), ``bad``.

    ``xf`` is a flat view of ``x`` (sample stride ``s_n``, class stride ``s_c``, ``n_cls`` classes); ``spec``:
    an :class:`Nll`."""
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(rows_n):
        ti = tl.load(t[rows, one], mask=m)
        tf = ti.astype(tl.float32)
        notign = tf != float(spec.ignore)
        inr = (tf >= 0.0) & (tf < float(n_cls))
        valid = notign & inr
        tc = tl.where(valid, ti, 0)
        idx = tl.minimum(isa.iota(rows, tl.int32), rows_n - 1) * s_n + tc * s_c
        xv = tl.load(xf[idx[:, 0:1], one]).astype(tl.float32)
        if spec.weighted:
            wv = tl.where(valid, tl.load(wf[tc[:, 0:1], one]).astype(tl.float32), 0.0)
        else:
            wv = tl.where(valid, 1.0, 0.0)
        tl.store(loss[rows, one], -(xv * wv), mask=m)
        tl.store(wsum[rows, one], wv, mask=m)
        tl.store(bad[rows, one], tl.where(notign & ~inr, 1.0, 0.0), mask=m)


@trn.kernel
def nll_bwd(g, t, wf, out, spec, scale):
    """``out[n, c] = -w[t] * g[n] * scale`` where ``c == t[n] != spec.ignore``, else 0; ``out [N, C]``; ``spec``:
    an :class:`Nll`."""
    r_dim, c_dim = out.shape
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(r_dim):
        ti = tl.load(t[rows, one], mask=m)
        tf = ti.astype(tl.float32)
        valid = (tf != float(spec.ignore)) & (tf >= 0.0) & (tf < float(c_dim))
        tc = tl.where(valid, ti, 0)
        if spec.g_scalar:
            gv = tl.broadcast_to(tl.load(g[0:1, 0:1]).astype(tl.float32), (rows.shape[0], 1))
        else:
            gv = tl.load(g[rows, one], mask=m).astype(tl.float32)
        if spec.weighted:
            gv = gv * tl.load(wf[tc[:, 0:1], one]).astype(tl.float32)
        gv = tl.where(valid, gv * (-scale), 0.0)
        tcf = tc.astype(tl.float32)
        for cols, mc in col_chunks(c_dim, CHUNK, m):
            cf = isa.iota(cols, tl.int32).astype(tl.float32)
            tl.store(out[rows, cols], tl.where(cf == tcf, gv, 0.0), mask=mc)


class Loss(U.Mode):
    """The pointwise losses of :func:`pw_loss` / :func:`pw_loss_bwd` (a compile-time constant of the kernels;
    ``param``: smooth L1's ``beta``, Huber's ``delta``)."""

    MSE = "mse"
    L1 = "l1"
    SMOOTH_L1 = "smooth_l1"
    HUBER = "huber"
    BCE = "bce"
    BCE_LOGITS = "bce_logits"  #: forward only here (the CPU's op sequence, rounded per step: :func:`pw_loss`)


def _sign(d: Any) -> Any:
    return tl.where(d > 0.0, 1.0, tl.where(d < 0.0, -1.0, 0.0))


def _smooth_l1(a: Any, b: Any, param: float) -> Any:
    d = tl.abs(a - b)
    return tl.where(d < param, tl.square(d) * (0.5 / param), d - 0.5 * param) if param > 0 else d


def _huber(a: Any, b: Any, param: float) -> Any:
    d = tl.abs(a - b)
    return tl.where(d < param, tl.square(d) * 0.5, (d - 0.5 * param) * param)


def _bce(a: Any, b: Any, param: float) -> Any:
    lp = tl.maximum(tl.log(a), -100.0)
    lq = tl.maximum(tl.log(1.0 - a), -100.0)
    return -(b * lp + (1.0 - b) * lq)


def _smooth_l1_grad(a: Any, b: Any, param: float) -> Any:
    d = a - b
    sg = _sign(d)
    return tl.where(tl.abs(d) < param, d * (1.0 / param), sg) if param > 0 else sg


def _huber_grad(a: Any, b: Any, param: float) -> Any:
    d = a - b
    return tl.where(d < -param, -param, tl.where(d > param, param, d))


#: The elementwise loss of each :class:`Loss` at input ``a``, target ``b`` (fp32 tiles): ``(a, b, param) -> tile``.
ELEM: dict[Loss, Callable[[Any, Any, float], Any]] = {
    Loss.MSE: lambda a, b, param: tl.square(a - b),
    Loss.L1: lambda a, b, param: tl.abs(a - b),
    Loss.SMOOTH_L1: _smooth_l1,
    Loss.HUBER: _huber,
    Loss.BCE: _bce,
}
#: d(loss)/d(a) of each :class:`Loss` (fp32 tiles).
ELEM_GRAD: dict[Loss, Callable[[Any, Any, float], Any]] = {
    Loss.MSE: lambda a, b, param: (a - b) * 2.0,
    Loss.L1: lambda a, b, param: _sign(a - b),
    Loss.SMOOTH_L1: _smooth_l1_grad,
    Loss.HUBER: _huber_grad,
    Loss.BCE: lambda a, b, param: (a - b) / tl.maximum((1.0 - a) * a, 1e-12),
}


@dataclass(frozen=True)
class PwLoss:
    """What one :func:`pw_loss` / :func:`pw_loss_bwd` launch computes (a compile-time spec: equal specs share a
    variant).

    Attributes:
        loss: the elementwise loss.
        weighted: an elementwise weight ``w`` multiplies the loss (or its gradient).
        pos_weighted: (forward, :attr:`Loss.BCE_LOGITS`) the positive-class weight ``pw`` is applied.
        reduce: (forward) ``out`` gets per-row sums ``[R, 1]`` instead of the elementwise loss.
        g_scalar: (backward) the incoming gradient is one ``[1, 1]`` value (a reduced loss), else ``[R, L]``.

    >>> PwLoss(Loss.MSE, weighted=False, reduce=True).pos_weighted
    False
    """

    loss: Loss
    weighted: bool
    pos_weighted: bool = False
    reduce: bool = False
    g_scalar: bool = False


#: :class:`PwLoss` made once per distinct value (a warm launch builds no new instance).
_pw = functools.lru_cache(maxsize=256)(PwLoss)


def _rnd(t: Any, low: Any) -> Any:
    """``t`` rounded to the narrower dtype ``low`` and back (None: unchanged)."""
    return t if low is None else t.astype(low).astype(tl.float32)


@trn.kernel
def pw_loss(a, b, w, pw, out, spec, param):
    """Elementwise loss of ``a``, ``b`` (``[R, L]``); ``out`` is ``[R, L]`` or per-row sums ``[R, 1]``.

    ``spec``: a :class:`PwLoss`; ``param``: smooth L1's ``beta`` or Huber's ``delta``."""
    mode = spec.loss
    r_dim, c_dim = a.shape
    low = a.dtype if a.dtype != tl.float32 else None
    cols = tl.arange(c_dim)[None, :]
    for rows, m in row_tiles(r_dim):
        at = tl.load(a[rows, cols], mask=m).astype(tl.float32)
        bt = tl.load(b[rows, cols], mask=m).astype(tl.float32)
        if mode is Loss.BCE_LOGITS:
            # the CPU's op sequence, each step rounded to the I/O dtype (a no-op for fp32)
            sp = _rnd(tl.log1p(tl.exp(-tl.abs(at))) + tl.maximum(-at, 0.0), low)       # -log_sigmoid(x)
            if spec.pos_weighted:
                lw = _rnd(_rnd(_rnd(tl.load(pw[rows, cols], mask=m).astype(tl.float32) - 1.0, low) * bt, low) + 1.0,
                          low)
                sp = _rnd(sp * lw, low)
            v = _rnd(_rnd(_rnd(1.0 - bt, low) * at, low) + sp, low)
        else:
            v = ELEM[mode](at, bt, param)
        if spec.weighted:
            v = _rnd(v * tl.load(w[rows, cols], mask=m).astype(tl.float32), low)
        if spec.reduce:
            tl.store(out[rows, tl.arange(1)[None, :]], tl.sum(v, axis=1, keepdims=True), mask=m)
        else:
            tl.store(out[rows, cols], v, mask=m)


@trn.kernel
def pw_loss_bwd(g, a, b, w, out, spec, param, scale):
    """``out = g * scale * d(loss)/d(a)`` (times ``w``) over ``[R, L]``; ``g`` is ``[R, L]`` or ``[1, 1]``.

    ``spec``: a :class:`PwLoss`; ``param`` as in :func:`pw_loss`."""
    r_dim, c_dim = a.shape
    cols = tl.arange(c_dim)[None, :]
    for rows, m in row_tiles(r_dim):
        at = tl.load(a[rows, cols], mask=m).astype(tl.float32)
        bt = tl.load(b[rows, cols], mask=m).astype(tl.float32)
        if spec.g_scalar:
            gv = tl.broadcast_to(tl.load(g[0:1, 0:1]).astype(tl.float32), (rows.shape[0], 1)) * scale
        else:
            gv = tl.load(g[rows, cols], mask=m).astype(tl.float32) * scale
        v = ELEM_GRAD[spec.loss](at, bt, param) * gv
        if spec.weighted:
            v = v * tl.load(w[rows, cols], mask=m).astype(tl.float32)
        tl.store(out[rows, cols], v, mask=m)


# ------------------------------------------------------------------------------------------ helpers


def _flt(*ts: torch.Tensor | None) -> bool:
    return all(t is None or (U.is_trn(t) and t.dtype in U.FLOAT_DTYPES and not t.is_conj() and not t.is_neg())
               for t in ts)


def _flat_parts(ts: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Same-shaped contiguous tensors as ``[R, L]`` (+ a ``[1, tail]`` rest) views, one list per launch."""
    n = ts[0].numel()
    L = min(n, FLAT)
    body, tail = n // L, n % L
    launches = [[t.view(-1)[:body * L].view(body, L) for t in ts]]
    if tail:
        launches.append([t.view(-1)[body * L:].view(1, tail) for t in ts])
    return launches


def _pw_forward(mode: Loss, a: torch.Tensor, b: torch.Tensor, reduction: int, param: float = 0.0,
                w: torch.Tensor | None = None, pw: torch.Tensor | None = None) -> Any:
    if not _flt(a, b, w, pw) or reduction not in (_NONE, _MEAN, _SUM):
        return decline("tensors not float trn tensors (or a conj/neg bit), or an unknown reduction")
    try:
        shape = torch.broadcast_shapes(a.shape, b.shape, *(t.shape for t in (w, pw) if t is not None))
    except RuntimeError:
        return decline("operands do not broadcast: torch raises")
    if tuple(shape) != tuple(a.shape) or a.dtype != b.dtype:
        return decline("operands that broadcast past the input's shape, or of different dtypes")
    ins = [t.expand(shape).contiguous() for t in (a, b, w, pw) if t is not None]
    n = a.numel()
    if n == 0:
        if reduction == _NONE:
            return torch.empty(shape, dtype=a.dtype, device="trn")
        return torch.full((), float("nan") if reduction == _MEAN else 0.0, dtype=a.dtype, device="trn")
    param = float(param)
    if reduction == _NONE:
        out = torch.empty(shape, dtype=a.dtype, device="trn")
        spec = _pw(mode, w is not None, pw is not None, False, False)
        for views in _flat_parts(ins + [out]):
            va, vb = views[0], views[1]
            vw = views[2] if w is not None else va
            vp = views[-2] if pw is not None else va
            pw_loss(va, vb, vw, vp, views[-1], spec, param)
        return out
    spec = _pw(mode, w is not None, pw is not None, True, False)
    parts = []
    for views in _flat_parts(ins):
        va, vb = views[0], views[1]
        vw = views[2] if w is not None else va
        vp = views[-1] if pw is not None else va
        part = torch.empty((va.shape[0], 1), dtype=torch.float32, device="trn")
        pw_loss(va, vb, vw, vp, part, spec, param)
        parts.append(part.sum())
    tot = parts[0] if len(parts) == 1 else parts[0] + parts[1]
    if reduction == _MEAN:
        tot = tot / n
    return tot.to(a.dtype)


def _pw_backward(mode: Loss, grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor, reduction: int,
                 param: float = 0.0, w: torch.Tensor | None = None) -> Any:
    if not _flt(grad, a, b, w) or reduction not in (_NONE, _MEAN, _SUM):
        return decline("tensors not float trn tensors (or a conj/neg bit), or an unknown reduction")
    try:
        shape = torch.broadcast_shapes(a.shape, b.shape, *(t.shape for t in (w,) if t is not None))
    except RuntimeError:
        return decline("operands do not broadcast: torch raises")
    if tuple(shape) != tuple(a.shape):
        return decline("operands that broadcast past the input's shape")
    g_scalar = grad.numel() == 1 and reduction != _NONE
    if not g_scalar and tuple(grad.shape) != tuple(shape):
        try:
            if torch.broadcast_shapes(grad.shape, shape) != shape:
                return decline("grad that broadcasts past the input's shape")
        except RuntimeError:
            return decline("grad does not broadcast: torch raises")
    out = torch.empty(shape, dtype=a.dtype, device="trn")
    n = a.numel()
    if n == 0:
        return out
    scale = 1.0 / n if reduction == _MEAN else 1.0
    ins = [t.expand(shape).contiguous() for t in (a, b, w) if t is not None]
    spec = _pw(mode, w is not None, False, False, g_scalar)
    param = float(param)
    if g_scalar:
        g1 = U.as_1x1(grad.reshape(1, 1))
        for views in _flat_parts(ins + [out]):
            pw_loss_bwd(g1, views[0], views[1], views[2] if w is not None else views[0], views[-1], spec, param,
                        scale)
    else:
        gc = grad.expand(shape).contiguous()
        for views in _flat_parts([gc] + ins + [out]):
            pw_loss_bwd(views[0], views[1], views[2], views[3] if w is not None else views[1], views[-1], spec,
                        param, scale)
    return out


# ------------------------------------------------------------------------------------------ nll


def _nll_ok(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None) -> bool:
    return (_flt(self, weight) and U.is_trn(target) and target.dtype in (torch.int64, torch.int32)
            and (weight is None or weight.dim() == 1))


def _nll_core(x2: torch.Tensor, t1: torch.Tensor, weight: torch.Tensor | None, reduction: int,
              ignore_index: int) -> Any:
    """nll over ``x2 [N, C]`` (any strides) and ``t1 [N]``; None when a target is out of range."""
    n, c = x2.shape
    out_dt = x2.dtype
    loss = torch.empty((n, 1), dtype=torch.float32, device="trn")
    wsum = torch.empty((n, 1), dtype=torch.float32, device="trn")
    bad = torch.empty((n, 1), dtype=torch.float32, device="trn")
    span = (n - 1) * x2.stride(0) + (c - 1) * x2.stride(1) + 1
    xf = U.view(x2, (span, 1), (1, 1), x2.storage_offset())
    tt = U.view(t1, (n, 1), (t1.stride(0), 1), t1.storage_offset())
    wf = U.view(weight, (c, 1), (weight.stride(0), 1), weight.storage_offset()) if weight is not None else xf
    nll_fwd(xf, tt, wf, loss, wsum, bad, n, c, x2.stride(0), x2.stride(1), _nll(int(ignore_index), weight is not None,
                                                                                  False))
    if bad.sum().item() > 0:
        return None
    if reduction == _NONE:
        return loss.view(n).to(out_dt), torch.zeros((), dtype=out_dt, device="trn")
    tot_w = wsum.sum()
    tot = loss.sum()
    if reduction == _MEAN:
        tot = tot / tot_w
    return tot.to(out_dt), tot_w.to(out_dt)


@lowering("aten::nll_loss_forward", dtypes=None)
def nll_loss_forward(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                     ignore_index: int) -> Any:
    """Negative log-likelihood of ``self [N, C]`` (or ``[C]``) at ``target`` -> (output, total_weight)."""
    if not _nll_ok(self, target, weight) or self.dim() not in (1, 2) or reduction not in (0, 1, 2):
        return decline(_BAD_NLL + ", or an unknown reduction")
    x2 = self if self.dim() == 2 else self.view(1, -1)
    t1 = target.reshape(-1)
    if t1.numel() != x2.shape[0] or (weight is not None and weight.numel() != x2.shape[1]) or x2.shape[1] == 0:
        return decline("target or weight of the wrong size (torch raises), or no classes")
    if x2.shape[0] == 0:
        return decline("an empty batch")
    r = _nll_core(x2, t1, weight, reduction, ignore_index)
    if r is None:
        return decline("a target out of range: torch raises")
    out, tw = r
    if self.dim() == 1 and reduction == _NONE:
        out = out.view(())
    return out, tw


@lowering("aten::nll_loss_backward", dtypes=None)
def nll_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                      weight: torch.Tensor | None, reduction: int, ignore_index: int,
                      total_weight: torch.Tensor) -> Any:
    """Gradient of nll_loss with respect to ``self``."""
    if not _nll_ok(self, target, weight) or self.dim() not in (1, 2) or not _flt(grad_output):
        return decline(_BAD_NLL + ", or grad not float")
    x2 = self if self.dim() == 2 else self.view(1, -1)
    n, c = x2.shape
    if target.numel() != n or n == 0 or c == 0:
        return decline("target of the wrong size, an empty batch, or no classes")
    out = torch.empty(self.shape, dtype=self.dtype, device="trn")
    _nll_grad(grad_output, target.reshape(n), weight, reduction, ignore_index, total_weight, out.view(n, c))
    return out


def _nll_grad(grad_output: torch.Tensor, t1: torch.Tensor, weight: torch.Tensor | None, reduction: int,
              ignore_index: int, total_weight: torch.Tensor, out2: torch.Tensor) -> None:
    n, c = out2.shape
    tt = U.view(t1, (n, 1), (t1.stride(0), 1), t1.storage_offset())
    wf = U.view(weight, (c, 1), (weight.stride(0), 1), weight.storage_offset()) if weight is not None else tt
    if reduction == _NONE:
        g = grad_output.reshape(n, 1)
        nll_bwd(g, tt, wf, out2, _nll(int(ignore_index), weight is not None, False), 1.0)
        return
    g = grad_output.reshape(1, 1)
    if reduction == _MEAN:
        g = g / total_weight.reshape(1, 1)
    nll_bwd(U.as_1x1(g), tt, wf, out2, _nll(int(ignore_index), weight is not None, True), 1.0)


@lowering("aten::nll_loss2d_forward", dtypes=None)
def nll_loss2d_forward(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                       ignore_index: int) -> Any:
    """nll_loss of ``self [N, C, H, W]`` at ``target [N, H, W]``."""
    if not _nll_ok(self, target, weight) or self.dim() != 4 or target.dim() != 3 or reduction not in (0, 1, 2):
        return decline(_BAD_NLL + ", target not 3-D, or an unknown reduction")
    n, c, h, w = self.shape
    if tuple(target.shape) != (n, h, w) or n * h * w == 0 or c == 0:
        return decline("target of the wrong shape (torch raises), an empty input, or no classes")
    x2 = self.permute(0, 2, 3, 1).contiguous().view(n * h * w, c)
    r = _nll_core(x2, target.reshape(-1), weight, reduction, ignore_index)
    if r is None:
        return decline("a target out of range: torch raises")
    out, tw = r
    if reduction == _NONE:
        out = out.view(n, h, w)
    return out, tw


@lowering("aten::nll_loss2d_backward", dtypes=None)
def nll_loss2d_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                        weight: torch.Tensor | None, reduction: int, ignore_index: int,
                        total_weight: torch.Tensor) -> Any:
    """Gradient of nll_loss2d with respect to ``self``."""
    if not _nll_ok(self, target, weight) or self.dim() != 4 or not _flt(grad_output):
        return decline(_BAD_NLL + ", or grad not float")
    n, c, h, w = self.shape
    if n * h * w == 0 or c == 0:
        return decline("an empty input or no classes")
    tmp = torch.empty((n, h, w, c), dtype=self.dtype, device="trn")
    _nll_grad(grad_output.contiguous() if reduction == _NONE else grad_output, target.reshape(-1), weight,
              reduction, ignore_index, total_weight, tmp.view(n * h * w, c))
    return tmp.permute(0, 3, 1, 2).contiguous()


# ------------------------------------------------------------------------------------------ pointwise losses


@lowering("aten::mse_loss", dtypes=U.FLOAT_DTYPES)
def mse_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = _MEAN) -> Any:
    """Mean squared error."""
    return _pw_forward(Loss.MSE, self, target, reduction)


@lowering("aten::mse_loss_backward", dtypes=U.FLOAT_DTYPES)
def mse_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int) -> Any:
    """Gradient of mse_loss with respect to ``self``."""
    return _pw_backward(Loss.MSE, grad_output, self, target, reduction)


@lowering("aten::smooth_l1_loss", dtypes=U.FLOAT_DTYPES)
def smooth_l1_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = _MEAN, beta: float = 1.0) -> Any:
    """Smooth L1 loss."""
    return _pw_forward(Loss.SMOOTH_L1, self, target, reduction, beta)


@lowering("aten::smooth_l1_loss_backward", dtypes=U.FLOAT_DTYPES)
def smooth_l1_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int,
                            beta: float) -> Any:
    """Gradient of smooth_l1_loss with respect to ``self``."""
    return _pw_backward(Loss.SMOOTH_L1, grad_output, self, target, reduction, beta)


@lowering("aten::huber_loss", dtypes=U.FLOAT_DTYPES)
def huber_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = _MEAN, delta: float = 1.0) -> Any:
    """Huber loss."""
    return _pw_forward(Loss.HUBER, self, target, reduction, delta)


@lowering("aten::huber_loss_backward", dtypes=U.FLOAT_DTYPES)
def huber_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int,
                        delta: float) -> Any:
    """Gradient of huber_loss with respect to ``self``."""
    return _pw_backward(Loss.HUBER, grad_output, self, target, reduction, delta)


@lowering("aten::binary_cross_entropy", dtypes=U.FLOAT_DTYPES)
def binary_cross_entropy(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                         reduction: int = _MEAN) -> Any:
    """Binary cross entropy of probabilities (log clamped at -100, as on the CPU)."""
    if U.is_trn(self) and self.numel() and not _probs_ok(self):
        return decline("input values outside [0, 1]: torch raises")
    return _pw_forward(Loss.BCE, self, target, reduction, 0.0, weight)


def _probs_ok(x: torch.Tensor) -> bool:
    """All of ``x`` in [0, 1] (else decline: the CPU raises torch's error)."""
    return bool(((x >= 0) & (x <= 1)).all().item())


@lowering("aten::binary_cross_entropy_backward", dtypes=U.FLOAT_DTYPES)
def binary_cross_entropy_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                                  weight: torch.Tensor | None = None, reduction: int = _MEAN) -> Any:
    """Gradient of binary_cross_entropy with respect to ``self``."""
    return _pw_backward(Loss.BCE, grad_output, self, target, reduction, 0.0, weight)


@lowering("aten::binary_cross_entropy_with_logits", dtypes=U.FLOAT_DTYPES)
def binary_cross_entropy_with_logits(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                                     pos_weight: torch.Tensor | None = None, reduction: int = _MEAN) -> Any:
    """``(1 - y) * x + (1 + (pw - 1) * y) * softplus(-x)`` (stable form), times ``weight``."""
    return _pw_forward(Loss.BCE_LOGITS, self, target, reduction, 0.0, weight, pos_weight)


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
    if self.dim() > 2 or self.numel() == 0:
        return None
    x2 = self.reshape(-1, self.shape[-1]) if self.dim() else self.reshape(1, 1)
    n, c = x2.shape
    if c > _MAX_CLASSES or n == 0:
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
    bad = torch.empty((n, 1), dtype=torch.float32, device="trn")
    multi_margin_fwd(x2, t2, weight.reshape(-1, 1) if weight is not None else None, loss, bad, _margin(int(p), False),
                     float(margin))
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
    g = 1.0 / (n * c) if reduction == _MEAN else 1.0 / c
    g = float(torch.tensor(g, dtype=torch.float32))  # torch rounds g to the input dtype first
    out = torch.empty((n, c), dtype=self.dtype, device="trn")
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
