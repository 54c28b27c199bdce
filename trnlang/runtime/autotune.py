"""``trn.autotune``: pick the best of several compile-time configurations of a kernel, per problem key.

Triton-like::

    @trn.autotune(configs=[trn.Config(BLOCK=256), trn.Config(BLOCK=512)], key=["x"])
    @trn.kernel
    def scale(x, out, BLOCK): ...

    scale(x, out)                                  # BLOCK is filled in by the tuner
    scale[lambda cfg: (n // cfg["BLOCK"],)](x, out)  # a grid may depend on the config

- A :class:`Config`'s keyword arguments are bound *by name* to the kernel's
  parameters (they are ordinary compile-time constants of the kernel); the
  caller passes every other argument, positionally.
- ``key`` names arguments whose values select the tuning result: a tensor
  contributes its shape and dtype, anything else its value. The grid is part of
  the key too. Each distinct key is tuned once.
- ``metric="sim"`` (default) compiles every config and ranks them by the
  simulated time of their schedule (nothing is executed while tuning);
  ``metric="wall"`` runs each config on copies of the tensor arguments and
  ranks by host wall time (the minimum over ``rep`` runs after ``warmup``).
  A config that fails to compile (e.g. its tiles overflow SBUF) is skipped.
- Results are remembered in memory and on disk under
  ``$TRN_CACHE_DIR/autotune/`` (default ``~/.cache/trnlang``), one JSON file
  per kernel source and config list, written atomically. A progress bar
  (tqdm) appears when tuning takes more than half a second.

Example:
    >>> import torch, trnlang as trn, trnlang.language as tl
    >>> @trn.autotune(configs=[trn.Config(COLS=32), trn.Config(COLS=64)], key=["x"])
    ... @trn.kernel
    ... def twice(x, out, COLS):
    ...     for j in tl.affine_range(x.shape[1] // COLS):
    ...         cols = j * COLS + tl.arange(COLS)[None, :]
    ...         tl.store(out[tl.arange(128)[:, None], cols], tl.load(x[tl.arange(128)[:, None], cols]) * 2.0)
    >>> x = torch.ones(128, 64); out = torch.empty_like(x)
    >>> twice(x, out); float(out.sum())
    16384.0
    >>> twice.best_config(x, out) in twice.configs  # ranked by simulated time
    True
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import os
import time
from typing import Any, Callable, Sequence

from trnlang.frontend.errors import LaunchError, TrnError
from trnlang.runtime import diskcache
from trnlang.runtime.kernel import KernelFn, _normalize_grid

__all__ = ["Autotuner", "Config", "autotune", "cache_dir"]

_METRICS = ("sim", "wall")


class Config:
    """One set of compile-time keyword arguments to try (``trn.Config(BLOCK=128, GROUP=4)``)."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = dict(kwargs)

    def __getitem__(self, name: str) -> Any:
        return self.kwargs[name]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and other.kwargs == self.kwargs

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self.kwargs.items())))

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items()) + ")"


def cache_dir() -> str:
    """``$TRN_CACHE_DIR/autotune`` (default ``~/.cache/trnlang/autotune``)."""
    return os.path.join(diskcache.cache_base(), "autotune")


def _store() -> diskcache.Store | None:
    """The autotune directory (private checks as for compiled kernels; its JSON choices cannot run code,
    and only name configs the kernel already lists, so entries are not authenticated)."""
    base = diskcache.cache_base()
    st = _stores.get(base)
    if st is None:
        st = _stores[base] = diskcache.Store(base, "autotune", authenticate=False)
    return st if st.usable else None


_stores: dict[str, diskcache.Store] = {}


