"""Glue that makes ``trn`` tensors behave like other device tensors in torch's Python layer.

The implementations only: what is applied, why, and when it can go is the table in
:mod:`trnlang.device.torch_patches` (the only caller). Each patched function takes torch's original path
unchanged when no ``trn`` tensor or device is involved.

- printing formats a CPU copy (trap 9: otherwise printing runs a dozen fallback ops);
- ``torch.load`` can restore storages to ``trn`` (``torch.save`` works through ``_copy_from``);
- ``torch.autocast(device_type="trn")``: a fallthrough for the autocast key (trap 8) plus
  casting kernels for the matmul family, like CUDA's lower-precision list;
- trap 2: ``_copy_from`` falls through the Conjugate and Negative keys (the CPU views keep the bits);
- ``torch.accelerator.synchronize`` and its memory functions route to ``torch.trn`` (trap 11);
- ``torch.UntypedStorage(n, device="trn")`` (deepcopy, ``storage.clone()``/``.to("trn")``) allocates
  device memory instead of crashing in C++ for want of a PrivateUse1 allocator.
- ``module.to("trn")`` / ``module.cpu()`` keep Parameter objects (so tied weights stay tied and an
  optimizer made before the move still holds the module's parameters): torch only reuses a Parameter
  across a conversion when the two TensorImpls are "shallow-copy compatible", which PrivateUse1 and
  CPU are not in torch 2.13, so it would make a new Parameter per module attribute. Conversions that
  involve ``trn`` run with torch's ``swap_module_params_on_conversion`` instead (``swap_tensors``).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import torch

from trnlang.device import memory

_LIBS: list[Any] = []
_DONE: set[str] = set()


def _once(fn: Any) -> Any:
    """Make a registration idempotent: torch's registries refuse (or duplicate) a second registration."""

    @functools.wraps(fn)
    def wrapper() -> None:
        if fn.__name__ not in _DONE:
            fn()
            _DONE.add(fn.__name__)

    return wrapper


#: Ops autocast runs in the lower-precision dtype on ``trn`` (the TensorE ops).
AUTOCAST_LOWER = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "conv1d", "conv2d", "conv3d",
                  "prelu", "chain_matmul", "_convolution", "convolution", "conv_transpose1d", "conv_transpose2d",
                  "scaled_dot_product_attention")


def _patch_printing() -> None:
    import torch._tensor_str as ts

    orig = ts._tensor_str
    if getattr(orig, "_trn_patched", False):
        return

    @functools.wraps(orig)
    def _tensor_str(self: torch.Tensor, indent: int) -> str:
        if self.device.type == "trn":
            with torch.no_grad():
                self = self.detach().to("cpu")
        return orig(self, indent)

    _tensor_str._trn_patched = True  # type: ignore[attr-defined]
    ts._tensor_str = _tensor_str


def _patch_dlpack_device() -> None:
    orig = torch.Tensor.__dlpack_device__
    if getattr(orig, "_trn_patched", False):
        return

    @functools.wraps(orig)
    def __dlpack_device__(self: torch.Tensor) -> Any:  # noqa: N807 - the protocol's name
        if self.device.type == "trn" and not torch.overrides.has_torch_function_unary(self):
            from torch.utils.dlpack import DLDeviceType

            return DLDeviceType.kDLExtDev, self.device.index or 0
        return orig(self)

    __dlpack_device__._trn_patched = True  # type: ignore[attr-defined]
    torch.Tensor.__dlpack_device__ = __dlpack_device__  # type: ignore[method-assign]


def _trn_tag(obj: Any) -> str | None:
    if obj.device.type == "trn":
        return "trn" if obj.device.index is None else f"trn:{obj.device.index}"
    return None


def _trn_deserialize(obj: Any, location: str) -> Any:
    if not location.startswith("trn"):
        return None
    if obj.device.type == "trn":
        return obj
    cpu = torch.empty((0,), dtype=torch.uint8).set_(obj.untyped_storage() if hasattr(obj, "untyped_storage")
                                                     else obj)
    t = memory.empty((cpu.numel(),), torch.uint8)
    memory.memmove(t.data_ptr(), cpu.data_ptr(), cpu.numel())
    return t.untyped_storage()


