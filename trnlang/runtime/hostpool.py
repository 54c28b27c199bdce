"""Native worker threads for the launches of one op split across the host's cores.

A device op that splits its work into one launch per thread (``stdlib_kernels._util.run_parallel``)
used to hand the other launches to a ``concurrent.futures`` pool: a Python thread woken through a
queue, which then needs the GIL before it can even start its native call. On a small host that
handoff costs 30 to 70 microseconds per op, a tenth of a 16 MiB layer norm.

Here each worker is a thread that lives in machine code compiled once with llvmlite
(``trn_worker``): it never holds the GIL. It waits on a 128-byte job slot: it spins (with
``pause``) for :data:`SPIN_US` microseconds after its last job, then sleeps on a futex. The
calling thread writes a launch (the kernel entry's address and its arguments, the worker's own
arena and error record) into the slot, posts it (``trn_post``: one atomic store, a futex wake only
if the worker sleeps), runs its own launch, and waits (``trn_wait``: spin, then ``sched_yield``).
A spinning worker starts a posted launch within a microsecond, as an OpenMP team does.

Only launches that are fully resolved to a native call can go to a worker (``KernelFn.bind`` of
a warm launch plan: :class:`NativeLaunch`); anything else runs on the Python pool. Linux x86-64
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
from typing import Any

import numpy as np

__all__ = ["NativeLaunch", "available", "run", "SPIN_US", "workers"]

#: how long an idle worker spins before it sleeps (microseconds)
SPIN_US = 200
#: job slot words (128 bytes: one slot never shares a cache line pair with another)
_WORDS = 16
_STATE, _SLEEPING, _FN, _ARGS, _RC = 0, 1, 2, 3, 12   # _ARGS: the 9 words of the kernel entry ABI
_IDLE, _POSTED, _DONE, _QUIT = 0, 1, 2, -1

_IR = r"""
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
declare void @llvm.x86.sse2.pause()
declare i64 @llvm.readcyclecounter()

define internal i64 @slot(ptr %job, i64 %k) alwaysinline {
  %p = getelementptr i64, ptr %job, i64 %k
  %v = load atomic i64, ptr %p seq_cst, align 8
  ret i64 %v
}

define internal void @set(ptr %job, i64 %k, i64 %v) alwaysinline {
  %p = getelementptr i64, ptr %job, i64 %k
  store atomic i64 %v, ptr %p seq_cst, align 8
  ret void
}

define internal void @wake(ptr %job) {
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %job, i64 129, i64 1, ptr null, ptr null, i64 0)
  ret void
}

; the worker: wait for a posted job, run it, mark it done; return on QUIT
define void @trn_worker(ptr %job, i64 %spin_cycles) {
entry:
  br label %idle
idle:
  %t0 = call i64 @llvm.readcyclecounter()
  br label %spin
spin:
  %s = call i64 @slot(ptr %job, i64 0)
  %posted = icmp eq i64 %s, 1
  br i1 %posted, label %run, label %notposted
notposted:
  %quit = icmp eq i64 %s, -1
  br i1 %quit, label %exit, label %pause
pause:
  call void @llvm.x86.sse2.pause()
  %t = call i64 @llvm.readcyclecounter()
  %el = sub i64 %t, %t0
  %more = icmp ult i64 %el, %spin_cycles
  br i1 %more, label %spin, label %sleep
sleep:
  call void @set(ptr %job, i64 1, i64 1)
  %s2 = call i64 @slot(ptr %job, i64 0)
  %p2 = icmp eq i64 %s2, 1
  %q2 = icmp eq i64 %s2, -1
  %go = or i1 %p2, %q2
  br i1 %go, label %awake, label %wait
wait:
  %s2w = and i64 %s2, 4294967295
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %job, i64 128, i64 %s2w, ptr null, ptr null, i64 0)
  br label %awake
awake:
  call void @set(ptr %job, i64 1, i64 0)
  br label %idle
