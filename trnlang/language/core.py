"""The documented builtins of ``trnlang.language`` (``tl``).

Each builtin documents its contract and delegates: it checks nothing and emits
nothing itself (``semantic`` checks, the trace context builds IR).
"""

from __future__ import annotations

from typing import Any, Iterator

import sympy

from trnlang.frontend.errors import TraceError
from trnlang.frontend.tracer import current
from trnlang.ir.nodes import axis_sym, pid_sym
from trnlang.ir.ops import Alu
from trnlang.ir.types import DType, Space
from trnlang.language import semantic as sem
from trnlang.language import semantic_compute as semc
from trnlang.language.values import DynSlice, Index, Tile, require_int, sizes_in, to_expr

# dtypes ------------------------------------------------------------------------------
float32 = DType.float32
bfloat16 = DType.bfloat16
float16 = DType.float16
float8_e4m3 = DType.float8_e4m3
float8_e5m2 = DType.float8_e5m2
int32 = DType.int32
int16 = DType.int16
int8 = DType.int8
uint8 = DType.uint8
bool_ = DType.bool_
int64 = DType.int64  # HBM storage only (torch index tensors); loads give int32 tiles

# buffers -----------------------------------------------------------------------------
sbuf = Space.SBUF
psum = Space.PSUM
hbm = Space.HBM
shared_hbm = Space.SHARED_HBM


class tile_size:  # noqa: N801 - NKI spelling
    """Hardware tile limits: ``pmax`` partitions, matmul free sizes."""

    pmax = 128
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    psum_fmax = 512


class constexpr:  # noqa: N801 - Triton spelling
    """Marks a kernel parameter as a compile-time constant (Triton's spelling): ``def k(x, out, BLOCK:
    tl.constexpr = 64)``. Every non-tensor argument of a kernel already is one (the kernel is specialized on its
    value, keywords included), so the annotation only documents it; ``tl.constexpr(v)`` is ``v``.

    Example:
        >>> import trnlang.language as tl
        >>> tl.constexpr(4) + 1
        5
    """

    def __new__(cls, value: Any) -> Any:  # noqa: D102 - the value itself, usable wherever a constant is
        return value


# index values --------------------------------------------------------------------------
def program_id(axis: int = 0) -> Index:
    """Index of this program instance along grid ``axis`` (symbolic)."""
    current()  # only inside a kernel being traced
    if not 0 <= axis < 3:
        raise TraceError(f"program_id axis must be 0, 1 or 2, got {axis}")
    return Index((), pid_sym(axis))


def num_programs(axis: int = 0) -> int:
    """Size of the launch grid along ``axis`` (a Python int)."""
    g = current().kernel.grid
    return g[axis] if axis < len(g) else 1


def arange(n: int, start: int = 0) -> Index:
    """``[start, start+1, ..., start+n-1]`` as a 1-D index value (``tl.arange(128)[:, None]`` for partitions)."""
    if not isinstance(n, int) or isinstance(n, bool):
        require_int(n, "tl.arange(n)")
    return Index((n,), start + axis_sym(0))


class _MGrid:
    """``tl.mgrid[0:128, 0:512]`` -> index values of shape (128, 512), like numpy.mgrid."""

    def __getitem__(self, key: Any) -> tuple[Index, ...]:
        if not isinstance(key, tuple):
            key = (key,)
        shape = []
        starts = []
        for k in key:
            if not isinstance(k, slice) or k.step not in (None, 1):
                raise TraceError("tl.mgrid takes unit-step slices like tl.mgrid[0:128, 0:512]")
            start = k.start or 0
            shape.append(k.stop - start)
            starts.append(start)
        return tuple(Index(tuple(shape), starts[i] + axis_sym(i)) for i in range(len(shape)))


mgrid = _MGrid()


def ds(start: Any, size: int) -> DynSlice:
    """A dynamic slice ``[start, start + size)`` with a symbolic start."""
    return DynSlice(start, size)


