"""Helpers shared by the lowerings: operand classification, strided views, scalars as device tensors.

Lowerings only use torch's public API on ``trn`` tensors (views are ``torch.as_strided``) and
launch kernels like a user would.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Sequence

import torch

from trnlang.device import memory

#: Tensor dtypes the elementwise kernels load and store natively.
NATIVE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Free-dimension chunk (elements per partition per instruction) of streaming kernels.
FREE_CHUNK = 2048

_scalars: OrderedDict[tuple[Any, ...], torch.Tensor] = OrderedDict()


def scalar_tensor(value: Any, dtype: torch.dtype) -> torch.Tensor:
    """A cached ``[1, 1]`` device tensor holding ``value`` (never mutated; kernels only read it).

    Scalars are runtime operands, not compile-time constants, so a new value (an optimizer's
    step size, say) does not recompile the kernel.
    """
    key = (type(value), value, dtype) if not (isinstance(value, float) and math.isnan(value)) else ("nan", dtype)
    t = _scalars.get(key)
    if t is None:
        t = torch.full((1, 1), value, dtype=dtype, device="trn")
        _scalars[key] = t
        if len(_scalars) > 512:
            _scalars.popitem(last=False)
    else:
        _scalars.move_to_end(key)
    return t


def is_trn(x: Any) -> bool:
    """A tensor on the ``trn`` device."""
    return isinstance(x, torch.Tensor) and x.device.type == "trn"


def scalar_value(x: Any) -> Any:
    """The Python value of a number or a CPU 0-dim tensor; None for anything else."""
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() == 0:
        return x.item()
    return None


def has_internal_overlap(t: torch.Tensor) -> bool:
    """More than one element of ``t`` maps to the same memory (expanded dims)."""
    return any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride()))


def byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[start, end) addresses ``t`` can touch."""
    if t.numel() == 0:
        return (t.data_ptr(), t.data_ptr())
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return (t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size())


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Identical views (same address, sizes, strides, dtype)."""
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype)


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The byte ranges of two tensors intersect (a conservative aliasing test)."""
    sa, ea = byte_span(a)
    sb, eb = byte_span(b)
    return sa < eb and sb < ea


def out_strides_like(shape: Sequence[int], operands: Sequence[torch.Tensor]) -> tuple[int, ...] | None:
    """Strides of a new output: those of the first dense full-shape operand, else None (contiguous)."""
    for t in operands:
        if tuple(t.shape) == tuple(shape) and not t.is_contiguous() and _dense(t):
            return tuple(t.stride())
    return None


def _dense(t: torch.Tensor) -> bool:
    dims = sorted((st, n) for n, st in zip(t.shape, t.stride()) if n != 1)
    expected = 1
    for st, n in dims:
        if st != expected:
            return False
        expected *= n
    return True


def new_output(shape: Sequence[int], dtype: torch.dtype, like: Sequence[torch.Tensor] = ()) -> torch.Tensor:
    """Allocate an output on ``trn`` (strides follow a dense operand, like TensorIterator)."""
    st = out_strides_like(shape, like)
    if st is None:
        return memory.empty(shape, dtype)  # the device allocator directly: no dispatcher round trip
    return memory.empty_strided(shape, st, dtype)


def broadcast_strides(t: torch.Tensor, shape: Sequence[int]) -> list[int]:
    """Strides of ``t`` expanded to ``shape`` (0 along broadcast dims)."""
    r = len(shape)
    pad = r - t.dim()
    out = [0] * r
    for i, (n, st) in enumerate(zip(t.shape, t.stride())):
        out[pad + i] = st if n != 1 else 0
    return out


def coalesce(shape: Sequence[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent dims that are contiguous with each other in every operand; drop size-1 dims."""
    dims = [i for i, n in enumerate(shape) if n != 1]
    sh = [int(shape[i]) for i in dims]
    sts = [[s[i] for i in dims] for s in strides]
    i = len(sh) - 2
    while i >= 0:
        if all(s[i] == s[i + 1] * sh[i + 1] for s in sts):
            sh[i] *= sh[i + 1]
            for s in sts:
                s[i] = s[i + 1]
                del s[i + 1]
            del sh[i + 1]
        i -= 1
    return sh, sts


def view(t: torch.Tensor, shape: Sequence[int], strides: Sequence[int], offset: int) -> torch.Tensor:
    """A strided view of ``t``'s storage (public API: ``torch.as_strided``)."""
    return torch.as_strided(t, tuple(shape), tuple(strides), offset)


def as_1x1(t: torch.Tensor) -> torch.Tensor:
    """A one-element device tensor seen as ``[1, 1]``."""
    if t.dim() == 2:
        return t
    return torch.as_strided(t, (1, 1), (1, 1), t.storage_offset())


def prod(xs: Sequence[int]) -> int:
    """Product of ints (1 for an empty sequence)."""
    r = 1
    for x in xs:
        r *= int(x)
    return r


def row_views(ts: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Views of same-shaped tensors as ``[R, L]`` or ``[A, R, L]`` (the last dim kept as is).

    Leading dims are merged where every tensor allows it; more than two remaining leading dims
    are looped over on the host. Returns one list of views (one per tensor) per launch.
    """
    shape = tuple(ts[0].shape)
    last = shape[-1]
    lead_shape = shape[:-1]
    sh, sts = coalesce(lead_shape, [list(t.stride()[:-1]) for t in ts])
    lasts = [t.stride()[-1] for t in ts]
    if not sh:
        sh, sts = [1], [[0] for _ in ts]
    launches = []
    outer, inner = sh[:-2], sh[-2:]
    import itertools

    for idx in itertools.product(*[range(n) for n in outer]):
        vs = []
        for k, t in enumerate(ts):
            off = t.storage_offset() + sum(i * sts[k][d] for d, i in enumerate(idx))
            ist = sts[k][len(outer):]
            vs.append(view(t, (*inner, last), (*ist, lasts[k]), off))
        launches.append(vs)
    return launches
