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

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Config", "current", "refresh", "read", "DEFAULT_MAX_LOADED_KERNELS"]

#: Compiled variants kept loaded when ``TRN_MAX_LOADED_KERNELS`` is unset (runtime/codecache.py).
DEFAULT_MAX_LOADED_KERNELS = 512
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
    launch_key: tuple[str | None, bool] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "launch_key", (self.target, self.interpret))  # one tuple, read per launch


def _positive(v: str | None, default: int) -> int:
    v = (v or "").strip()
    return max(1, int(v)) if v.isdigit() else default


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
