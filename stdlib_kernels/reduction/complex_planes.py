"""complex64 reductions on real/imaginary planes: ``sum``, ``mean``, ``var``/``std`` (+ ``_mean``) and
``linalg.vector_norm``, ``logsumexp``.

A complex64 tensor viewed as real (``torch.view_as_real``: a trailing dim of 2 float32 values) reduces with the
float32 row kernels over the same dims: the sum (and mean) of complex numbers is the sum of each plane; the
variance ``mean |z - mean z|^2`` is the real plane's variance plus the imaginary one's (same correction), a real
result as torch gives; a vector norm of complex values is the norm of their magnitudes (``abs``, native);
``logsumexp`` sums ``exp(re - max re) * (cos im, sin im)`` per plane and takes the complex log of the sum.
:mod:`~stdlib_kernels.reduction.reduce` routes complex64 calls here.

Example:
    >>> z = torch.randn(4, 5, dtype=torch.complex64).to("trn")          # doctest: +SKIP
    >>> z.sum(1), z.mean(), z.var(0), torch.linalg.vector_norm(z, 1)     # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

import torch

from stdlib_kernels import _util as U
from stdlib_kernels.reduction import reduce as R
from trnlang.device import decline

__all__ = ["sum_planes", "var_planes", "norm_of_abs", "logsumexp_planes"]


def _planes(self: Any, dim: Any, keepdim: bool) -> tuple[torch.Tensor, list[int], bool] | None:
    """``(view_as_real(x), reduced dims, keepdim)`` with a 0-dim ``x`` as one element; None for bad dims."""
    if self.dim() == 0:
        if dim is not None and not isinstance(dim, int) and len(dim) == 0:
            dim = None
        if dim is not None and any(d not in (0, -1) for d in ([dim] if isinstance(dim, int) else dim)):
            return None
        return torch.view_as_real(self.reshape(1)), [0], False  # the result is 0-dim either way
    red = R._dims(self, dim)
    return None if red is None else (torch.view_as_real(self), red, keepdim)


def _usable(self: Any) -> bool:
    return U.is_trn(self) and self.dtype == torch.complex64 and not self.is_conj() and not self.is_neg()


def sum_planes(self: Any, dim: Any, keepdim: bool, dtype: torch.dtype | None, mean: bool = False) -> Any:
    """Sum (or mean) of a complex64 tensor over ``dim``: each plane reduced by the float32 kernels."""
    if not _usable(self) or dtype not in (None, torch.complex64):
        return decline("not a complex64 trn tensor (or a conj/neg bit), or a dtype= other than complex64")
    got = _planes(self, dim, keepdim)
    if got is None:
        return decline("dims out of range or repeated: torch raises")
    r, red, keep = got
    out = R._simple(r, red, keep, torch.float32, R.Op.SUM, empty_value=0.0)
    if out is NotImplemented:
        return out
    if mean:  # torch divides the complex sum by complex(n): (re + im * 0) / n, (im - re * 0) / n (inf/NaN spread)
        c = U.prod([r.shape[d] for d in red])
        inv = 1.0 / c if c else math.inf
        re, im = out[..., 0], out[..., 1]
        out = torch.stack(((re + im * 0.0) * inv, (im - re * 0.0) * inv), -1)
    return torch.view_as_complex(out)


def var_planes(self: Any, dim: Any, correction: Any, keepdim: bool, std: bool, with_mean: bool) -> Any:
    """var/std (+ mean) of a complex64 tensor: the planes' variances added (a float32 result, as torch's)."""
    if not _usable(self):
        return decline("not a complex64 trn tensor, or a conj/neg bit")
    got = _planes(self, dim, keepdim)
    if got is None:
        return decline("dims out of range or repeated: torch raises")
    r, red, keep = got
    res = R._var(r, red, correction, keep, False, with_mean)
    if res is NotImplemented:
        return res
    v, m = res if with_mean else (res, None)
    v = v.sum(-1)  # var(re) + var(im)
    if std:
        v = v.sqrt()
    return (v, torch.view_as_complex(m)) if m is not None else v


def norm_of_abs(self: Any, ord: Any, dim: Any, keepdim: bool, dtype: torch.dtype | None) -> Any:
    """``linalg.vector_norm`` of complex64 values: the norm of their magnitudes (a float32 result)."""
    if not _usable(self) or dtype not in (None, torch.complex64):
        return decline("not a complex64 trn tensor (or a conj/neg bit), or a dtype= other than complex64")
    from stdlib_kernels.reduction import norms

    return norms.vector_norm(self.abs(), ord, dim, keepdim)


def logsumexp_planes(self: Any, dim: Any, keepdim: bool) -> Any:
    """``log(sum(exp(z)))`` of complex64 values over ``dim``, stabilised by the largest real part: with ``m`` that
    maximum, ``s = sum(exp(re - m) * (cos im + i sin im))`` on the planes, and the result is
    ``log|s| + m + i atan2(s.imag, s.real)`` (the principal log, as torch's)."""
    if not _usable(self):
        return decline("not a complex64 trn tensor, or a conj/neg bit")
    dims = [dim] if isinstance(dim, int) else list(dim)
    if self.dim() and not dims:
        dims = list(range(self.dim()))
    got = _planes(self, dims, keepdim)
    if got is None or self.numel() == 0:
        return decline("dims out of range or repeated, or an empty input")
    r, red, keep = got
    re, im = r[..., 0], r[..., 1]
    m = re.amax(red, keepdim=True)
    m = torch.where(m.isinf(), torch.zeros_like(m), m)  # all -inf (or an inf) rows: no shift, as torch's
    e = (re - m).exp()
    s_re = (e * im.cos()).sum(red, keepdim=keep)
    s_im = (e * im.sin()).sum(red, keepdim=keep)
    m = m if keep else m.reshape(s_re.shape)
    mag = torch.sqrt(s_re * s_re + s_im * s_im)
    return torch.complex(mag.log() + m, torch.atan2(s_im, s_re))
