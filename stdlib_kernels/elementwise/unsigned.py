"""Binary ops on torch's wider unsigned dtypes (uint16/32/64), in the forms the CPU has kernels for.

A float-valued op (``div``, ``atan2``, ``xlogy``, ...) promotes a uint operand to float32 first, as torch does
(a native cast). ``mul`` and ``bitwise_and``/``or``/``xor`` of same-width unsigned operands are computed on the
signed view of the same bits: products and bit operations agree modulo ``2^bits``, so the bits of the result
are the unsigned result's (uint64 products go through int64's range-checked multiply). Other ops (``add``,
comparisons but ``eq``/``ne``, ...) have no CPU kernel for these dtypes: declined, so torch raises its error.

Example:
    >>> a = torch.tensor([3, 60000], dtype=torch.uint16, device="trn")  # doctest: +SKIP
    >>> (a * 2).cpu()  # doctest: +SKIP
    tensor([    6, 54464], dtype=torch.uint16)
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from trnlang.device import decline

__all__ = ["WIDE_UNSIGNED", "has_wide_unsigned", "run_unsigned"]

#: torch's unsigned dtypes wider than a byte, and the signed dtype of the same width.
WIDE_UNSIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
_BITS_SAFE = ("mul", "bitwise_and", "bitwise_or", "bitwise_xor")


def has_wide_unsigned(*vs: Any) -> bool:
    """Some operand is a uint16/32/64 tensor."""
    return any(isinstance(v, torch.Tensor) and v.dtype in WIDE_UNSIGNED for v in vs)


def _signed_number(v: Any, bits: int) -> Any:
    """A Python integer as the signed value of the same ``bits`` low bits (other numbers as they are)."""
    if isinstance(v, bool) or not isinstance(v, int):
        return v
    v %= 1 << bits
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def run_unsigned(run: Callable[..., Any], op: str, self: Any, other: Any, out: torch.Tensor | None,
                 rdt: torch.dtype | None, **kw: Any) -> Any:
    """``run(op, self, other, out, rdt=..., **kw)`` (the binary launcher) for operands holding a uint16/32/64
    tensor: float results from float32 casts; ``mul`` and bit operations on the signed views."""
    try:
        common = torch.result_type(self, other)
    except (RuntimeError, TypeError):
        return decline("operands torch cannot promote: torch raises")
    want = rdt or common
    if want.is_floating_point:  # a float result (true division, xlogy, ...): uint operands as float32
        a, b = (v.to(torch.float32) if isinstance(v, torch.Tensor) and v.dtype in WIDE_UNSIGNED else v
                for v in (self, other))
        return run(op, a, b, out, rdt=rdt, **kw)
    signed = WIDE_UNSIGNED.get(common)
    if op not in _BITS_SAFE or signed is None or want != common or not all(
            not isinstance(v, torch.Tensor) or v.dtype == common for v in (self, other)) \
            or (out is not None and out.dtype != common):
        return decline("this op on uint16/32/64 (the CPU has no kernel for it, or mixes other dtypes): torch "
                       "raises or promotes")
    bits = 8 * common.itemsize
    a, b = (v.view(signed) if isinstance(v, torch.Tensor) else _signed_number(v, bits) for v in (self, other))
    r = run(op, a, b, None if out is None else out.view(signed), rdt=signed, **kw)
    if r is NotImplemented:
        return r
    return r.view(common) if out is None else out
