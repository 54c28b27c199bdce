"""Kernel arguments on the ``trn`` device: zero-copy views of simulated HBM for launches.

``args.describe`` calls :func:`describe_device_tensor` for torch tensors that are not on the CPU;
``args.alloc_like`` calls :func:`alloc_device` for outputs of kernels launched with device
tensors. The numpy view handed to the executor covers the tensor's own bytes in device memory,
with its real strides and storage offset, so kernels read and write device tensors in place.

The runtime does not import the device layer (``trnlang.device``, which sits above it): a ``trn``
tensor's untyped storage carries its memory block as ``_trn_block``, an object whose ``np_bytes()``
returns the block's bytes as a flat ``uint8`` array (the device memory protocol; the device layer's
``memory.HbmBlock`` implements it), and outputs are allocated through torch (``torch.empty(...,
device="trn")``), as a user would.

Example:
    >>> import torch, trnlang as trn, trnlang.language as tl
    >>> @trn.kernel
    ... def inc(x, out):
    ...     tl.store(out[0:1, 0:4], tl.load(x[0:1, 0:4]) + 1.0)
    >>> x = torch.zeros(1, 4, device="trn"); o = torch.empty_like(x)   # doctest: +SKIP
    >>> inc(x, o); o.cpu().tolist()                                     # doctest: +SKIP
    [[1.0, 1.0, 1.0, 1.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trnlang.frontend.errors import DTypeError, LaunchError
from trnlang.ir.nodes import HbmTensor, SourceLoc
from trnlang.ir.types import DType, to_dtype, torch_dtype

__all__ = ["describe_device_tensor", "alloc_device", "device_array", "set_foreign_storage_resolver"]

#: ``fn(storage) -> block or None``: the memory block of a ``trn`` storage the device layer did not make
#: (``torch.from_dlpack``, C++ ``from_blob``); set by the device layer when it registers
_FOREIGN: list[Any] = []


def set_foreign_storage_resolver(fn: Any) -> None:
    """Install ``fn(untyped_storage) -> block | None``, asked for ``trn`` storages without ``_trn_block``
    (memory made outside the device layer: DLPack capsules, C++ ``from_blob``); the device layer calls this
    when it registers.

    Example:
        >>> from trnlang.runtime.devices import set_foreign_storage_resolver
        >>> set_foreign_storage_resolver(lambda storage: None)   # doctest: +SKIP
    """
    _FOREIGN[:] = [fn]


def _check_device(t: Any, name: str) -> None:
    if t.device.type != "trn":
        raise LaunchError(f"argument {name!r} is on {t.device}; kernels take CPU, numpy or trn tensors")


def _block(t: Any, name: str | None = None) -> Any:
    """The memory block behind a ``trn`` tensor (the device memory protocol: ``np_bytes()``)."""
    st = t.untyped_storage()
    blk = getattr(st, "_trn_block", None)
    if blk is None and _FOREIGN:
        blk = _FOREIGN[0](st)
    if blk is None:
        what = f"argument {name!r}: this trn tensor" if name else "this trn tensor"
        raise LaunchError(f"{what} has no device memory attached")
    return blk


def device_array(t: Any) -> np.ndarray:
    """The zero-copy numpy view of a ``trn`` tensor's bytes (real strides and offset)."""
    info = _dtype_info(t.dtype)
    if info is None:
        raise DTypeError(f"trn: dtype {t.dtype} has no numpy equivalent for kernels")
    _, npdt, item = info
    return np.ndarray(tuple(t.shape), npdt, buffer=_block(t).np_bytes(), offset=t.storage_offset() * item,
                      strides=tuple(s * item for s in t.stride()))


_DTYPES: dict[Any, tuple[DType, np.dtype, int]] = {}


def _dtype_info(tdt: Any) -> tuple[DType, np.dtype, int] | None:
    info = _DTYPES.get(tdt)
    if info is None:
        d = to_dtype(tdt)
        if d is None:
            return None
        info = _DTYPES[tdt] = (d, d.np, d.itemsize)
    return info


def describe_device_tensor(arg: Any, name: str, kloc: SourceLoc) -> Any:
    """Specialization key, IR parameter and zero-copy numpy view of a ``trn`` tensor argument."""
    from trnlang.runtime.args import Prepared

    _check_device(arg, name)
    info = _dtype_info(arg.dtype)
    if info is None:
        supported = ", ".join(x.name.rstrip("_") for x in DType)
        raise DTypeError(f"argument {name!r} has unsupported dtype {arg.dtype}; kernels accept {supported}")
    if arg.is_conj() or arg.is_neg():
        raise LaunchError(f"argument {name!r} is a lazily conjugated/negated view; resolve it first")
    d, npdt, item = info
    blk = _block(arg, name)
    shape = tuple(arg.shape)
    arr = np.ndarray(shape, npdt, buffer=blk.np_bytes(), offset=arg.storage_offset() * item,
                     strides=tuple(s * item for s in arg.stride()))
    t = HbmTensor(name, shape, d, "in")
    return Prepared(("T", shape, d, arr.flags.c_contiguous), t, None, arr)


def alloc_device(device: Any, shape: tuple[int, ...], dtype: DType) -> Any:
    """A new uninitialised tensor on ``device`` (a kernel's returned output)."""
    import torch

    dev = torch.device(device)
    if dev.type != "trn":
        raise LaunchError(f"kernels cannot allocate outputs on {dev}")
    return torch.empty(tuple(int(s) for s in shape), dtype=torch_dtype(dtype), device=dev)
