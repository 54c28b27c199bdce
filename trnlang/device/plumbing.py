"""Native plumbing of the ``trn`` device: allocation, views, storage metadata, host<->device copies.

None of these touch data with compute engines: they set metadata (views redispatch to the CPU
kernels, which only build TensorImpls over the same storage) or move bytes between host and
simulated HBM (``memmove`` / CPU views, standing in for DMA). They are registered as lowerings
of kind ``plumbing`` and count as native in the coverage report.

Also here: ops whose generic composite kernel would bypass the fallback (trap 5 of the device
notes) are routed explicitly to the CPU (kind ``cpu``, counted as fallbacks).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from trnlang.device import fallback, memory
from trnlang.device.registry import lowering, resolve

aten = torch.ops.aten
_CPU_KS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_PRESERVE = torch.preserve_format


def _format_strides(shape: Sequence[int], memory_format: Any) -> tuple[int, ...]:
    if memory_format in (None, torch.contiguous_format):
        return memory.contiguous_strides(shape)
    if memory_format == _PRESERVE:
        raise RuntimeError("preserve memory format is unsupported by the empty() function")
    return torch.empty(tuple(shape), device="meta", memory_format=memory_format).stride()


def _check_device(device: Any) -> None:
    if device is not None:
        d = device if isinstance(device, torch.device) else torch.device(device)
        if d.index not in (None, 0) and d.type == "trn":
            raise RuntimeError(f"trn: invalid device {d}; torch.trn.device_count() is 1")


# --- allocation -------------------------------------------------------------------------------
@lowering("aten::empty.memory_format", kind="plumbing", variants=False)
def empty(size: Sequence[int], dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
          pin_memory: bool | None = None, memory_format: Any = None) -> torch.Tensor:
    """Uninitialised device memory, contiguous (or in the given memory format)."""
    _check_device(device)
    if layout not in (None, torch.strided):
        raise RuntimeError(f"trn: layout {layout} is not supported (only strided tensors live on the device)")
    if any(int(s) < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(int(s) for s in size)}: "
                           f"{list(size)}")
    dt = dtype or torch.get_default_dtype()
    return memory.empty_strided(size, _format_strides(size, memory_format), dt)


@lowering("aten::empty_strided", kind="plumbing", variants=False)
def empty_strided(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype | None = None, layout: Any = None,
                  device: Any = None, pin_memory: bool | None = None) -> torch.Tensor:
    """Uninitialised device memory with explicit strides."""
    _check_device(device)
    if len(size) != len(stride):
        raise RuntimeError(f"dimensionality of sizes ({len(size)}) must match dimensionality of strides "
                           f"({len(stride)})")
    if any(int(s) < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(int(s) for s in size)}: "
                           f"{list(size)}")
    return memory.empty_strided(size, stride, dtype or torch.get_default_dtype())


@lowering("aten::_efficientzerotensor", kind="plumbing", variants=False)
def efficientzerotensor(size: Sequence[int], dtype: torch.dtype | None = None, layout: Any = None,
                        device: Any = None, pin_memory: bool | None = None) -> torch.Tensor:
    """Trap 3: a real zero tensor (the CPU kernel's has null data)."""
    t = memory.empty(size, dtype or torch.get_default_dtype())
    memory.cpu_view(t).zero_()
    return t


# --- views (metadata only: the CPU kernels build a TensorImpl over the same storage) ------------
def _view_op(name: str) -> None:
    op = resolve(name)

    def view(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(_CPU_KS, *args, **kwargs)

    view.__doc__ = f"{name}: metadata only."
    lowering(name, kind="plumbing", variants=False)(view)


for _name in ("aten::as_strided", "aten::view", "aten::_reshape_alias", "aten::unfold", "aten::view_as_real",
              "aten::view_as_complex", "aten::as_strided_", "aten::_unsafe_view"):
    _view_op(_name)


# --- storage metadata ----------------------------------------------------------------------
@lowering("aten::set_.source_Storage_storage_offset", kind="plumbing", variants=False)
def set_storage_offset(self: torch.Tensor, source: Any, storage_offset: int, size: Sequence[int],
                       stride: Sequence[int] = ()) -> torch.Tensor:
    """Point ``self`` at a device storage with the given metadata."""
    if getattr(source, "_trn_block", None) is None and source.device.type == "trn":
        raise RuntimeError("trn: set_ to a storage without device memory")
    if not stride:
        stride = memory.contiguous_strides(size)
    return aten.set_.source_Storage_storage_offset.redispatch(_CPU_KS, self, source, storage_offset, size, stride)


@lowering("aten::set_.source_Storage", kind="plumbing", variants=False)
def set_storage(self: torch.Tensor, source: Any) -> torch.Tensor:
    """``self`` becomes a 1-D view of the whole storage."""
    n = source.nbytes() // self.element_size()
    return set_storage_offset(self, source, 0, (n,), (1,))


@lowering("aten::set_.source_Tensor", kind="plumbing", variants=False)
def set_tensor(self: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``self`` shares ``source``'s storage and metadata."""
    if source.device.type != "trn":
        raise RuntimeError(f"Attempted to set the storage of a tensor on device \"{self.device}\" to a storage on "
                           f"different device \"{source.device}\".  This is no longer allowed; the devices must "
                           "match.")
    return memory.set_metadata(self, source.shape, source.stride(), source.storage_offset(),
                               source.untyped_storage())


@lowering("aten::set_", kind="plumbing", variants=False)
def set_empty(self: torch.Tensor) -> torch.Tensor:
    """``self`` gets a fresh empty storage."""
    fresh = memory.empty((0,), self.dtype)
    return memory.set_metadata(self, (0,), (1,), 0, fresh.untyped_storage())


@lowering("aten::resize_", kind="plumbing", variants=False)
def resize_(self: torch.Tensor, size: Sequence[int], memory_format: Any = None) -> torch.Tensor:
    """Resize in place; growing past the storage moves the tensor to a bigger block (old bytes kept).

    Unlike CPU storages, device storages are not resized in place, so other tensors sharing the
    old storage keep seeing the old (smaller) block.
    """
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(size)}: {list(size)}")
    strides = _format_strides(size, memory_format if memory_format != _PRESERVE else None)
    off = int(self.storage_offset())
    need = memory.storage_nbytes(size, strides, self.element_size(), off)
    st = self.untyped_storage()
    if need <= st.nbytes():
        return memory.set_metadata(self, size, strides, off)
    bigger = memory.empty((need,), torch.uint8)
    old = memory.block_of(self)
    memory.memmove(memory.block_of(bigger).ptr, old.ptr, min(old.nbytes, need))
    return memory.set_metadata(self, size, strides, off, bigger.untyped_storage())


# --- copies ------------------------------------------------------------------------------------
def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride() and not a.is_conj()
            and not b.is_conj() and not a.is_neg() and not b.is_neg() and memory.is_dense(a))


def copy_between(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` where either side may be on ``trn`` (host memmove for dense same-layout copies)."""
    if dst.numel() == 0:
        return dst
    if _same_layout(dst, src):
        memory.memmove(dst.data_ptr(), src.data_ptr(), dst.numel() * dst.element_size())
        return dst
    shared = None
    if dst.device.type == "trn" and src.device.type == "trn":
        db, sb = memory.block_of(dst), memory.block_of(src)
        if db is sb:
            shared = db.cpu_storage()  # one CPU storage so copy_ sees the overlap
    dv = memory.cpu_view(dst, shared) if dst.device.type == "trn" else dst
    sv = memory.cpu_view(src, shared) if src.device.type == "trn" else src
    dv.copy_(sv)
    return dst


@lowering("aten::_copy_from", kind="plumbing", variants=False)
def copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``dst.copy_(self)`` for copies involving a ``trn`` tensor (both directions, any dtypes)."""
    return copy_between(dst, self)


@lowering("aten::_copy_from_and_resize", kind="plumbing", variants=False)
def copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Resize ``dst`` to ``self``'s shape, then copy."""
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    return copy_between(dst, self)


@lowering("aten::_to_copy", kind="plumbing", variants=False)
def to_copy(self: torch.Tensor, *, dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
            pin_memory: bool | None = None, non_blocking: bool = False, memory_format: Any = None) -> torch.Tensor:
    """Trap 6: ``.to()`` / ``.cpu()`` / ``.to("trn")`` natively, both directions (no pinned memory)."""
    dev = torch.device(device) if device is not None else self.device
    dt = dtype or self.dtype
    if layout not in (None, torch.strided):
        return NotImplemented
    mf = memory_format if memory_format is not None else _PRESERVE
    shape = tuple(self.shape)
    if mf == _PRESERVE:
        strides = tuple(self.stride()) if memory.is_dense(self) else memory.contiguous_strides(shape)
    else:
        strides = _format_strides(shape, mf)
    if dev.type == "trn":
        _check_device(dev)
        out = memory.empty_strided(shape, strides, dt)
    elif dev.type == "cpu":
        out = torch.empty_strided(shape, strides, dtype=dt)
    else:
        raise RuntimeError(f"trn: cannot copy a trn tensor to {dev}")
    return copy_between(out, self)


@lowering("aten::_local_scalar_dense", kind="plumbing", variants=False)
def local_scalar_dense(self: torch.Tensor) -> Any:
    """``.item()``: read one element from device memory."""
    return memory.cpu_view(self).item()


@lowering("aten::fill_.Scalar", kind="plumbing", variants=False)
def fill_scalar(self: torch.Tensor, value: Any) -> torch.Tensor:
    """Memset-style fill (a DMA from a constant)."""
    memory.cpu_view(self).fill_(value)
    return self


@lowering("aten::fill_.Tensor", kind="plumbing", variants=False)
def fill_tensor(self: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Fill with a 0-dim tensor's value."""
    if value.dim() != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} "
                           "dimensions.")
    v = memory.cpu_view(value) if value.device.type == "trn" else value
    memory.cpu_view(self).fill_(v)
    return self


@lowering("aten::zero_", kind="plumbing", variants=False)
def zero_(self: torch.Tensor) -> torch.Tensor:
    """Memset to zero."""
    memory.cpu_view(self).zero_()
    return self


# --- explicit CPU routes (trap 5: composite kernels that would bypass the fallback) ---------------
def _cpu_route(name: str, cpu_op: Any = None) -> None:
    op = resolve(name)

    def route(*args: Any, **kwargs: Any) -> Any:
        return fallback.run_on_cpu(op, args, kwargs, cpu_op=cpu_op, name=name)

    route.__doc__ = f"{name}: runs on the CPU (counted as a fallback)."
    lowering(name, kind="cpu", variants=False)(route)


for _name in ("aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::native_group_norm",
              "aten::native_group_norm_backward", "aten::native_batch_norm", "aten::native_batch_norm_backward",
              "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit.no_stats",
              "aten::_native_batch_norm_legit_no_training"):
    _cpu_route(_name)


def _conv_forward(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Any, padding: Any,
                  dilation: Any, transposed: bool, output_padding: Any, groups: int) -> torch.Tensor:
    return aten.convolution.default(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                    groups)


def _conv_backward(grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, stride: Any, padding: Any,
                   dilation: Any, transposed: bool, output_padding: Any, groups: int,
                   output_mask: Any) -> tuple[Any, ...]:
    bias_sizes = [weight.shape[1] * groups] if transposed else [weight.shape[0]]
    return aten.convolution_backward.default(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                                             transposed, output_padding, groups, output_mask)


_cpu_route("aten::convolution_overrideable", _conv_forward)
_cpu_route("aten::convolution_backward_overrideable", _conv_backward)
