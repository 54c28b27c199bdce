"""The JIT backend: compile a ``Kernel`` to native code (``codegen.lowering.kernel``), cache it, launch it.

``JitExecutor(kernel, debug)`` is the executor ``backend.make_executor`` returns
by default: ``run(arrays, grid)`` with the same contract as the interpreter's
``run_kernel`` (one numpy array per ``kernel.tensors``, any strides, mutated in
place; ``BoundsError`` naming the source line on an out-of-bounds access).

Specialization: one native variant per (tensor contiguity, whether two launch
arrays overlap in memory, grid). C-contiguous tensors get compile-time strides;
the others are addressed with run-time strides (in elements).

Caches: in memory per executor (at most ``TRN_MAX_LOADED_KERNELS`` variants per process stay
loaded, least recently used unloaded first: runtime/codecache.py); on disk under ``$TRN_CACHE_DIR`` (default
``~/.cache/trnlang``) in the per-user directory ``jit-<uid>`` through
``runtime.diskcache.Store``: entries are HMAC-authenticated with a per-user
secret and opened without following links; anything refused is rebuilt in
memory, never loaded (threat model: docs/cache_security.md). An entry's
payload is a JSON header (key, arena size...) + object code. The key hashes
the printed IR, argument dtypes and contiguity, grid, debug flag, target,
trnlang/llvmlite versions, host CPU name and features, the codegen sources and the identity of the gemm
libraries a kernel may link (``codegen.gemmlib``: compiled once, loaded by ``runtime.linklib`` before the kernel).

Launch: ctypes with declared argtypes, zero-copy pointers. Grid instances run
on a thread pool of ``os.cpu_count()`` threads (ctypes releases the GIL), each
thread with its own scratch arena, when the grid is large enough to pay for it
(measured on the first launches); kernels with ``device_print`` or kernel
allocated HBM scratch run their instances in order on the calling thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import functools
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from trnlang import config as _config
from trnlang.frontend.errors import BoundsError, LaunchError, TrnError
from trnlang.ir.nodes import Instr, Kernel, Loop, Region, instrs
from trnlang.ir.ops import Op
from trnlang.runtime import codecache, diskcache, forksafe
from trnlang.runtime import stats as _rstats

_N_PID = 3
_PARALLEL_MIN_NS = 150_000   # run a grid on the pool when sequential time would exceed this

_PRINT_CB = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))
_ARGTYPES = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]


# ------------------------------------------------------------------------------------------ disk cache


_stores: dict[tuple[str, str], diskcache.Store] = {}
_stores_lock = threading.Lock()


def _store() -> diskcache.Store | None:
    """This user's object store under ``$TRN_CACHE_DIR`` (None when the disk cache is off or refused)."""
    if not _config.current.disk_cache:
        return None
    from codegen import llvm
    from trnlang._version import __version__

    base = diskcache.cache_base()
    name = f"jit-{os.getuid()}"
    with _stores_lock:
        st = _stores.get((base, name))
        if st is None:
            ctx = "\0".join(["trnlang-jit", __version__, llvm.llvmlite_version, llvm.llvm_version]).encode()
            st = _stores[(base, name)] = diskcache.Store(base, name, context=ctx)
    return st if st.usable else None


def cache_dir() -> str | None:
    """The per-user object cache directory (created 0700), or None when it is unusable or refused."""
    st = _store()
    return st.path if st is not None else None


def fingerprint_sources() -> list[tuple[str, str]]:
    """``(package-relative name, path)`` of every source :func:`_codegen_fingerprint` hashes: codegen/ (sub-packages
    included), the IR package it reads (op table, index-range and bounds analyses) and the passes whose decisions
    it emits."""
    import codegen
    import trnlang.ir
    import trnlang.passes

    out = []
    for pkg in (codegen, trnlang.ir, trnlang.passes):
        root = os.path.dirname(os.path.abspath(pkg.__file__ or ""))
        for dirpath, dirnames, files in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    out.append((f"{pkg.__name__}/{os.path.relpath(path, root).replace(os.sep, '/')}", path))
    return out


