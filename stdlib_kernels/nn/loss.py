"""Losses, forward and backward: nll_loss (1-D/2-D and the 4-D ``nll_loss2d``), mse, l1-style, bce.

``cross_entropy`` composes ``_log_softmax`` (softmax family) with ``nll_loss``; its label-smoothing and
class-probability variants compose natively from pointwise ops and sums.

- ``nll_fwd``: rows (samples) on partitions; the picked log-probability ``x[n, t[n]]`` is a gather
  through an index tile (``n * stride_n + t * stride_c``) from a flat view of ``x``, the class
  weight another gather. It writes the per-sample loss, the per-sample weight and an
  out-of-range-target flag, or for ``sum`` / ``mean`` their totals (a ones matmul over the
  partitions, in the same launch). A bad target makes the lowering decline, so torch's CPU
  kernel raises its own error.
- ``nll_bwd``: the gradient is dense (zero except one column per row), so it is written in one
  pass as ``where(col == t, -w[t] * g, 0)`` over column chunks.
- ``pw_loss`` / ``pw_loss_bwd``: elementwise losses (mse, l1, smooth_l1, huber, bce,
  bce-with-logits) over a flat ``[R, L]`` view, writing either the elementwise loss or per-row
  partial sums (``sum`` / ``mean`` reductions), and their input gradients.

The margin losses live in ``stdlib_kernels.nn.margin_loss`` (imported, so registered, with this module).

Example:
    >>> import torch, torch.nn.functional as F
    >>> x = torch.randn(4, 5).to("trn")
    >>> F.cross_entropy(x, torch.tensor([0, 1, 2, 3]).to("trn"))   # doctest: +SKIP
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.tiling import col_chunks, row_tiles
from trnlang import config as _config
from trnlang.device import decline, fastlane, lowering
from trnlang.runtime.launch import PLANS

_ident = threading.get_ident

CHUNK = 4096
FLAT = 2048
_NONE, _MEAN, _SUM = 0, 1, 2

#: Decline reasons shared by several lowerings.
_BAD_NLL = "input/weight not float or target not int on trn, weight not 1-D, or input of the wrong rank"


@dataclass(frozen=True)
class Nll:
    """What one :func:`nll_fwd` / :func:`nll_bwd` launch computes (a compile-time spec: equal specs share a
    variant).

    Attributes:
        ignore: the target class that contributes nothing (torch's ``ignore_index``).
        weighted: class weights are read from ``wf`` (else every class weighs 1).
        g_scalar: (backward) the incoming gradient is one ``[1, 1]`` value (a reduced loss), else one per sample.
        reduce: (forward) 0: per-sample results; 1 (mean) / 2 (sum): ``[1, 1]`` totals summed in the kernel.

    >>> Nll(-100, weighted=True).g_scalar
    False
    """

    ignore: int
    weighted: bool
    g_scalar: bool = False
    reduce: int = 0


#: :class:`Nll` made once per distinct value (a warm launch builds no new instance).
_nll = functools.lru_cache(maxsize=1024)(Nll)


@trn.kernel
def nll_fwd(xf, t, wf, loss, wsum, bad, rows_n, n_cls, s_n, s_c, spec):
    """Per sample ``n < rows_n``: ``loss = -w[t] * x[n, t]``, ``wsum = w[t]`` (0 when ignored), ``bad``.

    ``xf`` is a flat view of ``x`` (sample stride ``s_n``, class stride ``s_c``, ``n_cls`` classes); ``spec``:
    an :class:`Nll`. With ``spec.reduce`` the three outputs are ``[1, 1]`` totals over the samples (a ones
    matmul sums each tile's partitions into PSUM; the mean divides the loss by the weight total)."""
    one = tl.arange(1)[None, :]
    if spec.reduce:
        acc_l = tl.zeros((1, 1), tl.float32, buffer=tl.psum)
        acc_w = tl.zeros((1, 1), tl.float32, buffer=tl.psum)
        acc_b = tl.zeros((1, 1), tl.float32, buffer=tl.psum)
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
        if spec.reduce:
            ones = tl.full((rows.shape[0], 1), 1.0, tl.float32)
            acc_l += tl.matmul(ones, tl.where(m, -(xv * wv), 0.0), transpose_x=True)
            acc_w += tl.matmul(ones, tl.where(m, wv, 0.0), transpose_x=True)
            acc_b += tl.matmul(ones, tl.where(m & notign & ~inr, 1.0, 0.0), transpose_x=True)
        else:
            tl.store(loss[rows, one], -(xv * wv), mask=m)
            tl.store(wsum[rows, one], wv, mask=m)
            tl.store(bad[rows, one], tl.where(notign & ~inr, 1.0, 0.0), mask=m)
    if spec.reduce:
        tot, tw = tl.copy(acc_l), tl.copy(acc_w)
        tl.store(loss[0:1, 0:1], tot / tw if spec.reduce == _MEAN else tot)
        tl.store(wsum[0:1, 0:1], tw)
        tl.store(bad[0:1, 0:1], tl.copy(acc_b))


@trn.kernel
def nll_bwd(g, tw, t, wf, out, spec, scale):
    """``out[n, c] = -w[t] * g[n] * scale`` where ``c == t[n] != spec.ignore``, else 0; ``out [N, C]``; ``spec``:
    an :class:`Nll` (``reduce`` mean: ``g`` is also divided by the ``[1, 1]`` total weight ``tw``)."""
    r_dim, c_dim = out.shape
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(r_dim):
        ti = tl.load(t[rows, one], mask=m)
        tf = ti.astype(tl.float32)
        valid = (tf != float(spec.ignore)) & (tf >= 0.0) & (tf < float(c_dim))
        tc = tl.where(valid, ti, 0)
        if spec.g_scalar:
            g0 = tl.load(g[0:1, 0:1]).astype(tl.float32)
            if spec.reduce == _MEAN:  # rounded to the loss dtype as torch's grad / total_weight is
                g0 = (g0 / tl.load(tw[0:1, 0:1]).astype(tl.float32)).astype(g.dtype).astype(tl.float32)
            gv = tl.broadcast_to(g0, (rows.shape[0], 1))
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
    """nll over ``x2 [N, C]`` (any strides) and ``t1 [N]``; None when a target is out of range.

    Sum and mean are totalled by the kernel itself (one launch, one ``[1, 1]`` read of the bad-target count)."""
    n, c = x2.shape
    out_dt = x2.dtype
    red = reduction if reduction in (_MEAN, _SUM) else 0
    # the kernel's arguments are pieces (no torch views: each view of a trn tensor is a dispatch)
    if red:  # 0-dim results, written by the kernel as [1, 1]
        loss, wsum = U.new_output((), out_dt), U.new_output((), out_dt)
        lp, wp = U.piece(loss, (1, 1), (1, 1), 0), U.piece(wsum, (1, 1), (1, 1), 0)
    else:
        loss = lp = U.new_output((n, 1), torch.float32)
        wsum = wp = U.new_output((n, 1), torch.float32)
    bad = U.new_output((1 if red else n, 1), torch.float32)
    span = (n - 1) * x2.stride(0) + (c - 1) * x2.stride(1) + 1
    xf = U.piece(x2, (span, 1), (1, 1), x2.storage_offset())
    tt = U.piece(t1, (n, 1), (t1.stride(0), 1), t1.storage_offset())
    wf = U.piece(weight, (c, 1), (weight.stride(0), 1), weight.storage_offset()) if weight is not None else xf
    spec = _nll(int(ignore_index), weight is not None, False, red)
    go = nll_fwd.bind(xf, tt, wf, lp, wp, bad, n, c, x2.stride(0), x2.stride(1), spec)
    go.run()
    if (U.read_scalar(bad) if red else bad.sum().item()) > 0:
        return None
    if red and weight is None and go.native:
        _NLL_FAST.learn(x2, t1, reduction, ignore_index, go)
    if red:
        return loss, wsum
    return loss.view(n).to(out_dt), torch.zeros((), dtype=out_dt, device="trn")


class _NllFast:
    """The registry's fast function of ``nll_loss_forward`` for the hot case (a total over samples, no class
    weights): a launch the lowering ran once on these layouts is kept as a pointer call
    (``Launch.pointer_call``) and run again on new addresses, into pooled outputs. Its bad-target count goes
    to the entry's own word; any bad target, kernel error or other call (a new layout, a CPU target, inference
    mode, ``trn profile`` recording, changed settings, another thread) returns None: the lowering runs (and
    raises). A hit costs ~4 us of host time where the lowering's pieces, outputs and launch cost ~15."""

    MAX = 64

    def __init__(self) -> None:
        self.table: dict[Any, Any] = {}

    @staticmethod
    def key(x: torch.Tensor, t: torch.Tensor, reduction: int, ignore_index: int) -> Any:
        return (x.dtype, x.shape, x.stride(), x.device, x.is_neg(), t.dtype, t.shape, t.stride(), t.device, reduction,
                ignore_index, _ident())

    def learn(self, x: torch.Tensor, t: torch.Tensor, reduction: int, ignore_index: int, go: Any) -> None:
        if len(self.table) >= self.MAX or not PLANS.enabled or torch.is_inference_mode_enabled():
            return
        word = np.zeros(1, np.float32)  # the bad-target count
        pools = (fastlane.OutputPool((), x.dtype), fastlane.OutputPool((), x.dtype))
        self.table[self.key(x, t, reduction, ignore_index)] = (go.pointer_call(), word, word.ctypes.data, pools,
                                                                _config.current.launch_key)

    def __call__(self, x: Any, t: Any, w: Any, reduction: Any, ignore_index: Any) -> Any:
        if w is not None or not self.table or type(x) is not torch.Tensor or type(t) is not torch.Tensor:
            return None
        if x.dim() == 1:
            x = x.view(1, -1)  # a view costs a dispatch, but the 1-D case is rare
        e = self.table.get(self.key(x, t, reduction, ignore_index))  # the devices are in the key: trn tensors only
        if e is None or not PLANS.enabled or torch.is_inference_mode_enabled():
            return None
        pc, word, addr, pools, lkey = e
        if lkey != _config.current.launch_key:
            return None
        loss, wsum = pools[0].take(), pools[1].take()
        xp = x.data_ptr()
        if pc.fn(pc.ctx, xp, t.data_ptr(), xp, loss.data_ptr(), wsum.data_ptr(), addr) or word[0] > 0:
            return None
        return loss, wsum


_NLL_FAST = _NllFast()


@lowering("aten::nll_loss_forward", dtypes=None, fast=_NLL_FAST)
def nll_loss_forward(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                     ignore_index: int) -> Any:
    """Negative log-likelihood of ``self [N, C]`` (or ``[C]``) at ``target`` -> (output, total_weight)."""
    if not _nll_ok(self, target, weight) or self.dim() not in (1, 2) or reduction not in (0, 1, 2):
        return decline(_BAD_NLL + ", or an unknown reduction")
    x2 = self if self.dim() == 2 else self.view(1, -1)
    t1 = target if target.dim() == 1 else target.reshape(-1)
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
        nll_bwd(g, g, tt, wf, out2, _nll(int(ignore_index), weight is not None, False), 1.0)
        return
    g, tw = U.as_1x1(grad_output), U.as_1x1(total_weight)  # the mean's division is the kernel's
    nll_bwd(g, tw, tt, wf, out2, _nll(int(ignore_index), weight is not None, True, reduction), 1.0)


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


# margin losses: their own module (registered when this one is imported)
from stdlib_kernels.nn import margin_loss as _margin_loss  # noqa: E402,F401
