"""The public launch API: the one way anything launches a compiled kernel.

``KernelFn.bind(*args)`` returns a :class:`Launch`: the call prepared now, run later. A warm launch on
torch tensors (one whose :class:`LaunchPlan` exists: the same dtypes, sizes, strides, constants and
settings ran before) is *resolved*: frozen on the compiled entry, the argument layout (meta block,
aliasing variant) and the tensors' addresses, so running it is one native call. Anything else is a
*deferred* launch that takes the general path (trace, compile, checks) when run.

- :meth:`Launch.run` (or calling it) runs it on this thread;
- :meth:`Launch.rebind` gives the same launch on other addresses (same layouts);
- :meth:`Launch.pointer_call` gives a native trampoline that runs the launch on addresses passed per call
  (the device fast lane's single ctypes call);
- :func:`run_parallel` runs launches together: the calling thread runs the first, native worker threads
  (``runtime/hostpool.py``) the others when all are resolved, else a Python thread pool;
  :func:`split_rows` / :func:`row_blocks` split a row-independent launch into one block per thread.

Resolution can be switched off (:data:`PLANS`); :func:`observe_launches` does so while tools such as ``trn
profile`` watch every launch of a ``@trn.kernel`` (each call reports the specialization that ran). Settings
come from :mod:`trnlang.config`.

Example:
    >>> import torch, trnlang as trn, trnlang.language as tl
    >>> @trn.kernel
    ... def double(x, out):
    ...     tl.store(out[0:4], tl.load(x[0:4]) * 2.0)
    >>> x, o = torch.arange(4.0), torch.empty(4)
    >>> double(x, o)                 # the first launch makes the plan
    >>> go = double.bind(x, o); go.resolved
    True
    >>> o2 = torch.empty(4); go.rebind([x.data_ptr(), o2.data_ptr()]).run(); o2.tolist()
    [0.0, 2.0, 4.0, 6.0]
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from trnlang import config as _config
from trnlang.frontend.errors import LaunchError, TrnError, user_traceback
from trnlang.runtime import jit as _jit
from trnlang.runtime.jit import _arena, _err_buffer

__all__ = ["Launch", "LaunchPlan", "PointerCall", "Switch", "PLANS", "num_threads", "run_parallel", "chunks",
           "row_blocks", "split_rows", "PARALLEL_MIN_WORK", "observe_launches", "LaunchObserver"]


class Switch:
    """An on/off flag read on every warm launch (an attribute, so the check costs one lookup)."""

    __slots__ = ("enabled",)

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled


#: Launch plans (resolved launches, device fast lanes, kept bound launches) are used while enabled.
PLANS = Switch()

#: ``callback(kernel, compiled, args, grid)``: ``kernel`` the ``KernelFn``, ``compiled`` the specialization that
#: ran (``compiled.ir.signature()`` names it), ``args`` the call's arguments, ``grid`` the launch grid.
LaunchObserver = Callable[[Any, Any, tuple[Any, ...], tuple[int, ...]], None]

#: the observers of :func:`observe_launches`, called after every launch through the general path
OBSERVERS: list[LaunchObserver] = []


class observe_launches:  # noqa: N801 - used like a function: ``with observe_launches(cb):``
    """Call ``callback(kernel, compiled, args, grid)`` after every ``@trn.kernel`` launch in a ``with`` block.

    Launch plans are off while any observer is active, so every launch (warm ones included) takes the general
    path and is seen; the eager device's fast lanes are plans too. Nesting and several observers are fine.

    Example:
        >>> import numpy as np, trnlang as trn, trnlang.language as tl
        >>> from trnlang.runtime.launch import observe_launches
        >>> @trn.kernel
        ... def double(x, out):
        ...     tl.store(out[0:4], tl.load(x[0:4]) * 2.0)
        >>> seen = []
        >>> with observe_launches(lambda k, comp, args, grid: seen.append(comp.ir.signature())):
        ...     double(np.ones(4, np.float32), np.zeros(4, np.float32))
        >>> seen
        ['double(f32[4],f32[4])']
    """

    def __init__(self, callback: LaunchObserver) -> None:
        self.callback = callback
        self._plans = True

    def __enter__(self) -> observe_launches:
        self._plans = PLANS.enabled
        PLANS.enabled = False
        OBSERVERS.append(self.callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        OBSERVERS.remove(self.callback)
        PLANS.enabled = self._plans


class _Shaped:
    """Stands in for a launch array in error messages (only its shape is read)."""

    __slots__ = ("shape",)

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape


class LaunchPlan:
    """A compiled specialization on torch tensors of fixed layouts: what every resolved launch of it shares.

    Keyed by the caller (``KernelFn``) on the tensors' dtypes, sizes, strides and devices, the constants,
    the grid and :attr:`trnlang.config.Config.launch_key`, so binding needs only addresses: the compiled
    variant per aliasing case, the stride metadata block and each tensor's byte extent are computed once.
    Only for compiled kernels without kernel-allocated outputs. No read-only check here: torch tensors
    have no read-only flag (numpy arrays, which do, are checked by the executors and never get a plan).
    """

    __slots__ = ("executor", "contiguous", "grid", "extents", "meta", "meta_addr", "variants", "shapes", "_last",
                 "_recent", "split", "__weakref__")

    def __init__(self, executor: Any, arrays: list[np.ndarray], grid: tuple[int, ...]) -> None:
        self.executor = executor
        self.contiguous = tuple([_jit.layout_of(a) for a in arrays])
        self.grid = grid
        ext: list[tuple[int, int] | None] = []
        for a in arrays:
            if a.size == 0:
                ext.append(None)
                continue
            lo = hi = 0
            for n, st in zip(a.shape, a.strides):
                if st > 0:
                    hi += (n - 1) * st
                else:
                    lo += (n - 1) * st
            ext.append((lo, hi + a.itemsize))
        self.extents = ext
        meta: list[int] = []
        for a in arrays:
            meta += list(a.shape) + [st // a.itemsize for st in a.strides]
        self.meta = np.array(meta or [0], np.int64)  # read-only for the kernel: shared by concurrent launches
        self.meta_addr = self.meta.ctypes.data
        self.variants: dict[bool, Any] = {}
        self.shapes = [_Shaped(a.shape) for a in arrays]  # what an error message needs of the arrays
        self._last: tuple[tuple[int, ...], Launch] | None = None
        self._recent: dict[tuple[int, ...], Launch] = {}  # launches of recent addresses (at most RECENT_LAUNCHES)
        self.split: Any = None  # ``runtime.split.Decision`` of a split-capable variant, made at its first launch

    def variant(self, may_alias: bool) -> Any:
        """The compiled variant for this layout (``may_alias``: a written argument overlaps another)."""
        v = self.variants.get(may_alias)
        if v is None or not v.alive:  # an evicted variant is compiled (loaded) again
            v = self.variants[may_alias] = self.executor.variant(self.contiguous, may_alias, self.grid)
        return v

    def bind(self, ptrs: Sequence[int]) -> Launch | None:
        """The resolved launch on these addresses (None: the call must take the general path).

        Everything but the native call is done here, so a launch run on a worker thread holds the GIL only
        to enter the call. The launches of the last :data:`RECENT_LAUNCHES` address sets are reused (a
        caching allocator hands an op the same few blocks call after call); they hold no tensor.
        """
        key = tuple(ptrs)
        last = self._last
        if last is not None and last[0] == key and last[1].variant.alive:
            last[1].variant.used = True
            return last[1]
        go = self._recent.get(key)
        if go is not None and go.variant.alive:  # outputs alternating between a few blocks (``z = x * y`` in a loop)
            go.variant.used = True
            self._last = (key, go)
            return go
        if len(key) != len(self.extents):
            raise LaunchError(f"this launch takes {len(self.extents)} tensor addresses, got {len(key)}")
        w = self.executor.written
        spans = [(p + e[0], p + e[1], w[i] if i < len(w) else True)
                 for i, (p, e) in enumerate(zip(key, self.extents)) if e is not None]
        v = self.variant(_jit.spans_conflict(spans))
        if (v.uses_meta and v.meta_words > self.meta.size) or self.grid != (1,):
            return None
        go = Launch(self, key, v)
        v.used = True
        self._last = (key, go)
        recent = self._recent
        if len(recent) >= RECENT_LAUNCHES:
            del recent[next(iter(recent))]  # the oldest
        recent[key] = go
        return go


class Launch:
    """One kernel launch, bound to its arguments: ``launch.run()`` (or ``launch()``) runs it.

    Made by ``KernelFn.bind``. A *resolved* launch (:attr:`resolved`) is frozen on the compiled entry
    (:attr:`entry`), the argument layout (its :class:`LaunchPlan`) and the addresses (:attr:`pointers`);
    :attr:`words` are the nine words of the entry ABI, with the arena and error record slots (6 and 7)
    left for the thread that runs it. It is :attr:`native` unless the kernel prints (``device_print``
    calls back into Python): a native launch may run on a native worker thread. A deferred launch
    holds the call and runs the general path.
    A launch holds no tensor: the caller keeps its arguments alive until it has run.

    Example:
        >>> import torch, trnlang as trn, trnlang.language as tl
        >>> @trn.kernel
        ... def neg(x, out):
        ...     tl.store(out[0:2], -tl.load(x[0:2]))
        >>> x, o = torch.ones(2), torch.empty(2)
        >>> go = neg.bind(x, o); go.resolved, go()   # cold: deferred (the general path)
        (False, None)
        >>> neg.bind(x, o).resolved, o.tolist()
        (True, [-1.0, -1.0])
    """

    __slots__ = ("_plan", "pointers", "variant", "entry", "words", "arena_size", "resolved", "native", "_fn",
                 "_ptr_arr", "_meta", "_cb", "_general", "_executor", "_shapes", "_keep", "_owner", "_run_words",
                 "_run_arg", "_run_err", "_split")
    _fn: Any  # the variant's ctypes entry (None: deferred)
    _ptr_arr: Any
    _run_words: Any  # the owner's words and arena (``run``)
    _run_arg: Any
    _run_err: Any
    _meta: Any
    _cb: Any

    def __init__(self, plan: LaunchPlan | None, pointers: tuple[int, ...], variant: Any,
                 general: Callable[[], Any] | None = None) -> None:
        # the plan keeps its last launch: a weak reference back, so dropping a plan (its variant evicted) frees
        # the pair at once instead of at the next cycle collection
        self._plan = weakref.ref(plan) if plan is not None else None
        self.pointers = pointers
        self.variant = variant
        self._general = general
        # the thread whose one-argument native call runs this launch (see ``run``): none yet, or never (-1)
        self._owner = 0 if plan is not None else -1
        self._run_words = self._run_arg = self._run_err = None
        self._split: Any = None  # its parts once split (see ``_run_split``); None: never split
        if plan is None:  # deferred
            self.resolved = self.native = False
            self.entry, self.words, self.arena_size = 0, [], 0
            self._fn = self._ptr_arr = self._meta = self._cb = self._executor = self._shapes = self._keep = None
            return
        v = variant
        self._executor, self._shapes = plan.executor, plan.shapes
        self._keep = plan.meta  # the meta block the words point at
        self._fn = v.fn
        self._ptr_arr = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        self._meta = plan.meta_addr if v.uses_meta else v.meta_addr
        self._cb = plan.executor._cb_addr if v.has_print else None
        self.arena_size = v.arena_size
        self.entry = ctypes.cast(v.fn, ctypes.c_void_p).value or 0
        self.words = [ctypes.addressof(self._ptr_arr), self._meta, 0, 1, 1, 1, 0, 0, 0]
        self.resolved = True
        # device_print calls back into Python: such a launch runs on Python threads only
        self.native = self._cb is None
        if v.split and self.native:  # decided at the first runs (``runtime/split.py``): not adopted before
            if plan.split is None:
                from trnlang.runtime.split import Decision

                plan.split = Decision()
            self._split = ()

    @property
    def plan(self) -> LaunchPlan | None:
        """The launch plan this launch was bound from (None: deferred, or the plan was dropped since)."""
        return self._plan() if self._plan is not None else None

    @property
    def splittable(self) -> bool:
        """True while :meth:`run` may spread this launch's outermost loop over the host threads
        (``runtime/split.py``): a split-capable variant whose plan has not decided to run it whole."""
        if self._split is None:
            return False
        plan = self.plan
        d = plan.split if plan is not None else None
        return d is None or d.split is not False

    @classmethod
    def deferred(cls, call: Callable[[], Any]) -> Launch:
        """A launch that runs ``call()`` (the general path) when run."""
        return cls(None, (), None, call)

    def run(self) -> None:
        """Run the launch on this thread (a kernel error is raised with the user's source line).

        The first thread that runs a resolved launch adopts it: its words (entry, pointer array, meta block,
        a scratch arena and error record of the launch's own) are written once, and every later run on that
        thread is a one-argument native call (``codegen.native.runner_module``) that releases the GIL. Other
        threads, and launches with a big scratch arena, pass the nine words with their thread's arena.
        """
        if self._owner == _get_ident():
            if _RUN(self._run_arg):
                self.on_error(self._run_err)
            return
        g = self._general
        if g is not None:
            g()
            return
        if self._split is not None and self._run_split():
            return
        if self._owner == 0 and self._adopt():
            self.run()
            return
        err, err_addr = _err_buffer()
        if self._fn(self._ptr_arr, self._meta, 0, 1, 1, 1, _arena(self.arena_size), err_addr, self._cb):
            self.on_error(err)

    def _run_split(self) -> bool:
        """Run a launch of a split-capable variant (``runtime/split.py``): whole and timed until its plan's
        decision, then in one part per thread. False: never split (it is adopted and runs as any launch)."""
        from trnlang.runtime import split

        plan = self.plan
        d = plan.split if plan is not None else None
        threads = num_threads()
        if d is None or d.split is False or threads == 1:
            self._split = None
            return False
        if d.split is None:
            d.timed(self._whole)
            return True
        parts = self._split
        if len(parts) != threads:
            parts = self._split = split.parts_of(self._fn, ctypes.addressof(self._ptr_arr), self._meta,
                                                 self.arena_size, self.on_error, threads)
        if not split.run_parts(parts):
            self._whole()  # the workers are busy: this launch is itself one of several run together
        return True

    def _whole(self) -> None:
        err, err_addr = _err_buffer()
        if self._fn(self._ptr_arr, self._meta, 0, 1, 1, 1, _arena(self.arena_size), err_addr, self._cb):
            self.on_error(err)

    def _adopt(self) -> bool:
        """Make this thread the launch's owner (see :meth:`run`); False when the arena is too big to own."""
        if self.arena_size > OWN_ARENA_MAX:
            self._owner = -1
            return False
        if _RUN is None:
            _load_runner()
        with _ADOPT_LOCK:  # the owner is set once, after its words (another thread may try at the same time)
            if self._owner:
                return bool(self._owner == _get_ident())
            arena = np.empty(self.arena_size + 64, np.uint8)  # 64-byte aligned inside; freed with the launch
            err = np.zeros(64, np.int64)
            w = np.array([self.entry, ctypes.addressof(self._ptr_arr), self._meta or 0, 0, 1, 1, 1,
                          (arena.ctypes.data + 63) & ~63, err.ctypes.data, self._cb or 0], np.int64)
            self._run_words = (w, arena)
            self._run_err = err
            self._run_arg = ctypes.c_void_p(w.ctypes.data)
            self._owner = _get_ident()
        return True

    __call__ = run

    def on_error(self, err: np.ndarray) -> None:
        """Raise the kernel error recorded in ``err`` (an error record this launch's entry filled)."""
        if self._executor is None:
            raise LaunchError("a deferred launch has no error record")
        try:
            self._executor._raise(self.variant, err, self._shapes)
        except TrnError as e:
            raise e.with_traceback(user_traceback(e)) from None

    def touch(self) -> None:
        """Mark the compiled code as in use (a kept launch: the code cache evicts least recently used code)."""
        if self.variant is not None:
            self.variant.used = True

    def rebind(self, pointers: Sequence[int]) -> Launch:
        """The same launch on other addresses (tensors of the same dtypes, sizes and strides).

        Raises ``LaunchError`` for a deferred launch or a wrong number of addresses.
        """
        plan = self.plan
        if plan is None:
            raise LaunchError("only a resolved launch can be rebound (this one runs the general path, or its plan "
                              "was dropped with its compiled code: bind it again)")
        go = plan.bind(pointers)
        if go is None:
            raise LaunchError("this launch cannot be resolved on these addresses")
        return go

    def pointer_call(self) -> PointerCall:
        """A native trampoline running this launch on addresses given per call (see :class:`PointerCall`)."""
        if not self.native:
            raise LaunchError("only a resolved launch without device_print has a pointer call")
        return PointerCall(self)


class PointerCall:
    """``pc.fn(pc.ctx, *pointers)``: a resolved launch run on new addresses in one native call.

    The trampoline (``codegen/native.py``) is a ctypes function that keeps the GIL (these launches last
    about a microsecond); it returns the kernel's result code (nonzero: :meth:`raise_error`). It uses the
    variant compiled for non-overlapping arguments, so the caller passes addresses of tensors no written
    argument overlaps, of the layouts the launch was bound on, and calls it from one thread at a time
    (the scratch arena and error record are its own). Calling ``pc(*pointers)`` does the same.
    """

    __slots__ = ("fn", "ctx", "launch", "plan", "variant", "_words", "_arena", "_err")

    def __init__(self, launch: Launch) -> None:
        plan = launch.plan
        if plan is None:
            raise LaunchError("this launch's plan was dropped with its compiled code: bind it again")
        v = plan.variant(False)
        if v.uses_meta and v.meta_words > plan.meta.size:
            raise LaunchError("this launch's variant for non-overlapping arguments needs another meta block")
        self.launch = launch
        self.plan = plan  # keeps the meta block alive
        self.variant = v  # keeps the code loaded while this call can run
        self._arena = np.empty(max(v.arena_size, 1) + 64, np.uint8)
        self._err = np.zeros(64, np.int64)
        fn_addr = ctypes.cast(v.fn, ctypes.c_void_p).value
        meta = plan.meta_addr if v.uses_meta else v.meta_addr
        self._words = np.array([fn_addr, meta, (self._arena.ctypes.data + 63) & ~63, self._err.ctypes.data], np.int64)
        self.ctx = self._words.ctypes.data
        self.fn = trampoline(len(launch.pointers))

    def __call__(self, *pointers: int) -> int:
        return int(self.fn(self.ctx, *pointers))

    def raise_error(self) -> None:
        """Raise the error of the last failed call."""
        self.plan.executor._raise(self.variant, self._err, self.plan.shapes)


_TRAMP: dict[int, Any] = {}
_TRAMP_LOCK = threading.Lock()

#: Launches (one per set of addresses) a launch plan keeps: an op whose output alternates between
#: a few allocator blocks binds them once (a new ``Launch`` costs 10-20 us of host time: parts, words, arena).
RECENT_LAUNCHES = 4
#: Largest scratch arena (bytes) a launch keeps of its own for its one-argument native call (bigger ones run on
#: the thread's arena: their kernels run long enough that the nine-word call's cost does not matter).
OWN_ARENA_MAX = 1 << 16
_get_ident = threading.get_ident
_ADOPT_LOCK = threading.Lock()
_RUN: Any = None  # ``codegen.native.RUNNER`` as a ctypes function releasing the GIL (argument: a c_void_p)


def _load_runner() -> None:
    """Compile and load the one-argument runner (once per process)."""
    global _RUN
    with _TRAMP_LOCK:
        if _RUN is None:
            from codegen import native

            lib = native.load(native.runner_module())
            fn: Any = ctypes.CFUNCTYPE(ctypes.c_int32)(lib.address(native.RUNNER))
            fn.argtypes = None  # the caller passes a c_void_p, taken as is (no conversion per call)
            fn._trnlang_module = lib
            _RUN = fn


def trampoline(n: int) -> Any:
    """The ctypes trampoline of ``n`` pointers (``codegen.native.trampoline_module``), compiled once per process."""
    fn: Any = _TRAMP.get(n)  # a ctypes function (it carries its module: the code stays loaded)
    if fn is not None:
        return fn
    with _TRAMP_LOCK:
        if n in _TRAMP:
            return _TRAMP[n]
        from codegen import native

        lib = native.load(native.trampoline_module(n))
        proto = ctypes.PYFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * (n + 1)))  # keeps the GIL
        fn = proto(lib.address(native.TRAMPOLINE))
        fn._trnlang_module = lib
        _TRAMP[n] = fn
        return fn


