"""Native worker threads for the launches of one op split across the host's cores.

A device op that splits its work into one launch per thread (``trnlang.runtime.launch.run_parallel``)
used to hand the other launches to a ``concurrent.futures`` pool: a Python thread woken through a
queue, which then needs the GIL before it can even start its native call. On a small host that
handoff costs 30 to 70 microseconds per op, a tenth of a 16 MiB layer norm.

Here each worker is a thread that lives in machine code compiled once with llvmlite
(``trn_worker``, built by ``codegen/native.py``): it never holds the GIL. It waits on a 128-byte
job slot: it spins (with ``pause``) for :data:`SPIN_US` microseconds after its last job, then sleeps on a futex. The
calling thread writes a launch (the kernel entry's address and its arguments, the worker's own
arena and error record) into the slot, posts it (``trn_post``: one atomic store, a futex wake only
if the worker sleeps), runs its own launch, and waits (``trn_wait``: spin, then ``sched_yield``).
A spinning worker starts a posted launch within a microsecond, as an OpenMP team does.

Only launches that are fully resolved to a native call can go to a worker (``KernelFn.bind`` of
a warm launch plan: a native ``trnlang.runtime.launch.Launch``); ``launch.run_parallel`` runs anything
else on its Python pool. Linux x86-64
only (futex, ``pause``); elsewhere :func:`available` is False and callers use the Python pool.
Kernel errors raised in a worker are reported by the calling thread, as for its own launch.

Example:
    >>> from trnlang.runtime import hostpool
    >>> isinstance(hostpool.available(), bool)
    True
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from trnlang import config as _config

if TYPE_CHECKING:
    from trnlang.runtime.launch import Launch

__all__ = ["available", "run", "SPIN_US", "workers"]

#: how long an idle worker spins before it sleeps (microseconds)
SPIN_US = 200
#: job slot words (``codegen.native.WORDS``: 128 bytes, one slot never shares a cache line pair with another)
_WORDS = 16
_FN, _ARGS = 2, 3   # the entry's address, then the 9 words of the kernel entry ABI (``codegen.native``)

class _Worker:
    def __init__(self, lib: Any, index: int) -> None:
        self.buf = np.zeros(_WORDS + 8, np.int64)
        addr = self.buf.ctypes.data
        off = (-addr % 64) // 8
        self.job = self.buf[off:off + _WORDS]
        self.addr = self.job.ctypes.data
        self.err = np.zeros(64, np.int64)
        self.arena = np.empty(0, np.uint8)
        self.arena_addr = 0
        self.busy = False
        cycles = int(SPIN_US * _tsc_per_us())
        loop = lib.worker

        def body() -> None:
            loop(self.addr, cycles)

        self.thread = threading.Thread(target=body, name=f"trn-native-{index}", daemon=True)
        self.thread.start()

    def arena_for(self, size: int) -> int:
        if self.arena.size < size + 64:
            self.arena = np.empty(max(size, 1 << 16) + 64, np.uint8)
            self.arena_addr = (self.arena.ctypes.data + 63) & ~63
        return self.arena_addr


class _Lib:
    def __init__(self) -> None:
        from codegen import native

        assert (native.WORDS, native.FN, native.ARGS) == (_WORDS, _FN, _ARGS)
        lib = native.load(native.worker_module())
        self.module = lib
        # CFUNCTYPE: the GIL is released while the worker loop / the wait runs
        self.worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(lib.address(native.WORKER))
        self.wait = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(lib.address(native.WAIT))
        # the post is a store and maybe a syscall: keep the GIL (PYFUNCTYPE avoids a release / reacquire)
        self.post = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(lib.address(native.POST))
        self.quit = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(lib.address(native.QUIT_FN))


_LOCK = threading.Lock()
_STATE_: dict[str, Any] = {"lib": None, "workers": [], "failed": False}


def _after_fork() -> None:
    """A forked child has none of the parent's threads: forget the workers (new ones start on use)."""
    global _LOCK
    _LOCK = threading.Lock()
    _STATE_["workers"] = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _tsc_per_us() -> float:
    """Time-stamp counter ticks per microsecond (from /proc/cpuinfo; 3000 when unknown)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return 3000.0


def available() -> bool:
    """Whether native workers can run here (Linux x86-64, not disabled with ``TRN_NATIVE_POOL=0``)."""
    if not _config.current.native_pool:
        return False
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64") \
        and not _STATE_["failed"]


def workers(n: int) -> list[_Worker]:
    """At least ``n`` native workers (started on first use), or [] when they are unavailable."""
    ws = _STATE_["workers"]
    if len(ws) >= n:
        return ws
    with _LOCK:
        try:
            if _STATE_["lib"] is None:
                _STATE_["lib"] = _Lib()
            while len(ws) < n:
                ws.append(_Worker(_STATE_["lib"], len(ws)))
        except Exception:  # no compiler / loader: the Python pool takes over
            _STATE_["failed"] = True
            return []
    return ws


def run(calls: Sequence[Launch]) -> bool:
    """Run ``calls`` concurrently: ``calls[0]`` on this thread, the others on native workers.

    Returns False (nothing run) when workers are unavailable or busy (a launch from another
    thread, or nested), so the caller can use its Python pool. Raises the first kernel error.
    """
    if not available():
        return False
    ws = workers(len(calls) - 1)
    if len(ws) < len(calls) - 1:
        return False
    with _LOCK:
        mine = []
        for w in ws:
            if not w.busy:
                mine.append(w)
                if len(mine) == len(calls) - 1:
                    break
        if len(mine) < len(calls) - 1:
            return False
        for w in mine:
            w.busy = True
    lib = _STATE_["lib"]
    posted: list[tuple[_Worker, Launch]] = []
    first_error: BaseException | None = None
    try:
        for w, c in zip(mine, calls[1:]):
            a = c.words
            j = w.job
            j[_FN] = c.entry
            j[_ARGS:_ARGS + 9] = (a[0], a[1], a[2], a[3], a[4], a[5], w.arena_for(c.arena_size), w.err.ctypes.data,
                                  a[8])
            lib.post(w.addr)
            posted.append((w, c))
        calls[0]()
    except BaseException as e:  # still wait for the workers below: they use the tensors' memory
        first_error = e
    finally:
        for w, c in posted:
            rc = lib.wait(w.addr)
            if rc and first_error is None:
                try:
                    c.on_error(w.err)
                except BaseException as e:
                    first_error = e
        with _LOCK:
            for w in mine:
                w.busy = False
    if first_error is not None:
        raise first_error
    return True
