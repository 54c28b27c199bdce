"""Flat and row launches of the elementwise kernels: one compiled variant across sizes (docs/specialization.md).

A contiguous elementwise op is one run of ``n`` elements. :func:`flat_tiles` walks it in tiles whose shapes are
all constants (``[128, FLAT_W]`` blocks, ``[1, FLAT_W]`` rows, ``[1, FLAT_TAIL]`` chunks, one masked
``[1, FLAT_TAIL]`` tile), so ``n`` is only a loop trip count: a runtime size of the compiled code, which
``trnlang.ir.symbounds`` proves every unmasked tile inside the tensors for (no run-time checks, so loads fuse
with the arithmetic). :func:`row_tiles` does the same for ``[n, d]`` launch pieces with ``d`` a constant
(broadcast rows and columns, strided rows, wide contiguous rows). Each kernel of the family takes a last
``flat`` parameter (False: exact 1- to 3-D tiles, :func:`tiles`; True: flat; ``"rows"``: rows) and has
shape-polymorphic twins (:func:`flat_kernel`) that the hosts launch through :func:`contiguous_calls` and
:func:`rows_twin`.

Example:
    >>> import torch
    >>> from stdlib_kernels.elementwise import flat
    >>> x = torch.randn(1000)
    >>> flat.flat_ok([x, x], x.shape), [len(p) for p in flat.flat_pieces([x, x], 1000)]
    (True, [2])
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels import tiling as T
from trnlang.device import fastlane
from trnlang.runtime.specialize import STDLIB_EXACT_MIN_BYTES

_shape3 = U.shape3
at = U.at3


def tiles(a: int, n: int, d: int, p: int, f: int) -> Any:
    """Yield ``(b, rows, cols)`` for every ``[p, f]`` tile of an ``[a, n, d]`` iteration space.

    Only dims with more than one tile get a real loop, so a kernel's tiles are allocated directly in
    the body of a loop with several iterations and the planner can multi-buffer them (load tile
    ``i + 1`` while tile ``i`` computes).
    """
    nb, ni, nj = a, tl.cdiv(n, p), tl.cdiv(d, f)
    for b in (tl.affine_range(nb) if nb > 1 else (0,)):
        for i in (tl.affine_range(ni) if ni > 1 else (0,)):
            rows = i * p + tl.arange(p)[:, None]
            for j in (tl.affine_range(nj) if nj > 1 else (0,)):
                yield b, rows, j * f + tl.arange(f)[None, :]


#: Free size of a flat launch's tiles (compile-time: the element count is the only runtime size).
FLAT_W = 512
#: Columns of the chunks that finish a flat launch (the last one masked): at most this many lanes are masked off.
FLAT_TAIL = 64
#: A flat launch piece of at least this many bytes is keyed on its exact size, as every stdlib launch of 1 MiB or
#: more (``STDLIB_EXACT_MIN_BYTES``: it runs long enough that a compile per size is the smaller cost, and exact
#: trip counts measured as fast or faster there). Smaller ones share one variant whatever their length.
FLAT_EXACT_MIN_BYTES = STDLIB_EXACT_MIN_BYTES


def _loop(k: Any) -> Any:
    """A real loop of ``k`` iterations (nothing for a compile-time 0)."""
    return () if isinstance(k, int) and k <= 0 else tl.affine_range(k)


def flat_tiles(n: Any) -> Any:
    """Yield ``(idx, mask)`` for the tiles of a flat ``[n]`` iteration space (``n`` may be a runtime size).

    ``[128, FLAT_W]`` blocks, then ``[1, FLAT_W]`` rows, then ``[1, FLAT_TAIL]`` chunks, then one masked
    ``[1, FLAT_TAIL]`` tile for the rest: every tile shape is a constant and only the last tile has a mask, so a
    variant serves every length at the speed of exact tiles (loop trip counts are the only runtime values;
    ``trnlang.ir.symbounds`` proves the unmasked tiles inside the tensor).
    """
    blk = 128 * FLAT_W
    nb = n // blk
    for i in _loop(nb):
        yield (i * 128 + tl.arange(128)[:, None]) * FLAT_W + tl.arange(FLAT_W)[None, :], None
    r0 = nb * 128
    for r in _loop((n - nb * blk) // FLAT_W):
        yield (r0 + r) * FLAT_W + tl.arange(FLAT_W)[None, :], None
    c0 = (n // FLAT_W) * FLAT_W
    for c in _loop((n - c0) // FLAT_TAIL):
        yield c0 + c * FLAT_TAIL + tl.arange(FLAT_TAIL)[None, :], None
    t0 = (n // FLAT_TAIL) * FLAT_TAIL
    if isinstance(n, int) and n == t0:
        return
    for _ in _loop(tl.cdiv(n - t0, FLAT_TAIL)):
        idx = t0 + tl.arange(FLAT_TAIL)[None, :]
        yield idx, idx < n


def row_tiles(n: Any, d: int) -> Any:
    """Yield ``(rows, cols, mask)`` for the tiles of an ``[n, d]`` space whose row count ``n`` may be a runtime
    size (``d`` is a constant): ``[128, f]`` tiles of full row blocks, then single rows, so no tile is masked
    along the rows; a ragged last column chunk is (``f = min(d, FREE_CHUNK)``)."""
    f = min(d, U.FREE_CHUNK)
    nb = n // 128
    for i in _loop(nb):
        for j in _loop(tl.cdiv(d, f)):
            cols = j * f + tl.arange(f)[None, :]
            yield i * 128 + tl.arange(128)[:, None], cols, (cols < d) if d % f else None
    for r in _loop(n - nb * 128):
        for j in _loop(tl.cdiv(d, f)):
            cols = j * f + tl.arange(f)[None, :]
            yield nb * 128 + r + tl.arange(1)[:, None], cols, (cols < d) if d % f else None


def spaces(out: Any, flat: Any) -> Any:
    """Yield ``(acc, mask)`` for every tile of an elementwise kernel's iteration space: ``acc(t)`` is operand
    ``t``'s access at that tile. ``flat``: True, every tensor is a contiguous 1-D piece (:func:`flat_tiles`);
    ``"rows"``, 2-D views whose row count may be a runtime size (:func:`row_tiles`); False, 1- to 4-D views
    tiled by :func:`tiles` (exact sizes; a 4-D view loops over its first dim)."""
    if flat is True:
        for idx, m in flat_tiles(out.shape[0]):
            yield (lambda t, idx=idx: t[idx]), m
        return
    if flat == "rows" and out.ndim == 3:
        for b in _loop(out.shape[0]):
            for rows, cols, m in row_tiles(out.shape[1], out.shape[2]):
                yield (lambda t, b=b, rows=rows, cols=cols: t[b, rows, cols]), m
        return
    if flat == "rows":
        for rows, cols, m in row_tiles(out.shape[0], out.shape[1]):
            yield (lambda t, rows=rows, cols=cols: t[rows, cols]), m
        return
    if out.ndim == 4:  # a 4-D view: one more outer loop
        nz, a, n, d = out.shape
        p = min(128, n)
        f = min(d, U.FREE_CHUNK)
        ragged = n % p != 0 or d % f != 0
        for z in (tl.affine_range(nz) if nz > 1 else (0,)):
            for b, rows, cols in tiles(a, n, d, p, f):
                m = ((rows < n) & (cols < d)) if ragged else None
                yield (lambda t, z=z, b=b, rows=rows, cols=cols: t[z, b, rows, cols]), m
        return
    a, n, d = _shape3(out)
    p = min(128, n)
    f = min(d, U.FREE_CHUNK)
    ragged = n % p != 0 or d % f != 0
    for b, rows, cols in tiles(a, n, d, p, f):
        m = ((rows < n) & (cols < d)) if ragged else None
        yield (lambda t, b=b, rows=rows, cols=cols: at(t, b, rows, cols)), m


_TWINS: dict[Any, Any] = {}


_ROW_TWINS: dict[Any, Any] = {}


def flat_kernel(kern: Any, rows: tuple[str, ...] = ()) -> Any:
    """The shape-polymorphic twin of an elementwise kernel for flat launches (its last parameter ``flat`` True):
    the element count is a runtime size below :data:`FLAT_EXACT_MIN_BYTES`. :func:`launch` uses it for ``kern``.

    ``rows``: the kernel's tensor parameters; a second twin then serves 2-D launch pieces (``flat="rows"``:
    broadcast rows or columns, strided rows) with the row count a runtime size and the row width keyed.
    """
    k = T.polymorphic(kern.fn)
    k.exact_min_bytes = FLAT_EXACT_MIN_BYTES
    _TWINS[kern] = k
    if rows:
        _ROW_TWINS[kern] = T.polymorphic(kern.fn, static=tuple((a, 1) for a in rows))
        _ROW_TWINS3[kern] = T.polymorphic(kern.fn, static=tuple((a, 2) for a in rows))
    return k


_ROW_TWINS3: dict[Any, Any] = {}
#: Contiguous 2-D and 3-D launches with rows at least this wide run as row launches on the tensors themselves
#: (their width keyed): no flat piece to make per call (a piece costs 1-2 us of host time).
ROWS_MIN_W = 128


def flat_twin(kern: Any) -> Any:
    """The flat twin of ``kern`` (:func:`flat_kernel`), else None."""
    return _TWINS.get(kern)


def rows_twin(kern: Any) -> Any:
    """The twin of ``kern`` for 2-D launch pieces with a runtime row count (``flat="rows"``), else None."""
    return _ROW_TWINS.get(kern) if FLAT_LAUNCHES else None


def contiguous_calls(kern: Any, ts: Sequence[torch.Tensor], shape: Sequence[int]) -> list[tuple[Any, list[Any], Any]]:
    """``(kernel, tensor arguments, flat argument)`` per launch of ``kern`` over contiguous tensors of ``shape``
    (operands, then the output): a row launch for 2-D / 3-D ones with wide rows, else one flat launch
    (:func:`flat_pieces`).

    A big op (``PARALLEL_MIN_WORK`` elements) is one launch when its loop of blocks is the kernel's whole work,
    so the runtime spreads it over the host threads (``runtime/split.py``) and the fast lane can replay it: row
    counts a multiple of 128 (3-D rows are merged into 2-D ones), flat lengths a multiple of a ``[128, FLAT_W]``
    block. Other big ops, and in-place ones from :data:`FLAT_SPLIT_MIN` elements (the runtime does not split a
    launch whose output is an input), are one flat launch per thread.
    """
    n = U.prod(shape)
    threads = U.num_threads()
    if n >= FLAT_SPLIT_MIN and threads > 1 and any(t.data_ptr() == ts[-1].data_ptr() for t in ts[:-1]):
        return [(_TWINS[kern], vs, True) for vs in flat_pieces(ts, n, min_work=FLAT_SPLIT_MIN)]
    big = n >= U.PARALLEL_MIN_WORK and threads > 1
    nd = len(shape)
    if nd in (2, 3) and shape[-1] >= ROWS_MIN_W and shape[-2] > 1 and kern in _ROW_TWINS:
        if not big:
            return [((_ROW_TWINS if nd == 2 else _ROW_TWINS3)[kern], list(ts), "rows")]
        rows = n // shape[-1]
        if rows % 128 == 0:
            vs = list(ts) if nd == 2 else [U.piece(t, (rows, shape[-1]), (shape[-1], 1), t.storage_offset())
                                           for t in ts]
            return [(_ROW_TWINS[kern], vs, "rows")]
    return [(_TWINS[kern], vs, True) for vs in flat_pieces(ts, n, split=big and n % (128 * FLAT_W) != 0)]


#: Flat launches on (``False``: every launch takes the exact-size path, as before they existed; for A/B timing).
FLAT_LAUNCHES = True


def flat_ok(ts: Sequence[Any], shape: Sequence[int]) -> bool:
    """Every tensor of ``ts`` (the output last) is contiguous with ``shape``: the op is one flat run of
    elements (or rows of one), launched once; the runtime spreads a long launch over the threads."""
    if not FLAT_LAUNCHES:
        return False
    for t in ts:
        if t.shape != shape or not t.is_contiguous():
            return False
    return True


def _flat1(t: torch.Tensor, n: int) -> Any:
    """A contiguous tensor of ``n`` elements as one 1-D launch argument (itself when it is 1-D)."""
    return t if t.dim() == 1 else U.piece(t, (n,), (1,), t.storage_offset())


#: Elements from which an in-place contiguous elementwise launch is split over the
#: threads (flat pieces). The runtime splits a launch's loop itself (``runtime/split.py``) but not one whose output
#: aliases an input: in-place ``add_`` of two 512 x 1536 fp32 tensors (a GPT-2 activation) on 2 threads 0.52 ->
#: 0.30-0.37 ms (Intel Xeon, 2026-12-03). Out of place, the runtime's split of one launch measured as fast or
#: faster (``a * b`` of 2^19 elements: 0.24-0.36 ms against 0.43 ms split here).
FLAT_SPLIT_MIN = 1 << 18


def flat_pieces(ts: Sequence[torch.Tensor], n: int, offsets: Sequence[int] | None = None,
                split: bool = True, min_work: int | None = None) -> list[list[Any]]:
    """Per launch, the flat 1-D pieces of contiguous tensors of ``n`` elements (from their storage offsets, or
    ``offsets``): one launch, or one per thread (blocks of 128 * FLAT_W elements) when the op is big (``min_work``
    elements, default ``PARALLEL_MIN_WORK``) and ``split``."""
    if split and n >= (U.PARALLEL_MIN_WORK if min_work is None else min_work) and U.num_threads() > 1:
        cuts = U.chunks(n, U.num_threads(), 128 * FLAT_W)
    else:
        cuts = [(0, n)]
    if len(cuts) == 1 and offsets is None:  # one launch: a 1-D tensor is its own piece (no piece to make)
        return [[_flat1(t, n) for t in ts]]
    offs = [t.storage_offset() for t in ts] if offsets is None else offsets
    return [[U.piece(t, (hi - lo,), (1,), o + lo) for t, o in zip(ts, offs)] for lo, hi in cuts]


def launch_contiguous(kern: Any, full: Sequence[torch.Tensor | None], scal: Sequence[torch.Tensor | None],
                      consts: tuple[Any, ...], ops: list[torch.Tensor], out: torch.Tensor) -> None:
    """``kern(*operands, extra, out, *rest, flat)`` over contiguous operands of ``out``'s shape, launched as
    :func:`contiguous_calls` says (:func:`flat_ok` holds); operand ``k`` is ``full[k]`` or the scalar ``scal[k]``,
    ``consts`` is ``(extra, *rest)``. A single launch is recorded for the device's fast lane."""
    if out.numel() == 0:
        return
    launches = []
    calls = contiguous_calls(kern, ops + [out], out.shape)
    for k, vs, mode in calls:
        it = iter(vs[:-1])
        args = (*[next(it) if f is not None else sc for f, sc in zip(full, scal)], consts[0], vs[-1], *consts[1:],
                mode)
        if len(calls) == 1:
            fastlane.record_launch(k, args)
            k(*args)
            return
        launches.append(U.launch(k, *args))
    U.run_parallel(launches)
