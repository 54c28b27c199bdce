"""complex64 division on real/imaginary planes (``aten::div.Tensor`` with a complex operand).

Smith's scaled division, as ``c10::complex`` divides: with ``|c| >= |d|``, ``r = d / c``,
``s = 1 / (c + d r)``, ``(a + b i) / (c + d i) = ((a + b r) s) + ((b - a r) s) i`` (else the roles of ``c`` and ``d``
swap), so ``c^2 + d^2`` is never formed and cannot overflow; ``0 / 0`` gives ``a / |c|`` and ``b / |d|`` (infinities
and NaN), as torch. Real operands (tensors, numbers) promote to complex64 with a zero imaginary part. Every step is
a native elementwise op on float32 planes.

Example:
    >>> import torch
    >>> z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64, device="trn")
    >>> torch.div(z, 2j).cpu()
    tensor([ 1.-0.5000j, -2.-1.5000j])
"""

from __future__ import annotations

from typing import Any

import torch

from stdlib_kernels import _util as U
from trnlang.device import decline

__all__ = ["complex_div"]


def complex_div(x: Any, y: Any, out: torch.Tensor | None = None) -> Any:
    """``x / y`` with a complex64 result (``NotImplemented``, a decline, for anything else: complex128, a conj/neg
    view, an ``out=`` that is not a complex64 trn tensor of the result's shape)."""
    from stdlib_kernels.elementwise.compare import promoted_planes

    try:
        rdt = torch.result_type(x, y)
    except (RuntimeError, TypeError):
        return decline("operands with no common result dtype")
    if rdt != torch.complex64 or not (U.is_trn(x) or U.is_trn(y)):
        return decline("a result dtype other than complex64, or no trn operand")
    px, py = promoted_planes(x), promoted_planes(y)
    if px is None or py is None:
        return decline("an operand that is not complex64/real on trn or a number, or a conj/neg view")
    a, b, c, d = px[..., 0], px[..., 1], py[..., 0], py[..., 1]
    ac, ad = c.abs(), d.abs()
    wide_c = ac >= ad
    rat = torch.where(wide_c, d / c, c / d)
    scl = 1.0 / torch.where(wide_c, c + d * rat, d + c * rat)
    re = torch.where(wide_c, a + b * rat, a * rat + b) * scl
    im = torch.where(wide_c, b - a * rat, b * rat - a) * scl
    zero = (ac == 0) & (ad == 0)
    re = torch.where(zero, a / ac, re)
    im = torch.where(zero, b / ad, im)
    res = torch.view_as_complex(torch.stack((re, im), -1))
    if out is None:
        return res
    if not (U.is_trn(out) and out.dtype == torch.complex64 and out.shape == res.shape):
        return decline("out= not a complex64 trn tensor of the result's shape")
    return out.copy_(res)