@_once
def _register_serialization() -> None:
    from torch.serialization import register_package

    register_package(15, _trn_tag, _trn_deserialize)  # before the generic privateuse1 entry (23)


def _autocast_kernel(op: Any) -> Any:
    ks = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, "AutocastPrivateUse1"))  # not in the stubs

    def cast(v: Any, dt: torch.dtype) -> Any:
        if (isinstance(v, torch.Tensor) and v.is_floating_point() and v.device.type == "trn" and v.dtype != dt
                and v.dtype != torch.float64):
            return v.to(dt)
        if isinstance(v, (list, tuple)):
            return type(v)(cast(x, dt) for x in v)
        return v

    def kernel(*args: Any, **kwargs: Any) -> Any:
        dt = torch.get_autocast_dtype("trn")
        with torch._C._ExcludeDispatchKeyGuard(ks):
            return op(*[cast(a, dt) for a in args], **{k: cast(v, dt) for k, v in kwargs.items()})

    return kernel


@_once
def _register_autocast() -> None:
    lib = torch.library.Library("_", "IMPL")
    lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _LIBS.append(lib)
    alib = torch.library.Library("aten", "IMPL")
    for name in AUTOCAST_LOWER:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        for ov in packet.overloads():
            op = getattr(packet, ov)
            if op._schema.is_mutable or "out" in ov:
                continue
            qual = name if ov == "default" else f"{name}.{ov}"
            alib.impl(qual, _autocast_kernel(op), "AutocastPrivateUse1")
    _LIBS.append(alib)


@_once
def _register_conj_neg_fallthroughs() -> None:
    lib = torch.library.Library("aten", "IMPL")
    for key in ("Conjugate", "Negative"):
        for name in ("_copy_from", "_copy_from_and_resize"):
            lib.impl(name, torch.library.fallthrough_kernel, key)
    _LIBS.append(lib)


_ACCEL = {
    "synchronize": "synchronize", "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated", "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved", "memory_stats": "memory_stats", "empty_cache": "empty_cache",
    "reset_peak_memory_stats": "reset_peak_memory_stats", "reset_accumulated_memory_stats": "reset_peak_memory_stats",
    "get_memory_info": "mem_get_info",
}


def _names_trn(dev: Any) -> bool:
    """True for ``None`` / an index (the current accelerator, i.e. ``trn``) or a ``trn`` device; False for
    any other device (``"cpu"``), which must get torch's own answer, unchanged by this package."""
    if dev is None or isinstance(dev, int):
        return True
    try:
        return torch.device(dev).type == "trn"
    except (RuntimeError, TypeError):
        return False


def _patch_accelerator() -> None:
    """Trap 11: ``torch.accelerator``'s synchronize and memory functions need C++ hooks a Python backend
    cannot provide; route them to ``torch.trn`` when ``trn`` is the current accelerator."""
    import torch.accelerator as acc

    mem = getattr(acc, "memory", None)
    for name, target in _ACCEL.items():
        orig = getattr(acc, name, None)
        if orig is None or getattr(orig, "_trn_patched", False):
            continue

        def make(orig: Any, target: str) -> Any:
            @functools.wraps(orig)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                cur = acc.current_accelerator()
                dev = args[0] if args else kwargs.get("device_index", kwargs.get("device"))
                if cur is not None and cur.type == "trn" and _names_trn(dev):
                    trn_mod = getattr(torch, "trn")  # the renamed PrivateUse1 module (not in the stubs)
                    return getattr(trn_mod, target)(dev) if dev is not None else getattr(trn_mod, target)()
                return orig(*args, **kwargs)  # another device named explicitly: torch's own answer

            wrapper._trn_patched = True  # type: ignore[attr-defined]
            return wrapper

        w = make(orig, target)
        setattr(acc, name, w)
        if mem is not None and getattr(mem, name, None) is orig:
            setattr(mem, name, w)


