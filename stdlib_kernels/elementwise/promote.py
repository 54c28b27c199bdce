"""Integer and bool inputs of ops torch computes in the default float dtype (``sin``, ``exp``, ``erf``, the
Bessel and ``special_*`` functions, ...): one shared rule instead of a dtype list per op.

torch promotes an integral or bool ``self`` of these ops to the default dtype (float32 here) and computes
there; we do the same on the device: a native cast (int64 included: its cast reads both int32 words), then the
op's float32 kernel. Declined when the default dtype is not float32 (torch would compute in float64).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from stdlib_kernels import _util as U
from trnlang.device import decline

#: integral and bool dtypes torch promotes to the default float dtype for float-valued ops.
INT_LIKE = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.uint16, torch.uint32,
            torch.uint64)


def promotes(x: Any) -> bool:
    """Whether ``x`` is an integral/bool ``trn`` tensor that a float-valued op must promote first.

    Example:
        >>> import torch, trnlang  # doctest: +SKIP
        >>> promotes(torch.ones(2, dtype=torch.int64, device="trn"))  # doctest: +SKIP
        True
    """
    return U.is_trn(x) and x.dtype in INT_LIKE


def promoting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap the unary lowering ``fn(self, *, out=None, **kw)`` so integral/bool inputs run as float32 copies.

    Example:
        >>> lower = promoting(lambda self, *, out=None: torch.sin(self))  # doctest: +SKIP
        >>> lower(torch.arange(3, device="trn")).dtype  # doctest: +SKIP
        torch.float32
    """
    def lower(self: Any, *args: Any, **kw: Any) -> Any:
        if promotes(self):
            if torch.get_default_dtype() != torch.float32:
                return decline("an integer input promoted to a default dtype other than float32")
            self = self.to(torch.float32)
        return fn(self, *args, **kw)

    lower.__name__ = getattr(fn, "__name__", "lower")
    lower.__doc__ = fn.__doc__
    return lower


def promoting_binary(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap the binary float-valued lowering ``fn(self, other, *, out=None)`` (``atan2``, ``special_zeta``) so
    integral/bool ``trn`` operands are cast to torch's result dtype, or to float32 when both are integral.

    Example:
        >>> lower = promoting_binary(lambda a, b, *, out=None: torch.atan2(a, b))  # doctest: +SKIP
        >>> lower(torch.arange(3, device="trn"), torch.ones(3, device="trn", dtype=torch.int32)).dtype  # doctest: +SKIP
        torch.float32
    """
    def lower(self: Any, other: Any, *args: Any, **kw: Any) -> Any:
        if promotes(self) or promotes(other):
            try:
                rdt = torch.result_type(self, other)
            except (RuntimeError, TypeError):
                return decline("operands torch cannot promote: torch raises")
            if rdt.is_complex:
                return decline("a complex operand")
            if not rdt.is_floating_point:
                if torch.get_default_dtype() != torch.float32:
                    return decline("integer operands promoted to a default dtype other than float32")
                rdt = torch.float32
            self = self.to(rdt) if promotes(self) else self
            other = other.to(rdt) if promotes(other) else other
        return fn(self, other, *args, **kw)

    lower.__name__ = getattr(fn, "__name__", "lower")
    lower.__doc__ = fn.__doc__
    return lower
