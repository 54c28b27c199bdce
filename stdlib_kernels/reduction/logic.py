"""``all`` / ``any`` (whole tensor, one dim, several dims, ``out=``) and ``count_nonzero``, on the fp32 row kernels of
:mod:`~stdlib_kernels.reduction.reduce`: an element's truth is ``x != 0`` (NaN counts), ``all`` the row minimum and
``any`` the row maximum of it. int64 and complex64 elements are nonzero when either int32 word / either plane is.

Example:
    >>> x = torch.tensor([[0, 3], [0, 0]]).to("trn")                           # doctest: +SKIP
    >>> x.any(1).cpu(), x.all().cpu(), torch.count_nonzero(x, 0).cpu()          # doctest: +SKIP
    (tensor([ True, False]), tensor(False), tensor([0, 1]))
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from stdlib_kernels import _util as U
from stdlib_kernels.reduction import reduce as R
from trnlang.device import decline, lowering
from trnlang.device.registry import check_dims, scalar_type_name

__all__ = ["count_nonzero", "count_nonzero_dims"]


_LOGIC_DTYPES = (*U.FLOAT_DTYPES, torch.int32, torch.bool, *R._SMALL_INTS)


def _logic(self: Any, dim: Any, keepdim: bool, op: str) -> Any:
    """all = min over (x != 0), any = max over (x != 0), as fp32 0/1 stored into a bool tensor."""
    if U.is_trn(self) and (self.dtype == torch.int64 or self.dtype == torch.complex64 and not self.is_conj()):
        if self.dtype == torch.complex64:  # nonzero = either plane nonzero
            words = torch.view_as_real(self)
        else:  # nonzero = either int32 word nonzero
            flat = self.contiguous().reshape(-1)  # one element may keep any stride: re-view it with stride 1
            words = U.view(flat, (flat.numel(),), (1,), flat.storage_offset()).view(torch.int32).view(*self.shape, 2)
        return _logic(_logic(words, [self.dim()], False, "any"), dim, keepdim, op)
    if not U.is_trn(self) or self.dtype not in _LOGIC_DTYPES:
        return decline("self not a trn tensor of a supported dtype")
    if isinstance(dim, int):
        dim = [dim]
    # dim=[] reduces nothing (torch: a no-op, the result is x != 0), unlike dim=None
    red = [] if dim is not None and len(dim) == 0 else R._dims(self, dim)
    if red is None:
        return decline("dims out of range or repeated: torch raises")
    if self.dim() == 0 and dim:
        red = []
    # torch keeps uint8 for all/any of uint8 (a legacy rule), bool otherwise
    out = torch.empty(R._out_shape(self, red, keepdim), dtype=torch.uint8 if self.dtype == torch.uint8 else torch.bool,
                      device="trn")
    r = U.prod([self.shape[d] for d in range(self.dim()) if d not in red])
    c = U.prod([self.shape[d] for d in red])
    if r == 0:
        return out
    if c == 0:
        return out.fill_(op == "all")
    self = R._widen(self)
    x2 = R._as_rows(self, red) if self.dim() else U.view(self, (1, 1), (1, 1), self.storage_offset())
    o2 = U.view(out, (r, 1), (1, 1), 0)
    R._launch(x2, o2, R._MIN if op == "all" else R._MAX, R._NZ, R._NO_POST, 1.0, 0.0, R._F32)
    return out


def _logic_into(self: Any, dim: Any, keepdim: bool, op: str, out: torch.Tensor | None) -> Any:
    """``all``/``any`` with an optional ``out=``, which must be bool or uint8 as on the CPU (torch casts into it
    and resizes it, warning when it had elements)."""
    if out is None:
        return _logic(self, dim, keepdim, op)
    if out.dtype not in (torch.bool, torch.uint8):
        raise RuntimeError(f"{op} only supports bool tensor for result, got: {scalar_type_name(out.dtype)}")
    r = _logic(self, dim, keepdim, op)
    if r is NotImplemented:
        return r
    U.resize_out(out, r.shape)
    return out.copy_(r)


def _logic_lowerings(op: str, which: str) -> None:
    """Register ``op`` (``all``/``any``: ``which`` element nonzero): whole tensor, one dim, several dims, ``out=``."""

    def whole(self: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
        return _logic_into(self, None, False, op, out)

    def one_dim(self: torch.Tensor, dim: int, keepdim: bool = False, *, out: torch.Tensor | None = None) -> Any:
        return _logic_into(self, dim, keepdim, op, out)

    def dims(self: torch.Tensor, dim: Sequence[int] | None = None, keepdim: bool = False, *,
             out: torch.Tensor | None = None) -> Any:
        return _logic_into(self, dim if dim is None or isinstance(dim, int) else list(dim), keepdim, op, out)

    whole.__doc__ = f"True when {which} element is nonzero."
    one_dim.__doc__ = f"``{op}`` along one dim."
    dims.__doc__ = f"``{op}`` along several dims."
    dts = (*_LOGIC_DTYPES, torch.int64, torch.complex64)
    lowering(f"aten::{op}", dtypes=dts)(whole)
    lowering(f"aten::{op}.dim", dtypes=dts)(one_dim)
    lowering(f"aten::{op}.dims", dtypes=dts)(dims)
    lowering(f"aten::{op}.dims_out", dtypes=dts, variants=False)(dims)  # all.out matches all.dims' names first


_logic_lowerings("all", "every")
_logic_lowerings("any", "some")


@lowering("aten::count_nonzero.dim_IntList", dtypes=(*_LOGIC_DTYPES, torch.int64, torch.complex64))
def count_nonzero_dims(self: torch.Tensor, dim: Sequence[int]) -> Any:
    """How many elements along ``dim`` (all dims for []) are nonzero, as int64 (torch: ``(x != 0).sum(dim)``)."""
    nz = _logic(self, [], False, "any")  # dim=[]: x != 0 elementwise
    return nz if nz is NotImplemented else R._sum(nz, list(dim), False, torch.int64)


@lowering("aten::count_nonzero", dtypes=(*_LOGIC_DTYPES, torch.int64, torch.complex64))
def count_nonzero(self: torch.Tensor, dim: int | None = None) -> Any:
    """``count_nonzero`` over one dim, or all of them."""
    if dim is not None and isinstance(self, torch.Tensor):
        check_dims(self.dim(), [dim], True)  # torch's errors (the registry checks int dims of listed ops only)
    return count_nonzero_dims(self, [] if dim is None else [dim])
