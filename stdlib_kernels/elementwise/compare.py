"""Comparisons (``eq ne lt le gt ge``), logical (``logical_and/or/xor/not``) and bitwise (``bitwise_and/or/xor``)
ops: bool (or integer) results of the binary elementwise kernel.

They are entries of ``stdlib_kernels.elementwise.pointwise.BINARY_OPS`` and run through the same kernel,
broadcasting and promotion as ``add``: both operands are compared in their common dtype (fp32 for
floats, int32 for integers and bools, int64 values range-checked) and the store writes torch
``bool`` (one byte per element, 0/1). Tensor and Scalar overloads, in-place and ``out=`` variants
are handled; ``logical_not`` is ``x == 0`` with a bool result (registered only if the unary family
has not lowered it).

Example:
    >>> import torch
    >>> x = torch.randn(8, 4, device="trn")           # doctest: +SKIP
    >>> (x > 0) & (x < 1), torch.logical_not(x > 0)   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.lanes import fast
from stdlib_kernels.elementwise.pointwise import OPERAND_DTYPES, run_binary
from stdlib_kernels.elementwise.unsigned import WIDE_UNSIGNED
from trnlang.device import REGISTRY, decline, lowering
from trnlang.device.fallback import clear_decline_reason

_INT_LIKE = (torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.int64)


def complex_planes(self: Any, other: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The ``[..., 2]`` real/imaginary planes of two complex64 ``trn`` tensors (no conj/neg bit), else None."""
    ts = (self, other)
    if not all(U.is_trn(t) and t.dtype == torch.complex64 and not t.is_conj() and not t.is_neg() for t in ts):
        return None
    return torch.view_as_real(self), torch.view_as_real(other)


def promoted_planes(v: Any) -> torch.Tensor | None:
    """``v`` promoted to complex64 as ``[..., 2]`` float32 real/imaginary planes on ``trn`` (None: not possible).

    A complex64 tensor is viewed, a real tensor gets a zero imaginary plane, a number (or a 0-dim CPU tensor)
    becomes a ``[2]`` pair that broadcasts against the other operand's planes.
    """
    if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0:
        v = v.item()
    if isinstance(v, (bool, int, float, complex)):
        c = complex(v)
        return torch.tensor([c.real, c.imag], dtype=torch.float32, device="trn")
    if not U.is_trn(v) or v.is_conj() or v.is_neg():
        return None
    if v.dtype == torch.complex64:
        return torch.view_as_real(v)
    if v.is_complex():
        return None
    re = v.to(torch.float32)
    return torch.stack((re, torch.zeros_like(re)), -1)


_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _int64_float(a: Any, b: Any) -> bool:
    """Two ``trn`` tensors, one int64 and one float32/bf16/fp16 (their common dtype is the float one)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and U.is_trn(a) and U.is_trn(b)):
        return False
    return {a.dtype, b.dtype} & {torch.int64} != set() and (a.dtype in _FLOATS or b.dtype in _FLOATS)


def _int64_pair(a: Any, b: Any) -> tuple[torch.Tensor, Any] | None:
    """Integer ``trn`` operands whose common dtype is int64 (a tensor and an int, or two tensors), as an int64 tensor
    and an int or an int64 tensor; None otherwise."""
    if not (isinstance(a, torch.Tensor) and a.dtype in _INTS and U.is_trn(a)):
        return None
    if isinstance(b, torch.Tensor):
        if b.dtype not in _INTS or not U.is_trn(b) or torch.result_type(a, b) != torch.int64:
            return None
        return a.to(torch.int64), b.to(torch.int64)
    if isinstance(b, int) and not isinstance(b, bool) and -(1 << 63) <= b < 1 << 63 \
            and torch.result_type(a, b) == torch.int64:
        return a, b
    return None


def _word_pairs(a: torch.Tensor, other: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The (low, high) int32 words of an 8-byte integer tensor and of an int (its bit pattern) or a tensor of the
    same dtype, along a last dim of 2."""
    wa = U.int32_words(a)
    if isinstance(other, int):
        w = [(other >> k) & 0xFFFFFFFF for k in (0, 32)]
        wb = torch.tensor([x - (1 << 32) if x >= 1 << 31 else x for x in w], dtype=torch.int32, device="trn")
    else:
        wb = U.int32_words(other)
    return wa, wb


def _words_eq(op: str, a: torch.Tensor, other: Any) -> torch.Tensor:
    """eq/ne of an 8-byte integer tensor and an int or a tensor of the same dtype, exactly: equal when both int32
    words are."""
    return _pairs_eq(op, *_word_pairs(a, other))


