"""Norms and log-sum-exp over dims: ``linalg.vector_norm`` (any real ``ord``) and ``logsumexp``, on the fp32 row
kernels of :mod:`~stdlib_kernels.reduction.reduce` (complex64 inputs: :mod:`~stdlib_kernels.reduction.complex_planes`).

Example:
    >>> x = torch.randn(64, 100).to("trn")                                          # doctest: +SKIP
    >>> torch.linalg.vector_norm(x, 3, 1), torch.logsumexp(x, 1)                    # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from stdlib_kernels import _util as U
from stdlib_kernels.reduction import complex_planes
from stdlib_kernels.reduction import reduce as R
from trnlang.device import decline, lowering

__all__ = ["vector_norm", "logsumexp"]


@lowering("aten::linalg_vector_norm", dtypes=R._C64)
def vector_norm(self: torch.Tensor, ord: Any = 2, dim: Sequence[int] | None = None, keepdim: bool = False, *,
                dtype: torch.dtype | None = None) -> Any:
    """``linalg.vector_norm`` for any real ``ord`` (2, 1, inf, -inf, 0, general p); fp32 on chip."""
    if self.dtype == torch.complex64:
        return complex_planes.norm_of_abs(self, ord, dim, keepdim, dtype)
    odt = R._float_out(self, dtype)
    if odt is None or isinstance(ord, complex) or (isinstance(ord, torch.Tensor)):
        return decline("a non-float input or dtype=, or a complex/tensor ord")
    o = float(ord)
    if math.isnan(o):
        return decline("ord is NaN")
    if self.numel() == 0 and (o < 0 or o == math.inf):  # no identity: torch raises unless no dim reduced is empty
        try:
            meta = torch.linalg.vector_norm(torch.empty(self.shape, dtype=self.dtype, device="meta"), ord, dim,
                                            keepdim, dtype=dtype)
        except RuntimeError:
            meta = None
        if meta is None or meta.numel() != 0:
            return decline("a negative or infinite ord over an empty dim: torch raises")
        return torch.empty(meta.shape, dtype=meta.dtype, device="trn")
    if o == math.inf:
        return R._simple(self, dim, keepdim, odt, R._MAX, pre=R._ABS)
    if o == -math.inf:
        return R._simple(self, dim, keepdim, odt, R._MIN, pre=R._ABS)
    if o == 0:
        return R._simple(self, dim, keepdim, odt, R._SUM, pre=R._NZ, empty_value=0.0)
    if o == 1:
        return R._simple(self, dim, keepdim, odt, R._SUM, pre=R._ABS, empty_value=0.0)
    if o == 2:
        return R._simple(self, dim, keepdim, odt, R._SUM, pre=R._SQ, post=R._SQRT, empty_value=0.0)
    return R._simple(self, dim, keepdim, odt, R._SUM, pre=R._POW, post=R._ROOT, p=o, empty_value=0.0)


@lowering("aten::logsumexp", dtypes=None)
def logsumexp(self: torch.Tensor, dim: Sequence[int], keepdim: bool = False) -> Any:
    """``log(sum(exp(x)))`` over ``dim``, stabilised by the row max (inf-safe as torch is)."""
    if self.dtype == torch.complex64:
        return complex_planes.logsumexp_planes(self, dim, keepdim)
    if self.dtype not in U.FLOAT_DTYPES:
        if self.is_floating_point() or self.is_complex():
            return decline("a float64/complex128 (or other unsupported float) input")
        self = self.to(torch.float32)  # torch: integral (and bool) inputs give the default float dtype
    if isinstance(dim, int):
        dim = [dim]
    if self.dim() and not dim:
        dim = list(range(self.dim()))
    return R._simple(self, dim, keepdim, self.dtype, R._LSE, empty_value=-math.inf)