def cdiv(a: Any, b: Any) -> Any:
    """Ceiling division (a Python int for ints)."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return Index((), sympy.ceiling(to_expr(a) / to_expr(b)))


# loops -----------------------------------------------------------------------------------
class _Range:
    def __init__(self, kind: str, args: tuple[Any, ...]) -> None:
        if not 1 <= len(args) <= 3:
            raise TraceError(f"{kind}_range takes 1 to 3 arguments (stop | start, stop[, step])")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
        self.kind = kind
        self.start, self.stop, self.step = (to_expr(v) for v in (start, stop, step))
        if not self.step.is_Integer or int(self.step) <= 0:
            raise TraceError(f"{kind}_range step must be a positive compile-time int, got {step}")

    def __iter__(self) -> Iterator[Index]:
        with current().loop(self.kind, self.start, self.stop, self.step) as lp:
            yield Index((), lp.var)


def affine_range(*args: Any) -> Any:
    """A real loop whose iterations are independent (``+=`` into PSUM allowed). Never unrolled.

    Example:
        >>> # for i in tl.affine_range(tl.cdiv(n, 128)): ...
    """
    return _Range("affine", args)


def sequential_range(*args: Any) -> Any:
    """A real loop with loop-carried dependences through buffers. Never unrolled."""
    return _Range("sequential", args)


def static_range(*args: Any) -> range:
    """Unrolled at trace time (a Python ``range`` of Python ints)."""
    for a in args:
        if not isinstance(a, int):
            if sizes_in(a):
                require_int(a, "tl.static_range")
            raise TraceError("tl.static_range needs Python ints; use tl.affine_range for symbolic bounds")
    return range(*args)


# memory --------------------------------------------------------------------------------
def ndarray(shape: Any, dtype: Any, buffer: Any = sbuf) -> Any:
    """Allocate a tile (tl.sbuf / tl.psum; contents undefined) or an HBM tensor (tl.hbm / tl.shared_hbm)."""
    return sem.ndarray(shape, dtype, buffer)


def zeros(shape: Any, dtype: Any = float32, buffer: Any = sbuf) -> Tile:
    """A tile of zeros."""
    return sem.full(shape, 0, dtype, buffer)


def ones(shape: Any, dtype: Any = float32, buffer: Any = sbuf) -> Tile:
    """A tile of ones."""
    return sem.full(shape, 1, dtype, buffer)


def full(shape: Any, value: Any, dtype: Any = float32, buffer: Any = sbuf) -> Tile:
    """A tile filled with ``value``."""
    return sem.full(shape, value, dtype, buffer)


def zeros_like(x: Any, dtype: Any = None, buffer: Any = None) -> Tile:
    """Zeros with x's shape (and dtype / buffer unless given)."""
    return sem.full(x.shape, 0, dtype or x.dtype, buffer or getattr(x, "buffer", sbuf))


def load(ap: Any, mask: Any = None, other: Any = 0, dtype: Any = None) -> Tile:
    """HBM access pattern -> SBUF tile. Masked-off elements are not read and become ``other``."""
    return sem.load(ap, mask, other, dtype)


def store(ap: Any, value: Any, mask: Any = None, accumulate: Any = None) -> None:
    """Tile -> HBM access pattern; masked-off elements are not written.

    ``accumulate="add"`` (or ``"multiply"``, ``"max"``, ``"min"``; ``True`` means ``"add"``) makes an
    accumulating DMA: ``tensor[i] = op(tensor[i], value)``, repeated indices of a gathered (indirect)
    access all accumulate, e.g. ``tl.store(grad[ids, cols], rows_tile, accumulate="add")`` (scatter-add).
    """
    sem.store(ap, value, mask, accumulate)


def load_transpose2d(ap: Any, dtype: Any = None) -> Tile:
    """Load a 2-D access ``[a, b]`` transposed, as a ``[b, a]`` tile."""
    return sem.load_transpose2d(ap, dtype)


# elementwise ------------------------------------------------------------------------------
def _bin(alu: Alu) -> Any:
    def f(x: Any, y: Any, dtype: Any = None) -> Any:
        return sem.binary(alu, x, y, dtype)

    f.__name__ = alu.value
    f.__doc__ = f"Elementwise ``{alu.value}(x, y)`` with numpy broadcasting (Vector engine)."
    f._alu = alu  # type: ignore[attr-defined]
    return f


def _un(alu: Alu) -> Any:
    def f(x: Any, dtype: Any = None) -> Tile:
        return sem.unary(alu, x, dtype)

    f.__name__ = alu.value
    f.__doc__ = f"Elementwise ``{alu.value}(x)`` (Scalar engine for transcendental functions, else Vector)."
    f._alu = alu  # type: ignore[attr-defined]
    return f


add = _bin(Alu.add)
subtract = _bin(Alu.subtract)
multiply = _bin(Alu.multiply)
divide = _bin(Alu.divide)
maximum = _bin(Alu.maximum)
minimum = _bin(Alu.minimum)
power = _bin(Alu.power)
fmod = _bin(Alu.fmod)
equal = _bin(Alu.equal)
not_equal = _bin(Alu.not_equal)
less = _bin(Alu.less)
less_equal = _bin(Alu.less_equal)
greater = _bin(Alu.greater)
greater_equal = _bin(Alu.greater_equal)
logical_and = _bin(Alu.logical_and)
logical_or = _bin(Alu.logical_or)
logical_xor = _bin(Alu.logical_xor)
bitwise_and = _bin(Alu.bitwise_and)
bitwise_or = _bin(Alu.bitwise_or)
bitwise_xor = _bin(Alu.bitwise_xor)
atan2 = _bin(Alu.atan2)

