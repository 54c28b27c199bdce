"""Run one launch's outermost ``affine_range`` loop on several host threads (issue 18).

A variant compiled with a split loop (``codegen/lowering/split.py`` decides which kernels qualify) reads its
entry words ``lo, hi, g1`` as "parts ``lo .. hi`` of ``g1``": part ``j`` of ``P`` runs iterations
``[T*j/P, T*(j+1)/P)`` of the loop's ``T``. Ordinary words (0, 1, 1) run the whole loop, so nothing changes
for a launch that is not split.

Whether to split is measured, not guessed: the first :data:`TIMED_RUNS` runs of a launch layout (a
``LaunchPlan`` of fixed sizes, or the shapes of a general-path call) run whole and are timed; the layout is
split from then on when the fastest of them took at least :data:`SPLIT_MIN_NS` (a launch shorter than that
loses more to waking the other threads than it gains). ``TRN_NUM_THREADS=1`` turns splitting off.
Parts run on the native worker threads of ``runtime/hostpool.py`` (the calling thread runs part 0); when
those are busy (a launch that is itself one of several run together by ``launch.run_parallel``) the
launch runs whole on the calling thread, so splits never nest. Where native workers are unavailable the
Python thread pool runs the parts.

Example:
    >>> import torch, trnlang as trn, trnlang.language as tl
    >>> @trn.kernel
    ... def double(x, out):
    ...     n, d = x.shape
    ...     for i in tl.affine_range(tl.cdiv(n, 128)):
    ...         rows = i * 128 + tl.arange(128)[:, None]
    ...         cols = tl.arange(d)[None, :]
    ...         tl.store(out[rows, cols], tl.load(x[rows, cols], mask=rows < n) * 2.0, mask=rows < n)
    >>> x = torch.randn(4096, 512); o = torch.empty_like(x)
    >>> for _ in range(4):
    ...     double(x, o)
    >>> torch.equal(o, x * 2)
    True
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trnlang.runtime.jit import _arena, _err_buffer, _get_pool

__all__ = ["Part", "SPLIT_MIN_NS", "TIMED_RUNS", "Decision", "run_parts"]

#: a launch layout is split when its fastest whole run took at least this long (nanoseconds)
SPLIT_MIN_NS = 60_000
#: whole runs timed before the decision
TIMED_RUNS = 2


class Part:
    """Part ``j`` of ``parts`` of a launch: what ``hostpool.run`` needs (entry, words, arena size, errors) and a
    call that runs it on the calling thread."""

    __slots__ = ("fn", "entry", "words", "arena_size", "native", "_on_error")

    def __init__(self, fn: Any, ptr_addr: int, meta_addr: int, j: int, parts: int, arena_size: int,
                 on_error: Callable[[np.ndarray], None]) -> None:
        self.fn = fn
        self.entry = ctypes.cast(fn, ctypes.c_void_p).value or 0
        self.words = (ptr_addr, meta_addr, j, j + 1, parts, 1, 0, 0, 0)
        self.arena_size = arena_size
        self.native = True
        self._on_error = on_error

    def __call__(self) -> None:
        err, err_addr = _err_buffer()
        w = self.words
        if self.fn(w[0], w[1], w[2], w[3], w[4], w[5], _arena(self.arena_size), err_addr, None):
            self._on_error(err)

    def on_error(self, err: np.ndarray) -> None:
        self._on_error(err)


def parts_of(fn: Any, ptr_addr: int, meta_addr: int, arena_size: int, on_error: Callable[[np.ndarray], None],
             threads: int) -> list[Part]:
    """One :class:`Part` per thread."""
    return [Part(fn, ptr_addr, meta_addr, j, threads, arena_size, on_error) for j in range(threads)]


def run_parts(parts: Sequence[Part]) -> bool:
    """Run ``parts`` together (part 0 on this thread); False (nothing run) when the native workers are busy.

    The first kernel error, in part order (so the error of the earliest failing iteration), is raised after
    every part has stopped.
    """
    from trnlang.runtime import hostpool

    if hostpool.available():
        return hostpool.run(parts)  # type: ignore[arg-type]
    futs = [_get_pool().submit(p) for p in parts[1:]]
    first: BaseException | None = None
    try:
        parts[0]()
    except BaseException as e:  # still wait: the other parts use the tensors' memory
        first = e
    for f in futs:
        try:
            f.result()
        except BaseException as e:
            first = first or e
    if first is not None:
        raise first
    return True


class Decision:
    """Whether one launch layout is split: ``None`` while its first runs are timed, then True or False."""

    __slots__ = ("times", "split")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.split: bool | None = None if TIMED_RUNS > 0 else True

    def timed(self, run: Callable[[], None]) -> None:
        """``run()`` (a whole launch), timed towards the decision."""
        t0 = time.perf_counter_ns()
        run()
        self.times.append(time.perf_counter_ns() - t0)
        if len(self.times) >= TIMED_RUNS:
            self.split = min(self.times) >= SPLIT_MIN_NS

