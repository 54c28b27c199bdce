"""``@trn.kernel``: specialization, tracing, the pass pipeline, caching and launch."""

from __future__ import annotations

import functools
import inspect
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from trnlang import config as _config
from trnlang.frontend.errors import (
    LaunchError,
    NeedStatic,
    TraceError,
    TrnError,
    user_loc,
    user_traceback,
)
from trnlang.frontend.tracer import tracing
from trnlang.ir.nodes import HbmTensor, Kernel, SourceLoc, sym
from trnlang.language.values import HbmRef
from trnlang.runtime import args as argconv
from trnlang.runtime import jit as _jit
from trnlang.runtime import stats as _rstats
from trnlang.runtime.args import TensorPiece
from trnlang.runtime.launch import OBSERVERS, PLANS, Launch, LaunchPlan
from trnlang.runtime.specialize import Sizes

_CONST_TYPES = (int, float, bool, str, type(None))
#: Whether standard-library kernels (``stdlib_kernels``) are shape-polymorphic by default (families opt in
#: with ``dynamic=True`` until the whole library is checked under it).
_STDLIB_DYNAMIC = False
_SIZE_NAMES = re.compile(r"\b[A-Za-z_]\w*_size\d+\b")
_CONST_SET = frozenset(_CONST_TYPES)
#: KernelFn attributes that choose the executor or the code (see ``KernelFn.__setattr__``)
_LAUNCH_SWITCHES = frozenset(("interpret", "target", "debug"))


class _SpecCache(dict):
    """Specializations by full key, plus the warm-launch index over them (cleared together)."""

    def __init__(self) -> None:
        super().__init__()
        self.fast: dict[Any, Compiled] = {}
        self.plans: dict[Any, LaunchPlan | None] = {}
        self.last: tuple[Any, LaunchPlan] | None = None  # the plan found last, and its key

    def plan_of(self, key: Any) -> LaunchPlan | None:
        """``plans.get(key)``, comparing with the last key found first (cheaper than hashing it again)."""
        last = self.last
        if last is not None and last[0] == key:
            return last[1]
        plan = self.plans.get(key)
        if plan is not None:
            self.last = (key, plan)
        return plan

    def clear(self) -> None:
        super().clear()
        self.fast.clear()
        self.plans.clear()
        self.last = None


_TORCH_TENSOR: Any = None


def _torch_tensor_type() -> Any:
    global _TORCH_TENSOR
    if _TORCH_TENSOR is None:
        import torch

        _TORCH_TENSOR = torch.Tensor
    return _TORCH_TENSOR


@dataclass
class Compiled:
    """One specialization: the kernel IR after the pipeline, and how to run it."""

    ir: Kernel
    runtime_checks: list[Any]
    executor: Any = None  # a callable(list[np.ndarray-like], grid) set by the chosen backend


def _normalize_grid(grid: Any) -> tuple[int, ...]:
    g = grid if isinstance(grid, tuple) else (grid,)
    if not 1 <= len(g) <= 3 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in g):
        raise LaunchError(f"a launch grid is 1 to 3 non-negative ints, got {grid!r}")
    return g