def _patch_storage_resize() -> None:
    """``UntypedStorage.resize_`` on a trn storage resizes device memory (``memory.resize_storage``); other
    devices keep torch's method."""
    from trnlang.device import memory

    cls = torch.UntypedStorage
    orig = cls.resize_
    if getattr(orig, "_trn_patched", False):
        return

    @functools.wraps(orig)
    def resize_(self: Any, size: int) -> Any:
        if self.device.type == "trn":
            memory.resize_storage(self, size)
            return self
        return orig(self, size)

    resize_._trn_patched = True  # type: ignore[attr-defined]
    cls.resize_ = resize_  # type: ignore[method-assign]


def _patch_storage_new() -> None:
    """``torch.UntypedStorage(n, device="trn")`` would ask C++ for a PrivateUse1 allocator that a Python
    backend cannot register (and crash); ``copy.deepcopy``, ``storage.clone()`` and ``storage.to("trn")``
    all go through it. Allocate device memory instead."""
    cls = torch.UntypedStorage
    if getattr(cls.__dict__.get("__new__"), "_trn_patched", False):
        return
    orig = torch._C.StorageBase.__new__

    def __new__(cls_: Any, *args: Any, **kwargs: Any) -> Any:
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == "trn":
            if torch.device(dev).index not in (None, 0):
                raise RuntimeError(f"trn: invalid device {dev}; torch.trn.device_count() is 1")
            if not args:
                return memory.empty((0,), torch.uint8).untyped_storage()
            if len(args) == 1 and isinstance(args[0], int):
                return memory.empty((args[0],), torch.uint8).untyped_storage()
            cpu = orig(cls_, *args)  # from a sequence of bytes: build on the CPU, then copy
            t = memory.empty((cpu.nbytes(),), torch.uint8)
            memory.memmove(t.data_ptr(), cpu.data_ptr(), cpu.nbytes())
            return t.untyped_storage()
        return orig(cls_, *args, **kwargs)

    __new__._trn_patched = True  # type: ignore[attr-defined]
    cls.__new__ = __new__  # type: ignore[assignment]


def _crosses_trn(module: torch.nn.Module, device: Any) -> bool:
    """The conversion moves tensors between ``trn`` and another device (``device`` None: stays where it is).

    Moves that stay on ``trn`` (a dtype or memory format change) keep torch's own path: the results are
    shallow-copy compatible with the parameters, so torch sets ``.data`` and needs no swap (a swap fails while an
    autograd graph still holds the parameter).
    """
    if device is None:
        return False
    to_trn = torch.device(device).type == "trn"
    for t in itertools.chain(module.parameters(), module.buffers()):
        if (t.device.type == "trn") != to_trn:
            return True
    return False


def _patch_module_conversion() -> None:
    mod = torch.nn.Module
    if getattr(mod.to, "_trn_patched", False):
        return
    orig_to, orig_cpu = mod.to, mod.cpu

    def swapping(fn: Any, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        fut = torch.__future__
        prev = fut.get_swap_module_params_on_conversion()
        fut.set_swap_module_params_on_conversion(True)
        try:
            return fn(module, *args, **kwargs)
        finally:
            fut.set_swap_module_params_on_conversion(prev)

    @functools.wraps(orig_to)
    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        if _crosses_trn(self, device):
            return swapping(orig_to, self, *args, **kwargs)
        return orig_to(self, *args, **kwargs)

    @functools.wraps(orig_cpu)
    def cpu(self: torch.nn.Module) -> Any:
        if _crosses_trn(self, "cpu"):
            return swapping(orig_cpu, self)
        return orig_cpu(self)

    to._trn_patched = True  # type: ignore[attr-defined]
    mod.to = to  # type: ignore[method-assign]
    mod.cpu = cpu  # type: ignore[method-assign]
    trn_method = getattr(mod, "trn", None)
    if trn_method is not None:
        @functools.wraps(trn_method)
        def trn(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if _crosses_trn(self, "trn"):
                return swapping(trn_method, self, *args, **kwargs)
            return trn_method(self, *args, **kwargs)

        mod.trn = trn  # type: ignore[attr-defined]
