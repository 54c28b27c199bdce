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
from stdlib_kernels.elementwise.pointwise import contiguous_calls, flat_kernel, flat_ok, rows_twin, spaces
from trnlang.device import lowering


@trn.kernel
def cast_copy(x, out, flat=False):
    """``out[...] = x`` over 1- to 3-D views (the store rounds to ``out``'s dtype). ``flat``: both are contiguous
    1-D pieces (``elementwise.flat.flat_tiles``, through :data:`cast_copy_flat`)."""
    for acc, m in spaces(out, flat):
        tl.store(acc(out), tl.load(acc(x), mask=m), mask=m)


#: :func:`cast_copy` for flat launches: one variant for every element count.
cast_copy_flat = flat_kernel(cast_copy, rows=("x", "out"))


def _kernel_ok(self: torch.Tensor, src: torch.Tensor, both_trn: bool, overlap: bool) -> bool:
    if not both_trn:
        return False
    if self.dtype not in U.NATIVE_DTYPES or src.dtype not in U.NATIVE_DTYPES:
        return False
    if src.dtype.is_floating_point and not self.dtype.is_floating_point:
        return False  # float -> int truncation: leave it to the host copy
    if self.is_conj() or src.is_conj() or self.is_neg() or src.is_neg() or U.has_internal_overlap(self):
        return False
    if U.broadcast_shape(src.shape, self.shape) != tuple(self.shape):
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
    if flat_ok((src, self), shape):  # one run of elements: one variant for every length
        U.run_parallel([U.launch(k, s, d, mode) for k, (s, d), mode in contiguous_calls(cast_copy, (src, self), shape)])
        return self
    strides = [U.broadcast_strides(src, shape), list(self.stride())]
    sh, sts = U.coalesce(*U.order_dims(shape, strides))
    if len(sh) > 3:
        if self.dtype != src.dtype and (self.element_size() == 8 or src.element_size() == 8):
            return torch.ops.aten._copy_from(src, self, non_blocking)
        # 4 or more dims: the movement kernel's 4-D windows (a host copy here would be torch's CPU copy, whose
        # OpenMP threads then spin on the cores our next kernels' threads run on)
        from stdlib_kernels.tensor.movement import move

        move(self, src if tuple(src.shape) == shape else src.expand(shape))
        return self
    # one long run becomes [rows, cols] pieces, and big copies one launch per thread
    parts = U.split_parts(U.launch_parts(sh, sts), self.numel())
    twin2 = rows_twin(cast_copy)  # 2-D pieces (strided rows): the row count a runtime size
    U.run_parallel([U.launch(twin2 if twin2 is not None and len(ps) == 2 else cast_copy,
                             U.piece(src, ps, pst[0], src.storage_offset() + po[0]),
                             U.piece(self, ps, pst[1], self.storage_offset() + po[1]),
                             *(("rows",) if twin2 is not None and len(ps) == 2 else ())) for ps, pst, po in parts])
    return self