exp = _un(Alu.exp)
log = _un(Alu.log)
log1p = _un(Alu.log1p)
expm1 = _un(Alu.expm1)
sqrt = _un(Alu.sqrt)
rsqrt = _un(Alu.rsqrt)
reciprocal = _un(Alu.reciprocal)
abs = _un(Alu.abs)  # noqa: A001 - the language's name
negative = _un(Alu.negative)
sign = _un(Alu.sign)
floor = _un(Alu.floor)
ceil = _un(Alu.ceil)
square = _un(Alu.square)
tanh = _un(Alu.tanh)
sigmoid = _un(Alu.sigmoid)
relu = _un(Alu.relu)
gelu = _un(Alu.gelu)
gelu_tanh = _un(Alu.gelu_tanh)
silu = _un(Alu.silu)
softplus = _un(Alu.softplus)
erf = _un(Alu.erf)
sin = _un(Alu.sin)
cos = _un(Alu.cos)
logical_not = _un(Alu.logical_not)
bitwise_not = _un(Alu.bitwise_not)
trunc = _un(Alu.trunc)
round = _un(Alu.round)  # noqa: A001 - the language's name (half to even)
tan = _un(Alu.tan)
asin = _un(Alu.asin)
acos = _un(Alu.acos)
atan = _un(Alu.atan)
sinh = _un(Alu.sinh)
cosh = _un(Alu.cosh)
asinh = _un(Alu.asinh)
acosh = _un(Alu.acosh)
atanh = _un(Alu.atanh)
log2 = _un(Alu.log2)
log10 = _un(Alu.log10)
exp2 = _un(Alu.exp2)
erfc = _un(Alu.erfc)
erfinv = _un(Alu.erfinv)
lgamma = _un(Alu.lgamma)
digamma = _un(Alu.digamma)


def where(cond: Any, x: Any, y: Any, dtype: Any = None) -> Tile:
    """``x`` where ``cond`` else ``y`` (cond: a bool tile or an index predicate)."""
    return sem.where(cond, x, y, dtype)


def copy(x: Any, dtype: Any = None) -> Tile:
    """Copy (and cast) a tile into SBUF; evicts PSUM to SBUF."""
    return sem.copy(x, dtype)


def broadcast_to(x: Any, shape: Any) -> Tile:
    """Broadcast a tile (numpy rules, including along partitions)."""
    return sem.broadcast_to(x, shape)


def expand_dims(x: Any, axis: int) -> Tile:
    """Insert a free axis of size 1."""
    return sem.expand_dims(x, axis)


def reshape(x: Any, shape: Any) -> Tile:
    """Reshape the free dimensions (the partition dimension stays)."""
    return sem.reshape(x, shape)


# reductions ---------------------------------------------------------------------------
def sum(x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Tile:  # noqa: A001
    """Sum along free axes (axis 0 is an error)."""
    return semc.reduce(Alu.add, x, axis, keepdims, dtype)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Tile:  # noqa: A001
    """Maximum along free axes (NaN propagates)."""
    return semc.reduce(Alu.maximum, x, axis, keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Tile:  # noqa: A001
    """Minimum along free axes (NaN propagates)."""
    return semc.reduce(Alu.minimum, x, axis, keepdims)


def prod(x: Any, axis: Any = None, keepdims: bool = False) -> Tile:
    """Product along free axes."""
    return semc.reduce(Alu.multiply, x, axis, keepdims)


def argmax(x: Any, axis: int = -1, keepdims: bool = False) -> Tile:
    """Index (int32) of the first maximum along one free axis."""
    return semc.reduce(Alu.argmax, x, axis, keepdims)


def argmin(x: Any, axis: int = -1, keepdims: bool = False) -> Tile:
    """Index (int32) of the first minimum along one free axis."""
    return semc.reduce(Alu.argmin, x, axis, keepdims)


def all(x: Any, axis: Any = None, keepdims: bool = False) -> Tile:  # noqa: A001
    """Logical and along free axes."""
    return semc.reduce(Alu.logical_and, x, axis, keepdims)


def any(x: Any, axis: Any = None, keepdims: bool = False) -> Tile:  # noqa: A001
    """Logical or along free axes."""
    return semc.reduce(Alu.logical_or, x, axis, keepdims)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Tile:
    """Mean along free axes."""
    return semc.mean(x, axis, keepdims)


def var(x: Any, axis: Any = None, keepdims: bool = False) -> Tile:
    """Population variance along free axes."""
    return semc.var(x, axis, keepdims)


def cumsum(x: Any, axis: int = -1) -> Tile:
    """Inclusive prefix sum along the last free axis."""
    return semc.cumsum(x, axis)


# matrix -----------------------------------------------------------------------------------
def matmul(x: Any, y: Any, transpose_x: bool = False) -> Tile:
    """``x[M, K] @ y[K, N]`` -> PSUM fp32 ``[M, N]`` (M, K <= 128, N <= 512); ``transpose_x``: x is ``[K, M]``."""
    return semc.matmul(x, y, transpose_x)


def transpose(x: Any) -> Tile:
    """Swap partition and free dimension of a 2-D tile (<= 128 x 128), on the Tensor engine."""
    return semc.transpose(x)


def device_print(label: str, x: Any) -> None:
    """Print a tile at run time (compiled or interpreted)."""
    semc.device_print(label, x)


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "annotations", "Any", "Iterator", "sympy", "TraceError", "current", "axis_sym", "pid_sym", "Alu", "DType",
    "Space", "sem", "semc", "DynSlice", "Index", "Pred", "Tile", "to_expr", "require_int", "sizes_in")]
