"""Simulated HBM: where the bytes of ``trn`` tensors live, and the tensors that point at them.

Design (see TORCH_DEVICE_NOTES.md):

- A :class:`HbmBlock` is one allocation of simulated HBM: host memory (a CPU ``UntypedStorage``
  by default, or the storage of a CPU result adopted zero-copy) with its address and size.
- A ``trn`` tensor is a plain ``torch.Tensor`` on ``trn:0`` whose sizes, strides and storage offset
  are the truth. Its storage is a non-owning, non-resizable ``trn`` storage made from the block's
  address (so ``data_ptr()`` is real and aliasing checks work), and the storage's Python object
  carries the block (``_trn_block``). PyTorch preserves a storage's Python object while the
  storage lives, so every alias C++ creates (views, detach, ``Parameter``, grads) finds the bytes,
  and the block is freed exactly when the last tensor using it dies.
- CPU views (for the CPU fallback and host copies) and numpy views (for kernel launches) are
  zero-copy windows on the same bytes, with the tensor's real strides and offset.

Example:
    >>> import torch, trnlang.device.memory as mem
    >>> t = mem.empty((2, 3), torch.float32)            # doctest: +SKIP
    >>> mem.cpu_view(t).fill_(1.0); t.cpu().sum().item()  # doctest: +SKIP
    6.0
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Sequence

import numpy as np
import torch

from trnlang import config as _config
from trnlang.device import guard as _guard
from trnlang.ir.types import to_dtype

DEVICE = torch.device("trn", 0)
_CPU_KS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_META_KS = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_SET = torch.ops.aten.set_.source_Storage_storage_offset
_construct = torch._C._construct_storage_from_data_pointer
_create_empty = torch._C._acc.create_empty_tensor
_CPU = torch.device("cpu")


class _Stats:
    """Allocation counters of the device (one simulated NeuronCore)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # re-entrant: a block freed by GC inside a locked section
        self.allocated = 0
        self.peak = 0
        self.count = 0
        self.total_allocs = 0
        self.total_frees = 0
        self.capacity: int | None = None  # an override (tests, tools); None: the target's figure
        self._by_target: dict[str, int] = {}

    def hbm_capacity(self) -> int:
        """HBM per core of the current target (``TRN_TARGET`` in the :mod:`trnlang.config` snapshot, else the
        default target)."""
        if self.capacity is not None:
            return self.capacity
        key = _config.current.target or ""
        cap = self._by_target.get(key)
        if cap is None:
            from trnlang.sim.targets import get_target

            cap = self._by_target[key] = int(get_target(key or None).hbm_bytes_per_core)
        return cap


STATS = _Stats()
_READY: list[bool] = []


def _first_use() -> None:
    """The first device tensor of the process: import the stdlib lowerings (outside torch's import)."""
    _READY.append(True)
    from trnlang.device import backend

    backend.ensure_lowerings()


class _Interface:
    """Carrier of an ``__array_interface__`` (numpy keeps it as the array's base, so ``block`` stays alive)."""

    __slots__ = ("__array_interface__", "block")
    __array_interface__: dict[str, Any]
    block: HbmBlock


