"""Batch norm (and instance norm, which torch runs as batch norm), forward and backward.

``[N, C, *]`` is viewed as ``[N * C, HW]`` rows (``stdlib_kernels.nn.norm``'s row kernels):

- forward: ``row_moments`` gives each row's mean and variance; :func:`bn_finalize`, one launch,
  turns them into the per-channel mean and inverse std, updates the running statistics in place,
  and writes the per-row affine coefficients ``a = invstd * w``, ``c = b - mean * a`` for every
  ``(n, c)`` row; ``row_affine`` writes ``x * a + c``.
- backward: ``row_dots`` (per-row ``sum(dy)``, ``sum(dy * x)``), small per-channel native ops,
  and ``row_affine2``.

Example:
    >>> import torch
    >>> x = torch.randn(4, 3, 5, 5).to("trn")
    >>> y = torch.nn.functional.batch_norm(x, None, None, training=True)
    >>> bool(torch.allclose(y.cpu(), torch.nn.functional.batch_norm(x.cpu(), None, None, training=True), atol=1e-5))
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.nn.norm import _empty, _f32, _ok, _params_ok, _rows, row_affine, row_affine2, row_dots, row_moments
from trnlang.device import decline, lowering, memory

#: Channels per tile of :func:`bn_finalize` (one partition, channels on the free axis).
CCHUNK = 2048


@dataclass(frozen=True)
class BnFinish:
    """What one :func:`bn_finalize` launch computes (a compile-time spec: equal specs share a variant).

    Attributes:
        eps: added to the variance before the reciprocal square root.
        momentum: weight of the new statistic in the running-stat update.
        unbias: ``n / (n - 1)``: the running variance takes the unbiased variance.
        train: statistics from the per-row moments (else the running stats are the statistics).
        has_w / has_b: an affine weight / bias to fold into the coefficients.
        upd_m / upd_v: update the running mean / variance in place.

    >>> BnFinish(1e-5, 0.1, 1.0, train=True, has_w=True, has_b=False, upd_m=True, upd_v=True).has_b
    False
    """

    eps: float
    momentum: float
    unbias: float
    train: bool
    has_w: bool
    has_b: bool
    upd_m: bool
    upd_v: bool


@trn.kernel
def bn_finalize(m, v, w, b, rm, rv, mean_o, istd_o, a_o, c_o, spec):
    """Per-channel batch-norm statistics and coefficients from per-(sample, channel) moments, in one launch.

    ``m`` / ``v`` ``[N, C]``: each row's mean and biased variance over its ``HW`` elements (``spec.train``);
    otherwise ``rm`` / ``rv`` are the statistics. Writes ``mean_o`` / ``istd_o`` ``[1, C]`` (fp32), the
    per-row coefficients ``a_o`` / ``c_o`` ``[N, C]`` (``a = invstd * w``, ``c = b - mean * a``), and with
    ``spec.upd_m`` / ``spec.upd_v`` updates ``rm`` / ``rv`` ``[1, C]`` in place: ``r * (1 - momentum) + stat *
    momentum`` in fp32, rounded once (the running variance takes the unbiased variance: ``var * unbias``).
    ``spec``: a :class:`BnFinish`.
    """
    eps, momentum, unbias = spec.eps, spec.momentum, spec.unbias
    n, c = a_o.shape
    f = min(c, CCHUNK)
    one = tl.arange(1)[:, None]
    inv_n = 1.0 / n
    for j in tl.affine_range(tl.cdiv(c, f)):
        cols = j * f + tl.arange(f)[None, :]
        cm = cols < c
        if spec.train:
            s = tl.zeros((1, f), tl.float32)
            for i in tl.sequential_range(n):
                s[...] = s + tl.load(m[i + one, cols], mask=cm)
            mean = s * inv_n
            q = tl.zeros((1, f), tl.float32)
            for i in tl.sequential_range(n):
                d = tl.load(m[i + one, cols], mask=cm) - mean
                q[...] = q + (tl.load(v[i + one, cols], mask=cm) + d * d)
            var = q * inv_n
        else:
            mean = tl.load(rm[one, cols], mask=cm).astype(tl.float32)
            var = tl.load(rv[one, cols], mask=cm).astype(tl.float32)
        istd = tl.rsqrt(var + eps)
        a = istd * tl.load(w[one, cols], mask=cm).astype(tl.float32) if spec.has_w else istd
        sh = tl.load(b[one, cols], mask=cm).astype(tl.float32) - mean * a if spec.has_b else -(mean * a)
        tl.store(mean_o[one, cols], mean, mask=cm)
        tl.store(istd_o[one, cols], istd, mask=cm)
        for i in tl.affine_range(n):
            tl.store(a_o[i + one, cols], a, mask=cm)
            tl.store(c_o[i + one, cols], sh, mask=cm)
        if spec.upd_m:
            tl.store(rm[one, cols], tl.load(rm[one, cols], mask=cm).astype(tl.float32) * (1.0 - momentum)
                     + mean * momentum, mask=cm)
        if spec.upd_v:
            tl.store(rv[one, cols], tl.load(rv[one, cols], mask=cm).astype(tl.float32) * (1.0 - momentum)
                     + var * unbias * momentum, mask=cm)


def _bn_forward(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool,
                momentum: float, eps: float) -> Any:
    if not _ok(input, weight, bias, running_mean, running_var) or input.dim() < 2:
        return decline("input or parameters not float trn tensors (or a conj/neg bit), or input of fewer than 2 dims")
    if not _params_ok(input, weight, bias, running_mean, running_var):
        return decline("a parameter neither in the input's dtype nor float32: torch raises")
    if len({p.dtype for p in (weight, bias, running_mean, running_var) if p is not None}) > 1:
        return decline("parameters of mixed dtypes: torch raises")
    n, c = input.shape[0], input.shape[1]
    hw = U.prod(input.shape[2:])
    for t in (weight, bias, running_mean, running_var):
        if t is not None and t.numel() != c:
            return decline("a parameter whose size is not the channel count: torch raises")
    if not training and (running_mean is None or running_var is None):
        return decline("eval mode without running stats")
    mixed = input.dtype != torch.float32 and any(p is not None and p.dtype == torch.float32
                                                 for p in (weight, bias, running_mean, running_var))
    sdt = torch.float32 if mixed else input.dtype               # saved stats: the CPU's parameter dtype
    if n * hw == 0 or c == 0:
        return decline("an empty input or no channels")
    out = memory.empty(input.shape, input.dtype)
    x2 = _rows(input, n * c, hw)
    f32 = torch.float32
    if training:
        m32 = memory.empty((n, c), f32)
        v32 = memory.empty((n, c), f32)
        row_moments(x2, m32.view(n * c, 1), v32.view(n * c, 1))
    else:
        m32 = v32 = x2  # unused
    save = [memory.empty((1, c), f32) for _ in range(2)]
    coef = [memory.empty((n, c), f32) for _ in range(2)]
    cnt = n * hw
    params = (weight, bias, running_mean, running_var)
    dummy = memory.empty((1, c), f32) if any(t is None for t in params) else None  # never read, never written
    param = [t.view(1, c) if t is not None else dummy for t in params]
    spec = BnFinish(float(eps), float(momentum), float(cnt / (cnt - 1) if cnt > 1 else 1.0), train=training,
                    has_w=weight is not None, has_b=bias is not None, upd_m=running_mean is not None and training,
                    upd_v=running_var is not None and training)
    bn_finalize(m32, v32, *param, *save, *coef, spec)
    row_affine(x2, coef[0].view(n * c, 1), coef[1].view(n * c, 1), out.view(n * c, hw))
    if not training:
        return out, memory.empty((0,), sdt), memory.empty((0,), sdt)
    save_mean, save_invstd = (t.view(c) for t in save)
    return out, save_mean.to(sdt), save_invstd.to(sdt)


@lowering("aten::native_batch_norm", dtypes=U.FLOAT_DTYPES)
def native_batch_norm(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                      running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool,
                      momentum: float, eps: float) -> Any:
    """Batch norm over ``input [N, C, *]`` (training updates the running stats in place)."""
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


@lowering("aten::_native_batch_norm_legit", dtypes=U.FLOAT_DTYPES)
def native_batch_norm_legit(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                            running_mean: torch.Tensor, running_var: torch.Tensor, training: bool,
                            momentum: float, eps: float) -> Any:
    """``_native_batch_norm_legit``: batch norm with running stats."""
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


@lowering("aten::_native_batch_norm_legit.no_stats", dtypes=U.FLOAT_DTYPES)
def native_batch_norm_legit_no_stats(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                                     training: bool, momentum: float, eps: float) -> Any:
    """``_native_batch_norm_legit.no_stats``: batch norm without running stats."""
    return _bn_forward(input, weight, bias, None, None, training, momentum, eps)


@lowering("aten::_native_batch_norm_legit_no_training", dtypes=U.FLOAT_DTYPES)
def native_batch_norm_legit_no_training(input: torch.Tensor, weight: torch.Tensor | None,
                                        bias: torch.Tensor | None, running_mean: torch.Tensor,
                                        running_var: torch.Tensor, momentum: float, eps: float) -> Any:
    """``_native_batch_norm_legit_no_training``: batch norm in eval mode."""
    return _bn_forward(input, weight, bias, running_mean, running_var, False, momentum, eps)


@lowering("aten::native_batch_norm_backward", dtypes=U.FLOAT_DTYPES)
def native_batch_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None,
                               running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                               save_mean: torch.Tensor | None, save_invstd: torch.Tensor | None, train: bool,
                               eps: float, output_mask: Sequence[bool]) -> Any:
    """Gradients of batch norm with respect to input, weight and bias."""
    if not _ok(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd) or input.dim() < 2:
        return decline("tensors not float trn tensors (or a conj/neg bit), or input of fewer than 2 dims")
    n, c = input.shape[0], input.shape[1]
    hw = U.prod(input.shape[2:])
    if n * c * hw == 0:
        return decline("an empty input")
    if train:
        if save_mean is None or save_invstd is None or save_mean.numel() != c:
            return decline("training backward without saved stats of the channel count")
        mean, invstd = _f32(save_mean), _f32(save_invstd)
    else:
        if running_mean is None or running_var is None:
            return decline("eval backward without running stats")
        mean, invstd = _f32(running_mean), (_f32(running_var) + eps).rsqrt()
    want_dx, want_w, want_b = (bool(v) for v in output_mask)
    x2 = _rows(input, n * c, hw)
    g2 = _rows(grad_out, n * c, hw)
    s1 = _empty((n * c, 1), torch.float32)
    s2 = _empty((n * c, 1), torch.float32)
    row_dots(g2, x2, s1, s2)
    sum_dy = s1.view(n, c).sum(0)                                    # [C]
    dot = s2.view(n, c).sum(0) - mean * sum_dy                      # sum(dy * (x - mean))
    w = _f32(weight) if weight is not None else None
    dx = dw = db = None
    if want_dx:
        dx = _empty(input.shape, input.dtype)
        k = invstd * w if w is not None else invstd                  # coefficient of dy
        if train:
            cnt = n * hw
            proj = dot * invstd * invstd / cnt                      # coefficient of (x - mean)
            bco = -proj * k
            cco = -bco * mean - sum_dy / cnt * k
        else:
            bco = torch.zeros_like(k)
            cco = torch.zeros_like(k)
        rows = [_rows(t.view(1, c).expand(n, c), n * c, 1) for t in (k, bco, cco)]
        row_affine2(g2, x2, *rows, dx.view(n * c, hw))
    if want_w:
        dw = (dot * invstd).to(weight.dtype if weight is not None else input.dtype)
    if want_b:
        db = sum_dy.to(weight.dtype if weight is not None else input.dtype)
    return dx, dw, db


# ------------------------------------------------------------------ the new API (torch 2.x batch_norm)


@lowering("aten::_batch_norm_with_update", dtypes=U.FLOAT_DTYPES)
def batch_norm_with_update(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                           running_mean: torch.Tensor, running_var: torch.Tensor, momentum: float,
                           eps: float) -> Any:
    """Training batch norm that updates the running stats -> (out, save_mean, save_invstd, reserve)."""
    r = _bn_forward(input, weight, bias, running_mean, running_var, True, momentum, eps)
    if r is NotImplemented:
        return r
    return (*r, torch.empty((0,), dtype=torch.uint8, device="trn"))


@lowering("aten::_batch_norm_no_update", dtypes=U.FLOAT_DTYPES)
def batch_norm_no_update(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                         running_mean: torch.Tensor | None, running_var: torch.Tensor | None, momentum: float,
                         eps: float) -> Any:
    """Batch norm without running-stat updates (eval with stats; batch stats without them)."""
    train = running_mean is None or running_var is None
    r = _bn_forward(input, weight, bias, None if train else running_mean, None if train else running_var, train,
                    momentum, eps)
    if r is NotImplemented:
        return r
    return (*r, torch.empty((0,), dtype=torch.uint8, device="trn"))


@lowering("aten::batch_norm_backward", dtypes=None)
def batch_norm_backward(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None,
                        running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                        save_mean: torch.Tensor | None, save_var: torch.Tensor | None, update: bool, eps: float,
                        output_mask: Sequence[bool], reserve: torch.Tensor) -> Any:
    """Backward of ``_batch_norm_with_update`` / ``_no_update`` (``save_var`` holds the inverse std)."""
    train = bool(update) or running_mean is None or running_var is None
    if save_mean is not None and save_mean.numel() == 0:
        save_mean = save_var = None
    return native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var,
                                      train, eps, output_mask)
