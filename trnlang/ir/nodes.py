"""IR data structures.

A ``Kernel`` holds HBM tensor parameters, a launch grid and a body: a list of
``Instr`` (one engine instruction each) and ``Loop`` (real loops, never
unrolled). On-chip memory is explicit: ``ALLOC`` instructions declare SBUF/PSUM
buffers, and instructions read and write *regions* of them. HBM is touched only
through *access patterns* (``Access``) by DMA instructions.

Index arithmetic is symbolic (sympy): loop variables ``i0, i1, ...``, program
ids ``pid0..pid2``, the axes of an access ``_a0, _a1, ...`` and gathered
indices ``_g0, _g1, ...``. Shapes of HBM tensors are ``Dim``: an int, or a
runtime size ``<arg>_size<d>`` (a ``SizeSym``) in a shape-polymorphic
specialization, so nothing downstream may assume a Python int where an
expression would do.
"""

from __future__ import annotations

import functools
import linecache
import re
import sys
from dataclasses import dataclass, field
from typing import Any, TypeAlias, Union

import sympy

from trnlang.ir.ops import OP_SPECS, Op
from trnlang.ir.types import DType, Engine, Space

Dim: TypeAlias = Union[int, sympy.Expr]
Expr: TypeAlias = sympy.Expr


_SIZE_NAME = re.compile(r"[A-Za-z_]\w*_size\d+")
_INTERNAL = ("sympy", "trnlang", "codegen", "mpmath")


def _from_user_code() -> bool:
    """Whether the comparison being evaluated was written in a kernel's source (not in sympy or trnlang)."""
    f = sys._getframe(3)
    name = f.f_globals.get("__name__", "") if f is not None else ""
    return not name.startswith(_INTERNAL)


class SizeSym(sympy.Symbol):
    """A tensor size that is a runtime value of the compiled kernel (``x.shape[0]`` in a shape-polymorphic
    specialization), named ``<arg>_size<d>``.

    Python cannot branch on a runtime value, so in a kernel's own code comparing one with a number
    (``n == 128``, ``n < 512``) or using it as a Python int (``range(n)``) raises ``NeedStatic``: the launch
    then makes that size a compile-time constant and traces again. Comparing two sizes with ``==`` is
    exact (equal sizes share one symbol); sympy and trnlang compare symbols structurally as usual.
    """

    def _guard(self, other: Any) -> None:
        if isinstance(other, (int, float, sympy.Number)) and _from_user_code():
            self._need_static()

    def _need_static(self) -> None:
        from trnlang.frontend.errors import NeedStatic  # errors imports this module

        raise NeedStatic((self,))

    def __eq__(self, other: Any) -> bool:
        self._guard(other)
        return super().__eq__(other)

    def __ne__(self, other: Any) -> bool:
        self._guard(other)
        return super().__ne__(other)

    def __lt__(self, other: Any) -> Any:
        self._guard(other)
        return super().__lt__(other)

    def __le__(self, other: Any) -> Any:
        self._guard(other)
        return super().__le__(other)

    def __gt__(self, other: Any) -> Any:
        self._guard(other)
        return super().__gt__(other)

    def __ge__(self, other: Any) -> Any:
        self._guard(other)
        return super().__ge__(other)

    def _as_int(self) -> int:
        if _from_user_code():
            self._need_static()
        raise TypeError(f"the runtime size {self.name} has no value at compile time")

    def __index__(self) -> int:
        return self._as_int()

    def __int__(self) -> int:
        return self._as_int()

    __hash__ = sympy.Symbol.__hash__


@functools.lru_cache(maxsize=None)
def sym(name: str) -> sympy.Symbol:
    """The one integer symbol of that name (loop vars, pids, axes, gathers; ``*_size<d>``: a runtime size)."""
    if _SIZE_NAME.fullmatch(name):
        return SizeSym(name, integer=True)
    return sympy.Symbol(name, integer=True)


def size_sym(arg: str, dim: int) -> sympy.Symbol:
    """The runtime size of dimension ``dim`` of kernel argument ``arg``."""
    return sym(f"{arg}_size{dim}")


def axis_sym(k: int) -> sympy.Symbol:
    """Symbol for the k-th axis of an access pattern / iota / affine_select."""
    return sym(f"_a{k}")


def gather_sym(k: int) -> sympy.Symbol:
    """Symbol standing for the value of the k-th gather tile of an access."""
    return sym(f"_g{k}")


def pid_sym(axis: int) -> sympy.Symbol:
    return sym(f"pid{axis}")


@dataclass(frozen=True)
class SourceLoc:
    """A line of the user's kernel source."""

    filename: str
    lineno: int
    func: str = ""

    @property
    def text(self) -> str:
        return linecache.getline(self.filename, self.lineno).rstrip("\n")

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