@functools.lru_cache(maxsize=1)
def _sim_fingerprint() -> str:
    """A hash of the sources simulated time depends on: the simulator (targets, cost model, scheduler) and the
    passes whose decisions it schedules (the memory planner's buffer counts). Results tuned on simulated time are
    only valid for the model that produced them."""
    import trnlang.passes as passes
    import trnlang.sim as sim

    h = hashlib.sha256()
    for pkg in (sim, passes):
        d = os.path.dirname(os.path.abspath(pkg.__file__ or ""))
        for name in sorted(os.listdir(d)):
            if name.endswith(".py"):
                with open(os.path.join(d, name), "rb") as f:
                    h.update(pkg.__name__.encode() + b"/" + name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def _key_value(v: Any) -> Any:
    shape = getattr(v, "shape", None)
    if shape is not None and hasattr(v, "dtype"):
        return ["tensor", [int(s) for s in shape], str(v.dtype)]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def _clone(v: Any) -> Any:
    if hasattr(v, "clone") and hasattr(v, "shape"):
        return v.clone()
    if hasattr(v, "copy") and hasattr(v, "shape"):
        return v.copy()
    return v


class Autotuner:
    """A kernel with several configurations; behaves like the kernel (call it, index it with a grid)."""

    def __init__(self, fn: KernelFn, configs: Sequence[Config], key: Sequence[str], metric: str = "sim",
                 warmup: int = 1, rep: int = 3) -> None:
        if not isinstance(fn, KernelFn):
            raise TypeError("trn.autotune decorates a @trn.kernel function (put @trn.autotune above @trn.kernel)")
        if metric not in _METRICS:
            raise ValueError(f"metric must be one of {', '.join(_METRICS)}, got {metric!r}")
        if not configs:
            raise ValueError("trn.autotune needs at least one trn.Config")
        params = list(fn._sig.parameters)
        for c in configs:
            bad = [k for k in c.kwargs if k not in params]
            if bad:
                raise ValueError(f"{c!r}: {', '.join(bad)} is not a parameter of {fn.fn.__name__}({', '.join(params)})")
        names = {k for c in configs for k in c.kwargs}
        for k in key:
            if k not in params or k in names:
                raise ValueError(f"autotune key {k!r} must name a parameter of {fn.fn.__name__} that the caller passes")
        self.fn, self.configs, self.key, self.metric = fn, list(configs), list(key), metric
        self.warmup, self.rep = warmup, rep
        self.params = [p for p in params if p not in names]
        self.best: dict[str, Config] = {}
        self.timings: dict[str, list[tuple[Config, float]]] = {}
        self._loaded = False
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "kernel")

    # --- launch ---------------------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        return self._launch(args, (1,))

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args: self._launch(args, grid)

    def profile(self, *args: Any, grid: Any = (1,), simulate_only: bool = False) -> Any:
        """Tune (if needed), then profile the best config (see ``KernelFn.profile``)."""
        cfg = self.best_config(*args, grid=grid)
        return self.fn.profile(*self._full(args, cfg), grid=self._grid(grid, cfg), simulate_only=simulate_only)

    def best_config(self, *args: Any, grid: Any = (1,)) -> Config:
        """The best config for these arguments (tuning now if this key was never tuned)."""
        key = self._key(args, grid)
        cfg = self.best.get(key)
        if cfg is None:
            self._load()
            cfg = self.best.get(key)
        if cfg is None:
            cfg = self._tune(args, grid, key)
        return cfg

    def _launch(self, args: tuple[Any, ...], grid: Any) -> Any:
        cfg = self.best_config(*args, grid=grid)
        return self.fn[self._grid(grid, cfg)](*self._full(args, cfg))

    # --- helpers --------------------------------------------------------------------------------------
    def _full(self, args: tuple[Any, ...], cfg: Config) -> tuple[Any, ...]:
        if len(args) != len(self.params):
            raise LaunchError(f"{self.fn.fn.__name__} takes {len(self.params)} argument(s) besides its tuned "
                              f"constants ({', '.join(self.params)}), got {len(args)}", loc=self.fn.loc)
        values = dict(zip(self.params, args))
        values.update(cfg.kwargs)
        return tuple(values[p] for p in self.fn._sig.parameters)

    @staticmethod
    def _grid(grid: Any, cfg: Config) -> tuple[int, ...]:
        return _normalize_grid(grid(cfg.kwargs) if callable(grid) else grid)

    def _key(self, args: tuple[Any, ...], grid: Any) -> str:
        values = dict(zip(self.params, args))
        key = [[k, _key_value(values.get(k))] for k in self.key]
        g = "config" if callable(grid) else list(_normalize_grid(grid))
        return json.dumps([key, g, self.fn._target(), self.metric], sort_keys=True)

    def _path(self) -> str:
        try:
            src = inspect.getsource(self.fn.fn)
        except (OSError, TypeError):
            src = self.fn.fn.__qualname__
        model = _sim_fingerprint() if self.metric == "sim" else ""  # a changed cost model re-tunes
        h = hashlib.sha256(json.dumps([src, [sorted((k, repr(v)) for k, v in c.kwargs.items())
                                             for c in self.configs], model]).encode()).hexdigest()[:16]
        name = f"{self.fn.fn.__module__}.{self.fn.fn.__qualname__}".replace("<", "").replace(">", "")
        return f"{name}-{h}.json"

    def _read(self) -> dict[str, Any]:
        st = _store()
        raw = st.read(self._path()) if st is not None else None
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def _load(self) -> None:
        data = self._read()
        entries = data.get("entries")
        for key, entry in (entries.items() if isinstance(entries, dict) else ()):
            try:
                cfg = Config(**entry["config"])
            except (TypeError, KeyError):  # a damaged file only costs re-tuning
                continue
            if cfg in self.configs and key not in self.best:
                self.best[key] = self.configs[self.configs.index(cfg)]

    def _save(self, key: str, cfg: Config, timings: list[tuple[Config, float]]) -> None:
        st = _store()
        if st is None:  # no usable cache directory only costs re-tuning
            return
        data = self._read()
        data.setdefault("kernel", self.fn.fn.__qualname__)
        data.setdefault("entries", {})[key] = {
            "config": cfg.kwargs, "metric": self.metric,
            "timings": [[c.kwargs, t if math.isfinite(t) else None] for c, t in timings]}
        st.write(self._path(), json.dumps(data, indent=1, sort_keys=True).encode())  # atomic

    def _measure(self, args: tuple[Any, ...], grid: Any, cfg: Config) -> float:
        full = self._full(args, cfg)
        g = self._grid(grid, cfg)
        if self.metric == "sim":
            return float(self.fn.profile(*full, grid=g, simulate_only=True).time_us * 1e-6)
        copies = tuple(_clone(a) for a in full)  # the caller's tensors are only written by the final launch
        launch = self.fn[g]
        for _ in range(self.warmup):
            launch(*copies)
        best = math.inf
        for _ in range(max(1, self.rep)):
            t0 = time.perf_counter()
            launch(*copies)
            best = min(best, time.perf_counter() - t0)
        return best

    def _tune(self, args: tuple[Any, ...], grid: Any, key: str) -> Config:
        timings: list[tuple[Config, float]] = []
        errors: list[TrnError] = []
        bar = _progress(len(self.configs), f"autotune {self.fn.fn.__name__}")
        try:
            for cfg in self.configs:
                try:
                    t = self._measure(args, grid, cfg)
                except TrnError as e:
                    errors.append(e)
                    t = math.inf
                timings.append((cfg, t))
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        best_cfg, best_t = min(timings, key=lambda ct: ct[1])
        if not math.isfinite(best_t):
            raise errors[-1]
        self.best[key] = best_cfg
        self.timings[key] = timings
        self._save(key, best_cfg, timings)
        return best_cfg


def _progress(total: int, desc: str) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency, but tuning works without it
        return None
    return tqdm(total=total, desc=desc, delay=0.5, leave=False, unit="config")


def autotune(configs: Sequence[Config], key: Sequence[str] = (), metric: str = "sim", warmup: int = 1,
             rep: int = 3) -> Callable[[KernelFn], Autotuner]:
    """Decorate a ``@trn.kernel`` to choose among ``configs`` per ``key`` (see the module docstring).

    Args:
        configs: the configurations; their keyword arguments bind to kernel parameters by name.
        key: names of (caller-passed) kernel parameters whose values select the tuning result.
        metric: ``"sim"`` (simulated time, default) or ``"wall"`` (host wall time).
        warmup, rep: launches before / measured per config with ``metric="wall"``.

    Example:
        >>> import trnlang as trn
        >>> trn.autotune(configs=[trn.Config(B=1)], key=[], metric="cycles")
        Traceback (most recent call last):
        ...
        ValueError: metric must be one of sim, wall, got 'cycles'
    """
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {', '.join(_METRICS)}, got {metric!r}")

    def wrap(fn: KernelFn) -> Autotuner:
        return Autotuner(fn, configs, key, metric, warmup, rep)

    return wrap
