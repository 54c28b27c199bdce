"""Activation functions and their backward ops (``elu``, ``hardswish``, ``mish``, ``glu``, ``*_backward``, ...).

Every op here is one launch of the elementwise kernel of ``stdlib_kernels.elementwise.unary`` (:func:`unary.ew`):
the formula is a function of up to three fp32 tiles (``grad``, ``self``/``result``, a weight) added
to ``unary.EW_OPS`` under a compile-time name, with the op's scalar arguments as compile-time
``params``. The formulas are torch's CPU kernels' (``aten/src/ATen/native/cpu/Activation.cpp``), so
NaN / inf handling matches: e.g. ``threshold`` keeps NaN, ``hardtanh`` propagates it. Operands may have
any strides (transposed / sliced views launch without copies). ``glu`` and its backward work on the
two halves of ``dim`` as strided views; ``_prelu_kernel`` broadcasts the weight with stride-0 views.

Example:
    >>> import torch, torch.nn.functional as F
    >>> x = torch.randn(8, 16, device="trn", requires_grad=True)
    >>> F.hardswish(x).sum().backward()    # hardswish + hardswish_backward, both native
"""

from __future__ import annotations

import math
from typing import Any

import torch

import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.unary import DTYPES, EW_OPS, logit_bounds, run
from trnlang.device import REGISTRY, Accepts, decline, lowering

_SQRT1_2 = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_GELU_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5
_GELU_KAPPA = 0.044715


def _num(v: Any) -> float | None:
    """A Scalar argument as a float (None if it is not a plain number)."""
    s = U.scalar_value(v)
    if s is None or isinstance(s, complex):
        return None
    return float(s)


def _num_as(v: Any, t: Any) -> float | None:
    """A Scalar rounded to ``t``'s dtype first (torch's ``Scalar.to<scalar_t>()`` in hardshrink / shrink backward)."""
    f = _num(v)
    if f is None or not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
        return f
    return float(torch.tensor(f, dtype=t.dtype))


# ------------------------------------------------------------------------------------------ formulas
# forward: fn(params, x); backward: fn(params, grad, x_or_result[, weight])


def _elu(p: tuple, x: Any) -> Any:
    alpha, scale, iscale = p
    return tl.where(x <= 0.0, tl.expm1(x * iscale) * (alpha * scale), x * scale)


def _elu_bw(p: tuple, g: Any, x: Any) -> Any:
    alpha, scale, iscale, is_result = p
    negcoef = alpha * scale
    if is_result:
        neg = g * iscale * (x + negcoef)
    else:
        neg = g * iscale * negcoef * tl.exp(x * iscale)
    return tl.where(x <= 0.0, neg, g * scale)


def _hardsigmoid(p: tuple, x: Any) -> Any:
    return tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0


def _hardswish(p: tuple, x: Any) -> Any:
    return x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0


def _hardswish_bw(p: tuple, g: Any, x: Any) -> Any:
    return tl.where(x <= -3.0, 0.0, tl.where(x < 3.0, g * (x / 3.0 + 0.5), g))


def _mish(p: tuple, x: Any) -> Any:
    return x * tl.tanh(tl.log1p(tl.exp(x)))


def _mish_bw(p: tuple, g: Any, x: Any) -> Any:
    s = tl.sigmoid(x)
    t = tl.tanh(tl.log1p(tl.exp(x)))
    return g * (t + x * s * (1.0 - t * t))


def _softshrink(p: tuple, x: Any) -> Any:
    lam = p[0]
    return tl.where(x > lam, x - lam, tl.where(x < -lam, x + lam, x * 0.0))


def _shrink_bw(p: tuple, g: Any, x: Any) -> Any:
    lam = p[0]
    return tl.where((x >= -lam) & (x <= lam), 0.0, g)


