"""Exact int64 ``add``/``sub``/``rsub``/``neg`` for every value, on the two int32 words of each element.

The engines compute 32-bit integers; int64 arithmetic whose values stay within int32 runs as int32 (the common
case, checked per call by ``pointwise``). Beyond that, a sum is formed word by word as a 64-bit adder does: the low
words add (wrapping), the carry is the unsigned overflow of that addition (``lo < a_lo`` as unsigned, i.e. the
signed comparison of both with their sign bits flipped), and the high words add with the carry. A difference
borrows the same way. The result wraps modulo 2^64, as torch's int64 arithmetic does.

Example:
    >>> import torch, trnlang  # doctest: +SKIP
    >>> x = torch.tensor([2**40, -(2**62)], device="trn")  # doctest: +SKIP
    >>> add64(x, 2**40 + 1, None, "add").cpu().tolist()  # doctest: +SKIP
    [2199023255553, -4611684918500130815]
"""

from __future__ import annotations

from typing import Any

import torch

from stdlib_kernels import _util as U

__all__ = ["add64", "supports"]

_FLIP = -(1 << 31)  # the sign bit of an int32 word: xor-ing it maps unsigned order onto signed order


def supports(op: str, alpha: Any) -> bool:
    """Whether :func:`add64` computes ``op`` with this ``alpha`` (None, 1 or -1: no 64-bit product needed)."""
    return op in ("add", "sub", "rsub") and (alpha is None or (type(alpha) is int and alpha in (1, -1)))


def _words(v: Any, shape: tuple[int, ...]) -> torch.Tensor:
    """The (low, high) int32 words of an integer operand (a trn tensor of any integer dtype, or an int), broadcast
    to ``shape``."""
    if isinstance(v, torch.Tensor) and v.device.type == "trn":
        t = v if v.dtype == torch.int64 else v.to(torch.int64)
    else:
        t = torch.tensor(int(v), dtype=torch.int64, device="trn")
    return U.int32_words(t.expand(shape))


def _below(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a < b`` for int32 words read as unsigned, as int32 0/1."""
    return torch.lt(torch.bitwise_xor(a, _FLIP), torch.bitwise_xor(b, _FLIP)).to(torch.int32)


def add64(self: Any, other: Any, alpha: Any, op: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """``self + alpha * other`` (op ``add``), ``self - alpha * other`` (``sub``) or ``other - alpha * self``
    (``rsub``) in int64 with torch's wrapping, for any values; ``alpha`` is None, 1 or -1 (see :func:`supports`).
    ``shape``: the broadcast shape (default: from the tensor operands)."""
    if shape is None:
        shape = tuple(torch.broadcast_shapes(*(t.shape for t in (self, other) if isinstance(t, torch.Tensor))))
    if op == "rsub":
        self, other, op = other, self, "sub"
    if alpha == -1:
        op = "sub" if op == "add" else "add"
    a, b = _words(self, shape), _words(other, shape)
    a_lo, a_hi, b_lo, b_hi = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    if op == "add":
        lo = torch.add(a_lo, b_lo)
        hi = torch.add(torch.add(a_hi, b_hi), _below(lo, a_lo))  # carry: the low sum wrapped past 2^32
    else:
        lo = torch.sub(a_lo, b_lo)
        hi = torch.sub(torch.sub(a_hi, b_hi), _below(a_lo, b_lo))  # borrow: a_lo < b_lo as unsigned
    return U.from_int32_words(torch.stack((lo, hi), -1))
