"""Products over dims (``prod``, ``prod.dim_int``) in every dtype the device computes.

- float32/bfloat16/float16: the fp32 row-reduction kernels of :mod:`~stdlib_kernels.reduction.reduce`.
- integer and bool inputs (result int64, or the ``dtype=`` given): the int32 row kernels give the product
  modulo 2^32 exactly (int32 multiplies wrap), which is torch's answer for results of 32 bits or fewer. For int64
  results the fp32 product supplies the high word (:func:`_int64_from`): below ``2^24`` in magnitude it is exact
  by itself (with no zero factor every partial product, in any grouping, is at most the final magnitude, all
  factors being integers of magnitude >= 1, so no step rounds; a zero factor makes it an exact 0), and below
  ``2^52 / C`` (``C`` factors) it is close enough to pick the high word. Larger int64 products (torch wraps them
  modulo ``2^64``) are declined with that reason.
- complex64: a pairwise tree of complex multiplications over the ``[R, C]`` rows (``log2 C`` native
  elementwise steps, each halving the columns), as accurate as the CPU's sequential product or better.

Example:
    >>> x = torch.tensor([[2, -3, 4], [0, 7, 9]]).to("trn")            # doctest: +SKIP
    >>> x.prod(1).cpu(), x.prod().cpu()                                 # doctest: +SKIP
    (tensor([-24, 0]), tensor(0))
"""

from __future__ import annotations

from typing import Any

import torch

from stdlib_kernels import _util as U
from stdlib_kernels.reduction import reduce as R
from trnlang.device import decline, lowering

__all__ = ["prod_dim", "prod_all", "EXACT"]

#: products of integers below this magnitude are exact in fp32 (its 24-bit significand)
EXACT = float(2**24)
_INTS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_DTYPES = (*U.FLOAT_DTYPES, *_INTS, torch.complex64)


def _result_dtype(self: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    """torch's result dtype: ``dtype=`` if given, int64 for integer/bool inputs, else the input's."""
    if dtype is not None:
        return dtype
    return torch.int64 if self.dtype in _INTS else self.dtype


def _prod(self: Any, dim: int | None, keepdim: bool, dtype: torch.dtype | None) -> Any:
    if not U.is_trn(self) or self.is_conj() or self.is_neg():
        return decline("self not a trn tensor, or a conj/neg bit")
    odt = _result_dtype(self, dtype)
    if self.dtype not in _DTYPES or odt not in _DTYPES:
        return decline("a dtype this product has no kernel for")
    red = R._dims(self, None if dim is None else [dim])
    if red is None:
        return decline("dims out of range: torch raises")
    # torch converts the input to dtype= first (an int64 result of narrower integers needs no conversion)
    x = self if odt == self.dtype or (odt == torch.int64 and self.dtype in _INTS) else self.to(odt)
    if odt == torch.complex64:
        return _complex_prod(x, red, keepdim)
    if odt in U.FLOAT_DTYPES:
        return R._simple(x, red, keepdim, odt, R.Op.PROD, empty_value=1.0)
    # integer result: the exact product modulo 2^32 (int32 multiplies wrap) is torch's answer for results of 32
    # bits or fewer; int64 results also need the high word, from the fp32 product's magnitude
    m = R._simple(x.to(torch.int32), red, keepdim, torch.int32, R.Op.PROD, empty_value=1, ints=True)
    if m is NotImplemented or odt != torch.int64:
        return m if m is NotImplemented else m.to(odt)
    a = R._simple(x.to(torch.float32), red, keepdim, torch.float32, R.Op.PROD, empty_value=1.0)
    return _int64_from(m, a, max(1, U.prod([x.shape[d] for d in red])))


def _int64_from(m: torch.Tensor, a: torch.Tensor, c: int) -> Any:
    """The int64 products whose low words are ``m`` (int32, exact modulo 2^32) and whose fp32 values are ``a``.

    ``a`` is within a relative ``c * 2^-23`` of the exact product ``P`` (``c`` factors, each multiply rounding by at
    most 2^-24), so where ``|a| < 2^52 / c`` it is within 2^29 of ``P`` and the high word ``k = round((a - m) / 2^32)``
    is exact; ``P = k * 2^32 + m``. Larger products are declined (torch wraps them modulo 2^64).
    """
    if m.numel() == 0:
        return m.to(torch.int64)
    a_max = float(a.abs().amax().item())  # NaN (inf * 0) and inf fail the test below
    if not a_max < 2.0**52 / c:
        return decline("an int64 product of magnitude 2^52 / (factors) or more (torch wraps it modulo 2^64)")
    if a_max < EXACT:
        return a.to(torch.int64)  # below 2^24 the fp32 product is exact (see the module docstring)
    hi = torch.round((a - m.to(torch.float32)) * (1.0 / 2**32)).to(torch.int32) - (m < 0).to(torch.int32)
    out = torch.empty(m.shape, dtype=torch.int64, device="trn")
    words = out.view(-1).view(torch.int32).view(-1, 2)  # (low, high) int32 words of each int64
    words[:, 0] = m.reshape(-1)
    words[:, 1] = hi.reshape(-1)
    return out


def _complex_prod(x: torch.Tensor, red: list[int], keepdim: bool) -> torch.Tensor:
    """The complex64 product over ``red``: rows ``[R, C]``, then pairwise halving with native complex multiplies."""
    shape = R._out_shape(x, red, keepdim)
    kept = [d for d in range(x.dim()) if d not in red]
    r = U.prod([x.shape[d] for d in kept])
    c = U.prod([x.shape[d] for d in red])
    if r == 0 or c == 0:
        return torch.ones(shape, dtype=torch.complex64, device="trn")
    y = x.permute(kept + red).reshape(r, c) if x.dim() else x.reshape(1, 1)
    while y.shape[1] > 1:
        n = y.shape[1]
        h = n // 2
        z = y[:, :h] * y[:, h:2 * h]
        if n % 2:  # the odd column joins the first product
            z[:, :1] = z[:, :1] * y[:, n - 1:]
        y = z
    return y.reshape(shape)


@lowering("aten::prod.dim_int", dtypes=None)
def prod_dim(self: torch.Tensor, dim: int, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Any:
    """Product over one dim (float: fp32 on chip; integers: exact, int64 below 2^52 / C; complex64: pairwise)."""
    return _prod(self, dim, keepdim, dtype)


@lowering("aten::prod", dtypes=None)
def prod_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> Any:
    """Product of all elements."""
    return _prod(self, None, False, dtype)