def _gelu_bw(p: tuple, g: Any, x: Any) -> Any:
    if p[0] == "tanh":
        x2 = x * x
        inner = (x + x2 * x * _GELU_KAPPA) * _GELU_BETA
        t = tl.tanh(inner)
        right = t + 1.0
        dright = (1.0 - t * t) * ((x2 * (3.0 * _GELU_KAPPA) + 1.0) * _GELU_BETA)
        return g * (right * 0.5 + x * 0.5 * dright)
    cdf = (tl.erf(x * _SQRT1_2) + 1.0) * 0.5
    pdf = tl.exp(x * x * -0.5) * _INV_SQRT_2PI
    return g * (cdf + x * pdf)


def _softplus_bw(p: tuple, g: Any, x: Any) -> Any:
    beta, th = p
    z = tl.exp(x * beta)
    return tl.where(x * beta > th, g, g * z / (z + 1.0))


def _logit_bw(p: tuple, g: Any, x: Any) -> Any:
    lo, hi = p
    d = g / (x * (1.0 - x))
    if lo is None:
        return tl.where((x < 0.0) | (x > 1.0), math.nan, d)
    return tl.where((x < lo) | (x > hi), 0.0, d)


def _log_sigmoid_bw(p: tuple, g: Any, x: Any, z: Any) -> Any:
    neg = x < 0.0
    return (tl.where(neg, 1.0, 0.0) - tl.where(neg, 1.0, -1.0) * (z / (z + 1.0))) * g


def _glu_bw_a(p: tuple, g: Any, b: Any) -> Any:
    return g * tl.sigmoid(b)


def _glu_bw_b(p: tuple, g: Any, a: Any, b: Any) -> Any:
    s = tl.sigmoid(b)
    return g * a * s * (1.0 - s)


EW_OPS.update({
    "elu": _elu,
    "elu_bw": _elu_bw,
    "leaky_relu": lambda p, x: tl.where(x > 0.0, x, x * p[0]),
    "leaky_relu_bw": lambda p, g, x: tl.where(x > 0.0, g, g * p[0]),
    "hardtanh": lambda p, x: tl.minimum(tl.maximum(x, p[0]), p[1]),
    "hardtanh_bw": lambda p, g, x: tl.where((x <= p[0]) | (x >= p[1]), 0.0, g),
    "hardsigmoid": _hardsigmoid,
    "hardsigmoid_bw": lambda p, g, x: tl.where((x > -3.0) & (x < 3.0), g / 6.0, 0.0),
    "hardswish": _hardswish,
    "hardswish_bw": _hardswish_bw,
    "mish": _mish,
    "mish_bw": _mish_bw,
    "softshrink": _softshrink,
    "hardshrink": lambda p, x: tl.where((x >= -p[0]) & (x <= p[0]), 0.0, x),
    "shrink_bw": _shrink_bw,
    "threshold": lambda p, x: tl.where(x <= p[0], p[1], x),
    "threshold_bw": lambda p, g, x: tl.where(x <= p[0], 0.0, g),
    "sigmoid_bw": lambda p, g, y: g * (1.0 - y) * y,
    "tanh_bw": lambda p, g, y: g * (1.0 - y * y),
    "silu_bw": lambda p, g, x: g * tl.sigmoid(x) * (1.0 + x * (1.0 - tl.sigmoid(x))),
    "gelu_bw": _gelu_bw,
    "softplus_bw": _softplus_bw,
    "logit_bw": _logit_bw,
    "glu": lambda p, a, b: a * tl.sigmoid(b),
    "glu_bw_a": _glu_bw_a,
    "glu_bw_b": _glu_bw_b,
    "log_sigmoid": lambda p, x: tl.minimum(x, 0.0) - tl.log1p(tl.exp(-tl.abs(x))),
    "log_sigmoid_buf": lambda p, x: tl.exp(-tl.abs(x)),
    "log_sigmoid_bw": _log_sigmoid_bw,
    "prelu": lambda p, x, w: tl.where(x > 0.0, x, w * x),
    "prelu_bw_x": lambda p, g, x, w: tl.where(x > 0.0, g, w * g),
    "prelu_bw_w": lambda p, g, x: tl.where(x > 0.0, 0.0, x * g),
})


