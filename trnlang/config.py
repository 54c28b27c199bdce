"""The runtime's configuration: the ``TRN_*`` environment variables, read once into a snapshot.

The launch paths consult the settings on every call, so they read a frozen :class:`Config`
(:data:`current`: an attribute lookup) instead of the process environment. The snapshot is taken
when ``trnlang`` is imported; a program that changes an environment variable afterwards calls
:func:`refresh` to make the runtime see it (the test suite's ``monkeypatch.setenv`` does so through
``tests/conftest.py``). Which variable means what: docs/config.md.

Example:
    >>> import os, trnlang.config as config
    >>> os.environ["TRN_NUM_THREADS"] = "3"
    >>> config.refresh().num_threads
    3
    >>> del os.environ["TRN_NUM_THREADS"]; config.refresh().num_threads == (os.cpu_count() or 1)
    True
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

__all__ = ["Config", "current", "refresh", "read", "override", "DEFAULT_MAX_LOADED_KERNELS"]

#: Compiled variants kept loaded when ``TRN_MAX_LOADED_KERNELS`` is unset (runtime/codecache.py).
DEFAULT_MAX_LOADED_KERNELS = 2048
_OFF = ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Config:
    """One reading of the ``TRN_*`` variables the runtime uses (see docs/config.md).

    Attributes:
        target: ``TRN_TARGET`` (None when unset or empty; kernels then compile for ``trn2``).
        interpret: ``TRN_INTERPRET`` is set to a true value: kernels run on the numpy interpreter.
        num_threads: ``TRN_NUM_THREADS`` (a positive integer), else the machine's cores: threads of one
            split op and of a compiled grid.
        native_pool: ``TRN_NATIVE_POOL`` is not false: split launches may run on native worker threads.
        max_loaded_kernels: ``TRN_MAX_LOADED_KERNELS`` (a positive integer), else
            :data:`DEFAULT_MAX_LOADED_KERNELS`.
        disk_cache: ``TRN_JIT_NO_DISK_CACHE`` is unset or empty: compiled objects are cached on disk.
        cache_dir: ``TRN_CACHE_DIR``, else ``~/.cache/trnlang``.
        config_dir: ``TRN_CONFIG_DIR`` (None: ``$XDG_CONFIG_HOME/trnlang`` or ``~/.config/trnlang``).
        generation: how many snapshots were taken before this one (0 for the first).
        dump: ``TRN_DUMP`` split at commas: the pass pipeline prints the IR after each named stage (``trace``,
            a pass of ``trnlang.passes.PIPELINE`` or ``LOWERING``, ``compile``, or ``all``) to stderr.
        compile_route: ``TRN_COMPILE`` lower-cased (``"inductor"``: torch.compile's default backend compiles
            trn graphs through Inductor with trnlang kernels, see trnlang/compile/inductor/).
        fallback: ``TRN_FALLBACK`` lower-cased (default ``"warn"``): what an op the device cannot run
            natively does (``warn``, ``error``, ``silent``, ``f64only``: ``error`` except for float64/complex128
            calls, which warn; ``trnlang.device.fallback.policy`` validates it).
        guard: ``TRN_GUARD`` is set to a true value: device allocations end at an inaccessible page.
        cache_limit_mb: ``TRN_CACHE_LIMIT_MB`` (a non-negative integer), else 1024: bytes of freed device
            blocks the caching allocator keeps.
        jit_libm: ``TRN_JIT_LIBM`` is set to a true value: generated kernels call the float64 libm instead of
            the vectorised math library (an accuracy oracle for tests).
        stream_min_mb: ``TRN_STREAM_MIN_MB`` (a number), else 0 (the last-level cache size): the smallest
            output written with streaming stores, read when ``codegen.lowering.stream`` is imported.
        isa: ``TRN_ISA`` lower-cased (None when unset or empty): the forced ISA path of generated code
            (``codegen.isa.forced_name`` validates it).
        dist_check: ``TRN_DIST_CHECK`` (default ``"1"``): collectives check that every rank called the same op
            (``trnlang.distributed.c10d.check_enabled`` validates it).
        compile_fuse: ``TRN_COMPILE_FUSE`` is not ``"0"``: the torch.compile backend fuses graph regions.
        stdlib_exclude: ``TRN_STDLIB_EXCLUDE``, comma-separated ATen op names (``aten::logaddexp``): the standard
            library's lowerings of these ops (and their routed in-place/``out=`` variants) are not registered, so
            the ops run through the CPU fallback (read when the device registers).
        launch_key: ``(target, interpret)``: the part of the settings a warm launch depends on (caches of
            bound launches key on it).
    """

    target: str | None
    interpret: bool
    num_threads: int
    native_pool: bool
    max_loaded_kernels: int
    disk_cache: bool
    cache_dir: str
    config_dir: str | None
    generation: int = 0
    compile_route: str = ""
    dump: frozenset[str] = frozenset()
    fallback: str = "warn"
    guard: bool = False
    cache_limit_mb: int = 1024
    jit_libm: bool = False
    stream_min_mb: float = 0.0
    isa: str | None = None
    dist_check: str = "1"
    compile_fuse: bool = True
    stdlib_exclude: frozenset[str] = frozenset()
    launch_key: tuple[str | None, bool] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "launch_key", (self.target, self.interpret))  # one tuple, read per launch


def _positive(v: str | None, default: int) -> int:
    v = (v or "").strip()
    return max(1, int(v)) if v.isdigit() else default


def _number(v: str | None, default: float) -> float:
    try:
        return float((v or "").strip())
    except ValueError:
        return default


def read(env: Mapping[str, str] | None = None, generation: int = 0) -> Config:
    """A :class:`Config` from ``env`` (default: ``os.environ``), without installing it.

    Example:
        >>> read({"TRN_TARGET": "trn3", "TRN_INTERPRET": "1"}).launch_key
        ('trn3', True)
    """
    e = os.environ if env is None else env
    return Config(
        target=e.get("TRN_TARGET") or None,
        interpret=e.get("TRN_INTERPRET", "").strip().lower() not in _OFF,
        num_threads=_positive(e.get("TRN_NUM_THREADS"), os.cpu_count() or 1),
        native_pool=e.get("TRN_NATIVE_POOL", "1").strip().lower() not in ("0", "false", "no", "off"),
        max_loaded_kernels=_positive(e.get("TRN_MAX_LOADED_KERNELS"), DEFAULT_MAX_LOADED_KERNELS),
        disk_cache=not e.get("TRN_JIT_NO_DISK_CACHE"),
        cache_dir=e.get("TRN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "trnlang"),
        config_dir=e.get("TRN_CONFIG_DIR") or None,
        generation=generation,
        compile_route=(e.get("TRN_COMPILE") or "").strip().lower(),
        dump=frozenset(x.strip() for x in (e.get("TRN_DUMP") or "").split(",") if x.strip()),
        fallback=e.get("TRN_FALLBACK", "warn").strip().lower() or "warn",
        guard=e.get("TRN_GUARD", "").strip().lower() not in _OFF,
        cache_limit_mb=int(v) if (v := e.get("TRN_CACHE_LIMIT_MB", "").strip()).isdigit() else 1024,
        jit_libm=e.get("TRN_JIT_LIBM", "").strip().lower() not in _OFF,
        stream_min_mb=_number(e.get("TRN_STREAM_MIN_MB"), 0.0),
        isa=e.get("TRN_ISA", "").strip().lower() or None,
        dist_check=e.get("TRN_DIST_CHECK", "1"),
        compile_fuse=e.get("TRN_COMPILE_FUSE", "1") != "0",
        stdlib_exclude=frozenset(x.strip() for x in (e.get("TRN_STDLIB_EXCLUDE") or "").split(",") if x.strip()),
    )


_lock = threading.Lock()
#: The snapshot in force (replaced, never mutated, by :func:`refresh`).
current: Config = read()


def refresh() -> Config:
    """Read the environment again and install the result as :data:`current` (returned).

    Warm launch caches key on :attr:`Config.launch_key`, so a changed ``TRN_TARGET`` or ``TRN_INTERPRET``
    takes effect on the next launch.

    Example:
        >>> import trnlang.config as config
        >>> config.refresh().generation > 0
        True
    """
    global current
    with _lock:
        current = read(generation=current.generation + 1)
        return current


@contextlib.contextmanager
def override(**env: str | None) -> Iterator[Config]:
    """Set (a value) or unset (None) environment variables and :func:`refresh` for the ``with`` block; the
    variables and the snapshot are put back after it.

    Example:
        >>> import trnlang.config as config
        >>> with config.override(TRN_FALLBACK="silent") as c:
        ...     c.fallback, config.current.fallback
        ('silent', 'silent')
    """
    old = {k: os.environ.get(k) for k in env}
    try:
        _set_env(env)
        yield refresh()
    finally:
        _set_env(old)
        refresh()


def _set_env(env: dict[str, str | None]) -> None:
    """Set each variable of ``env`` to its value, or unset it where the value is None."""
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
