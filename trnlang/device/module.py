"""``torch.trn``: the device module of the simulated NeuronCore (registered as PrivateUse1's module).

One device (``trn:0``, one NeuronCore). Kernels run synchronously, so ``synchronize`` has
nothing to wait for. Memory statistics count simulated HBM against the target's HBM per core
(``trnlang.sim.targets``). Random ops on ``trn`` tensors draw from the device's own generator
(a CPU generator: a seeded ``trn`` run draws the same numbers as a seeded CPU run).

Example:
    >>> import torch
    >>> torch.trn.is_available(), torch.trn.device_count()   # doctest: +SKIP
    (True, 1)
    >>> x = torch.empty(1024, device="trn")                   # doctest: +SKIP
    >>> torch.trn.memory_allocated() >= 4096                  # doctest: +SKIP
    True
"""

from __future__ import annotations

import types
from typing import Any, Literal

import torch

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device", "device", "synchronize",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
    "reset_peak_memory_stats", "mem_get_info", "memory_summary", "empty_cache", "get_device_name",
    "get_device_properties", "get_amp_supported_dtype", "is_bf16_supported", "default_generator",
    "Stream", "Event", "StreamContext", "stream", "current_stream", "default_stream",
]

_generator: torch.Generator | None = None


def default_generator() -> torch.Generator:
    """The generator random ops on ``trn`` tensors use when none is given."""
    global _generator
    if _generator is None:
        _generator = torch.Generator()
        _generator.manual_seed(torch.initial_seed())
    return _generator


def _index(d: Any) -> int:
    if d is None:
        return 0
    if isinstance(d, int):
        idx = d
    else:
        dev = torch.device(d)
        if dev.type != "trn":
            raise ValueError(f"expected a trn device, got {dev}")
        idx = dev.index or 0
    if idx != 0:
        raise RuntimeError(f"trn: invalid device ordinal {idx} (torch.trn.device_count() is 1)")
    return idx


def is_available() -> bool:
    """The simulated device is always available."""
    return True


def is_initialized() -> bool:
    """Nothing to initialise lazily."""
    return True


def _lazy_init() -> None:
    return None


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """One simulated NeuronCore."""
    return 1


def current_device() -> int:
    """Always 0."""
    return 0


def set_device(device: Any) -> None:
    """Select the device (only ``trn:0`` exists)."""
    _index(device)


class device:  # noqa: N801 - torch spelling
    """Context manager selecting a device (``with torch.trn.device(0): ...``)."""

    def __init__(self, device: Any) -> None:
        self.idx = _index(device)

    def __enter__(self) -> "device":
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        return False


def synchronize(device: Any = None) -> None:
    """Wait for the device: kernels run synchronously, so there is nothing to wait for."""
    _index(device)


def manual_seed(seed: int) -> None:
    """Seed the device generator."""
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator (there is one)."""
    manual_seed(seed)


def seed() -> None:
    """Seed the device generator non-deterministically."""
    default_generator().seed()


def seed_all() -> None:
    """Same as :func:`seed` (one device)."""
    seed()


def initial_seed() -> int:
    """The device generator's initial seed."""
    return default_generator().initial_seed()


def get_rng_state(device: Any = "trn") -> torch.Tensor:
    """The device generator's state (a CPU uint8 tensor)."""
    return default_generator().get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "trn") -> None:
    """Restore the device generator's state."""
    default_generator().set_state(new_state.cpu() if new_state.device.type != "cpu" else new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """States of all device generators."""
    return [get_rng_state()]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    """Restore all device generators."""
    set_rng_state(new_states[0])


def memory_allocated(device: Any = None) -> int:
    """Bytes of simulated HBM held by live tensors."""
    _index(device)
    from trnlang.device import memory

    return memory.STATS.allocated - memory.idle_bytes()


def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` since the start or the last reset."""
    _index(device)
    from trnlang.device import memory

    return memory.STATS.peak


def memory_reserved(device: Any = None) -> int:
    """Bytes allocated plus the bytes the caching allocator holds for reuse."""
    from trnlang.device import memory

    _index(device)
    return memory.STATS.allocated + memory.CACHE.bytes  # includes the fast lane's idle pooled outputs


def max_memory_reserved(device: Any = None) -> int:
    """Peak reserved bytes."""
    return max_memory_allocated(device)


def memory_stats(device: Any = None) -> dict[str, int]:
    """Allocation counters (``torch.cuda.memory_stats`` key spelling)."""
    _index(device)
    from trnlang.device import memory

    return memory.stats()


def reset_peak_memory_stats(device: Any = None) -> None:
    """Reset the peak counters."""
    _index(device)
    from trnlang.device import memory

    memory.reset_peak()


def reset_max_memory_allocated(device: Any = None) -> None:
    """Same as :func:`reset_peak_memory_stats`."""
    reset_peak_memory_stats(device)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the core's HBM."""
    _index(device)
    from trnlang.device import memory

    total = memory.STATS.hbm_capacity()
    return total - memory.STATS.allocated + memory.idle_bytes(), total  # idle pooled outputs are free to reuse


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A short text report of the device memory counters."""
    st = memory_stats(device)
    mib = 1024 * 1024
    return (f"trn:0 simulated HBM: {st['allocated_bytes.all.current'] / mib:.2f} MiB allocated in "
            f"{st['allocation.all.current']} blocks, peak {st['allocated_bytes.all.peak'] / mib:.2f} MiB, "
            f"capacity {st['hbm_bytes_per_core'] / mib:.0f} MiB")


def empty_cache() -> None:
    """Release the host memory held by the caching allocator (freed blocks kept for reuse)."""
    from trnlang.device import memory

    memory.empty_cache()


def get_device_name(device: Any = None) -> str:
    """The simulated target's name."""
    _index(device)
    from trnlang.sim.targets import get_target

    return f"simulated NeuronCore ({get_target().name})"


def get_device_properties(device: Any = None) -> Any:
    """Name and HBM size of the simulated core."""
    _index(device)
    from trnlang.device import memory

    return types.SimpleNamespace(name=get_device_name(), total_memory=memory.STATS.hbm_capacity(),
                                 multi_processor_count=1, type="trn")


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes ``torch.autocast(device_type="trn")`` accepts."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bf16 is the engines' native half type."""
    return True


from trnlang.device.streams import (  # noqa: E402 - streams of a synchronous device (streams.py)
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    stream,
)


def as_module() -> types.ModuleType:
    """This module (registered as ``torch.trn``)."""
    import sys

    return sys.modules[__name__]