run:
  %fn = call i64 @slot(ptr %job, i64 2)
  %a0 = call i64 @slot(ptr %job, i64 3)
  %a1 = call i64 @slot(ptr %job, i64 4)
  %a2 = call i64 @slot(ptr %job, i64 5)
  %a3 = call i64 @slot(ptr %job, i64 6)
  %a4 = call i64 @slot(ptr %job, i64 7)
  %a5 = call i64 @slot(ptr %job, i64 8)
  %a6 = call i64 @slot(ptr %job, i64 9)
  %a7 = call i64 @slot(ptr %job, i64 10)
  %a8 = call i64 @slot(ptr %job, i64 11)
  %fp = inttoptr i64 %fn to ptr
  %p0 = inttoptr i64 %a0 to ptr
  %p1 = inttoptr i64 %a1 to ptr
  %p6 = inttoptr i64 %a6 to ptr
  %p7 = inttoptr i64 %a7 to ptr
  %p8 = inttoptr i64 %a8 to ptr
  %rc = call i32 %fp(ptr %p0, ptr %p1, i64 %a2, i64 %a3, i64 %a4, i64 %a5, ptr %p6, ptr %p7, ptr %p8)
  %rc64 = sext i32 %rc to i64
  call void @set(ptr %job, i64 12, i64 %rc64)
  call void @set(ptr %job, i64 0, i64 2)
  br label %idle
exit:
  ret void
}

; post the job written in the slot; wake the worker if it sleeps
define void @trn_post(ptr %job) {
  call void @set(ptr %job, i64 0, i64 1)
  %sl = call i64 @slot(ptr %job, i64 1)
  %asleep = icmp ne i64 %sl, 0
  br i1 %asleep, label %w, label %done
w:
  call void @wake(ptr %job)
  br label %done
done:
  ret void
}

; wait until the posted job is done; returns its result code and frees the slot
define i64 @trn_wait(ptr %job) {
entry:
  br label %loop
loop:
  %n = phi i64 [ 0, %entry ], [ %n1, %next ]
  %s = call i64 @slot(ptr %job, i64 0)
  %done = icmp eq i64 %s, 2
  br i1 %done, label %finish, label %next0
next0:
  %long = icmp ugt i64 %n, 20000
  br i1 %long, label %yield, label %pause
yield:
  %y = call i32 @sched_yield()
  br label %next
pause:
  call void @llvm.x86.sse2.pause()
  br label %next
next:
  %n1 = add i64 %n, 1
  br label %loop
finish:
  %rc = call i64 @slot(ptr %job, i64 12)
  call void @set(ptr %job, i64 0, i64 0)
  ret i64 %rc
}

; stop a worker (it returns from trn_worker)
define void @trn_quit(ptr %job) {
  call void @set(ptr %job, i64 0, i64 -1)
  call void @wake(ptr %job)
  ret void
}
"""


class NativeLaunch:
    """A kernel launch resolved to one native call (made by ``KernelFn.bind``); callable in any thread.

    ``entry``: the kernel entry's address; ``args``: the nine words of the entry ABI, with the
    arena and error record slots (6 and 7) filled per thread; ``arena_size``: bytes of scratch;
    ``on_error(err)``: raises the kernel's error from its error record.
    """

    __slots__ = ("entry", "args", "arena_size", "on_error", "call", "keep")

    def __init__(self, entry: int, args: list[int], arena_size: int, on_error: Any, call: Any, keep: Any) -> None:
        self.entry = entry
        self.args = args
        self.arena_size = arena_size
        self.on_error = on_error
        self.call = call
        self.keep = keep  # objects whose memory the words point at (pointer array, meta block)

    def __call__(self) -> None:
        self.call()


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
        from codegen import llvm

        lib = llvm.load_object(llvm.compile_ir(_IR))
        self.module = lib
        # CFUNCTYPE: the GIL is released while the worker loop / the wait runs
        self.worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(lib.address("trn_worker"))
        self.wait = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(lib.address("trn_wait"))
        # the post is a store and maybe a syscall: keep the GIL (PYFUNCTYPE avoids a release / reacquire)
        self.post = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(lib.address("trn_post"))
        self.quit = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(lib.address("trn_quit"))


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
    if os.environ.get("TRN_NATIVE_POOL", "1").strip().lower() in ("0", "false", "no", "off"):
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


def run(calls: Sequence[NativeLaunch]) -> bool:
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
    posted: list[tuple[_Worker, NativeLaunch]] = []
    first_error: BaseException | None = None
    try:
        for w, c in zip(mine, calls[1:]):
            a = c.args
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
