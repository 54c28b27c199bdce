"""Loop skeletons of row-tiled kernels: partition tiles of rows, and free-axis chunks of columns.

Most kernels of the stdlib walk an ``[N, D]`` iteration space the same way: the rows in tiles of up to 128
partitions (a real loop, the last tile masked when ``N`` is not a multiple of the tile), and inside a tile the free
axis in chunks of ``f`` columns (a second real loop, masked the same way). :func:`row_tiles` and
:func:`col_chunks` are those two loops as generators, so a kernel body keeps only its own logic: whatever it does
per row tile (loading per-row indices, zeroing an accumulator) goes between the two ``for`` statements.

Both loops are always real loops (``tl.affine_range`` by default, ``tl.sequential_range`` when iterations carry a
dependence through a buffer), even with a single iteration, so the tiles a body allocates sit in a loop body and
the memory planner can multi-buffer them (load tile ``i + 1`` while tile ``i`` computes). The tile shapes are
``[min(p, N), 1]`` row indices and ``[1, min(f, D)]`` column indices, as the hand-written loops had.

Compare :func:`stdlib_kernels.elementwise.pointwise.tiles`, which yields every tile of an elementwise ``[A, N, D]``
space at once (and skips the loop of a single-tile dim) for kernels with no per-row work.

Example:
    >>> import torch
    >>> import trnlang as trn
    >>> import trnlang.language as tl
    >>> from stdlib_kernels.tiling import col_chunks, row_tiles
    >>> @trn.kernel
    ... def row_sums_of_squares(x, out):
    ...     n, d = x.shape
    ...     for rows, rm in row_tiles(n):
    ...         acc = tl.zeros((rows.shape[0], 1), tl.float32)
    ...         for cols, m in col_chunks(d, 512, rm, loop=tl.sequential_range):
    ...             v = tl.load(x[rows, cols], mask=m)
    ...             acc[...] = acc + tl.sum(v * v, axis=1, keepdims=True)
    ...         tl.store(out[rows, tl.arange(1)[None, :]], acc, mask=rm)
    >>> x = torch.randn(300, 700)
    >>> out = torch.empty(300, 1)
    >>> row_sums_of_squares(x, out)
    >>> torch.allclose(out, (x * x).sum(1, keepdim=True), rtol=1e-4, atol=1e-4)
    True
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import trnlang as trn
import trnlang.language as tl
from trnlang.runtime.specialize import STDLIB_EXACT_MIN_BYTES

#: Partitions of one row tile (``tl.tile_size.pmax``).
PMAX = 128
#: Free-axis buckets below this are powers of two; from it up, multiples of it (a mask covers the rest).
FREE_STEP = 512

Loop = Callable[..., Any]  # tl.affine_range or tl.sequential_range


def row_tiles(n: int, p: int = PMAX, loop: Loop = tl.affine_range) -> Iterator[tuple[Any, Any]]:
    """Yield ``(rows, mask)`` for every tile of up to ``p`` rows of ``n``, inside a real ``loop``.

    ``rows`` is the ``[min(p, n), 1]`` index of the tile's rows (``i * pp + tl.arange(pp)[:, None]``), ``mask`` is
    ``rows < n`` (the ragged last tile). Nothing is yielded for ``n == 0``.
    """
    if n <= 0:
        return
    pp = min(p, n)
    for i in loop(tl.cdiv(n, pp)):
        rows = i * pp + tl.arange(pp)[:, None]
        yield rows, rows < n


def col_chunks(d: int, f: int, mask: Any = None, loop: Loop = tl.affine_range) -> Iterator[tuple[Any, Any]]:
    """Yield ``(cols, mask)`` for every chunk of up to ``f`` of ``d`` free-axis columns, inside a real ``loop``.

    ``cols`` is the ``[1, min(f, d)]`` index of the chunk's columns; the yielded mask is ``cols < d``, and'ed with
    ``mask`` (typically the row mask of the enclosing :func:`row_tiles`) when one is given. Nothing is yielded for
    ``d == 0``.
    """
    if d <= 0:
        return
    ff = min(f, d)
    for j in loop(tl.cdiv(d, ff)):
        cols = j * ff + tl.arange(ff)[None, :]
        yield cols, (cols < d) if mask is None else mask & (cols < d)


# --- shape-polymorphic tiles (docs/specialization.md, "The standard library") ---------------------------------
# A stdlib kernel is ``@trn.kernel(dynamic=True)``: a size >= 2 of a tensor under EXACT_MIN_BYTES is a runtime
# symbol of the compiled code, so it cannot pick a tile shape. The host picks one instead, a *bucket* of the size
# (a compile-time argument of the launch: one variant per bucket), and the kernel masks the bucket's tail.
# Sizes that are compile-time ints (0, 1, big tensors) keep the exact tiles they always had.


def polymorphic(fn: Callable[..., Any], static: tuple[tuple[str, int], ...] = ()) -> Any:
    """``@trn.kernel(dynamic=True)`` for a standard-library kernel: sizes are runtime values, except those of
    tensors of ``STDLIB_EXACT_MIN_BYTES`` or more, keyed exactly (their launches run long enough to pay a compile
    per size, and exact sizes run them faster; see ``trnlang/runtime/specialize.py``).

    ``static``: ``(argument, dim)`` pairs that are compile-time sizes from the start (what a trace would learn
    from a ``NeedStatic``). Learning it from a launch where that size happens to equal another tensor's size at
    the same dim position would make the other one a constant too (equal sizes share a symbol), for good.

    >>> @polymorphic
    ... def inc(x, out):
    ...     tl.store(out[0:2, 0:3], tl.load(x[0:2, 0:3]) + 1.0)
    >>> inc.dynamic, inc.exact_min_bytes == STDLIB_EXACT_MIN_BYTES
    (True, True)
    >>> sorted(polymorphic(inc.fn, static=(("x", 1),)).compile_stats()["static_dims"])
    [('x', 1)]
    """
    k = trn.kernel(dynamic=True)(fn)
    k.exact_min_bytes = STDLIB_EXACT_MIN_BYTES
    k._static_dims.update(static)
    return k


class RowLaunch:
    """The host side of a row kernel made by :func:`row_polymorphic`: calls it with the row bucket of its first
    argument's rows appended (the kernel's last parameter, ``rb``). From ``PMAX`` rows up the launch goes to the
    shape-polymorphic kernel (``kernel``); fewer rows go to the same kernel keyed on exact sizes (``exact``): a
    power-of-two bucket of a few rows runs up to twice the rows, and that measured 1.2x slower on group norm's
    6-row moments."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.exact = trn.kernel(dynamic=False)(kernel.fn)
        self.__doc__ = kernel.fn.__doc__
        self.__name__ = kernel.fn.__name__

    def __call__(self, *args: Any) -> Any:
        r = args[0].shape[0]
        return (self.kernel if r >= PMAX else self.exact)(*args, row_bucket(r))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)