class HbmBlock:
    """One allocation of simulated HBM (host memory), kept alive by the storages that use it.

    Blocks made by the allocator return their host memory to the cache (:class:`_Cache`) when they die.
    """

    __slots__ = ("owner", "ptr", "nbytes", "cached", "__weakref__")

    def __init__(self, owner: Any, ptr: int, nbytes: int, cached: int = 0) -> None:
        self.owner = owner
        self.ptr = ptr
        self.nbytes = nbytes
        self.cached = cached  # size class of the cache this block's memory came from (0: not the allocator's)
        with STATS.lock:
            STATS.allocated += nbytes
            STATS.count += 1
            STATS.total_allocs += 1
            STATS.peak = max(STATS.peak, STATS.allocated)

    def __del__(self) -> None:
        try:
            with STATS.lock:
                STATS.allocated -= self.nbytes
                STATS.count -= 1
                STATS.total_frees += 1
                if self.cached:
                    CACHE.put(self.cached, self.owner)
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    # Storages point at the block, never the reverse (no reference cycle: the bytes are freed as
    # soon as the last storage dies, without waiting for the garbage collector).
    def trn_storage(self) -> Any:
        """A new ``trn`` storage over this block (make one per block: aliases share it)."""
        st: Any = _construct(self.ptr, DEVICE, self.nbytes)  # a Python attribute rides on the storage
        st._trn_block = self
        return st

    def cpu_storage(self) -> Any:
        """A non-resizable CPU storage over the same bytes (a CPU op can never reallocate them)."""
        st: Any = _construct(self.ptr, _CPU, self.nbytes)
        st._trn_block = self  # CPU views that escape keep the bytes alive
        return st

    def np_bytes(self) -> np.ndarray:
        """The block as a flat numpy uint8 array (zero-copy) that keeps the block alive.

        Not cached on the block: the array references the block, and a cache would make a cycle.
        """
        if self.nbytes == 0:
            return np.empty(0, np.uint8)
        h = _Interface()  # the array interface is the cheapest way to wrap an address
        h.__array_interface__ = {"data": (self.ptr, False), "shape": (self.nbytes,), "typestr": "|u1", "version": 3}
        h.block = self
        return np.asarray(h)


class _Cache:
    """A caching allocator (like CUDA's): freed host memory is kept by size class and reused.

    Reuse skips the host allocator and, for big blocks, the page faults of touching fresh memory.
    Size classes: multiples of 512 bytes up to 1 MiB, of 2 MiB above. The cache holds at most
    ``limit`` bytes (``TRN_CACHE_LIMIT_MB``, default 1024); ``torch.trn.empty_cache()`` releases it.
    Callers hold ``STATS.lock``.
    """

    def __init__(self) -> None:
        self.free: dict[int, list[Any]] = {}
        self.bytes = 0
        self.limit = _config.current.cache_limit_mb << 20

    @staticmethod
    def size_class(nbytes: int) -> int:
        if nbytes <= 1 << 20:
            return max(512, (nbytes + 511) & ~511)
        return (nbytes + (2 << 20) - 1) & ~((2 << 20) - 1)

    def get(self, cls: int) -> Any:
        lst = self.free.get(cls)
        if lst:
            self.bytes -= cls
            return lst.pop()
        return None

    def put(self, cls: int, owner: Any) -> None:
        if self.bytes + cls > self.limit:
            return  # over the limit: the host memory is freed
        self.free.setdefault(cls, []).append(owner)
        self.bytes += cls

    def clear(self) -> None:
        self.free.clear()
        self.bytes = 0


CACHE = _Cache()


def _new_block(nbytes: int) -> HbmBlock:
    cap = STATS.hbm_capacity()
    if STATS.allocated + nbytes > cap and _IDLE_RELEASERS:
        for release in _IDLE_RELEASERS:  # idle pooled outputs of the fast lane count as allocated
            release()
    if STATS.allocated + nbytes > cap:
        raise torch.OutOfMemoryError(
            f"trn: out of memory: tried to allocate {nbytes} bytes with {STATS.allocated} of {cap} bytes of "
            "simulated HBM in use (the target's HBM per core; set TRN_TARGET or free tensors)")
    if GUARD:  # debug mode: every block ends right before a PROT_NONE page; no caching (see guard.py)
        region = _guard.GuardedRegion(nbytes)
        return HbmBlock(region, region.ptr, nbytes, 0)
    cls = _Cache.size_class(nbytes)
    with STATS.lock:
        owner = CACHE.get(cls)
    if owner is None:
        owner = torch.UntypedStorage(cls)  # 64-byte aligned host memory
    return HbmBlock(owner, owner.data_ptr(), nbytes, cls)


#: ``TRN_GUARD=1`` (read at import): allocate every block between guard pages, bypassing the cache
GUARD = _guard.env_enabled()

