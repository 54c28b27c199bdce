"""Registration of the ``trn`` device with PyTorch (once per process).

Order matters (TORCH_DEVICE_NOTES.md): rename PrivateUse1 and register the device module,
hooks and guard through ``_setup_privateuseone_for_python_backend``; then the backend
fallback (one function; the registry behind it is Python data); then the plumbing kernels and
the patches to torch (``torch_patches.PATCHES``, one table); the stdlib lowerings
(``stdlib_kernels``) are imported lazily, at the first allocation on the device, so
``import torch`` stays cheap and never imports the kernel language while torch is half-imported.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.RLock()
_state = {"registered": False, "lowerings": False}
_LIBS: list[Any] = []


def _make_hooks() -> tuple[Any, Any]:
    import torch

    class TrnHooks(torch._C._acc.PrivateUse1Hooks):
        """PrivateUse1 hooks: the device is built in and always available."""

        def is_available(self) -> bool:
            return True

        def has_primary_context(self, dev_id: int) -> bool:
            return True

        def is_built(self) -> bool:
            return True

    class TrnGuard(torch._C._acc.DeviceGuard):
        """The device guard (one device, nothing to switch)."""

        def type_(self) -> Any:
            return torch._C._autograd.DeviceType.PrivateUse1

    return TrnHooks(), TrnGuard()


def is_registered() -> bool:
    """True once this process set up the ``trn`` device."""
    return _state["registered"]


def register() -> None:
    """Set up the ``trn`` device in this process (idempotent; safe with a half-imported torch)."""
    if _state["registered"]:
        return
    with _lock:
        if _state["registered"]:
            return
        import torch
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", "trn"):
            raise RuntimeError(f"trn: PrivateUse1 is already taken by the {current!r} backend in this process")
        if current == "trn" and hasattr(torch, "trn"):
            _state["registered"] = True  # someone (an earlier copy of this module) did it
            return
        from trnlang.device import module

        hooks, guard = _make_hooks()
        _setup_privateuseone_for_python_backend("trn", backend_module=module.as_module(), hook=hooks,
                                                device_guard=guard)
        _LIBS.extend([hooks, guard])
        from trnlang.device import fallback, torch_patches

        lib = torch.library.Library("_", "IMPL")
        lib.fallback(fallback.boxed_fallback, "PrivateUse1")
        _LIBS.append(lib)
        from trnlang.device import plumbing  # noqa: F401  (registers the plumbing lowerings)

        torch_patches.apply_all()  # every change to torch outside PrivateUse1: one table
        from trnlang.device import memory
        from trnlang.runtime.devices import set_foreign_storage_resolver

        set_foreign_storage_resolver(memory.foreign_block)  # DLPack / from_blob storages
        from trnlang import distributed

        distributed.register()  # the c10d backend "trn" (a few dict entries; its kernels wait for a trn group)
        _state["registered"] = True


def lowerings_loaded() -> bool:
    """The stdlib lowerings are registered (:func:`ensure_lowerings` has run)."""
    return bool(_state["lowerings"])


def ensure_lowerings() -> None:
    """Import the stdlib lowerings once (they register themselves with the registry)."""
    if _state["lowerings"]:
        return
    with _lock:
        if _state["lowerings"]:
            return
        _state["lowerings"] = True
        import stdlib_kernels

        stdlib_kernels.register_all()
