"""What a compiled variant of a kernel is keyed on: the specialization policy.

A kernel is traced once per *class* of launches, not once per shape. Tensor sizes
are runtime values of the compiled code (``x.shape[0]`` traces to the symbol
``x_size0``; loop trip counts, masks of ragged last tiles and addresses use it)
except where a compile-time value pays or is required:

=====================================  ==========================================
keyed on (a new value compiles again)  why
=====================================  ==========================================
dtype and rank of every tensor         the generated code's types
layout: C-contiguous or not, and       compile-time strides vectorise
which strides are 0 or 1 (JIT)
sizes 0 and 1                          ``n == 1`` in Python stays exact; broadcast
every size of a tensor of 16 MiB or    such a launch runs for milliseconds: exact
more (``EXACT_MIN_BYTES``; 1 MiB for   sizes fold masks and trip counts (measured
the stdlib: STDLIB_EXACT_MIN_BYTES)    1.4-1.8x faster) and pick streaming stores
which sizes are equal (same dim        equal sizes share one symbol, so bounds
position across arguments)             proofs relate ``x`` and ``out``
sizes the kernel needs as constants    tile shapes (``tl.arange(d)``), Python
(learned while tracing)                ``range(n)``, ``if n > 512`` on a size
every non-tensor argument              ints, floats, strings are constants
grid, target, interpret, debug         launch configuration
=====================================  ==========================================

Everything else about a size is a runtime value: a new row count of the same
class reuses the compiled code (and its disk-cache entry).

How sizes become constants: the first trace of a kernel treats every size >= 2
as a runtime symbol. When the kernel's own code needs one as a compile-time
value (a tile shape, ``range``, a Python comparison with a number) tracing
raises ``NeedStatic`` for it; that dimension (with the dims sharing its symbol)
becomes a constant of the kernel from then on and tracing starts again. Any
other failure of a symbolic trace (e.g. ``bool()`` of a comparison of two
sizes) makes the whole kernel shape-specialized. ``@trn.kernel(dynamic=False)``
asks for shape specialization up front; ``kernel.compile_stats()`` shows which
dimensions are constants and why.

Example:
    >>> import numpy as np, trnlang as trn, trnlang.language as tl
    >>> @trn.kernel
    ... def double_rows(x, out):
    ...     n, d = x.shape
    ...     for i in tl.affine_range(tl.cdiv(n, 128)):
    ...         r = i * 128 + tl.arange(128)[:, None]
    ...         c = tl.arange(d)[None, :]
    ...         tl.store(out[r, c], tl.load(x[r, c], mask=r < n) * 2.0, mask=r < n)
    >>> for n in (300, 1000, 2049):
    ...     x = np.ones((n, 8), np.float32); o = np.empty_like(x); double_rows(x, o)
    >>> double_rows.compile_stats()["traces"], sorted(double_rows.compile_stats()["static_dims"])  # 1 retrace
    (2, [('out', 1), ('x', 1)])
"""

from __future__ import annotations

from typing import Any

from trnlang.ir.nodes import HbmTensor, size_sym

#: Tensors of at least this many bytes are keyed on their exact sizes. Their launches take milliseconds, so a
#: compile per size pays, and exact sizes fold the ragged-tile masks and trip counts that runtime sizes keep
#: (measured on a 2-core Xeon: tutorial 01 vector add 4096x4096 5.8 -> 10.6 GB/s, gelu(a*b+c) 4096x1024
#: 17.5 -> 12.4 ms). A divisibility class (sizes that are multiples of the tile) would recover most of that
#: for runtime sizes too; it is not built yet.
EXACT_MIN_BYTES = 16 << 20
#: The standard library's shape-polymorphic kernels key tensors of at least this many bytes on exact sizes
#: (``KernelFn.exact_min_bytes``, set by ``stdlib_kernels.tiling.polymorphic``). Their launches are split into
#: per-thread pieces of a few MiB, and with runtime sizes those ran 1.3-2.5x slower (bench_stdlib, 4096x1024
#: fp32: elementwise add 1.29x -> 0.45x of torch, gelu 0.87x -> 0.23x, row sums 1.75x -> 1.38x); a 1 MiB launch
#: runs long enough (~0.1 ms) that a compile per size is the smaller cost. Smaller tensors (decode steps, small
#: batches) keep runtime sizes.
STDLIB_EXACT_MIN_BYTES = 1 << 20


class Sizes:
    """Assigns runtime-size symbols to the tensor dimensions of one launch.

    Args:
        static: ``(argument name, dim)`` pairs that are compile-time constants of this kernel.
    """

    def __init__(self, static: frozenset[tuple[str, int]] | set[tuple[str, int]], big_bytes: int | None = None) -> None:
        if big_bytes is None:
            from codegen.lowering.stream import NT_MIN_BYTES

            big_bytes = min(EXACT_MIN_BYTES, NT_MIN_BYTES)
        self.static = static
        self.big_bytes = big_bytes
        self._by_pos_value: dict[tuple[int, int], Any] = {}
        self.owners: dict[Any, list[tuple[str, int]]] = {}

    def apply(self, prepared: list[Any]) -> None:
        """Replace each tensor argument's IR shape and key by its size classes (in place)."""
        for p in prepared:
            t = p.tensor
            if t is None:
                continue
            dims: list[Any] = []
            key: list[Any] = []
            big = p.array is not None and p.array.nbytes >= self.big_bytes
            for d, n in enumerate(t.shape):
                n = int(n)
                if n <= 1 or big or (t.name, d) in self.static:
                    dims.append(n)
                    key.append(n)
                    continue
                s = self._by_pos_value.get((d, n))
                if s is None:
                    s = self._by_pos_value[(d, n)] = size_sym(t.name, d)
                self.owners.setdefault(s, []).append((t.name, d))
                dims.append(s)
                key.append(s.name)
            if any(not isinstance(x, int) for x in dims):
                p.tensor = HbmTensor(t.name, tuple(dims), t.dtype, t.kind, t.space, t.loc)
            p.key = (p.key[0], tuple(key), *p.key[2:])

    @property
    def symbolic(self) -> bool:
        """Whether any dimension of this launch is a runtime size."""
        return bool(self.owners)

    def dims_of(self, syms: tuple[Any, ...]) -> set[tuple[str, int]]:
        """The ``(argument, dim)`` pairs that the given size symbols stand for."""
        out: set[tuple[str, int]] = set()
        for s in syms:
            out.update(self.owners.get(s, ()))
        return out