#: callables releasing memory held for reuse outside the cache (the fast lane's idle outputs)
_IDLE_RELEASERS: list[Any] = []
#: callables returning bytes counted in ``STATS.allocated`` that no tensor uses (idle pooled outputs)
IDLE_COUNTERS: list[Any] = []


def idle_bytes() -> int:
    """Bytes counted as allocated that are only held for reuse (see :mod:`trnlang.device.fastlane`)."""
    return sum(f() for f in IDLE_COUNTERS)


def empty_cache() -> None:
    """Release the host memory the caching allocator holds (and idle pooled outputs)."""
    for release in _IDLE_RELEASERS:
        release()
    with STATS.lock:
        CACHE.clear()


def block_of(t: torch.Tensor) -> HbmBlock:
    """The HBM block behind a ``trn`` tensor (its storage's memory adopted if made elsewhere, e.g. DLPack)."""
    st = t.untyped_storage()
    blk = getattr(st, "_trn_block", None)
    if blk is None:
        blk = foreign_block(st)
    if blk is None:
        raise RuntimeError("trn: this tensor's storage has no device memory attached (not created by trnlang)")
    return blk


def foreign_block(storage: Any) -> HbmBlock | None:
    """Adopt the memory of a ``trn`` storage made outside the device layer as its block.

    ``torch.from_dlpack`` of a ``trn`` tensor's capsule (and C++ ``from_blob`` on the device) make storages
    over memory torch was handed: device memory is host memory, so that memory *is* the block. The
    block keeps the storage (and so the memory's owner) alive; it is attached as the storage's ``_trn_block``,
    so later launches and CPU views find it directly. None for storages that are not ``trn`` or have no bytes
    behind a null pointer.
    """
    if storage.device.type != DEVICE.type:
        return None
    ptr, n = storage.data_ptr(), storage.nbytes()
    if not ptr and n:
        return None
    blk = HbmBlock(storage, ptr, n)
    storage._trn_block = blk
    return blk


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of ``shape`` (size-0/1 dims get the stride they would have)."""
    strides = [1] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(int(shape[i]), 1)
    return tuple(strides)


def storage_nbytes(shape: Sequence[int], strides: Sequence[int], itemsize: int, offset: int = 0) -> int:
    """Bytes a strided tensor needs from the start of its storage (0 for an empty tensor)."""
    if any(int(s) == 0 for s in shape):
        return 0
    last = offset + sum((int(n) - 1) * int(st) for n, st in zip(shape, strides))
    return (last + 1) * itemsize


def wrap(storage: Any, dtype: torch.dtype, shape: Sequence[int], strides: Sequence[int],
         offset: int | torch.SymInt = 0) -> torch.Tensor:
    """A new ``trn`` tensor over a ``trn`` storage with the given metadata."""
    if not _READY:
        _first_use()
    t = _create_empty((0,), dtype)
    _SET.redispatch(_CPU_KS, t, storage, offset, tuple(shape), tuple(strides))
    return t


def empty_strided(shape: Sequence[int], strides: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Allocate a ``trn`` tensor with the given sizes and strides."""
    shape = tuple([int(s) for s in shape])
    strides = tuple([int(s) for s in strides])
    blk = _new_block(storage_nbytes(shape, strides, dtype.itemsize))
    if not _READY:
        _first_use()
    if blk.nbytes and strides == contiguous_strides(shape):
        return _on_block(blk, shape, dtype)
    t = _create_empty((0,), dtype)
    _SET.redispatch(_CPU_KS, t, blk.trn_storage(), 0, shape, strides)
    return t


def empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Allocate a contiguous ``trn`` tensor (the allocation fast path of the lowerings)."""
    shape = tuple([int(s) for s in shape])
    n = 1
    for s in shape:
        n *= s
    if n == 0:
        return empty_strided(shape, contiguous_strides(shape), dtype)
    blk = _new_block(n * dtype.itemsize)
    if not _READY:
        _first_use()
    return _on_block(blk, shape, dtype)


def _on_block(blk: HbmBlock, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous ``trn`` tensor of ``shape`` on ``blk``: made with its sizes and an empty storage, whose bytes
    are then swapped with a storage over the block (~1.5 us; ``set_`` is a boxed redispatch, ~3.5)."""
    t = _create_empty(shape, dtype)
    st: Any = t.untyped_storage()
    st._swap_data_ptr_(_construct(blk.ptr, DEVICE, blk.nbytes))
    st._trn_block = blk  # the storage keeps the block (as trn_storage's storages do)
    return t


def adopt(cpu: torch.Tensor, storages: dict[int, Any] | None = None) -> torch.Tensor:
    """Move a CPU tensor to ``trn`` by adopting its storage as device memory (zero-copy).

    ``storages`` maps CPU storage addresses to the ``trn`` storages already made in the same call,
    so results sharing a storage stay aliases on the device.
    """
    st = cpu.untyped_storage()
    ptr = st.data_ptr()
    # (address 0 is every empty storage's: two empty results are not aliases of each other)
    trn_st = storages.get(ptr) if storages is not None and ptr != 0 else None
    if trn_st is None:
        blk = getattr(st, "_trn_block", None)  # a CPU view of device memory: same block
        if blk is None:
            blk = HbmBlock(st, ptr, st.nbytes())
        trn_st = blk.trn_storage()
        if storages is not None and ptr != 0:
            storages[ptr] = trn_st
    return wrap(trn_st, cpu.dtype, cpu.shape, cpu.stride(), cpu.storage_offset())


def cpu_view(t: torch.Tensor, cpu_storage: Any = None) -> torch.Tensor:
    """A CPU tensor viewing the same bytes as the ``trn`` tensor ``t`` (same sizes, strides, offset).

    The conjugate/negative bits are kept, so CPU ops see exactly what ``t`` means. Pass
    ``cpu_storage`` (from :meth:`HbmBlock.cpu_storage`) to make several views share one storage.
    """
    if cpu_storage is None:
        # one CPU storage per block, kept by the trn storage (no cycle: it refers to the block, not back), so
        # a view costs no new storage and gloo's threads never drop the last reference to a Python object;
        # re-made when the trn storage moved to another block (resize_storage)
        st: Any = t.untyped_storage()
        blk = getattr(st, "_trn_block", None) or block_of(t)
        cpu_storage = getattr(st, "_trn_cpu", None)
        if cpu_storage is None or cpu_storage._trn_block is not blk:
            cpu_storage = st._trn_cpu = blk.cpu_storage()
    v = torch.empty((0,), dtype=t.dtype)
    v.set_(cpu_storage, t.storage_offset(), t.shape, t.stride())
    if t.is_conj():
        v = v.conj()
    if t.is_neg():
        v = torch._neg_view(v)
    return v


def resize_storage(st: Any, nbytes: int) -> None:
    """Resize a ``trn`` storage in place, as ``UntypedStorage.resize_`` does on the CPU.

    The storage object (and every tensor on it) moves to a new block of ``nbytes`` (the leading bytes kept);
    size 0 frees the bytes. FSDP2 frees and re-allocates unsharded parameters this way. torch routes a
    PrivateUse1 storage's resize to a C++ hook a Python backend cannot implement, so the call has to reach
    this function from ``UntypedStorage.resize_`` (a patch to torch).

    Example:
        >>> t = empty((4,), torch.float32)                       # doctest: +SKIP
        >>> resize_storage(t.untyped_storage(), 0); t.untyped_storage().nbytes()  # doctest: +SKIP
        0
    """
    nbytes, old = int(nbytes), st.nbytes()
    if nbytes < 0:
        raise RuntimeError(f"trn: storage size must be non-negative, got {nbytes}")
    if nbytes == old:
        return
    if nbytes:
        blk: HbmBlock | None = _new_block(nbytes)
        assert blk is not None
        new = blk.trn_storage()
        memmove(blk.ptr, st.data_ptr(), min(old, nbytes))
    else:
        blk, new = None, _construct(0, DEVICE, 0)
    if old and nbytes:  # torch swaps the bytes of two storages only when one of them is empty
        hold = _construct(0, DEVICE, 0)
        st._swap_data_ptr_(hold)
        st._swap_data_ptr_(new)
    else:
        st._swap_data_ptr_(new)
        hold = new
    # the Python attribute follows the bytes; `hold` takes the old block (freed when it dies, unless a view
    # of the old bytes still holds it)
    hold._trn_block = getattr(st, "_trn_block", None)  # type: ignore[attr-defined]
    st._trn_block = blk
    st._trn_cpu = None  # cpu_view's cached CPU storage viewed the old block (and would keep it alive)