class KernelFn:
    """A trnlang kernel: call it (``k(*args)``) or launch a grid (``k[4](*args)``, ``k[2, 3](*args)``).

    Example:
        >>> import numpy as np, trnlang as trn, trnlang.language as tl
        >>> @trn.kernel
        ... def add_one(x, out):
        ...     tl.store(out[0:2, 0:3], tl.load(x[0:2, 0:3]) + 1.0)
        >>> x = np.zeros((2, 3), np.float32); o = np.empty_like(x)
        >>> add_one(x, o); float(o.sum())
        6.0
    """

    def __init__(self, fn: Callable[..., Any], target: str | None = None, interpret: bool | None = None,
                 debug: bool = False, dynamic: bool | None = None) -> None:
        self.fn = fn
        self.target = target
        self.interpret = interpret
        self.debug = debug
        # shape polymorphism (runtime/specialize.py); the standard library opts in family by family
        self.dynamic = dynamic if dynamic is not None else (
            _STDLIB_DYNAMIC or not (getattr(fn, "__module__", None) or "").startswith("stdlib_kernels"))
        self._static_dims: set[tuple[str, int]] = set()  # declared constant for every launch (tiling.polymorphic)
        # learned per class of launch (the values of the non-tensor arguments: one spec needing a constant size
        # must not take the others' polymorphism): sizes found to be constants, classes traced on exact shapes
        self._learned: dict[tuple[Any, ...], set[tuple[str, int]]] = {}
        self._exact: set[tuple[Any, ...]] = set()
        self._stats: dict[str, Any] = {"traces": 0, "static_reasons": [], "fallback": None}
        self._sig = inspect.signature(fn)
        self._keyfn: Callable[..., Any] | None = None  # _plan_key's generated function (argument types of last call)
        self._cache = _SpecCache()
        self._fast = self._cache.fast
        code = fn.__code__
        self.loc = SourceLoc(code.co_filename, code.co_firstlineno, fn.__name__)
        functools.update_wrapper(self, fn)

    def __setattr__(self, name: str, value: Any) -> None:
        """Setting ``interpret``, ``target`` or ``debug`` drops the warm-launch indexes, whose keys omit them.

        The next launch looks its specialization up again (the full key has the three), so a switch made
        after the first launch takes effect; warm launches pay nothing for it.
        """
        object.__setattr__(self, name, value)
        if name in _LAUNCH_SWITCHES:
            cache = self.__dict__.get("_cache")
            if cache is not None:
                cache.fast.clear()
                cache.plans.clear()
                cache.last = None
            object.__setattr__(self, "_keyfn", None)

    # --- launch ---------------------------------------------------------------------------
    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        g = _normalize_grid(grid)

        def launch(*args: Any, **kwargs: Any) -> Any:
            return self._call(self._positional(args, kwargs) if kwargs else args, g)

        return launch

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kf = self._keyfn
        if kf is not None and not kwargs and PLANS.enabled:  # a warm launch: key, plan, resolved launch, run
            pk = kf(args, (1,), _config.current.launch_key)
            if pk is not None:
                plan = self._cache.plan_of(pk[0])
                if plan is not None:
                    go = plan.bind(pk[1])
                    if go is not None:
                        go.run()
                        return None
            return self._call(args, (1,), False if pk is None else pk)  # None: other types, so the general key
        return self._call(self._positional(args, kwargs) if kwargs else args, (1,))

    def _positional(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Keyword arguments (``k(x, out, BLOCK=64)``) mapped to positions, defaults filled in between.

        Example:
            >>> import numpy as np, trnlang as trn, trnlang.language as tl
            >>> @trn.kernel
            ... def fill(out, value=1.0):
            ...     tl.store(out[0:2, 0:2], tl.full((2, 2), value))
            >>> o = np.zeros((2, 2), np.float32); fill(o, value=3.0); float(o[0, 0])
            3.0
        """
        try:
            ba = self._sig.bind(*args, **kwargs)
        except TypeError as e:
            params = ", ".join(self._sig.parameters)
            raise LaunchError(f"kernel {self.fn.__name__}({params}) called with {len(args)} positional and "
                              f"keyword(s) {', '.join(kwargs)}: {e}", loc=user_loc(3),
                              notes=[f"kernel defined at {self.loc}"]) from None
        ba.apply_defaults()
        if ba.kwargs:
            raise LaunchError(f"kernel {self.fn.__name__}: keyword-only or **kwargs parameters are not supported "
                              f"({', '.join(ba.kwargs)}); give them as ordinary parameters", loc=user_loc(3))
        return tuple(ba.args)

    def bind(self, *args: Any) -> Launch:
        """This launch prepared now, run later: ``k.bind(*args).run()`` is ``k(*args)`` (trnlang/runtime/launch.py).

        A warm launch on torch tensors (one whose launch plan exists) is resolved to the native call
        here, so the returned :class:`~trnlang.runtime.launch.Launch` does almost no Python work: host
        code that splits an op into one launch per thread binds every launch first and then runs them on
        threads, which start together instead of queueing on the GIL behind each other's argument
        processing. Anything else is a deferred launch (the general path when run). Raises
        ``LaunchError`` when the arguments do not fit the kernel's parameters.

        Example:
            >>> import torch, trnlang as trn, trnlang.language as tl
            >>> @trn.kernel
            ... def double(x, out):
            ...     tl.store(out[0:4], tl.load(x[0:4]) * 2.0)
            >>> x, o = torch.arange(4.0), torch.empty(4)
            >>> go = double.bind(x, o); go(); o.tolist()
            [0.0, 2.0, 4.0, 6.0]
        """
        grid = (1,)
        pk = self._plan_key(args, grid) if PLANS.enabled and not self.debug else None
        if pk is not None:
            plan = self._cache.plan_of(pk[0])
            if plan is not None:
                go = plan.bind(pk[1])
                if go is not None:
                    return go
        self._bind(args)
        return Launch.deferred(functools.partial(self._call, args, grid))

    def _plan_key(self, args: tuple[Any, ...], grid: tuple[int, ...]) -> tuple[Any, Sequence[int]] | None:
        """Key of a torch-tensor launch plan and the tensors' addresses (None: not a plan-able call).

        Computed by a function generated for the argument types of the last plan-able call (:func:`_key_function`:
        straight-line code, no loop over the arguments), else by :meth:`_plan_key_general`."""
        kf = self._keyfn
        if kf is not None:
            r = kf(args, grid, _config.current.launch_key)
            if r is not None:
                return r
        r = self._plan_key_general(args, grid)
        if r is not None:
            self._keyfn = _key_function(tuple(map(type, args)))
        return r

    def _plan_key_general(self, args: tuple[Any, ...], grid: tuple[int, ...]) -> tuple[Any, list[int]] | None:
        """:meth:`_plan_key` for any arguments."""
        # flat: a constant is (type, value), a tensor or piece (dtype, shape, strides, is_cpu, is_neg)
        key: list[Any] = [grid, _config.current.launch_key]
        ptrs = []
        tt = _TORCH_TENSOR or _torch_tensor_type()
        for a in args:
            ta = type(a)
            if ta in _CONST_SET:
                key += (ta, a)
            elif ta is tt or isinstance(a, tt):
                p = a.data_ptr()
                if not p:  # meta tensors, empty storages: the general path
                    return None
                key += (a.dtype, a.shape, a.stride(), a.is_cpu, a.is_neg())
                ptrs.append(p)
            elif ta is TensorPiece:  # the same entries as its tensor (a view's plan serves the piece)
                key += a.key
                ptrs.append(a.ptr)
            elif ta is tuple:
                for v in a:
                    if type(v) not in _CONST_SET:
                        return None
                key += (ta, a)
            elif ta in argconv.SPEC_TYPES:  # an enum member or a frozen dataclass of constants (args.is_spec)
                key += (ta, a)
            else:
                return None
        return tuple(key), ptrs

    def _call(self, args: tuple[Any, ...], grid: tuple[int, ...], pk: Any = False) -> Any:
        """Launch on ``args`` (``pk``: the plan key, when the caller computed it already)."""
        try:
            if pk is False:
                pk = self._plan_key(args, grid) if PLANS.enabled and not self.debug else None
            if pk is not None:
                plan = self._cache.plan_of(pk[0])
                if plan is not None:
                    go = plan.bind(pk[1])
                    if go is not None:
                        go.run()
                        return None
            if any(type(a) is TensorPiece for a in args):  # a cold launch of pieces: run it on the views
                return self._call(tuple(a.tensor() if type(a) is TensorPiece else a for a in args), grid)
            fast = self._fast_key(args, grid)
            if fast is not None:
                hit = self._fast.get(fast[0])
                if hit is not None:  # warm launch: no signature binding, no IR objects
                    r = self._launch(hit, fast[1], args, grid)
                    if pk is not None and pk[0] not in self._cache.plans:
                        self._cache.plans[pk[0]] = self._make_plan(hit, fast[1], grid)
                    return r
            comp, prepared = self._specialize(args, grid)
            if fast is not None:
                self._fast[fast[0]] = comp
            r = self._run(comp, prepared, args, grid)
            if pk is not None and pk[0] not in self._cache.plans:
                self._cache.plans[pk[0]] = self._make_plan(comp, [p.array for p in prepared if p.tensor is not None],
                                                           grid)
            return r
        except TrnError as e:
            raise e.with_traceback(user_traceback(e)) from None

    # --- introspection ---------------------------------------------------------------------
    def ir(self, *args: Any, grid: Any = (1,)) -> str:
        """The traced (and verified) IR of this specialization, as text."""
        from trnlang.ir.printer import print_kernel

        try:
            comp, _ = self._specialize(args, _normalize_grid(grid))
        except TrnError as e:
            raise e.with_traceback(user_traceback(e)) from None
        return print_kernel(comp.ir)

    def trace(self, *args: Any, grid: Any = (1,)) -> Kernel:
        """The IR object for these exact shapes (after the pass pipeline), as the simulator needs it.

        ``ir()`` shows the variant that runs, whose sizes may be runtime symbols (docs/specialization.md).
        """
        return self._specialize(args, _normalize_grid(grid), static=True)[0].ir

    def llvm_ir(self, *args: Any, grid: Any = (1,), optimized: bool = False) -> str:
        """The LLVM IR the JIT generates for this specialization (``optimized``: after LLVM's O3 pipeline)."""
        from codegen.lowering.kernel import llvm_ir_text

        g = _normalize_grid(grid)
        try:
            comp, prepared = self._specialize(args, g)
        except TrnError as e:
            raise e.with_traceback(user_traceback(e)) from None
        k = comp.ir
        contiguous: list[Any] = [_jit.layout_of(p.array) for p in prepared if p.tensor is not None]
        contiguous += [True] * (len(k.tensors) - len(contiguous))
        return llvm_ir_text(k, g, contiguous, debug=self.debug, optimized=optimized)

    def profile(self, *args: Any, grid: Any = (1,), simulate_only: bool = False, extrapolate: bool = True) -> Any:
        """Run the kernel (outputs are written as by a normal call) and return the ``trn.Profile`` of its schedule.

        Args:
            *args: the kernel's arguments, as for a call.
            grid: the launch grid (instances run back to back on one simulated NeuronCore).
            simulate_only: compile and simulate without executing (outputs are not written; ``result`` is None).
                For big problems whose host execution would be slow.
            extrapolate: let the scheduler generate the steady state of long loops (see ``trnlang.sim.schedule``).

        Example:
            >>> import torch, trnlang as trn, trnlang.language as tl
            >>> @trn.kernel
            ... def double(x, out):
            ...     tl.store(out[0:128, 0:64], tl.load(x[0:128, 0:64]) * 2.0)
            >>> x = torch.ones(128, 64); out = torch.empty_like(x)
            >>> p = double.profile(x, out)
            >>> float(out[0, 0]), p.engines["dma"].instructions, p.time_us > 1.3
            (2.0, 2, True)
        """
        from trnlang.sim.profile import Profile

        g = _normalize_grid(grid)
        try:
            comp, prepared = self._specialize(args, g, static=True)
            result = None if simulate_only else self._run(comp, prepared, args, g)
        except TrnError as e:
            raise e.with_traceback(user_traceback(e)) from None
        return Profile.simulate(comp.ir, g, result=result, extrapolate=extrapolate)

    # --- internals --------------------------------------------------------------------------
    def _target(self) -> str:
        return self.target or _config.current.target or "trn2"

    def _use_interpreter(self) -> bool:
        if self.interpret is not None:
            return self.interpret
        return _config.current.interpret

    def _bind(self, args: tuple[Any, ...]) -> None:
        try:
            self._sig.bind(*args)
        except TypeError as e:
            params = ", ".join(self._sig.parameters)
            raise LaunchError(f"kernel {self.fn.__name__}({params}) called with {len(args)} argument(s): {e}",
                              loc=user_loc(3), notes=[f"kernel defined at {self.loc}"]) from None

    def _specialize(self, args: tuple[Any, ...], grid: tuple[int, ...],
                    static: bool = False) -> tuple[Compiled, list[Any]]:
        """The compiled variant for these arguments (traced on a miss; see runtime/specialize.py).

        ``static``: key on exact shapes (the simulator needs concrete sizes).
        """
        self._bind(args)
        cls: tuple[Any, ...] = ()
        tried: set[tuple[str, int]] = set()  # sizes made constants by errors of this call (kept if it compiles)
        exact = False  # this call retries on exact shapes (kept for its class if that compiles)
        while True:
            prepared = [argconv.describe(a, name, self.loc) for a, name in zip(args, self._sig.parameters)]
            sizes = None
            if self.dynamic and not static:
                cls = tuple(p.key for p in prepared if p.tensor is None)
                if not exact and cls not in self._exact:
                    fixed = self._static_dims | self._learned.get(cls, set()) | tried
                    sizes = Sizes(fixed, getattr(self, "exact_min_bytes", None))  # stdlib: tiling.polymorphic
                    sizes.apply(prepared)
            key = (tuple(p.key for p in prepared), grid, self._target(), self._use_interpreter(), self.debug)
            comp = self._cache.get(key)
            if comp is not None:
                _rstats.count(self.fn.__name__, "memory_hits")
                break
            try:
                comp = self._compile(prepared, grid)
            except NeedStatic as e:  # the kernel's code needs these sizes as numbers: for its class, for good
                dims = sizes.dims_of(e.syms) if sizes is not None else set()
                if not dims:
                    raise
                self._learned.setdefault(cls, set()).update(dims)
                self._stats["static_reasons"].append(f"{', '.join(map(str, e.syms))}: {e.msg} ({e.loc})")
                continue
            except Exception as e:  # noqa: BLE001 - a failed symbolic trace: retry with more constants / exact
                if sizes is None or not sizes.symbolic:
                    raise
                named = sizes.dims_of(tuple(sym(n) for n in _SIZE_NAMES.findall(str(e))))
                why = f"{type(e).__name__}: {getattr(e, 'msg', e)}"
                if named - tried:  # the error names runtime sizes: make just those constants
                    tried |= named
                else:
                    exact = True
                continue
            self._cache[key] = comp
            break
        if tried:  # the retries worked: the error was the symbolic trace's, not the user's
            self._learned.setdefault(cls, set()).update(tried)
            self._stats["static_reasons"].append(why)
        if exact:
            self._exact.add(cls)
            self._stats["fallback"] = why
        return comp, prepared

    def compile_stats(self) -> dict[str, Any]:
        """How often this kernel was traced and compiled, and which sizes are compile-time constants.

        Keys: ``traces`` (kernel traces), ``variants`` (compiled specializations in memory),
        ``dynamic`` (shape-polymorphic), ``static_dims`` ((argument, dim) pairs keyed on exactly),
        ``static_reasons`` and ``fallback`` (why).

        Example:
            >>> import numpy as np, trnlang as trn, trnlang.language as tl
            >>> @trn.kernel
            ... def inc(x, out):
            ...     n = x.shape[0]
            ...     for i in tl.affine_range(tl.cdiv(n, 128)):
            ...         r = i * 128 + tl.arange(128)
            ...         tl.store(out[r], tl.load(x[r], mask=r < n) + 1.0, mask=r < n)
            >>> for n in (200, 300, 5000):
            ...     x = np.zeros(n, np.float32); o = np.empty_like(x); inc(x, o)
            >>> inc.compile_stats()["traces"]
            1
        """
        return {"traces": self._stats["traces"], "variants": len(self._cache),
                "dynamic": self.dynamic and not self._exact,
                "static_dims": set(self._static_dims).union(*self._learned.values()),
                "static_reasons": list(self._stats["static_reasons"]), "fallback": self._stats["fallback"]}

    def _compile(self, prepared: list[Any], grid: tuple[int, ...]) -> Compiled:
        from trnlang.passes import run_pipeline

        kernel = self._trace(prepared, grid)
        checks = run_pipeline(kernel)
        comp = Compiled(kernel, checks)
        from trnlang.runtime import backend

        comp.executor = backend.make_executor(kernel, interpret=self._use_interpreter(), debug=self.debug)
        if isinstance(comp.executor, _jit.JitExecutor):  # an evicted variant takes its plans (and spec) along
            comp.executor.on_evict = functools.partial(_forget, weakref.ref(self._cache), comp)
        return comp

    def _trace(self, prepared: list[Any], grid: tuple[int, ...]) -> Kernel:
        self._stats["traces"] += 1
        _rstats.count(self.fn.__name__, "traces")
        params = [p.tensor for p in prepared if p.tensor is not None]
        k = Kernel(self.fn.__name__, params, grid, [], target=self._target(), loc=self.loc)
        call_args = [HbmRef(p.tensor) if p.tensor is not None else p.value for p in prepared]
        with tracing(k) as ctx:
            ret = self.fn(*call_args)
            if len(ctx.blocks) != 1:
                raise TraceError("a traced loop was left early (`break` or `return` inside tl.affine_range / "
                                 "tl.sequential_range is not supported)", loc=ctx.loops[-1].loc)
            rets = ret if isinstance(ret, tuple) else (() if ret is None else (ret,))
            outs: list[HbmTensor] = []
            for r in rets:
                if not isinstance(r, HbmRef) or r.tensor not in ctx.allocated_hbm:
                    raise TraceError("a kernel returns tensors it allocated with tl.ndarray(..., buffer=tl.shared_hbm)"
                                     f", got {type(r).__name__}", loc=self.loc)
                if r.tensor in outs:
                    raise TraceError("the same tensor is returned twice", loc=self.loc)
                r.tensor.kind = "out"
                outs.append(r.tensor)
            k.outputs = outs
            k.scratch = [t for t in ctx.allocated_hbm if t not in outs]
            for i, t in enumerate(k.outputs):
                t.name = f"out{i}"
            for i, t in enumerate(k.scratch):
                t.name = f"scratch{i}"
        k.returns_tuple = isinstance(ret, tuple)  # type: ignore[attr-defined]
        return k

    def _fast_key(self, args: tuple[Any, ...], grid: tuple[int, ...]) -> tuple[Any, list[np.ndarray]] | None:
        """The warm-launch key (layout of every tensor, value of every constant, grid, env) and the arrays.

        It is built from the same numpy views the slow path specializes on, so a hit always means the
        same specialization; anything unusual returns None and takes the slow path.
        """
        key: list[Any] = [grid, _config.current.launch_key]
        arrays = []
        for a in args:
            ta = type(a)
            if ta in _CONST_TYPES or (ta is tuple and all(type(v) in _CONST_TYPES for v in a)):
                key.append((ta, a))
                continue
            if ta is np.ndarray:
                arr = a
            elif argconv._is_torch(a):
                try:
                    arr = argconv.as_array(a)
                except Exception:  # unsupported dtype or device: the slow path reports it
                    return None
            elif ta in argconv.SPEC_TYPES:
                key.append((ta, a))
                continue
            else:
                return None
            arrays.append(arr)
            key.append((arr.shape, arr.dtype, arr.flags.c_contiguous))
        return tuple(key), arrays

    def _make_plan(self, comp: Compiled, arrays: list[np.ndarray], grid: tuple[int, ...]) -> LaunchPlan | None:
        from trnlang.runtime.jit import JitExecutor

        ex = comp.executor
        k = comp.ir
        if not isinstance(ex, JitExecutor) or k.outputs or k.scratch:
            return None
        if any(any(s % a.itemsize for s in a.strides) or a.ctypes.data % min(a.itemsize, 8) for a in arrays):
            return None
        return LaunchPlan(ex, arrays, grid)

    def _launch(self, comp: Compiled, arrays: list[np.ndarray], args: tuple[Any, ...], grid: tuple[int, ...]) -> Any:
        k = comp.ir
        if not k.outputs and not k.scratch:
            comp.executor(arrays, grid)
            if OBSERVERS:
                _notify(self, comp, args, grid)
            return None
        like = next((a for a in args if argconv.is_tensor(a)), None)
        outs_host = [argconv.alloc_like(like, t.shape, t.dtype) for t in k.outputs]
        scratch = [_scratch_array(t) for t in k.scratch]
        comp.executor([*arrays, *(argconv.as_array(o) for o in outs_host), *scratch], grid)
        if OBSERVERS:
            _notify(self, comp, args, grid)
        if not outs_host:
            return None
        if getattr(k, "returns_tuple", False):
            return tuple(outs_host)
        return outs_host[0]

    def _run(self, comp: Compiled, prepared: list[Any], args: tuple[Any, ...], grid: tuple[int, ...]) -> Any:
        k = comp.ir
        arrays = [p.array for p in prepared if p.tensor is not None]
        like = next((a for a in args if argconv.is_tensor(a)), None)
        outs_host = [argconv.alloc_like(like, t.shape, t.dtype) for t in k.outputs]
        scratch = [_scratch_array(t) for t in k.scratch]
        comp.executor([*arrays, *(argconv.as_array(o) for o in outs_host), *scratch], grid)
        for p in prepared:
            p.finish()
        if OBSERVERS:
            _notify(self, comp, args, grid)
        if not outs_host:
            return None
        if getattr(k, "returns_tuple", False):
            return tuple(outs_host)
        return outs_host[0]


_KEY_FUNCTIONS: dict[tuple[type, ...], Callable[..., Any] | None] = {}


def _key_function(types: tuple[type, ...]) -> Callable[..., Any] | None:
    """``f(args, grid, launch_key)``: :meth:`KernelFn._plan_key_general`'s result for arguments of exactly these
    types (None for others), as straight-line code made once per type pattern; None when a type is not plan-able.

    A warm launch on tiny tensors is dominated by this key (five torch attribute reads per tensor), so the
    loop, the type dispatch and the list building are compiled away.

    Example:
        >>> import torch
        >>> f = _key_function((torch.Tensor, float))
        >>> x = torch.zeros(2, 3)
        >>> key, ptrs = f((x, 1.5), (1,), "lk")
        >>> key == ((1,), "lk", torch.float32, (2, 3), (3, 1), True, False, float, 1.5), ptrs == (x.data_ptr(),)
        (True, True)
        >>> f((x, 2), (1,), "lk") is None   # an int where the pattern has a float
        True
    """
    if types in _KEY_FUNCTIONS:
        return _KEY_FUNCTIONS[types]
    tt = _TORCH_TENSOR or _torch_tensor_type()
    names = [f"a{i}" for i in range(len(types))]
    checks, ptrs, keys, nonzero, body = [], [], ["grid", "lk"], [], []
    env: dict[str, Any] = {"CS": _CONST_SET}
    for i, (t, a) in enumerate(zip(types, names)):
        env[f"T{i}"] = t
        checks.append(f"type({a}) is not T{i}")
        if t in _CONST_SET or t in argconv.SPEC_TYPES:  # a spec type: its instances by value, as the general key
            keys += [f"T{i}", a]
        elif t is tuple:
            body.append(f"for v in {a}:\n        if type(v) not in CS:\n            return None")
            keys += [f"T{i}", a]
        elif t is TensorPiece:
            keys.append(f"*{a}.key")
            ptrs.append(f"{a}.ptr")
        elif issubclass(t, tt):
            body.append(f"p{i} = {a}.data_ptr()")
            nonzero.append(f"p{i}")
            keys += [f"{a}.dtype", f"{a}.shape", f"{a}.stride()", f"{a}.is_cpu", f"{a}.is_neg()"]
            ptrs.append(f"p{i}")
        else:
            _KEY_FUNCTIONS[types] = None
            return None
    lines = ["def key(args, grid, lk):", f"    if len(args) != {len(types)}:", "        return None"]
    if names:
        lines.append(f"    {', '.join(names)}, = args")
        lines.append(f"    if {' or '.join(checks)}:")
        lines.append("        return None")
    lines += [f"    {b}" for b in body]
    if nonzero:
        lines.append(f"    if not ({' and '.join(nonzero)}):")
        lines.append("        return None")
    lines.append(f"    return ({', '.join(keys)},), ({''.join(p + ', ' for p in ptrs)})")
    exec(compile("\n".join(lines), f"<trnlang plan key {len(types)}>", "exec"), env)  # noqa: S102 - our own text
    _KEY_FUNCTIONS[types] = env["key"]
    return env["key"]


def _notify(kfn: KernelFn, comp: Compiled, args: tuple[Any, ...], grid: tuple[int, ...]) -> None:
    for cb in tuple(OBSERVERS):
        cb(kfn, comp, args, grid)


def _scratch_array(t: HbmTensor) -> np.ndarray:
    """A kernel-private HBM tensor for one launch: its constant contents (``data``), else zeros."""
    if t.data is not None:
        return np.array(t.data, dtype=t.dtype.np, copy=True)
    return np.zeros(tuple(int(s) for s in t.shape), t.dtype.np)


def _forget(cache_ref: Any, comp: Compiled, executor: Any, empty: bool) -> None:
    """A variant of ``comp``'s executor was evicted (runtime/codecache.py): drop the launch plans on that
    executor and, once it has no variant left, the specialization itself (traced again on its next launch)."""
    cache = cache_ref()
    if cache is None:
        return
    for k, plan in list(cache.plans.items()):
        if plan is not None and plan.executor is executor:
            cache.plans.pop(k, None)
    if cache.last is not None and cache.last[1].executor is executor:
        cache.last = None
    if empty:
        for d in (cache, cache.fast):
            for k, c in list(d.items()):
                if c is comp:
                    d.pop(k, None)


def kernel(fn: Callable[..., Any] | None = None, *, target: str | None = None, interpret: bool | None = None,
           debug: bool = False, dynamic: bool | None = None) -> Any:
    """Define a trnlang kernel (``@trn.kernel`` or ``@trn.kernel(target="trn2", interpret=True)``).

    ``dynamic`` (default True for user kernels): tensor sizes are runtime values, so a new size of the same
    class reuses the compiled code; False keys every variant on exact shapes. The policy is in
    ``trnlang/runtime/specialize.py`` and docs/specialization.md.

    Example:
        >>> import trnlang as trn, trnlang.language as tl
        >>> @trn.kernel
        ... def copy_rows(x, out):
        ...     tl.store(out[0:4, :], tl.load(x[0:4, :]))
    """
    if fn is None:
        return lambda f: KernelFn(f, target, interpret, debug, dynamic)
    return KernelFn(fn, target, interpret, debug, dynamic)


__all__ = ["kernel", "KernelFn", "Compiled"]