@dataclass(eq=False)
class HbmTensor:
    """A tensor in HBM: a kernel argument (kind 'in'), or allocated by the kernel
    ('out' is returned to the caller, 'scratch' is private to the kernel).

    ``data``: a scratch tensor's initial contents (NKI's ``nl.shared_constant``, a numpy array of the
    tensor's shape and dtype), placed in HBM by the launch; None: zeros."""

    name: str
    shape: tuple[Dim, ...]
    dtype: DType
    kind: str = "in"
    space: Space = Space.HBM
    loc: SourceLoc | None = None
    data: Any = None

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(eq=False)
class Buf:
    """An on-chip buffer (SBUF or PSUM); dimension 0 is the partition dimension."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    space: Space
    loc: SourceLoc | None = None
    blocks: int = 0  # NKI block dimensions (shape[1:1 + blocks]) of a PSUM tensor: allocated one block at a time

    @property
    def nbytes_per_partition(self) -> int:
        n = 1
        for s in self.shape[1:]:
            n *= s
        return n * self.dtype.itemsize


@dataclass(eq=False)
class Region:
    """A rectangular part of a buffer, viewed as a tile.

    ``starts[d]`` (affine in loop variables) and ``sizes[d]`` per buffer
    dimension; dimensions with ``keep[d] == False`` were indexed by a single
    index and do not appear in the view's shape.

    ``ap``: a strided / permuted view (NKI's access patterns, ``t[i_p, 2 * i_f]``):
    ``(stride, size)`` per view axis, strides in elements of the row-major
    buffer, from the element at ``starts``; the view's shape is the sizes, and
    ``starts``/``sizes``/``keep`` are then the box of buffer elements it touches.
    """

    buf: Buf
    starts: tuple[Expr, ...]
    sizes: tuple[int, ...]
    keep: tuple[bool, ...]
    ap: tuple[tuple[int, int], ...] | None = None

    @staticmethod
    def whole(buf: Buf) -> Region:
        return Region(buf, tuple(sympy.Integer(0) for _ in buf.shape), tuple(buf.shape), tuple(True for _ in buf.shape))

    @property
    def shape(self) -> tuple[int, ...]:
        if self.ap is not None:
            return tuple(n for _, n in self.ap)
        return tuple(s for s, k in zip(self.sizes, self.keep) if k)

    @property
    def view_strides(self) -> list[int]:
        """The stride (elements of the row-major buffer) of each view axis."""
        if self.ap is not None:
            return [int(s) for s, _ in self.ap]
        strides = [1] * len(self.buf.shape)
        for d in range(len(self.buf.shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * int(self.buf.shape[d + 1])
        return [s for s, k in zip(strides, self.keep) if k]

    @property
    def dtype(self) -> DType:
        return self.buf.dtype

    @property
    def space(self) -> Space:
        return self.buf.space

    @property
    def is_whole(self) -> bool:
        return self.ap is None and all(k for k in self.keep) and tuple(self.sizes) == tuple(self.buf.shape) and all(
            s == 0 for s in self.starts)


@dataclass(eq=False)
class Access:
    """An access pattern on an HBM tensor, shaped like a tile.

    Element ``[a0, a1, ...]`` of the tile is tensor element
    ``[index[0], index[1], ...]`` where each index is a sympy expression over
    the axis symbols ``_a0..``, loop variables, program ids and gather symbols
    ``_g0..`` (``_gk`` = value of ``gathers[k]`` broadcast to the tile shape at
    the same position). ``mask`` (over the same symbols) disables elements.
    """

    tensor: HbmTensor
    shape: tuple[int, ...]
    index: tuple[Expr, ...]
    gathers: tuple[Region, ...] = ()
    mask: Any = None  # sympy Boolean or None

    @property
    def dtype(self) -> DType:
        return self.tensor.dtype


@dataclass(frozen=True)
class Imm:
    """An immediate scalar operand."""

    value: float | int | bool


Operand = Union[Region, Access, Imm]


@dataclass(eq=False)
class Instr:
    """One engine instruction."""

    op: Op
    outs: tuple[Any, ...]      # Region | Access (DMA store) | Buf (ALLOC)
    ins: tuple[Operand, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    engine: Engine | None = None
    loc: SourceLoc | None = None

    @property
    def spec(self):  # noqa: ANN201 - OpSpec
        return OP_SPECS[self.op]


@dataclass(eq=False)
class Loop:
    """A real loop: ``kind`` is 'affine' (iterations independent) or 'sequential'."""

    kind: str
    var: sympy.Symbol
    start: Expr
    stop: Expr
    step: Expr
    body: list[Stmt] = field(default_factory=list)
    loc: SourceLoc | None = None


Stmt = Union[Instr, Loop]


@dataclass(eq=False)
class Kernel:
    """A traced kernel: parameters (in call order), outputs, grid, body."""

    name: str
    params: list[HbmTensor]
    grid: tuple[int, ...]
    body: list[Stmt]
    outputs: list[HbmTensor] = field(default_factory=list)
    scratch: list[HbmTensor] = field(default_factory=list)
    target: str = "trn2"
    loc: SourceLoc | None = None

    @property
    def tensors(self) -> list[HbmTensor]:
        """Every HBM tensor, in launch-argument order: params, outputs, scratch."""
        return [*self.params, *self.outputs, *self.scratch]

    def signature(self) -> str:
        """The kernel's name and its parameters' dtypes and shapes (symbols for runtime sizes), e.g.
        ``softmax(f32[128,s0],f32[128,s0])``: what names one specialization apart from another in profiles
        (no spaces, so it stays one column of a text table)."""
        params = (f"{t.dtype.short}[{','.join(str(d).replace(' ', '') for d in t.shape)}]" for t in self.params)
        return f"{self.name}({','.join(params)})"


def walk(body: list[Stmt]):  # noqa: ANN201 - generator of (Stmt, enclosing loops)
    """Yield (stmt, loops) for every statement, depth first, with its enclosing loops."""

    def rec(stmts: list[Stmt], loops: tuple[Loop, ...]):
        for s in stmts:
            yield s, loops
            if isinstance(s, Loop):
                yield from rec(s.body, (*loops, s))

    yield from rec(body, ())


def instrs(body: list[Stmt]) -> list[Instr]:
    return [s for s, _ in walk(body) if isinstance(s, Instr)]


def operand_regions(x: Any) -> list[Region]:
    """Regions an operand reads on chip (an Access reads its gather tiles)."""
    if isinstance(x, Region):
        return [x]
    if isinstance(x, Access):
        return list(x.gathers)
    return []
