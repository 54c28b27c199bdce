"""What Inductor needs to know about the ``trn`` device: a Dynamo device interface and wrapper op overrides.

Inductor asks a device for its current index, its properties, whether it is available, how to
synchronize, and what the generated Python wrapper writes for streams and device guards. ``trn`` runs
kernels synchronously on the host, so streams are 0 and guards are no-ops; the rest delegates to the
``torch.trn`` module (:mod:`trnlang.device.module`).

Example:
    >>> from trnlang.compile.inductor.device import register_device
    >>> register_device()
    >>> from torch._dynamo.device_interface import get_interface_for_device
    >>> get_interface_for_device("trn").is_available()
    True
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

__all__ = ["TrnInterface", "register_device"]


def _mod() -> Any:
    from trnlang.device import module

    return module


class TrnInterface(DeviceInterface):
    """Dynamo/Inductor's view of the ``trn`` device (one NeuronCore model on the host)."""

    class Worker:
        """Queries Inductor's compile workers may make (no device state to carry)."""

        @staticmethod
        def set_device(device: int) -> None:
            _mod().set_device(device)

        @staticmethod
        def current_device() -> int:
            return int(_mod().current_device())

        @staticmethod
        def get_device_properties(device: Any = None) -> Any:
            return _mod().get_device_properties(device)

    @staticmethod
    def current_device() -> int:
        return int(_mod().current_device())

    @staticmethod
    def set_device(device: Any) -> None:
        _mod().set_device(device)

    @staticmethod
    def device_count() -> int:
        return int(_mod().device_count())

    @staticmethod
    def is_available() -> bool:
        return bool(_mod().is_available())

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0

    @staticmethod
    def synchronize(device: Any = None) -> None:
        _mod().synchronize(device)

    @classmethod
    def get_device_properties(cls, device: Any = None) -> Any:
        return _mod().get_device_properties(device)

    @staticmethod
    def get_compute_capability(device: Any = None) -> str:
        import trnlang.config as config

        return config.current.target or "trn2"

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return int(_mod().memory_allocated(device))

    @staticmethod
    def is_triton_capable(device: Any = None) -> bool:
        return False


_registered: list[bool] = []


def register_device() -> None:
    """Register the device interface and the wrapper's op overrides for ``trn`` (idempotent)."""
    if _registered:
        return
    from torch._inductor.codegen.common import register_device_op_overrides
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides

    register_interface_for_device("trn", TrnInterface)
    # kernels run synchronously on the host: no streams, no device guards (as on the CPU)
    register_device_op_overrides("trn", CpuDeviceOpOverrides())
    _registered.append(True)
    assert torch.device("trn").type == "trn"