# ---------------------------------------------------------------------------------------- thread split
#: Work (elements touched, or multiply-adds for matmuls) below which a launch is not split across threads.
PARALLEL_MIN_WORK = 1 << 20
_host_pool: Any = None


def num_threads() -> int:
    """Threads of one split op and of a compiled grid (``TRN_NUM_THREADS``, else the machine's cores)."""
    return _config.current.num_threads


def run_parallel(launches: Sequence[Callable[[], Any]]) -> None:
    """Run independent launches (on disjoint outputs) together; the first error raised propagates.

    The calling thread runs the first; when every launch is resolved the others run on native worker
    threads (``runtime/hostpool.py``), else on a Python thread pool (compiled kernels release the GIL,
    and each thread has its own scratch arena). More launches than threads (``TRN_NUM_THREADS``, else the
    cores) run in waves of that many: spinning workers beyond the cores would take turns on them.

    Example:
        >>> out = []
        >>> run_parallel([lambda: out.append(1), lambda: out.append(2)]); sorted(out)
        [1, 2]
    """
    if len(launches) <= 1:
        for c in launches:
            c()
        return
    threads = num_threads()
    if len(launches) > threads:  # more launches than threads: waves of ``threads`` (never more threads than cores)
        for i in range(0, len(launches), threads):
            run_parallel(launches[i:i + threads])
        return
    from trnlang.runtime import hostpool

    if all(type(c) is Launch and c.native for c in launches) and hostpool.run(launches):  # type: ignore[arg-type]
        return
    global _host_pool
    if _host_pool is None:
        import concurrent.futures

        _host_pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, num_threads()),
                                                           thread_name_prefix="trn-host")
    futs = [_host_pool.submit(c) for c in launches[1:]]
    launches[0]()
    for f in futs:
        f.result()


