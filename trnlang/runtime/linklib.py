"""Libraries that kernel objects link against: compiled once, cached on disk like kernels, loaded once per process.

A kernel that multiplies calls the gemm library (``codegen.gemmlib``) through declarations; before such a kernel's
object is loaded, :func:`ensure` makes sure each library it names is loaded in this process and its entry points
are registered with LLVM's symbol table (``codegen.llvm.add_symbol``), so the kernel's calls resolve to it.

A library object comes from the same per-user disk cache as kernels (``runtime.jit``'s store: HMAC-authenticated
entries named ``lib-<identity>.bin``, opened without following links; anything refused is rebuilt in memory and
never loaded; docs/cache_security.md), or is compiled (once across processes sharing the cache: the build lock)
and written there. A loaded library stays loaded for the life of the process (kernels may call it at any time).

Fork: the child inherits the loaded code and LLVM's symbol table with the memory; only the lock is renewed
(``runtime.forksafe``). Threads: the first kernel needing a library loads it under :data:`_lock`; the others wait
for it, later ones read :data:`_loaded` without the lock.

Example:
    >>> from codegen import gemmlib
    >>> ensure(["fp32"]); loaded()["fp32"] == gemmlib.identity("fp32")
    True
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["ensure", "loaded", "stats", "entry_name"]

_lock = threading.Lock()
_loaded: dict[str, Any] = {}   # identity -> codegen.llvm.LoadedModule (never freed)
_libs: dict[str, str] = {}     # library -> identity of its loaded copy
_stats = {"compiles": 0, "disk_hits": 0, "compile_s": 0.0}


def entry_name(lib: str) -> str:
    """The disk-cache key of library ``lib``'s object in this process (``lib-<identity>``)."""
    from codegen import gemmlib

    return f"lib-{lib}-{gemmlib.identity(lib)}"


def _object(lib: str, key: str) -> bytes:
    """The object code of ``lib``: from the disk cache, else compiled (and written there)."""
    from codegen import gemmlib, llvm
    from trnlang.runtime import jit

    entry = jit.read_entry(key)
    with jit._building(key) if entry is None else contextlib.nullcontext():
        if entry is None:  # another process may have built it while this one waited for the lock
            entry = jit.read_entry(key)
        if entry is not None:
            _stats["disk_hits"] += 1
            return entry[1]
        t0 = time.perf_counter()
        obj = llvm.compile_ir(gemmlib.library_module(lib))
        dt = time.perf_counter() - t0
        _stats["compiles"] += 1
        _stats["compile_s"] += dt
        jit.write_entry(key, {"key": key, "library": lib, "compile_s": round(dt, 3)}, obj)
        return obj


def ensure(libs: Iterable[str]) -> None:
    """Load (once per process) each library in ``libs`` and register its entry points for kernels to link."""
    from codegen import gemmlib, llvm

    for lib in libs:
        ident = gemmlib.identity(lib)
        if ident in _loaded:
            continue
        with _lock:
            if ident in _loaded:
                continue
            mod = llvm.load_object(_object(lib, entry_name(lib)))
            for entry in gemmlib.LIBS[lib]:
                name = gemmlib.symbol(lib, entry)
                llvm.add_symbol(name, mod.address(name))
            _loaded[ident] = mod
            _libs[lib] = ident


def loaded() -> dict[str, str]:
    """``{library: identity}`` of the libraries loaded in this process."""
    return dict(_libs)


def stats() -> dict[str, float]:
    """Library objects compiled and read from the disk cache by this process, and the seconds spent compiling."""
    return dict(_stats)
