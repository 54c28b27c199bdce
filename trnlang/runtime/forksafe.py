"""Fork safety: every thread pool, lock and worker of trnlang is renewed in a forked child.

A child made by ``fork()`` (``os.fork``, ``multiprocessing``'s fork context) has only the thread
that forked. A pool inherited from the parent believes its worker threads still exist (work
submitted to it never runs) and a lock another parent thread held at the fork stays held forever.
So the child, right after the fork, gets empty pools (new threads start on first use) and fresh
locks. This module is the audit of them all: :data:`MODULE_STATE` names each module-level pool and
lock, and :func:`track_lock` covers per-object locks. The native workers of
``trnlang.runtime.hostpool`` reset themselves the same way.

Thread-local scratch (``threading.local``) needs nothing: the forking thread keeps its own.

Example:
    >>> import threading
    >>> class Compiler:
    ...     def __init__(self) -> None:
    ...         self.lock = threading.Lock()
    ...         track_lock(self, "lock")
    >>> c = Compiler(); _ = c.lock.acquire()
    >>> after_fork_in_child(); c.lock.locked()   # what a forked child sees
    False
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Any, Callable

__all__ = ["MODULE_STATE", "track_lock", "on_fork_child", "after_fork_in_child"]


def _none() -> None:
    return None


#: (module, attribute, what the child gets): module-level pools (None: made again on first use) and locks.
#: Modules not imported when the process forks are skipped.
MODULE_STATE: list[tuple[str, str, Callable[[], Any]]] = [
    ("trnlang.runtime.jit", "_pool", _none),                    # the grid-instance thread pool
    ("trnlang.runtime.jit", "_pool_lock", threading.Lock),
    ("trnlang.runtime.jit", "_stores_lock", threading.Lock),    # the disk cache stores
    ("trnlang.runtime.diskcache", "_lock", threading.Lock),
    ("trnlang.runtime.codecache", "_LOCK", threading.Lock),     # the loaded-kernel LRU
    ("trnlang.runtime.linklib", "_lock", threading.Lock),       # the gemm libraries kernels link
    ("trnlang.runtime.stats", "_lock", threading.Lock),         # compile_stats() counters
    ("trnlang.runtime.launch", "_host_pool", _none),            # run_parallel's Python pool
    ("trnlang.runtime.launch", "_TRAMP_LOCK", threading.Lock),  # the pointer-call trampolines
    ("trnlang.runtime.launch", "_ADOPT_LOCK", threading.Lock),  # a resolved launch's first-thread adoption
    ("trnlang.config", "_lock", threading.Lock),
    ("codegen.llvm", "_init_lock", threading.Lock),
    ("codegen.llvm", "_tm_lock", threading.Lock),
    ("codegen.llvm", "_live_lock", threading.Lock),
    ("codegen.mathlib.gemm", "_default_lock", threading.Lock),
    ("codegen.mathlib.gemm_bf16", "_default_lock", threading.Lock),  # the bf16 gemm library
    ("trnlang.device.fallback", "_lock", threading.Lock),
    ("trnlang.device.backend", "_lock", threading.RLock),
    ("trnlang.distributed", "_lock", threading.Lock),
    ("trnlang.distributed.c10d", "_lock", threading.Lock),
]

_TRACKED: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()
_HOOKS: list[Callable[[], None]] = []


def track_lock(obj: Any, *attrs: str) -> None:
    """Renew ``obj``'s lock attributes ``attrs`` (``threading.Lock``) in a forked child, while ``obj`` lives."""
    _TRACKED[obj] = attrs


def on_fork_child(fn: Callable[[], None]) -> Callable[[], None]:
    """Run ``fn()`` in a forked child after the pools and locks are renewed (usable as a decorator)."""
    _HOOKS.append(fn)
    return fn


def after_fork_in_child() -> None:
    """What a forked child runs first (registered with ``os.register_at_fork``); callable for tests."""
    for module, attr, make in MODULE_STATE:
        m = sys.modules.get(module)
        if m is not None and hasattr(m, attr):
            setattr(m, attr, make())
    for obj, attrs in list(_TRACKED.items()):
        for a in attrs:
            setattr(obj, a, threading.Lock())
    for fn in _HOOKS:
        fn()


@on_fork_child
def _llvmlite_lock() -> None:
    """llvmlite serialises its binding calls with one process-wide RLock: a parent thread compiling at the fork
    would leave it held in the child."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    llvm_lock = getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None)
    if llvm_lock is not None:
        ffi.lib._lock._lock = threading.RLock()  # type: ignore[union-attr]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=after_fork_in_child)