#: integer dtypes ``hardtanh`` takes (as the integer ``clamp``)
_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _register(name: str, fn: Any, accepts: Accepts | None = None, dtypes: Any = DTYPES) -> None:
    if f"aten::{name}" not in REGISTRY:
        lowering(f"aten::{name}", dtypes=dtypes, accepts=accepts)(fn)


def _fw(op: str, self: Any, params: tuple, out: torch.Tensor | None) -> Any:
    if not U.is_trn(self) or any(v is None for v in params):
        return decline("self not a trn tensor, or a missing parameter")
    return run(op, [self], self.dtype, out, params)


def _bw(op: str, grad: Any, x: Any, params: tuple, out: torch.Tensor | None = None) -> Any:
    if not (U.is_trn(grad) and U.is_trn(x)) or grad.dtype != x.dtype or any(v is None for v in params):
        return decline("grad and input not trn tensors of one dtype, or a missing parameter")
    return run(op, [grad, x], grad.dtype, out, params)


# ------------------------------------------------------------------------------------------ forward


def elu(self: Any, alpha: Any = 1, scale: Any = 1, input_scale: Any = 1, *, out: torch.Tensor | None = None) -> Any:
    """``aten::elu`` (selu and celu decompose to it): ``x > 0 ? scale x : alpha scale expm1(input_scale x)``."""
    return _fw("elu", self, (_num(alpha), _num(scale), _num(input_scale)), out)


def leaky_relu(self: Any, negative_slope: Any = 0.01, *, out: torch.Tensor | None = None) -> Any:
    """``aten::leaky_relu``: ``x > 0 ? x : negative_slope x``."""
    return _fw("leaky_relu", self, (_num(negative_slope),), out)


def hardtanh(self: Any, min_val: Any = -1, max_val: Any = 1, *, out: torch.Tensor | None = None) -> Any:
    """``aten::hardtanh`` (relu6 decomposes to it): ``min(max(x, min_val), max_val)``; on an integer tensor the
    integer ``clamp`` by the bounds cast toward zero."""
    if U.is_trn(self) and self.dtype in _INTS:
        lo, hi = _num(min_val), _num(max_val)
        if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
            return decline("a missing or non-finite bound")
        if self.dtype == torch.uint8 and (lo < 0 or hi < 0):
            raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
        return torch.clamp(self, math.trunc(lo), math.trunc(hi), out=out)  # torch casts them toward zero
    return _fw("hardtanh", self, (_num(min_val), _num(max_val)), out)


