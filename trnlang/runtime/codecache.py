"""The per-process cap on loaded native kernels: least-recently-used compiled variants are unloaded.

Every compiled variant (``runtime.jit.Variant``) owns one MCJIT engine holding its machine code
(about 50 KiB of native memory, plus the launch plans, output pools and traced IR that hang off
it). Without a cap a program that meets ever new shapes grows without bound. At most
``TRN_MAX_LOADED_KERNELS`` variants (default :data:`DEFAULT_MAX`; ``trnlang.config``, checked at every compile) stay
loaded; adding one more evicts the least recently used (a launch sets ``variant.used``; each add
turns the set bits into the add's number and evicts the variants with the oldest numbers).

Evicting a variant makes it unreachable for new launches and drops every cache derived from it:
its executor's entry, the launch plans on its executor (and the kernel's specialization when that
executor has no variant left), bound launches (``stdlib_kernels._util.BoundLaunches``) and device
fast lanes with their pooled outputs (listeners registered with :func:`on_evict`). The machine
code itself is never freed while anything can still call it: every launch path holds a Python
reference to the variant's ctypes function (which holds the engine) for the duration of the
call, so the engine is disposed by reference counting when the last in-flight launch returns.
A later launch of the same shape compiles again (from the disk cache: a load, not a compile).

Example:
    >>> import os, trnlang.config
    >>> os.environ["TRN_MAX_LOADED_KERNELS"] = "8"; _ = trnlang.config.refresh(); max_loaded()
    8
    >>> del os.environ["TRN_MAX_LOADED_KERNELS"]; _ = trnlang.config.refresh(); max_loaded() == DEFAULT_MAX
    True
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from typing import Any, Callable

from trnlang import config as _config

__all__ = ["DEFAULT_MAX", "ENV", "max_loaded", "add", "on_evict", "loaded", "stats", "evict_all"]

ENV = "TRN_MAX_LOADED_KERNELS"
#: Default cap on loaded variants (about 25 MiB of machine code and engines at the default).
DEFAULT_MAX = _config.DEFAULT_MAX_LOADED_KERNELS
#: Return freed native memory to the OS (glibc ``malloc_trim``) every this many evictions.
TRIM_EVERY = 64

_LOCK = threading.Lock()
_RING: OrderedDict[int, Any] = OrderedDict()  # id(variant) -> variant, clock order (hand at the front)
_TICK = [0]  # adds so far: the clock of last uses (see add)
_LISTENERS: list[Callable[[list[Any]], None]] = []
_STATS = {"evicted": 0, "since_trim": 0}


def max_loaded() -> int:
    """The cap: ``TRN_MAX_LOADED_KERNELS`` if a positive integer, else :data:`DEFAULT_MAX` (``trnlang.config``)."""
    return _config.current.max_loaded_kernels


def on_evict(fn: Callable[[list[Any]], None]) -> Callable[[list[Any]], None]:
    """Call ``fn(evicted_variants)`` after each eviction (drop caches holding them); usable as a decorator."""
    _LISTENERS.append(fn)
    return fn


def add(v: Any) -> None:
    """Count a newly loaded variant, evicting over the cap (``v.evict(v)`` unloads one; flags ``used``, ``alive``).

    Launches only set ``variant.used`` (one store on the hot path). Each add first turns those bits into
    the number of the add they happened before (``_clock``), then evicts the variants whose last use is
    oldest, oldest loaded first among equals: least recently used to the resolution of one compile. (A
    plain second-chance clock degenerates to FIFO when every variant was used since the hand last passed,
    and then unloads a kernel launched between every compile.)
    """
    cap = max_loaded()
    victims: list[Any] = []
    with _LOCK:
        _TICK[0] += 1
        tick = _TICK[0]
        for old in _RING.values():
            if old.used:
                old.used = False
                old._clock = tick
        v._clock = tick + 1  # the newest stays
        _RING[id(v)] = v
        excess = len(_RING) - cap
        if excess > 0:
            order = sorted(_RING.items(), key=lambda kv: getattr(kv[1], "_clock", 0))  # stable: load order
            for k, old in order[:excess]:
                if old is v:
                    continue
                del _RING[k]
                victims.append(old)
    if victims:
        _evict(victims)


def _evict(victims: list[Any]) -> None:
    for old in victims:
        old.alive = False
        old.evict(old)
    for fn in list(_LISTENERS):
        fn(victims)
    _STATS["evicted"] += len(victims)
    _STATS["since_trim"] += len(victims)
    if _STATS["since_trim"] >= TRIM_EVERY:
        _STATS["since_trim"] = 0
        _trim()


def evict_all() -> None:
    """Unload every variant now (tests, memory pressure); each is compiled again on its next launch."""
    with _LOCK:
        victims = list(_RING.values())
        _RING.clear()
    if victims:
        _evict(victims)


def loaded() -> int:
    """Variants loaded now (at most :func:`max_loaded`)."""
    return len(_RING)


def stats() -> dict[str, int]:
    """``{"loaded": n, "evicted": total, "max": cap}``."""
    return {"loaded": len(_RING), "evicted": _STATS["evicted"], "max": max_loaded()}


def _trim() -> None:
    """Give freed heap pages back to the OS (engines are many small allocations; glibc keeps them otherwise)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
