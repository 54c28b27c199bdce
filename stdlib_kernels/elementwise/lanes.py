"""Fast-lane keys of the binary elementwise ops (``trnlang.device.fastlane``): tensor-tensor and tensor-scalar.

A lane replays the one launch a lowering made, so its key must hold everything the lowering's
choice of kernel, output dtype and launch depended on. Tensor-tensor lanes: two ``trn`` tensors of
one float dtype (their shapes, and their strides when either is not contiguous: views, broadcasts).
Tensor-scalar lanes (``x * 2.5``, ``x + 1``, ``x > 0.5``, ``x ** 2``): one ``trn`` tensor and a
Python ``bool``/``int``/``float``; the key is the tensor's dtype and shape (and strides when it is not
contiguous), the number's type (torch's promotion depends on it: an int tensor times
2.5 is float) and, for integer tensors, the default float dtype. The number itself is a runtime
operand of the kernel (a ``[1, 1]`` device tensor), so every value runs the same compiled variant;
:func:`scalar_key` returns it as the kernel reads it (rounded to bf16/fp16 first where torch rounds
it: every op but ``mul``/``div`` on a bf16/fp16 tensor).

``x ** 2`` and ``x ** 3`` of float tensors, which the lowering gives kernels of their own (reading a scalar 0), have
lanes keyed on the exponent. Otherwise, only calls whose lowering does not depend on the
number's value beyond its type are given lanes:
float tensors with any number, int32 tensors with a number in the int32 range, smaller integer and
bool tensors with a float (and bool tensors with a bool). Others (int64 tensors, whose values are
range-checked per call; ``uint8 + 300``) run the lowering.

Example:
    >>> import torch
    >>> x = torch.randn(8, device="trn")                    # doctest: +SKIP
    >>> y = x * 2.5; y = x * 0.5                             # doctest: +SKIP  (the second call: the lane)

In-place variants (``x.add_(y)``) take contiguous tensors only (:func:`contiguous_layout`): their check that the
written operand does not partly overlap a read one compares contiguous spans.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import torch

from trnlang.device import fastlane

__all__ = ["same_layout", "contiguous_layout", "scalar_key", "fast"]

_TENSORS = (torch.Tensor, torch.nn.Parameter)  # a module's weights are Parameters
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_HALF = (torch.bfloat16, torch.float16)
_SMALL_INTS = (torch.int16, torch.int8, torch.uint8, torch.bool)
_NUMBERS = (float, int, bool)
_I32 = 2**31
#: ops whose number operand torch keeps in fp32 for bf16/fp16 tensors (pointwise._OPMATH_SCALAR)
_OPMATH = ("mul", "div")
_default_dtype = torch.get_default_dtype


def same_layout(a: Any, b: Any) -> Any:
    """The fast-lane key of two ``trn`` tensors of one float dtype: ``(dtype, shape)`` for one shape, contiguous;
    ``(dtype, shape of a, shape of b)`` for contiguous shapes that differ (a broadcast: ``x + bias``; the lowering's
    first call checks that they broadcast, and makes a lane only of a single launch into a dense output); with the
    strides after the shapes when either is not contiguous (views: ``x.t() * y``, ``-x[..., 32:]``: the key holds
    every layout the lowering's launch and its output's strides depend on); else None."""
    if type(a) not in _TENSORS or type(b) not in _TENSORS:
        return None
    dt = a.dtype
    if b.dtype is not dt or a.is_cpu or b.is_cpu or dt not in _FLOATS or a.is_neg() or b.is_neg():
        return None
    sh = a.shape
    if not a.is_contiguous() or not b.is_contiguous():
        return dt, sh, a.stride(), b.shape, b.stride()
    if b.shape != sh:
        return dt, sh, b.shape
    return dt, sh


def contiguous_layout(a: Any, b: Any) -> Any:
    """:func:`same_layout` for contiguous tensors only (the in-place variants' lanes)."""
    k = same_layout(a, b)
    return None if k is None or len(k) == 5 else k


@lru_cache(maxsize=512)
def _rounded(v: float, dtype: torch.dtype) -> float:
    return torch.tensor(v, dtype=torch.float32).to(dtype).item()


def _half(v: Any, dtype: torch.dtype) -> Any:
    """``v`` rounded to bf16/fp16 as the lowering rounds it (zeros kept with their sign: 0.0 == -0.0 in a cache)."""
    f = float(v)
    if f == 0.0 or f != f:
        return f
    return _rounded(f, dtype)


def scalar_key(op: str, ints: bool = True, strided: bool = True) -> Callable[[Any, Any], tuple[Any, Any] | None]:
    """The tensor-scalar key function of the binary op ``op`` (a ``BINARY_OPS`` name).

    Returns ``f(x, number) -> ((dtype, shape, type(number)[, default dtype][, strides]), value) | None``: the
    strides of a non-contiguous tensor last (``strided=False``: contiguous tensors only).
    ``ints=False``: integer tensors with integer numbers take no lane (``pow``: one kernel per exponent).
    """
    rounds = op not in _OPMATH
    own_kernel = (2, 3) if op == "pow" else ()  # numbers the lowering gives a kernel of their own (x ** 2, x ** 3)

    def layout_key(a: Any, s: Any) -> tuple[Any, Any] | None:
        ts = type(s)
        if type(a) not in _TENSORS or ts not in _NUMBERS or a.is_cpu or a.is_neg():
            return None
        dt = a.dtype
        if s in own_kernel:  # compiled into its kernel (which reads a scalar 0): the number is part of the key
            return ((dt, a.shape, ts, s), 0) if dt in _FLOATS else None
        if dt in _FLOATS:
            return (dt, a.shape, ts), (_half(s, dt) if rounds and dt in _HALF else s)
        if ts is float:
            if dt is torch.int32 or dt in _SMALL_INTS:
                return (dt, a.shape, ts, _default_dtype()), s
            return None
        if not ints:
            return None
        if dt is torch.int32:
            return ((dt, a.shape, ts), s) if -_I32 <= s < _I32 else None
        if dt is torch.bool and ts is bool:
            return (dt, a.shape, ts), s
        return None

    def key(a: Any, s: Any) -> tuple[Any, Any] | None:
        kv = layout_key(a, s)
        if kv is None or a.is_contiguous():
            return kv
        return ((*kv[0], a.stride()), kv[1]) if strided else None

    return key


def fast(lower: Callable[..., Any], op: str | None = None, ints: bool = True,
         inplace: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """The registry fast function of a binary lowering: a tensor-tensor lane, and a tensor-scalar lane when
    ``op`` (its ``BINARY_OPS`` name) is given; ``inplace`` (the lowering writing operand 0: ``lambda a, b: add(a, b,
    out=a)``) gives the in-place variant (``x.add_(y)``) lanes too."""
    return fastlane.fast_function(lower, 2, same_layout, scalar_key(op, ints) if op is not None else None,
                                  inplace=inplace, inplace_keys=(contiguous_layout, scalar_key(op, ints, False)
                                                                 if op is not None else None))


def check_alpha(common: torch.dtype, alpha: Any) -> None:
    """Raise torch's errors for an ``alpha`` that does not suit the operands' common dtype (add/sub).

    Example:
        >>> check_alpha(torch.int32, 1.5)
        Traceback (most recent call last):
            ...
        RuntimeError: For integral input tensors, argument alpha must not be a floating point number.
    """
    if isinstance(alpha, bool) and common != torch.bool:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if not (common.is_floating_point or common.is_complex) and not isinstance(alpha, int):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if not common.is_complex and isinstance(alpha, complex):
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")