def np_view(t: torch.Tensor) -> np.ndarray:
    """A numpy array viewing the bytes of ``t`` with its real strides (bf16/fp8 via ml_dtypes)."""
    d = to_dtype(t.dtype)
    if d is None:
        raise TypeError(f"trn: dtype {t.dtype} has no numpy equivalent for kernels")
    item = d.itemsize
    blk = block_of(t)
    return np.ndarray(tuple(t.shape), d.np, buffer=blk.np_bytes(), offset=t.storage_offset() * item,
                      strides=tuple(s * item for s in t.stride()))


def set_metadata(t: torch.Tensor, shape: Sequence[int], strides: Sequence[int], offset: int | torch.SymInt,
                 storage: Any = None) -> torch.Tensor:
    """Point ``t`` at (``storage`` or its own storage) with new metadata, in place."""
    st = storage if storage is not None else t.untyped_storage()
    _SET.redispatch(_CPU_KS, t, st, int(offset), tuple(int(s) for s in shape), tuple(int(s) for s in strides))
    return t


def memmove(dst: int, src: int, nbytes: int) -> None:
    """Raw host copy between device/host addresses (the simulated DMA for dense same-layout copies)."""
    if nbytes > 0:
        ctypes.memmove(dst, src, nbytes)


def is_dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense (some permutation of the dims is contiguous)."""
    return t.is_contiguous() or dense_layout(tuple(t.shape), t.stride())


def dense_layout(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """c10's non-overlapping-and-dense rule on plain ints (the one ``empty_like`` and TensorIterator use): the dims
    sorted by stride form a contiguous nest; dims of size 0 or 1 sort last and end the check.

    Example:
        >>> dense_layout((3, 4), (1, 3)), dense_layout((3, 4), (1, 4)), dense_layout((0, 5), (7, 2))
        (True, False, False)
    """
    expected = 1
    for small, st, n in sorted((n < 2, st, n) for n, st in zip(shape, strides)):
        if small:
            return True
        if st != expected:
            return False
        expected *= n
    return True


def stats() -> dict[str, int]:
    """Counters in the key spelling of ``torch.cuda.memory_stats``."""
    idle = idle_bytes()
    with STATS.lock:
        cur, peak, count = STATS.allocated - idle, STATS.peak, STATS.count
        allocs, frees = STATS.total_allocs, STATS.total_frees
    return {
        "allocated_bytes.all.current": cur,
        "allocated_bytes.all.peak": peak,
        "reserved_bytes.all.current": cur + idle + CACHE.bytes,
        "reserved_bytes.all.peak": peak + CACHE.bytes,
        "cached_bytes.all.current": CACHE.bytes,
        "active_bytes.all.current": cur,
        "allocation.all.current": count,
        "allocation.all.allocated": allocs,
        "allocation.all.freed": frees,
        "num_alloc_retries": 0,
        "num_ooms": 0,
        "hbm_bytes_per_core": STATS.hbm_capacity(),
    }


def reset_peak() -> None:
    """Reset the peak counter to the current allocation."""
    idle = idle_bytes()
    with STATS.lock:
        STATS.peak = STATS.allocated - idle