def hardsigmoid(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::hardsigmoid``: ``min(max(x + 3, 0), 6) / 6``."""
    return _fw("hardsigmoid", self, (), out)


def hardswish(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::hardswish``: ``x min(max(x + 3, 0), 6) / 6``."""
    return _fw("hardswish", self, (), out)


def mish(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::mish``: ``x tanh(log1p(exp(x)))``."""
    return _fw("mish", self, (), out)


def softshrink(self: Any, lambd: Any = 0.5, *, out: torch.Tensor | None = None) -> Any:
    """``aten::softshrink``: ``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    return _fw("softshrink", self, (_num(lambd),), out)


def hardshrink(self: Any, lambd: Any = 0.5, *, out: torch.Tensor | None = None) -> Any:
    """``aten::hardshrink``: 0 on ``[-lambd, lambd]`` (lambd rounded to the dtype, as torch), else ``x``."""
    return _fw("hardshrink", self, (_num_as(lambd, self),), out)


def threshold(self: Any, threshold: Any, value: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::threshold``: ``x <= threshold ? value : x``; on an integer tensor both numbers are first cast to its
    dtype (truncated, as torch's kernel does) and the select is a native integer ``where``."""
    if U.is_trn(self) and self.dtype in _INTS:
        th, v = _num(threshold), _num(value)
        if th is None or v is None:
            return decline("a missing parameter")
        info = torch.iinfo(self.dtype)
        ti, vi = math.trunc(th), math.trunc(v)
        if self.dtype == torch.uint8:  # torch's checked cast takes a negative int down to -255, wrapped
            ti, vi = (x % 256 if isinstance(U.scalar_value(n), int) and -255 <= x < 0 else x
                      for x, n in ((ti, threshold), (vi, value)))
        if not (info.min <= ti <= info.max and info.min <= vi <= info.max):
            return decline("a threshold or value outside the integer dtype's range (torch raises)")
        r = torch.where(self <= ti, torch.full((), vi, dtype=self.dtype, device=self.device), self)
        if out is None:
            return r
        if out.dtype != self.dtype or out.shape != r.shape:
            return decline("out= of another dtype or shape than self")
        return out.copy_(r)
    return _fw("threshold", self, (_num(threshold), _num(value)), out)


def _halves(self: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    if self.dim() == 0:
        return None
    d = dim % self.dim()
    n = self.shape[d]
    if n % 2:
        return None
    h = n // 2
    return self.narrow(d, 0, h), self.narrow(d, h, h)


def glu(self: Any, dim: int = -1, *, out: torch.Tensor | None = None) -> Any:
    """``aten::glu``: ``a sigmoid(b)`` for the halves ``a``, ``b`` of ``dim`` (strided views, no copies)."""
    hv = _halves(self, dim)
    if hv is None:
        return decline("an odd size or 0-dim input: torch raises")
    return run("glu", list(hv), self.dtype, out)


def prelu_kernel(self: Any, weight: Any) -> Any:
    """``aten::_prelu_kernel``: ``x > 0 ? x : weight x`` (weight broadcast to ``self`` with stride-0 views)."""
    return run("prelu", [self, weight], self.dtype)


def log_sigmoid_forward(self: Any, *, output: Any = None, buffer: Any = None) -> Any:
    """``aten::log_sigmoid_forward``: ``(min(x, 0) - log1p(z), z)`` with ``z = exp(-|x|)`` (torch's CPU buffer)."""
    out = run("log_sigmoid", [self], self.dtype)
    buf = run("log_sigmoid_buf", [self], self.dtype)
    return out, buf


for _name, _fn in (("elu", elu), ("leaky_relu", leaky_relu), ("hardsigmoid", hardsigmoid),
                   ("hardswish", hardswish), ("mish", mish), ("softshrink", softshrink), ("hardshrink", hardshrink),
                   ):
    _register(_name, _fn)
_register("threshold", threshold, dtypes=(*DTYPES, *_INTS))
_register("hardtanh", hardtanh, dtypes=(*DTYPES, *_INTS))
# the declarative form: these check nothing themselves (dtypes= and accepts= say what they take)
_register("glu", glu, Accepts(tensors=("self",)))
_register("_prelu_kernel", prelu_kernel, Accepts(tensors=("self", "weight"), same_dtype=True))
_register("log_sigmoid_forward", log_sigmoid_forward, Accepts(tensors=("self",)))


# ------------------------------------------------------------------------------------------ backward


def threshold_backward(grad_output: Any, self: Any, threshold: Any, *, grad_input: Any = None) -> Any:
    """``aten::threshold_backward`` (relu's backward): 0 where ``self <= threshold``, else the gradient."""
    return _bw("threshold_bw", grad_output, self, (_num(threshold),), grad_input)


def sigmoid_backward(grad_output: Any, output: Any, *, grad_input: Any = None) -> Any:
    """``aten::sigmoid_backward``: ``g (1 - y) y``."""
    return _bw("sigmoid_bw", grad_output, output, (), grad_input)


def tanh_backward(grad_output: Any, output: Any, *, grad_input: Any = None) -> Any:
    """``aten::tanh_backward``: ``g (1 - y^2)``."""
    return _bw("tanh_bw", grad_output, output, (), grad_input)


def silu_backward(grad_output: Any, self: Any, *, grad_input: Any = None) -> Any:
    """``aten::silu_backward``: ``g s (1 + x (1 - s))``, ``s = sigmoid(x)``."""
    return _bw("silu_bw", grad_output, self, (), grad_input)


def softplus_backward(grad_output: Any, self: Any, beta: Any, threshold: Any, *, grad_input: Any = None) -> Any:
    """``aten::softplus_backward``: ``g z / (z + 1)``, ``z = exp(beta x)`` (``g`` above the threshold)."""
    return _bw("softplus_bw", grad_output, self, (_num(beta), _num(threshold)), grad_input)


def gelu_backward(grad_output: Any, self: Any, *, approximate: str = "none", grad_input: Any = None) -> Any:
    """``aten::gelu_backward`` for ``approximate="none"`` and ``"tanh"``."""
    if approximate not in ("none", "tanh"):
        return decline("an unknown approximate= mode")
    return _bw("gelu_bw", grad_output, self, (approximate,), grad_input)


def elu_backward(grad_output: Any, alpha: Any, scale: Any, input_scale: Any, is_result: bool, self_or_result: Any,
                 *, grad_input: Any = None) -> Any:
    """``aten::elu_backward`` (from the input or, ``is_result``, from the output)."""
    return _bw("elu_bw", grad_output, self_or_result, (_num(alpha), _num(scale), _num(input_scale), bool(is_result)),
               grad_input)


def leaky_relu_backward(grad_output: Any, self: Any, negative_slope: Any, self_is_result: bool, *,
                        grad_input: Any = None) -> Any:
    """``aten::leaky_relu_backward``: ``x > 0 ? g : negative_slope g``."""
    return _bw("leaky_relu_bw", grad_output, self, (_num(negative_slope),), grad_input)


def hardtanh_backward(grad_output: Any, self: Any, min_val: Any, max_val: Any, *, grad_input: Any = None) -> Any:
    """``aten::hardtanh_backward``: 0 outside ``(min_val, max_val)``."""
    return _bw("hardtanh_bw", grad_output, self, (_num(min_val), _num(max_val)), grad_input)


def hardsigmoid_backward(grad_output: Any, self: Any, *, grad_input: Any = None) -> Any:
    """``aten::hardsigmoid_backward``: ``g / 6`` on ``(-3, 3)``, else 0."""
    return _bw("hardsigmoid_bw", grad_output, self, (), grad_input)


def hardswish_backward(grad_output: Any, self: Any, *, out: Any = None) -> Any:
    """``aten::hardswish_backward``."""
    return _bw("hardswish_bw", grad_output, self, (), out)


def mish_backward(grad_output: Any, self: Any) -> Any:
    """``aten::mish_backward``: ``g (t + x s (1 - t^2))``, ``t = tanh(softplus(x))``, ``s = sigmoid(x)``."""
    return _bw("mish_bw", grad_output, self, ())


def logit_backward(grad_output: Any, self: Any, eps: Any = None, *, grad_input: Any = None) -> Any:
    """``aten::logit_backward``: ``g / (x (1 - x))`` (0 outside ``[eps, 1 - eps]``, NaN outside [0, 1] without eps)."""
    if not (U.is_trn(grad_output) and U.is_trn(self)) or grad_output.dtype != self.dtype \
            or self.dtype not in DTYPES:
        return decline("grad_output and self not trn tensors of one supported dtype")
    return run("logit_bw", [grad_output, self], self.dtype, None, logit_bounds(eps, self.dtype))


def softshrink_backward(grad_output: Any, self: Any, lambd: Any, *, grad_input: Any = None) -> Any:
    """``aten::softshrink_backward``: 0 on ``[-lambd, lambd]``."""
    return _bw("shrink_bw", grad_output, self, (_num_as(lambd, self),), grad_input)


def hardshrink_backward(grad_out: Any, self: Any, lambd: Any, *, grad_input: Any = None) -> Any:
    """``aten::hardshrink_backward``: 0 on ``[-lambd, lambd]``."""
    return _bw("shrink_bw", grad_out, self, (_num_as(lambd, self),), grad_input)


def glu_backward(grad_output: Any, self: Any, dim: int, *, grad_input: Any = None) -> Any:
    """``aten::glu_backward``: the two halves of the input gradient, each one launch into a view of the result."""
    if not (U.is_trn(grad_output) and U.is_trn(self)) or self.dtype not in DTYPES or grad_output.dtype != self.dtype:
        return decline("grad_output and self not trn tensors of one supported dtype")
    hv = _halves(self, dim)
    if hv is None or tuple(grad_output.shape) != tuple(hv[0].shape):
        return decline("an odd size, or grad_output not the shape of a half")
    if grad_input is not None:
        if not U.is_trn(grad_input) or grad_input.dtype != self.dtype:
            return decline("grad_input= not a trn tensor of self's dtype")
        if grad_input.numel() == 0 and tuple(grad_input.shape) != tuple(self.shape):
            grad_input.resize_(self.shape)
        if tuple(grad_input.shape) != tuple(self.shape) or U.has_internal_overlap(grad_input) \
                or U.overlaps(grad_input, self) or U.overlaps(grad_input, grad_output):
            return decline("grad_input= of the wrong shape, or overlapping an input")
        res = grad_input
    else:
        res = U.new_output(tuple(self.shape), self.dtype, [self])
    a, b = hv
    ga, gb = _halves(res, dim)  # type: ignore[misc]
    if run("glu_bw_a", [grad_output, b], self.dtype, ga) is NotImplemented:
        return NotImplemented
    run("glu_bw_b", [grad_output, a, b], self.dtype, gb)
    return res


def log_sigmoid_backward(grad_output: Any, self: Any, buffer: Any, *, grad_input: Any = None) -> Any:
    """``aten::log_sigmoid_backward``: ``(max_deriv - sign z / (1 + z)) g`` from the forward's buffer ``z``."""
    if not all(U.is_trn(t) for t in (grad_output, self, buffer)) or not (
            grad_output.dtype == self.dtype == buffer.dtype) or tuple(buffer.shape) != tuple(self.shape):
        return decline("tensors not trn tensors of one dtype, or buffer not of self's shape")
    return run("log_sigmoid_bw", [grad_output, self, buffer], self.dtype)


def prelu_kernel_backward(grad_output: Any, self: Any, weight: Any) -> Any:
    """``aten::_prelu_kernel_backward``: ``(x > 0 ? g : w g, x > 0 ? 0 : x g)`` (both of ``self``'s shape)."""
    if not (U.is_trn(grad_output) and U.is_trn(self) and U.is_trn(weight)) \
            or not (grad_output.dtype == self.dtype == weight.dtype):
        return decline("tensors not trn tensors of one dtype")
    gi = run("prelu_bw_x", [grad_output, self, weight], self.dtype)
    if gi is NotImplemented:
        return NotImplemented
    gw = run("prelu_bw_w", [grad_output, self], self.dtype)
    return gi, gw


for _name, _fn in (("threshold_backward", threshold_backward), ("sigmoid_backward", sigmoid_backward),
                   ("tanh_backward", tanh_backward), ("silu_backward", silu_backward),
                   ("softplus_backward", softplus_backward), ("gelu_backward", gelu_backward),
                   ("elu_backward", elu_backward), ("leaky_relu_backward", leaky_relu_backward),
                   ("hardtanh_backward", hardtanh_backward), ("hardsigmoid_backward", hardsigmoid_backward),
                   ("hardswish_backward", hardswish_backward), ("mish_backward", mish_backward),
                   ("logit_backward", logit_backward), ("softshrink_backward", softshrink_backward),
                   ("hardshrink_backward", hardshrink_backward), ("glu_backward", glu_backward),
                   ("log_sigmoid_backward", log_sigmoid_backward),
                   ("_prelu_kernel_backward", prelu_kernel_backward)):
    _register(_name, _fn)