def _words_order(op: str, a: torch.Tensor, other: Any) -> torch.Tensor:
    """lt/le/gt/ge of an int64 tensor and an int or another int64 tensor, exactly: the high words compare as
    signed int32, and where they are equal the low words decide as unsigned (their sign bits flipped, then
    signed)."""
    wa, wb = _word_pairs(a, other)
    flip = -(1 << 31)
    hi_a, hi_b = wa[..., 1], wb[..., 1]
    lo_a, lo_b = torch.bitwise_xor(wa[..., 0], flip), torch.bitwise_xor(wb[..., 0], flip)
    strict = {"lt": torch.lt, "le": torch.lt, "gt": torch.gt, "ge": torch.gt}[op]
    return strict(hi_a, hi_b) | ((hi_a == hi_b) & getattr(torch, op)(lo_a, lo_b))


def _pairs_eq(op: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """eq/ne of values held as pairs along the last dim (int32 words, complex planes): equal when both are."""
    return (a == b).all(-1) if op == "eq" else (a != b).any(-1)


def _complex_eq(op: str, self: torch.Tensor, other: Any, out: torch.Tensor | None) -> Any:
    """eq/ne of a complex64 trn tensor and another one, a real trn tensor or a number, on their real/imaginary
    planes (the real operand promoted to complex64, as torch does)."""
    if op not in ("eq", "ne"):
        raise NotImplementedError(f'"{op}" not implemented for \'ComplexFloat\'')  # torch's CPU error
    from stdlib_kernels.elementwise.complex_arith import up_complex32

    self, other = up_complex32(self), up_complex32(other)  # complex32 compares exactly as complex64
    planes = complex_planes(self, other)
    if planes is None and (_number(other) or U.is_trn(other)) and self.dtype == torch.complex64 \
            and U.is_trn(self) and not self.is_conj() and not self.is_neg():
        pb = promoted_planes(other)  # a number: a [2] pair broadcast against the planes
        planes = (torch.view_as_real(self), pb) if pb is not None else None
    if planes is None:
        return decline("complex operands other than complex64 trn tensors, real trn tensors or a number (eq/ne)")
    return _into(_pairs_eq(op, *planes), out)


def _into(res: torch.Tensor, out: torch.Tensor | None) -> Any:
    """``res``, or ``out=`` (a trn bool tensor of its shape; an empty one takes the shape, as torch's) holding it."""
    if out is None:
        return res
    if not (U.is_trn(out) and out.dtype == torch.bool):
        return decline("out= not a trn bool tensor")
    if out.numel() == 0 and out.shape != res.shape:
        out.resize_(res.shape)
    if out.shape != res.shape:
        return decline("out= of another shape than the result")
    return out.copy_(res)


def _number(v: Any) -> bool:
    """A Python number, or a 0-dim CPU tensor standing for one (not a float64/complex128 one: another result)."""
    if isinstance(v, torch.Tensor):
        return v.device.type == "cpu" and v.dim() == 0 and v.dtype not in (torch.float64, torch.complex128)
    return isinstance(v, (bool, int, float, complex))


def _complex_number(v: Any) -> bool:
    """A Python complex number or a 0-dim complex CPU tensor."""
    if isinstance(v, torch.Tensor):
        return v.device.type == "cpu" and v.dim() == 0 and v.is_complex()
    return isinstance(v, complex)


def _compare(op: str) -> Callable[..., Any]:
    def lower(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
        if isinstance(self, torch.Tensor) and self.is_complex():
            return _complex_eq(op, self, other, out)
        if op in ("eq", "ne") and U.is_trn(self) and _complex_number(other) \
                and torch.result_type(self, other) in (torch.complex64, torch.complex32):
            # a real tensor against a complex number: compared in complex64, as torch promotes
            if isinstance(other, torch.Tensor):
                other = complex(other.to(torch.complex64).item())
            return _complex_eq(op, self.to(torch.complex64), other, out)
        if isinstance(other, torch.Tensor) and other.is_complex() and op in ("eq", "ne"):
            return _complex_eq(op, other, self, out)  # symmetric: the complex operand first
        if isinstance(self, torch.Tensor) and self.dtype in _UNSIGNED_WIDE:
            return _unsigned_eq(op, self, other, out)
        r = run_binary(op, self, other, out, rdt=torch.bool)
        if r is NotImplemented and _int64_float(self, other):
            # an int64 tensor against a float one: torch compares in the float dtype, so convert it (exactly
            # rounded, natively) and compare the floats
            rdt = torch.result_type(self, other)
            clear_decline_reason()
            return run_binary(op, self.to(rdt), other.to(rdt), out, rdt=torch.bool)
        pair = _int64_pair(self, other) if r is NotImplemented else None
        if pair is not None:
            # values beyond int32: compare the two int32 words instead
            clear_decline_reason()
            return _into(_words_eq(op, *pair) if op in ("eq", "ne") else _words_order(op, *pair), out)
        return r

    lower.__name__ = op
    lower.__doc__ = f"``aten::{op}``: elementwise comparison in the common dtype, a bool result."
    return lower


#: torch's unsigned types wider than a byte: eq/ne compare their bits, as the signed type of the same width
_UNSIGNED_WIDE = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def _unsigned_eq(op: str, self: torch.Tensor, other: Any, out: torch.Tensor | None) -> Any:
    """eq/ne of uint16/32/64: equality of bits, so the same comparison on the signed view of each operand
    (another operand dtype, or a number outside the type's range, is declined: torch decides those)."""
    signed = _UNSIGNED_WIDE[self.dtype]
    if isinstance(other, torch.Tensor) and other.device.type == "cpu" and other.dim() == 0 \
            and other.dtype == self.dtype:
        other = int(other.item())
    if isinstance(other, bool) or not isinstance(other, (int, torch.Tensor)):
        return decline("an unsigned comparison with a non-integer operand")
    if isinstance(other, int):
        bits = 8 * self.element_size()
        if not 0 <= other < (1 << bits):
            return decline("a number outside the unsigned type's range")
        other = other - (1 << bits) if other >= 1 << (bits - 1) else other
    elif other.dtype != self.dtype or not U.is_trn(other):
        return decline("operands of different dtypes or devices")
    if self.element_size() == 8:  # int64 arithmetic is exact only within int32: compare the two int32 words
        if out is not None:
            return decline("out= with 8-byte unsigned operands")
        return _words_eq(op, self, other)
    if isinstance(other, torch.Tensor):
        other = other.view(signed)
    return run_binary(op, self.view(signed), other, out, rdt=torch.bool)


def _nonzero_if_complex(v: Any) -> Any:
    """A complex64 trn tensor as its (native) ``!= 0``; anything else as it is."""
    return v.ne(0) if U.is_trn(v) and v.dtype == torch.complex64 and not (v.is_conj() or v.is_neg()) else v


def _logical(op: str) -> Callable[..., Any]:
    def lower(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
        self, other = _nonzero_if_complex(self), _nonzero_if_complex(other)
        if any(isinstance(v, torch.Tensor) and v.is_complex() for v in (self, other)):
            return decline("a complex operand other than a complex64 trn tensor without conj/neg bits")
        if U.is_trn(out) and out.dtype == torch.complex64 and not (out.is_conj() or out.is_neg()):
            res = run_binary(op, self, other, None, rdt=torch.bool)  # into a complex out= / in place: 0 or 1
            if res is NotImplemented:
                return res
            if out.numel() == 0 and out.shape != res.shape:
                out.resize_(res.shape)
            return out.copy_(res) if out.shape == res.shape else decline("out= of another shape: torch raises")
        return run_binary(op, self, other, out, rdt=torch.bool)

    lower.__name__ = op
    lower.__doc__ = f"``aten::{op}``: nonzero-ness of both operands combined, a bool result."
    return lower


def _bitwise(op: str) -> Callable[..., Any]:
    def lower(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
        rdt = torch.result_type(self, other)
        if rdt not in _INT_LIKE and rdt not in WIDE_UNSIGNED:
            return decline("a float result type: torch raises")
        return run_binary(op, self, other, out, rdt=rdt, compute="i32")

    lower.__name__ = op
    lower.__doc__ = f"``aten::{op}``: integer / bool bitwise op (int32 arithmetic)."
    return lower


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    for _ov in ("Tensor", "Scalar"):
        # complex64 order comparisons come in to raise torch's NotImplementedError natively
        _cdt = (torch.complex64, torch.complex32, *_UNSIGNED_WIDE) if _op in ("eq", "ne") else (torch.complex64,)
        _lo = _compare(_op)  # fast lanes: same-layout float tensors, a tensor and a number (lanes.py)
        lowering(f"aten::{_op}.{_ov}", dtypes=(*OPERAND_DTYPES, *_cdt),
                 fast=fast(_lo, _op if _ov == "Scalar" else None))(_lo)

for _op in ("logical_and", "logical_or", "logical_xor"):
    lowering(f"aten::{_op}", dtypes=(*OPERAND_DTYPES, torch.complex64))(_logical(_op))

for _op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    for _ov in ("Tensor", "Scalar"):
        lowering(f"aten::{_op}.{_ov}", dtypes=(*_INT_LIKE, *WIDE_UNSIGNED))(_bitwise(_op))


def logical_not(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self == 0`` as bool (``out=`` may have another dtype: the 0/1 values are cast)."""
    if not isinstance(self, torch.Tensor):
        return decline("self not a tensor")
    zero = 0.0 if self.dtype.is_floating_point else 0
    return run_binary("eq", self, zero, out, rdt=torch.bool)


if "aten::logical_not" not in REGISTRY:  # a unary op: the unary family's lowering, when present, is kept
    lowering("aten::logical_not", dtypes=OPERAND_DTYPES)(logical_not)
