"""Guard pages for debugging out-of-bounds accesses (``TRN_GUARD=1``).

A :class:`GuardedRegion` is an anonymous ``mmap`` with one ``PROT_NONE`` page before and one after
its usable bytes. The usable bytes *end* exactly at the trailing guard page, so writing (or reading)
even one byte past the end faults with SIGSEGV instead of silently corrupting a neighbour; an access
far enough before the start hits the leading guard page. Freeing the region unmaps it, so a later
use of a stale pointer faults as well.

With ``TRN_GUARD=1`` (read when :mod:`trnlang.device.memory` is imported) the ``trn`` device
allocates every block this way and bypasses its caching allocator (a reused block would hide
use-after-free and its size class would leave slack before the guard page). It is a debug mode:
each allocation costs an ``mmap`` and at least two pages, and the usable start is only aligned to
``gcd(nbytes, page size)`` (kernels and torch handle element-aligned pointers).

Example:
    >>> import ctypes
    >>> r = GuardedRegion(12)
    >>> ctypes.memmove(r.ptr, b"x" * 12, 12)  # doctest: +SKIP
    >>> # ctypes.memmove(r.ptr + 12, b"x", 1) would die with SIGSEGV
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any

import numpy as np

PAGE = mmap.PAGESIZE
_PROT_NONE = 0
_PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc: Any = None


def _lib() -> Any:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_long]
        lib.munmap.restype = ctypes.c_int
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mprotect.restype = ctypes.c_int
        lib.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _libc = lib
    return _libc


def env_enabled() -> bool:
    """True when ``TRN_GUARD`` is set to something other than empty/0/false/no/off (``trnlang.config``)."""
    from trnlang import config

    return config.current.guard


class GuardedRegion:
    """``nbytes`` usable bytes at ``ptr``, ending right before a ``PROT_NONE`` page (unmapped on free)."""

    __slots__ = ("base", "size", "ptr", "nbytes", "__weakref__")

    def __init__(self, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError(f"negative size {nbytes}")
        self.base = 0
        lib = _lib()
        data_pages = (nbytes + PAGE - 1) // PAGE
        size = (data_pages + 2) * PAGE
        base = lib.mmap(None, size, _PROT_RW, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if base is None or base == _MAP_FAILED:
            err = ctypes.get_errno()
            raise MemoryError(f"TRN_GUARD: mmap of {size} bytes failed: {os.strerror(err)}")
        self.base, self.size = int(base), size
        tail = self.base + (data_pages + 1) * PAGE
        for addr in (self.base, tail):
            if lib.mprotect(addr, PAGE, _PROT_NONE) != 0:
                err = ctypes.get_errno()
                lib.munmap(self.base, size)
                self.base = 0
                raise MemoryError(f"TRN_GUARD: mprotect failed: {os.strerror(err)}")
        self.ptr = tail - nbytes  # the end is aligned to the guard page, not the start
        self.nbytes = nbytes

    def data_ptr(self) -> int:
        """The usable start (the caching allocator's owners answer the same call)."""
        return self.ptr

    def np_bytes(self) -> np.ndarray:
        """The usable bytes as a flat uint8 numpy array that keeps the region alive."""
        h = _Interface()
        h.__array_interface__ = {"data": (self.ptr, False), "shape": (self.nbytes,), "typestr": "|u1", "version": 3}
        h.region = self
        return np.asarray(h)

    def __del__(self) -> None:
        if self.base:
            try:
                _lib().munmap(self.base, self.size)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass
            self.base = 0


class _Interface:
    """Carrier of an ``__array_interface__`` (numpy keeps it as the array's base, so ``region`` stays alive)."""

    __slots__ = ("__array_interface__", "region")
    __array_interface__: dict[str, Any]
    region: GuardedRegion