@functools.cache
def _codegen_fingerprint() -> str:
    """Hash of the sources that decide what machine code a kernel gets (:func:`fingerprint_sources`): a change in
    any of them invalidates cached objects."""
    h = hashlib.sha256()
    for name, path in fingerprint_sources():
        with open(path, "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


#: How a launch array's strides are compiled (see ``layout_of``).
Layout = bool | tuple[int | None, ...]


def layout_of(a: np.ndarray) -> bool | tuple[int | None, ...]:
    """How a launch array's strides are compiled: True (C-contiguous: all strides compile-time), else per dim
    0 or 1 when that stride is 0 (broadcast) or one element (unit step), None when it is read at run time.

    Knowing a zero stride lets LLVM hoist a broadcast operand's load out of the inner loop and
    vectorise it (a column broadcast ``x * col`` ran its scalar loop otherwise).
    """
    if a.flags.c_contiguous:
        return True
    item = a.itemsize
    return tuple([0 if s == 0 else 1 if s == item else None for s in a.strides])


def _layout_text(c: Any) -> str:
    if c is True:
        return "1"
    if c is False:
        return "0"
    return "".join("z" if s == 0 else "u" if s == 1 else "r" for s in c)


def cache_key(ir_text: str, dtypes: Sequence[str], contiguous: Sequence[Layout], may_alias: bool,
              grid: Sequence[int], debug: bool, target: str) -> str:
    """sha256 naming one compiled variant."""
    from codegen import gemmlib, llvm
    from codegen.lowering import stream as lower_stream
    from codegen.lowering.kernel import LOWERING_VERSION
    from codegen.lowering.vecmath import libm_forced
    from trnlang._version import __version__

    parts = [
        "trnlang-jit", LOWERING_VERSION, __version__, llvm.llvmlite_version, llvm.host_cpu_key(),
        "libm" if libm_forced() else "vecmath",
        _codegen_fingerprint(), gemmlib.key(), str(lower_stream.NT_MIN_BYTES),
        target, ",".join(dtypes), ",".join(_layout_text(c) for c in contiguous),
        str(int(may_alias)), ",".join(str(g) for g in grid), str(int(debug)), ir_text,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def read_entry(key: str) -> tuple[dict[str, Any], bytes] | None:
    """(header, object bytes) of the authenticated cache entry for ``key``, or None (missing or refused)."""
    st = _store()
    payload = st.read(key + ".bin") if st is not None else None
    if payload is None or len(payload) < 4:
        return None
    n = int.from_bytes(payload[:4], "little")
    try:
        header = json.loads(payload[4:4 + n].decode())
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(header, dict) or header.get("key") != key:
        return None
    return header, payload[4 + n:]


def cached_kernel_names(keys: Sequence[str]) -> dict[str, int]:
    """How many of the cache entries ``keys`` (file stems) each kernel name has (authenticated entries only;
    entries written before names were recorded count under ``"?"``)."""
    out: dict[str, int] = {}
    for key in keys:
        entry = read_entry(key)
        if entry is not None:
            name = str(entry[0].get("kernel", "?"))
            out[name] = out.get(name, 0) + 1
    return out


def _building(key: str) -> contextlib.AbstractContextManager[bool]:
    """The cross-process build lock of the cache entry ``key`` (:meth:`diskcache.Store.building`): processes
    sharing the cache that miss the same kernel at once compile it once, the others load it."""
    st = _store()
    return st.building(key + ".bin") if st is not None else contextlib.nullcontext(False)


def write_entry(key: str, header: dict[str, Any], obj: bytes) -> None:
    """Store a compiled variant (authenticated, atomic; never raises)."""
    st = _store()
    if st is not None:
        h = json.dumps(header, sort_keys=True).encode()
        st.write(key + ".bin", len(h).to_bytes(4, "little") + h + obj)


# ------------------------------------------------------------------------------------------ variants


@dataclass
class Variant:
    """One compiled specialization."""

    fn: Any
    arena_size: int
    meta_words: int
    has_print: bool
    key: str
    params: tuple[Any, ...]
    ns_per_instance: float | None = None
    deferred: dict[int, TrnError] | None = None
    meta: np.ndarray | None = None
    meta_addr: int = 0
    uses_meta: bool = True
    timed: int = 0
    stats: dict[str, float] = field(default_factory=dict)
    metas: dict[Any, tuple[int, np.ndarray]] = field(default_factory=dict)
    used: bool = True    # launched since the eviction clock last passed (runtime/codecache.py)
    alive: bool = True   # False once evicted: caches holding it must drop it
    evict: Any = None    # unloads it from its executor (called by codecache)
    split: bool = False  # its outermost affine loop can run in parts on threads (``codegen/lowering/split.py``)
    split_ns: dict[Any, Any] = field(default_factory=dict)  # launch shapes -> timings, then whether to split


_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_tls = threading.local()


def num_threads() -> int:
    """Threads for grid instances: ``TRN_NUM_THREADS`` if set, else the machine's cores (``trnlang.config``)."""
    return _config.current.num_threads


def _get_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1,
                                                              thread_name_prefix="trn-jit")
    return _pool


def _err_buffer() -> tuple[np.ndarray, int]:
    """This thread's error record (read only after a failing call) and its address."""
    e = getattr(_tls, "err", None)
    if e is None:
        e = _tls.err = (np.zeros(64, np.int64),)
        _tls.err_addr = e[0].ctypes.data
    return e[0], _tls.err_addr


def _arena(size: int) -> int:
    """Address of this thread's 64-byte aligned scratch arena of at least ``size`` bytes."""
    buf = getattr(_tls, "arena", None)
    if buf is None or buf.size < size + 64:
        buf = np.empty(max(size, 1 << 16) + 64, np.uint8)
        _tls.arena = buf
        _tls.addr = (buf.ctypes.data + 63) & ~63
    return _tls.addr


def _instr_table(k: Kernel) -> list[tuple[Instr, tuple[Loop, ...]]]:
    out: list[tuple[Instr, tuple[Loop, ...]]] = []

    def rec(stmts: Sequence[Any], loops: tuple[Loop, ...]) -> None:
        for s in stmts:
            if isinstance(s, Loop):
                rec(s.body, (*loops, s))
            else:
                out.append((s, loops))

    rec(k.body, ())
    return out


class JitExecutor:
    """``run(arrays, grid)`` on native code compiled for this kernel."""

    def __init__(self, kernel: Kernel, debug: bool = False) -> None:
        self.kernel = kernel
        self.debug = debug
        self.variants: dict[tuple[Any, ...], Variant] = {}
        self._ir_text: str | None = None
        self._instrs: list[tuple[Instr, tuple[Loop, ...]]] | None = None
        self._has_scratch = bool(kernel.scratch)
        # accumulating DMA stores are read-modify-write: grid instances that may hit the same element run in order
        # DMA stores that accumulate into HBM race across grid instances; a matmul's PSUM accumulation does not
        self._has_accumulate = any(i.op is Op.DMA_COPY and i.attrs.get("accumulate") is not None
                                   for i in instrs(kernel.body))
        # tensors the kernel writes: only an overlap involving one of them needs the aliasing variant
        # (two read-only arguments on the same memory, as in ``x + x``, keep the fast one)
        from trnlang.interpret.interpreter import written_mask

        self.written = written_mask(kernel)
        # the arguments (not kernel-allocated outputs or scratch) it writes: each must be writable at launch
        n_params = len(kernel.params)
        self._written_params = tuple(i for i, w in enumerate(self.written) if w and i < n_params)
        self._cb = _PRINT_CB(self._print_cb)
        self._cb_addr = ctypes.cast(self._cb, ctypes.c_void_p).value
        self._sig: list[tuple[np.dtype, tuple[int, ...] | None]] | None = None
        self._sym_spec: tuple[tuple[Any, ...], tuple[Any, ...], bool] | None = None
        self._grids: dict[Any, tuple[int, ...]] = {}
        self._lock = threading.Lock()
        forksafe.track_lock(self, "_lock")
        self.last_compile: dict[str, float] = {}
        #: ``on_evict(executor, empty)`` after one of its variants was evicted (the owner drops its plans)
        self.on_evict: Any = None

    # ------------------------------------------------------------------ compile
    def ir_text(self) -> str:
        if self._ir_text is None:
            from trnlang.ir.printer import print_kernel

            self._ir_text = print_kernel(self.kernel)
        return self._ir_text

    def variant(self, contiguous: tuple[Layout, ...], may_alias: bool, grid: tuple[int, ...]) -> Variant:
        key = (contiguous, may_alias, grid)
        v = self.variants.get(key)
        if v is None:
            added = False
            with self._lock:
                v = self.variants.get(key)
                if v is None:
                    v = self._compile(contiguous, may_alias, grid)
                    v.evict = self._evict
                    self.variants[key] = v
                    added = True
            if added:
                codecache.add(v)  # may unload least recently used variants (never one a launch holds)
        return v

    def _evict(self, v: Variant) -> None:
        """Forget an evicted variant (its code is freed when the last launch holding it returns)."""
        if self.variants.get(v.params) is v:
            self.variants.pop(v.params, None)
        _rstats.count(self.kernel.name, "evictions")
        cb = self.on_evict
        if cb is not None:
            cb(self, not self.variants)

    def _compile(self, contiguous: tuple[Layout, ...], may_alias: bool, grid: tuple[int, ...]) -> Variant:
        from codegen import gemmlib, llvm
        from codegen.lowering.kernel import ENTRY, lower_kernel
        from trnlang.runtime import linklib

        t0 = time.perf_counter()
        k = self.kernel
        dtypes = [t.dtype.short for t in k.tensors]
        key = cache_key(self.ir_text(), dtypes, contiguous, may_alias, grid, self.debug, k.target)
        entry = read_entry(key)
        stats: dict[str, float] = {}
        deferred = None
        with _building(key) if entry is None else contextlib.nullcontext():
            if entry is None:  # another process may have built it while this one waited for the lock
                entry = read_entry(key)
            if entry is not None:
                header, obj = entry
                stats["source"] = 1.0
                _rstats.count(k.name, "disk_hits")
            else:
                _rstats.count(k.name, "compiles")
                low = lower_kernel(k, grid, contiguous, may_alias, self.debug)
                t1 = time.perf_counter()
                obj = llvm.compile_ir(low.module)
                stats["lower_s"] = t1 - t0
                stats["llvm_s"] = time.perf_counter() - t1
                header = {"key": key, "arena_size": low.arena_size, "meta_words": low.meta_words,
                          "has_print": low.has_print, "kernel": k.name, "libs": gemmlib.used(low.module),
                          "split": low.split}
                deferred = low.deferred
                write_entry(key, header, obj)
        t2 = time.perf_counter()
        linklib.ensure([str(x) for x in header.get("libs", ())])  # before the load: it resolves the kernel's calls
        stats["link_s"] = time.perf_counter() - t2
        lib = llvm.load_object(obj)
        fn = lib.cfunc(ENTRY, ctypes.c_int32, _ARGTYPES)
        stats["total_s"] = time.perf_counter() - t0
        self.last_compile = stats
        v = Variant(fn, int(header["arena_size"]), int(header["meta_words"]), bool(header["has_print"]), key,
                    (contiguous, may_alias, grid), deferred=deferred, stats=stats)
        v.split = bool(header.get("split", False))
        v.meta = np.zeros(max(1, v.meta_words), np.int64)
        v.meta_addr = v.meta.ctypes.data
        v.uses_meta = any(c is not True for c in contiguous) or \
            any(not isinstance(d, int) for t in k.tensors for d in t.shape)
        return v

    # ------------------------------------------------------------------ launch
    def __call__(self, arrays: list[np.ndarray], grid: Any = None) -> None:
        self.run(arrays, grid)

    def _signature(self) -> list[tuple[np.dtype, tuple[int, ...] | None]]:
        """Expected (dtype, shape) per launch array (shape None when symbolic): the cheap launch check."""
        if self._sig is None:
            out = []
            for t in self.kernel.tensors:
                static = all(isinstance(d, int) for d in t.shape)
                out.append((t.dtype.np, tuple(int(d) for d in t.shape) if static else None))
            self._sig = out
        return self._sig

    def _symbolic_ok(self, arrays: list[np.ndarray]) -> bool:
        """The cheap check of a shape-polymorphic launch: ranks, constant sizes, and equal sizes where the
        kernel's sizes share a symbol (anything else: the full check, which names the problem)."""
        spec = self._sym_spec
        if spec is None:
            first: dict[Any, tuple[int, int]] = {}
            consts, eqs = [], []
            for i, t in enumerate(self.kernel.tensors):
                for d, s in enumerate(t.shape):
                    if isinstance(s, int):
                        consts.append((i, d, s))
                    elif isinstance(s, sympy.Symbol):
                        if s in first:
                            eqs.append((i, d, *first[s]))
                        else:
                            first[s] = (i, d)
                    else:  # a size formula: the full check binds and evaluates it
                        spec = self._sym_spec = ((), (), False)
                        return False
            spec = self._sym_spec = (tuple(consts), tuple(eqs), True)
        cs, es, usable = spec
        if not usable:
            return False
        for i, d, n in cs:
            if arrays[i].shape[d] != n:
                return False
        for i, d, j, e in es:
            if arrays[i].shape[d] != arrays[j].shape[e]:
                return False
        return True

    def run(self, arrays: list[np.ndarray], grid: Any = None) -> None:
        """Execute every program instance of ``grid`` (default ``kernel.grid``) on ``arrays``, in place."""
        g = self._grid(grid)
        self._check_args(arrays)
        contiguous = tuple([layout_of(a) for a in arrays])
        copies: list[tuple[np.ndarray, np.ndarray]] = []
        if any(c is not True for c in contiguous):
            arrays, copies = _fix_strides(arrays)
            contiguous = tuple([layout_of(a) for a in arrays])
        ptrs = [a.__array_interface__["data"][0] for a in arrays]
        may_alias = _overlap(arrays, ptrs, contiguous, self.written)
        v = self.variants.get((contiguous, may_alias, g))
        if v is None:
            v = self.variant(contiguous, may_alias, g)
        v.used = True
        meta_addr, meta = (_launch_meta(v, arrays) if v.uses_meta else (v.meta_addr, None))
        n = len(g)
        g0 = g[0] if n > 0 else 1
        g1 = g[1] if n > 1 else 1
        g2 = g[2] if n > 2 else 1
        total = g0 * g1 * g2
        if total == 0:
            return
        ptr_arr = (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs)
        try:
            self._launch(v, ptr_arr, meta_addr, (g0, g1, g2), total, arrays)
        finally:
            del meta  # kept alive until the launch is over
            for dst, src in copies:
                dst[...] = src

    def _grid(self, grid: Any) -> tuple[int, ...]:
        """The launch grid as a tuple of ints (memoised per spelling)."""
        if isinstance(grid, list):
            grid = tuple(grid)
        g = self._grids.get(grid)
        if g is None:
            k = self.kernel
            g = tuple(int(x) for x in (k.grid if grid is None else grid))
            if len(g) > _N_PID or any(x < 0 for x in g):
                raise LaunchError(f"bad grid {g}", loc=k.loc)
            self._grids[grid] = g
        return g

    def _check_args(self, arrays: list[np.ndarray]) -> None:
        """The cheap signature check (the full one when it fails or sizes are symbolic), then read-only outputs."""
        sig = self._signature()
        ok = len(arrays) == len(sig)
        symbolic = False
        if ok:
            for a, (dt, shape), t in zip(arrays, sig, self.kernel.tensors):
                if not isinstance(a, np.ndarray) or a.dtype != dt:
                    ok = False
                    break
                if shape is None:
                    symbolic = True
                    if a.ndim != len(t.shape):
                        ok = False
                        break
                elif a.shape != shape:
                    ok = False
                    break
        if ok and symbolic:
            ok = self._symbolic_ok(arrays)
        if not ok:
            self._check(arrays)
        for i in self._written_params:  # a store to read-only memory would be a SIGSEGV or a silent write
            if not arrays[i].flags.writeable:
                from trnlang.interpret.interpreter import raise_read_only

                raise_read_only(self.kernel, i)

    def _launch(self, v: Variant, ptr_arr: Any, meta_addr: int, gg: tuple[int, int, int], total: int,
                arrays: list[np.ndarray]) -> None:
        cb_addr = self._cb_addr if v.has_print else None
        ncpu = num_threads()
        if total == 1 and v.split and ncpu > 1 and self._run_split(v, ptr_arr, meta_addr, arrays, ncpu):
            return
        sequential = (total == 1 or v.has_print or self._has_scratch or self._has_accumulate or ncpu == 1 or v.timed < 2
                      or v.ns_per_instance is None or v.ns_per_instance * total < _PARALLEL_MIN_NS)
        if sequential:
            err, err_addr = _err_buffer()
            if v.timed < 2 and total > 1:
                t0 = time.perf_counter_ns()
                rc = v.fn(ptr_arr, meta_addr, 0, total, gg[1], gg[2], _arena(v.arena_size), err_addr, cb_addr)
                v.ns_per_instance = (time.perf_counter_ns() - t0) / total
                v.timed += 1
            else:
                rc = v.fn(ptr_arr, meta_addr, 0, total, gg[1], gg[2], _arena(v.arena_size), err_addr, cb_addr)
            if rc:
                self._raise(v, err, arrays)
            return
        workers = min(ncpu, total)
        bounds = [(total * w // workers, total * (w + 1) // workers) for w in range(workers)]
        errs = [np.zeros(64, np.int64) for _ in bounds]

        def work(i: int) -> int:
            lo, hi = bounds[i]
            return int(v.fn(ptr_arr, meta_addr, lo, hi, gg[1], gg[2], _arena(v.arena_size), errs[i].ctypes.data,
                            None))

        futs = [_get_pool().submit(work, i) for i in range(1, workers)]
        rcs = [work(0)] + [f.result() for f in futs]
        for rc, err in zip(rcs, errs):
            if rc:
                self._raise(v, err, arrays)

    def _run_split(self, v: Variant, ptr_arr: Any, meta_addr: int, arrays: list[np.ndarray], ncpu: int) -> bool:
        """Run a grid-(1,) launch of a split-capable variant (``runtime/split.py``): timed whole runs first, then
        in parts when long enough. False: the caller runs it whole."""
        from trnlang.runtime import split

        key = tuple([a.shape for a in arrays])
        d = v.split_ns.get(key)
        if d is None:
            if len(v.split_ns) > 256:
                v.split_ns.clear()
            d = v.split_ns[key] = split.Decision()
        if d.split is False:
            return False

        def raise_err(err: np.ndarray) -> None:
            self._raise(v, err, arrays)

        ptr_addr = ctypes.addressof(ptr_arr)
        if d.split is None:
            d.timed(split.Part(v.fn, ptr_addr, meta_addr, 0, 1, v.arena_size, raise_err))
            return True
        return split.run_parts(split.parts_of(v.fn, ptr_addr, meta_addr, v.arena_size, raise_err, ncpu))

    def _check(self, arrays: list[np.ndarray]) -> None:
        from trnlang.interpret.interpreter import check_launch

        check_launch(self.kernel, arrays, {})

    # ------------------------------------------------------------------ errors and printing
    def instrs(self) -> list[tuple[Instr, tuple[Loop, ...]]]:
        if self._instrs is None:
            self._instrs = _instr_table(self.kernel)
        return self._instrs

    @staticmethod
    def _where(err: np.ndarray, loops: Sequence[Loop]) -> str:
        from codegen.lowering.kernel import ERR_LOOPS, ERR_PIDS

        pids = ", ".join(str(int(err[ERR_PIDS + a])) for a in range(_N_PID))
        lv = "".join(f" {lp.var}={int(err[ERR_LOOPS + k])}" for k, lp in enumerate(loops))
        return f"pid=({pids}){lv}"

    def _raise(self, v: Variant, err: np.ndarray, arrays: list[np.ndarray]) -> None:
        from codegen.lowering.kernel import (
            ERR_A,
            ERR_B,
            ERR_C,
            ERR_INDEX,
            ERR_INSTR,
            ERR_KIND,
            ERR_POS,
            KIND_ACCESS,
            KIND_DEFERRED,
            KIND_REGION,
            KIND_STEP,
        )
        from codegen.lowering.plan import all_regions

        kind, iid = int(err[ERR_KIND]), int(err[ERR_INSTR])
        table = self.instrs()
        if kind == KIND_STEP:
            from codegen.lowering.kernel import all_loops

            lp = all_loops(self.kernel.body)[int(err[ERR_A])]
            raise ValueError(f"loop {lp.var} has step 0")
        ins, loops = table[iid]
        where = self._where(err, loops)
        op = ins.op.value
        if kind == KIND_ACCESS:
            acc = [*ins.outs, *ins.ins][int(err[ERR_B])]
            shape = [int(s) for s in acc.shape]
            arr = arrays[[id(t) for t in self.kernel.tensors].index(id(acc.tensor))]
            pos = [int(x) for x in err[ERR_POS:ERR_POS + len(shape)]]
            at = [int(x) for x in err[ERR_INDEX:ERR_INDEX + len(acc.index)]]
            raise BoundsError(f"{op}: index {at} is out of bounds for tensor {acc.tensor.name} of shape "
                              f"{tuple(arr.shape)} (tile element {pos} of {shape}; {int(err[ERR_A])} element(s) out "
                              f"of bounds) (at {where})", loc=ins.loc)
        if kind == KIND_REGION:
            r: Region = all_regions(ins)[int(err[ERR_C])]
            d, s = int(err[ERR_A]), int(err[ERR_B])
            raise BoundsError(f"{op}: region [{s}:{s + r.sizes[d]}] of dimension {d} is outside buffer "
                              f"{r.buf.name} of shape {tuple(r.buf.shape)} (at {where})", loc=ins.loc)
        if kind == KIND_DEFERRED:
            if v.deferred is None:
                from codegen.lowering.kernel import lower_kernel

                contiguous, may_alias, grid = v.params
                v.deferred = lower_kernel(self.kernel, grid, contiguous, may_alias, self.debug).deferred
            e = v.deferred.get(iid)
            if e is not None:
                raise e
        raise RuntimeError(f"trnlang JIT: unknown error record {err[:8].tolist()}")

    def _print_cb(self, iid: int, data: int, vals: Any) -> None:
        try:
            ins, loops = self.instrs()[iid]
            r = ins.ins[0]
            if isinstance(r, Region):
                dt = r.dtype
                shape = tuple(int(s) for s in r.shape)
            else:
                from trnlang.ir.types import DType

                dt = DType.float32 if isinstance(getattr(r, "value", None), float) else DType.int32
                shape = ()
            n = int(np.prod(shape)) if shape else 1
            raw = (ctypes.c_char * (n * dt.itemsize)).from_address(data)
            tile = np.frombuffer(memoryview(raw), dtype=dt.np, count=n).reshape(shape).copy()
            pids = ", ".join(str(int(vals[a])) for a in range(_N_PID))
            lv = "".join(f" {lp.var}={int(vals[_N_PID + k])}" for k, lp in enumerate(loops))
            label = ins.attrs.get("label", "")
            with np.printoptions(threshold=1 << 16, linewidth=120):
                print(f"[{self.kernel.name} pid=({pids}){lv}] {label}: {dt.short}{list(tile.shape)}\n"
                      f"{np.array2string(tile)}", flush=True)
        except Exception as e:  # noqa: BLE001 - never unwind through native frames
            print(f"trnlang device_print failed: {e!r}", file=sys.stderr)


def _launch_meta(v: Variant, arrays: list[np.ndarray]) -> tuple[int, np.ndarray]:
    """The shape/stride block of a launch and its address. Blocks are never written after they are made, so
    launches (also concurrent ones) of the same shapes and strides share one; a variant keeps a few."""
    key = tuple([(a.shape, a.strides) for a in arrays])
    hit = v.metas.get(key)
    if hit is not None:
        return hit
    meta = np.zeros(max(1, v.meta_words), np.int64)
    pos = 0
    for a in arrays:
        nd = a.ndim
        if nd:
            meta[pos:pos + nd] = a.shape
            meta[pos + nd:pos + 2 * nd] = [st // a.itemsize for st in a.strides]
        pos += 2 * nd
    if len(v.metas) >= 64:
        v.metas.clear()
    v.metas[key] = hit = (meta.ctypes.data, meta)
    return hit


def _fix_strides(arrays: list[np.ndarray]) -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    """Arrays whose strides are not whole elements are run on contiguous copies (copied back after)."""
    out, copies = arrays, []
    for i, a in enumerate(arrays):
        if any(s % a.itemsize for s in a.strides) or a.ctypes.data % min(a.itemsize, 8):
            c = np.ascontiguousarray(a)
            if c is a:
                continue
            if out is arrays:
                out = list(arrays)
            out[i] = c
            copies.append((a, c))
    return out, copies


def _overlap(arrays: list[np.ndarray], ptrs: list[int], contiguous: tuple[Any, ...],
             written: Sequence[bool] | None = None) -> bool:
    """Whether the memory extents of two launch arrays intersect, one of them written by the kernel.

    ``written[i]``: the kernel stores to array ``i`` (None: treat every array as written).
    """
    if len(arrays) < 2:
        return False
    ext = []
    for i, (a, p, c) in enumerate(zip(arrays, ptrs, contiguous)):
        w = True if written is None or i >= len(written) else written[i]
        if c is True:
            if a.nbytes:
                ext.append((p, p + a.nbytes, w))
            continue
        if a.size == 0:
            continue
        lo = hi = p
        for n, st in zip(a.shape, a.strides):
            if st > 0:
                hi += (n - 1) * st
            else:
                lo += (n - 1) * st
        ext.append((lo, hi + a.itemsize, w))
    return spans_conflict(ext)


def spans_conflict(spans: list[tuple[int, int, bool]]) -> bool:
    """Whether two ``(lo, hi, written)`` byte spans intersect with at least one of them written."""
    spans = sorted(spans)
    for i in range(len(spans)):
        lo_i, hi_i, w_i = spans[i]
        for j in range(i + 1, len(spans)):
            lo_j, hi_j, w_j = spans[j]
            if lo_j >= hi_i:
                break
            if w_i or w_j:
                return True
    return False


def run_kernel(kernel: Kernel, arrays: list[np.ndarray], grid: tuple[int, ...] | None = None,
               debug: bool = False) -> None:
    """Compiled counterpart of ``trnlang.interpret.interpreter.run_kernel`` (executor cached on the kernel)."""
    ex = getattr(kernel, "_trn_jit", None)
    if ex is None or ex.debug != debug:
        ex = JitExecutor(kernel, debug)
        kernel._trn_jit = ex  # type: ignore[attr-defined]
    ex.run(arrays, grid)
