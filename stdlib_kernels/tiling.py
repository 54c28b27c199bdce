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

Compare :func:`stdlib_kernels.pointwise.tiles`, which yields every tile of an elementwise ``[A, N, D]`` space at
once (and skips the loop of a single-tile dim) for kernels with no per-row work.

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

import trnlang.language as tl

#: Partitions of one row tile (``tl.tile_size.pmax``).
PMAX = 128

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