def chunks(n: int, parts: int, align: int = 128) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges splitting ``n`` into at most ``parts`` pieces, boundaries multiples of ``align``.

    >>> chunks(1000, 2)
    [(0, 512), (512, 1000)]
    """
    blocks = -(-n // align) if n else 0
    parts = max(1, min(parts, blocks))
    out, start = [], 0
    for p in range(parts):
        stop = min(n, (blocks * (p + 1) // parts) * align)
        if stop > start:
            out.append((start, stop))
        start = stop
    return out


def row_blocks(rows: int, work: int) -> list[slice]:
    """Row slices for one launch per thread (a single full slice when the op is too small to split).

    ``work``: elements the op touches (the split pays off above :data:`PARALLEL_MIN_WORK`). Blocks are
    multiples of 128 rows, so every launch keeps full partition tiles but its last.

    >>> row_blocks(100, 1 << 24)
    [slice(None, None, None)]
    """
    threads = num_threads()
    if threads == 1 or work < PARALLEL_MIN_WORK or rows < 256:
        return [slice(None)]
    return [slice(lo, hi) for lo, hi in chunks(rows, threads, 128)]


def split_rows(kern: Any, views: Sequence[Any], *consts: Any, work: int | None = None,
               keep: Sequence[int] = ()) -> None:
    """``kern(*views, *consts)`` for a kernel whose rows are independent: one launch per thread on row blocks
    when big (:func:`row_blocks`; ``work`` defaults to the first view's size).

    Every non-None view (but those at the positions in ``keep``, passed whole to every launch: a shared
    matrix, say) is a torch tensor (or a ``TensorPiece``) ``[R, L]`` or ``[A, R, L]`` with the same ``R`` (its
    second-last dim);
    a launch gets the same rows of each, as a ``TensorPiece`` (no torch views).

    Example:
        >>> import torch, trnlang as trn, trnlang.language as tl
        >>> @trn.kernel
        ... def inc(x, out):
        ...     tl.store(out[0:2, 0:3], tl.load(x[0:2, 0:3]) + 1.0)
        >>> x, o = torch.zeros(2, 3), torch.empty(2, 3)
        >>> split_rows(inc, [x, o]); o.sum().item()
        6.0
    """
    from trnlang.runtime.args import TensorPiece

    ref = next(v for k, v in enumerate(views) if v is not None and k not in keep)
    r = ref.shape[-2]
    blocks = row_blocks(r, ref.numel() if work is None else work)
    if len(blocks) == 1:
        kern(*views, *consts)
        return

    def cut(v: Any, lo: int, hi: int) -> Any:
        if v is None:
            return None
        st = v.stride()
        shape = (*v.shape[:-2], hi - lo, v.shape[-1])
        return TensorPiece(v.base if isinstance(v, TensorPiece) else v, shape, st, v.storage_offset() + lo * st[-2])

    launches = []
    for s in blocks:
        lo, hi, _ = s.indices(r)
        launches.append(kern.bind(*[v if k in keep else cut(v, lo, hi) for k, v in enumerate(views)], *consts))
    run_parallel(launches)
