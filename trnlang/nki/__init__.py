"""NKI kernels on trnlang: ``import trnlang.nki as nki`` (docs/nki.md).

The names NKI users write -- ``nki.jit``, ``nki.baremetal``, ``nki.simulate_kernel``, ``nki.benchmark``,
``nki.profile``, ``nki.language`` (``nl``), ``nki.isa`` (``nisa``), ``nki.typing``, ``nki.compiler`` --
implemented on trnlang's language core: a ``@nki.jit`` kernel is a ``@trn.kernel`` traced under NKI's tile
rules, compiled by the same JIT, run by the same interpreter and simulated by the same cost model.

``trnlang.nki.install()`` lets unmodified kernel files import ``neuronxcc.nki`` / ``nki`` when those
packages are not installed (a real install always wins).

Example:
    >>> import numpy as np
    >>> import trnlang.nki as nki
    >>> import trnlang.nki.language as nl
    >>> @nki.jit
    ... def add_kernel(a, b):
    ...     c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ...     ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    ...     iy = nl.arange(512)[None, :]
    ...     nl.store(c[ix, iy], value=nl.load(a[ix, iy]) + nl.load(b[ix, iy]))
    ...     return c
    >>> a = np.ones((256, 512), np.float32)
    >>> float(add_kernel[2](a, a).sum())
    262144.0
"""

from __future__ import annotations

from typing import Any, Callable

from trnlang.frontend.errors import TraceError
from trnlang.frontend.tracer import NeedUnroll
from trnlang.frontend.tracer import dialect as _dialect
from trnlang.nki import compiler, isa, language, typing
from trnlang.nki._aliases import install, install_aliases, uninstall
from trnlang.runtime.kernel import KernelFn


class NkiKernel(KernelFn):
    """A ``@nki.jit`` kernel: a trnlang kernel traced under NKI's tile rules (``TraceContext.nki``).

    Call it (``k(a, b)``) or launch a grid (``k[2, 3](a, b)``); keyword arguments bind by name.
    """

    _unroll: frozenset[tuple[str, int]] = frozenset()

    def _trace(self, prepared: list[Any], grid: tuple[int, ...]) -> Any:
        while True:
            try:
                with _dialect("nki", self._unroll):
                    return super()._trace(prepared, grid)
            except NeedUnroll as e:
                # A loop variable indexed a Python list of tiles, which other loops filled with append():
                # like NKI, unroll the kernel's loops with constant trip counts and trace again.
                if ("*", 0) in self._unroll:
                    raise TraceError(e.msg, loc=e.loc) from None
                self._unroll = frozenset({("*", 0)})


def _wrap(fn: Callable[..., Any] | None, interpret: bool | None, kwargs: dict[str, Any]) -> Any:
    target = kwargs.get("target")

    def make(f: Callable[..., Any]) -> NkiKernel:
        if isinstance(f, NkiKernel):
            return f
        return NkiKernel(f, target=target, interpret=interpret)

    return make if fn is None else make(fn)


def jit(func: Callable[..., Any] | None = None, mode: str = "auto", **kwargs: Any) -> Any:
    """Compile a NKI kernel with trnlang's JIT (``@nki.jit`` or ``@nki.jit(mode=...)``).

    ``mode="simulation"`` runs it in the numpy reference interpreter; other NKI options (platform target,
    debug flags, framework modes) are accepted and ignored: trnlang runs on the host.

    Example:
        >>> import numpy as np, trnlang.nki as nki, trnlang.nki.language as nl
        >>> @nki.jit
        ... def twice(x):
        ...     out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ...     nl.store(out, value=nl.multiply(nl.load(x), 2.0))
        ...     return out
        >>> twice(np.ones((2, 2), np.float32)).tolist()
        [[2.0, 2.0], [2.0, 2.0]]
    """
    return _wrap(func, True if mode == "simulation" else None, kwargs)


def baremetal(kernel: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """NKI's baremetal launch: here the same compiled kernel as ``nki.jit`` (artifact options ignored)."""
    return _wrap(kernel, None, kwargs)


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a kernel once in the numpy reference interpreter (NKI's CPU simulator) and return its outputs.

    Example:
        >>> import numpy as np, trnlang.nki as nki, trnlang.nki.language as nl
        >>> @nki.jit
        ... def neg(x):
        ...     out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ...     nl.store(out, value=nl.negative(nl.load(x)))
        ...     return out
        >>> nki.simulate_kernel(neg, np.ones((2, 2), np.float32)).tolist()
        [[-1.0, -1.0], [-1.0, -1.0]]
    """
    k = kernel if isinstance(kernel, KernelFn) else jit(kernel)
    interp = NkiKernel(k.fn, target=k.target, interpret=True)
    return interp(*args, **kwargs)


class LatencyStats:
    """Simulated latency of a benchmarked kernel (deterministic: every percentile is the simulated time)."""

    def __init__(self, time_us: float) -> None:
        self.time_us = time_us

    def get_latency_percentile(self, percentile: float = 50) -> float:
        """The simulated latency in microseconds (the same for every percentile)."""
        return self.time_us


class BenchmarkResult:
    """``.nc_latency`` of the last benchmarked launch, plus the full ``trn.Profile``."""

    def __init__(self, profile: Any) -> None:
        self.profile = profile
        self.nc_latency = LatencyStats(float(profile.time_us))


class _Profiled:
    """A kernel run through the simulator on each call: outputs as by a normal call, the profile kept."""

    def __init__(self, kernel: Any, save_trace_name: str | None) -> None:
        self.kernel = kernel if isinstance(kernel, KernelFn) else jit(kernel)
        self.save_trace_name = save_trace_name
        self.benchmark_result: BenchmarkResult | None = None
        self.profile: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        k = self.kernel
        call = k._positional(args, kwargs) if kwargs else args
        prof = k.profile(*call)
        self.profile = prof
        self.benchmark_result = BenchmarkResult(prof)
        if self.save_trace_name:
            prof.save_trace(self.save_trace_name)
        return prof.result


def benchmark(kernel: Any = None, warmup: int = 0, iters: int = 1, save_neff_name: str | None = None,
              save_trace_name: str | None = None, **_: Any) -> Any:
    """Benchmark a kernel on the simulator: ``nki.benchmark(k, save_trace_name="t.json")(a, b)`` or
    ``@nki.benchmark(...)``; afterwards ``.benchmark_result.nc_latency.get_latency_percentile(50)`` is the
    simulated time in us and ``save_trace_name`` a Chrome trace (Perfetto). ``warmup``/``iters``/NEFF names
    are accepted and ignored (the simulator is deterministic)."""
    if kernel is not None and callable(kernel):
        return _Profiled(kernel, save_trace_name)
    return lambda k: _Profiled(k, save_trace_name)


def profile(func: Any = None, working_directory: str | None = None, save_neff_name: str | None = None,
            save_trace_name: str | None = None, profile_nth: int = 1, **_: Any) -> Any:
    """Profile a kernel on the simulator; like ``benchmark``, the trace goes to ``save_trace_name`` (inside
    ``working_directory`` when given)."""
    import os

    path = save_trace_name or "profile.json"
    if working_directory:
        path = os.path.join(working_directory, path)
    if func is not None and callable(func):
        return _Profiled(func, path)
    return lambda k: _Profiled(k, path)


__all__ = ["jit", "baremetal", "simulate_kernel", "benchmark", "profile", "language", "isa", "typing",
           "compiler", "install", "install_aliases", "uninstall", "NkiKernel", "BenchmarkResult", "LatencyStats"]
