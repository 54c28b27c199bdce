"""Process-wide compilation counters: how often kernels are traced, compiled, and found in a cache.

``trnlang.compile_stats()`` answers "did that new size compile?" for a whole program (every
``@trn.kernel`` and every standard-library kernel behind the ``trn`` device), where
``KernelFn.compile_stats()`` answers it for one kernel. Counted per kernel name:

- ``traces``: the kernel's Python function was traced to IR (a new specialization class);
- ``compiles``: native compilations (LLVM) of a traced variant;
- ``disk_hits``: variants loaded from the disk cache instead of compiled;
- ``memory_hits``: launches that looked up a specialization (a launch the warm fast path did not
  take: new sizes, new layouts) and found it already compiled in this process; warm launches of an
  already-seen shape are not counted (they never look);
- ``variants``: compiled variants currently loaded (compiles + disk hits - evictions).

Example:
    >>> import numpy as np, trnlang as trn, trnlang.language as tl
    >>> @trn.kernel
    ... def add_one(x, out):
    ...     n = x.shape[0]
    ...     for i in tl.affine_range(tl.cdiv(n, 128)):
    ...         r = i * 128 + tl.arange(128)
    ...         tl.store(out[r], tl.load(x[r], mask=r < n) + 1.0, mask=r < n)
    >>> trn.reset_compile_stats()
    >>> for n in (100, 300, 1000):
    ...     x = np.zeros(n, np.float32); add_one(x, np.empty_like(x))
    >>> s = trn.compile_stats()["kernels"]["add_one"]
    >>> s["traces"], s["compiles"] + s["disk_hits"], s["memory_hits"]
    (1, 1, 2)
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

__all__ = ["count", "compile_stats", "reset_compile_stats", "EVENTS"]

#: The counted events (``variants`` is derived).
EVENTS = ("traces", "compiles", "disk_hits", "memory_hits", "evictions")

_lock = threading.Lock()
_counts: defaultdict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(EVENTS, 0))
_loaded: defaultdict[str, int] = defaultdict(int)


def count(kernel: str, event: str) -> None:
    """Add one ``event`` (one of :data:`EVENTS`) for the kernel named ``kernel``."""
    with _lock:
        _counts[kernel][event] += 1
        if event in ("compiles", "disk_hits"):
            _loaded[kernel] += 1
        elif event == "evictions":
            _loaded[kernel] = max(0, _loaded[kernel] - 1)


def compile_stats() -> dict[str, Any]:
    """Totals over every kernel (``traces``, ``compiles``, ``disk_hits``, ``memory_hits``, ``evictions``,
    ``variants``) and the same per kernel name under ``"kernels"``, since the last reset."""
    with _lock:
        kernels = {k: {**v, "variants": _loaded[k]} for k, v in sorted(_counts.items())}
    totals: dict[str, Any] = {e: sum(v[e] for v in kernels.values()) for e in (*EVENTS, "variants")}
    totals["kernels"] = kernels
    return totals


def reset_compile_stats() -> None:
    """Zero every counter (loaded-variant counts restart from zero too)."""
    with _lock:
        _counts.clear()
        _loaded.clear()