def row_polymorphic(static: tuple[tuple[str, int], ...]) -> Callable[[Callable[..., Any]], RowLaunch]:
    """A row kernel ``f(x, ..., rb=None)`` whose row count (``x.shape[0]``) is a runtime size from ``PMAX`` rows
    up and every size named in ``static`` a constant (typically the free axis: a runtime row width slows the row
    copies); the host appends the row bucket. Inside, ``extent(rows, PMAX, rb)`` is the partition tile (masked
    past the rows).

    >>> @row_polymorphic(static=(("x", 1), ("out", 1)))
    ... def halve(x, out, rb=None):
    ...     r = x.shape[0]
    ...     p = extent(r, PMAX, rb)
    ...     for i in tl.affine_range(tl.cdiv(r, p)):
    ...         rows = i * p + tl.arange(p)[:, None]
    ...         cols = tl.arange(x.shape[1])[None, :]
    ...         tl.store(out[rows, cols], tl.load(x[rows, cols], mask=rows < r) * 0.5, mask=rows < r)
    >>> import numpy as np
    >>> for r in (130, 300):
    ...     x = np.ones((r, 5), np.float32); o = np.zeros_like(x); halve(x, o)
    >>> float(o.sum()), halve.compile_stats()["variants"]
    (750.0, 1)
    """
    return lambda fn: RowLaunch(polymorphic(fn, static))


def row_bucket(n: int, p: int = PMAX) -> int:
    """Partition-tile bucket of ``n`` rows: ``p`` from ``p`` rows up, else the next power of two (>= 1).

    >>> [row_bucket(n) for n in (0, 1, 2, 3, 100, 128, 5000)]
    [1, 1, 2, 4, 128, 128, 128]
    """
    if n >= p:
        return p
    return 1 << max(0, int(n) - 1).bit_length()


def free_bucket(n: int, cap: int, step: int = FREE_STEP) -> int:
    """Free-axis tile bucket of ``n`` columns (at most ``cap``): the next power of two below ``step``, the next
    multiple of ``step`` from there (so a mask wastes at most half a tile on small rows and < ``step`` columns on
    long ones).

    >>> [free_bucket(n, 2048) for n in (1, 3, 64, 65, 511, 512, 513, 1500, 2048, 9000)]
    [1, 4, 64, 128, 512, 512, 1024, 1536, 2048, 2048]
    """
    n = min(int(n), cap)
    if n <= step:
        return 1 << max(0, n - 1).bit_length()
    return min(cap, -(-n // step) * step)


def extent(n: Any, cap: int, bucket: int | None) -> int:
    """Inside a kernel: the tile extent along an axis of ``n`` elements, ``min(n, cap)`` when ``n`` is a
    compile-time int, else the host's ``bucket`` (:func:`row_bucket` / :func:`free_bucket` of the launch's
    size; the tail past ``n`` must be masked)."""
    return min(n, cap) if isinstance(n, int) or bucket is None else bucket  # no bucket: n becomes a constant


def ragged(n: Any, t: int) -> bool:
    """Inside a kernel: whether tiles of ``t`` leave a partial last tile of ``n`` (always, for a runtime size)."""
    return not isinstance(n, int) or n % t != 0


def fits(n: Any, cap: int, flag: bool | None) -> bool:
    """Inside a kernel: ``n <= cap`` for a compile-time ``n``, else the host's answer ``flag`` for the launch."""
    return n <= cap if isinstance(n, int) or flag is None else flag


def tile_of(r: int, c: int, cap: int) -> tuple[int, int, bool]:
    """The host's tile argument of an ``[R, C]`` row kernel: ``(row bucket, column bucket, C <= cap)``.

    >>> tile_of(300, 1000, 2048), tile_of(3, 5000, 2048)
    ((128, 1024, True), (4, 2048, False))
    """
    return row_bucket(r), free_bucket(c, cap), c <= cap


def runtime_scalar(s: Any) -> Any:
    """Inside a kernel: a ``[1, 1]`` fp32 tile of a scalar passed as a ``[1, 1]`` tensor (a runtime value, so
    a size-dependent factor such as ``1 / C`` does not key the variant), or the Python number itself."""
    if isinstance(s, (int, float)):
        return s
    return tl.load(s[0:1, 0:1]).astype(tl.float32)
