"""Device-to-device copies with casts (``aten::copy_``): a load and a store per tile.

Copies that involve the host (CPU <-> trn), complex/conjugated views or dtypes the kernels do
not handle go to the device's ``_copy_from`` plumbing (host memmove / CPU views: the simulated
DMA).
"""

from __future__ import annotations

from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels._util import shape3 as _shape3
from stdlib_kernels.elementwise.pointwise import at as _at
from trnlang.device import lowering


@trn.kernel
def cast_copy(x, out):
    """``out[...] = x`` over 1- to 3-D views (the store rounds to ``out``'s dtype)."""
    a, n, d = _shape3(out)
    p = min(128, n)
    f = min(d, U.FREE_CHUNK)
    ragged = n % p != 0 or d % f != 0
    for b in tl.affine_range(a):
        for i in tl.affine_range(tl.cdiv(n, p)):
            rows = i * p + tl.arange(p)[:, None]
            for j in tl.affine_range(tl.cdiv(d, f)):
                cols = j * f + tl.arange(f)[None, :]
                m = ((rows < n) & (cols < d)) if ragged else None
                tl.store(_at(out, b, rows, cols), tl.load(_at(x, b, rows, cols), mask=m), mask=m)


def _kernel_ok(self: torch.Tensor, src: torch.Tensor, both_trn: bool, overlap: bool) -> bool:
    if not both_trn:
        return False
    if self.dtype not in U.NATIVE_DTYPES or src.dtype not in U.NATIVE_DTYPES:
        return False
    if src.dtype.is_floating_point and not self.dtype.is_floating_point:
        return False  # float -> int truncation: leave it to the host copy
    if self.is_conj() or src.is_conj() or self.is_neg() or src.is_neg() or U.has_internal_overlap(self):
        return False
    try:
        if torch.broadcast_shapes(src.shape, self.shape) != self.shape:
            return False
    except RuntimeError:
        return False
    return not overlap


@lowering("aten::copy_", kind="kernel", variants=False, device_check=False)
def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> Any:
    """``self.copy_(src)``: a kernel between device tensors, else the device's host copy."""
    both_trn = U.is_trn(self) and U.is_trn(src)
    if both_trn and U.same_view(self, src) and not (self.is_conj() ^ src.is_conj()) \
            and not (self.is_neg() ^ src.is_neg()):
        return self
    if self.numel() == 0:
        return self
    overlap = both_trn and U.overlaps(self, src)
    if overlap and U.overlap_status(self, src) == "partial":  # as CPU: x[1:].copy_(x[:-1]) raises
        raise RuntimeError(U.OVERLAP_MSG)
    if not _kernel_ok(self, src, both_trn, overlap):
        return torch.ops.aten._copy_from(src, self, non_blocking)
    shape = tuple(self.shape)
    strides = [U.broadcast_strides(src, shape), list(self.stride())]
    sh, sts = U.coalesce(shape, strides)
    if len(sh) > 3:
        return torch.ops.aten._copy_from(src, self, non_blocking)
    # one long run becomes [rows, cols] pieces, and big copies one launch per thread
    parts = U.split_parts(U.launch_parts(sh, sts), self.numel())
    U.run_parallel([U.launch(cast_copy, U.piece(src, ps, pst[0], src.storage_offset() + po[0]),
                             U.piece(self, ps, pst[1], self.storage_offset() + po[1])) for ps, pst, po in parts])
    return self
