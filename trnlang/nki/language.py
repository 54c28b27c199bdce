"""``nki.language`` (``nl``) on the trnlang core: NKI's tile-level names and signatures.

Everything here delegates to ``trnlang.language`` semantics (no emulation): the kernel is traced under
NKI's rules (``TraceContext.nki``), so tiles keep their partition dimension (``x[0:128, j]`` and
``nl.max(t, axis=1)`` are ``[128, 1]``) and ``nl.par_dim`` block dimensions lay out like NKI's.

Example:
    >>> import numpy as np
    >>> import trnlang.nki as nki
    >>> import trnlang.nki.language as nl
    >>> @nki.jit
    ... def center(x):
    ...     out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ...     t = nl.load(x)
    ...     nl.store(out, value=nl.subtract(t, nl.mean(t, axis=1)))
    ...     return out
    >>> x = np.arange(8, dtype=np.float32).reshape(2, 4)
    >>> center(x).tolist()
    [[-1.5, -0.5, 0.5, 1.5], [-1.5, -0.5, 0.5, 1.5]]
"""

from __future__ import annotations

import builtins as _builtins
from typing import Any

import numpy as np

from trnlang.frontend.errors import ShapeError, TraceError
from trnlang.ir.ops import Alu
from trnlang.ir.types import DType, Space
from trnlang.language import core as _tl
from trnlang.language import semantic as _sem
from trnlang.language import semantic_compute as _semc
from trnlang.language.values import ParDim, Pred, Tile

# dtypes, buffers, index values and loops: the core's objects under NKI's names -----------------
float32 = DType.float32
bfloat16 = DType.bfloat16
float16 = DType.float16
tfloat32 = DType.float32  # computed as fp32
float8_e4m3 = DType.float8_e4m3
float8_e5m2 = DType.float8_e5m2
int32 = DType.int32
int16 = DType.int16
int8 = DType.int8
uint8 = DType.uint8
bool_ = DType.bool_

sbuf = Space.SBUF
psum = Space.PSUM
hbm = Space.HBM
shared_hbm = Space.SHARED_HBM
private_hbm = Space.HBM

program_id = _tl.program_id
num_programs = _tl.num_programs
arange = _tl.arange
mgrid = _tl.mgrid
ds = _tl.ds
static_range = _tl.static_range
par_dim = ParDim


class tile_size:  # noqa: N801 - NKI spelling
    """Hardware tile limits (``nl.tile_size.pmax`` ...), as NKI names them."""

    pmax = 128
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    psum_fmax = 2048
    bn_stats_fmax = 512
    bn_stats_dim = 6
    bn_aggr_dim = 2


def nc(n: int) -> int:
    """NKI's number of physical NeuronCores along an SPMD grid dimension (``nl.spmd_dim(g, nl.nc(2))``)."""
    if not isinstance(n, int) or n < 1:
        raise TraceError(f"nl.nc takes a positive number of NeuronCores, got {n!r}")
    return n


def spmd_dim(*sizes: int) -> int:
    """A launch-grid dimension spread over NeuronCores: ``k[nl.spmd_dim(g, nl.nc(2)), m]`` launches
    ``g * 2`` programs along it (program ids ``0 .. 2g - 1``, as NKI numbers them). trnlang simulates one
    NeuronCore, so the programs of every core run there (and on the host's threads).

    Example:
        >>> import trnlang.nki.language as nl
        >>> nl.spmd_dim(3, nl.nc(2))
        6
    """
    n = 1
    for s in sizes:
        if not isinstance(s, int) or s < 1:
            raise TraceError(f"nl.spmd_dim takes positive ints (grid sizes, nl.nc(k)), got {s!r}")
        n *= s
    return n


def program_ndim() -> int:
    """Number of dimensions of the launch grid."""
    from trnlang.frontend.tracer import current

    return len(current().kernel.grid)


def _unrolled(args: tuple[Any, ...]) -> range | None:
    """A Python range when this loop (its file and line; ``("*", 0)``: every loop) must be unrolled: its
    variable indexes a Python list (whose tiles other loops appended, so those unroll too)."""
    from trnlang.frontend.errors import user_loc
    from trnlang.frontend.tracer import current

    unroll = current().unroll
    loc = user_loc(2) if unroll else None
    if loc is not None and ((loc.filename, loc.lineno) in unroll or ("*", 0) in unroll) and _builtins.all(
            isinstance(a, int) for a in args):
        return range(*args)
    return None


def affine_range(*args: Any, directives: Any = None, **_: Any) -> Any:
    """Loop with independent iterations (``directives=`` are scheduling hints, accepted and ignored).

    A real loop; one whose variable indexes a Python list (``tiles[k]``) is unrolled, as NKI does."""
    return _unrolled(args) or _tl.affine_range(*args)


def sequential_range(*args: Any, directives: Any = None, **_: Any) -> Any:
    """Loop with loop-carried dependences (``directives=`` accepted and ignored); unrolled like
    ``affine_range`` when its variable indexes a Python list."""
    return _unrolled(args) or _tl.sequential_range(*args)


# masks on compute ops -----------------------------------------------------------------------
def _masked(t: Any, mask: Any) -> Any:
    """Attach NKI's compute ``mask=`` to a result: assigning it into a buffer writes only the lanes the
    predicate selects (the rest keep their contents); a fresh result's masked-off lanes are unspecified."""
    if mask is None or not isinstance(t, Tile):
        return t
    if not isinstance(mask, Pred):
        raise TraceError(f"mask= must be a predicate over index values (e.g. i_p < n), got {type(mask).__name__}")
    if len(mask.shape) > t.ndim or _builtins.any(
            m not in (1, d) for m, d in zip(mask.shape[::-1], t.shape[::-1])):
        raise ShapeError(f"mask= of shape {mask.shape} does not cover this op's result of shape {t.shape}: a mask "
                         "that limits the lanes an op reads (a reduction's input) is not supported yet; mask the "
                         "load (other=0) instead")
    t.mask = mask  # type: ignore[attr-defined]
    return t


# creation, load and store -------------------------------------------------------------------
def ndarray(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "", **_: Any) -> Any:
    """A tile (``nl.sbuf`` / ``nl.psum``, contents undefined) or an HBM tensor (``nl.shared_hbm``); a
    ``nl.par_dim`` marks the partition dimension, dimensions before it are blocks."""
    return _sem.ndarray(shape, dtype, buffer)


def zeros(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "", **_: Any) -> Tile:
    """A tile of zeros."""
    return _sem.full(shape, 0, dtype, buffer)


def ones(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "", **_: Any) -> Tile:
    """A tile of ones."""
    return _sem.full(shape, 1, dtype, buffer)


def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = sbuf, name: str = "", **_: Any) -> Tile:
    """A tile filled with ``fill_value``."""
    return _sem.full(shape, fill_value, dtype, buffer)


def zeros_like(a: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> Tile:
    """Zeros shaped like ``a``."""
    return _tl.zeros_like(a, dtype, buffer)


def load(src: Any, mask: Any = None, dtype: Any = None, **_: Any) -> Tile:
    """HBM -> SBUF tile (``nl.load(x)`` loads a whole tensor)."""
    return _sem.load(src, mask, 0, dtype)


def store(dst: Any, value: Any, mask: Any = None, **_: Any) -> None:
    """Tile -> HBM."""
    _sem.store(dst, value, mask)


def load_transpose2d(src: Any, mask: Any = None, dtype: Any = None) -> Tile:
    """Load ``[a, b]`` as a ``[b, a]`` tile."""
    return _sem.load_transpose2d(src, dtype)


def copy(src: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Tile:
    """Copy (and cast) a tile."""
    return _masked(_sem.copy(src, dtype), mask)


def broadcast_to(src: Any, shape: Any) -> Tile:
    """Broadcast a tile (numpy rules, along partitions too)."""
    return _sem.broadcast_to(src, shape)


def shared_constant(constant: Any, dtype: Any = None, **_: Any) -> Any:
    """A constant HBM tensor baked into the kernel (``nl.shared_constant(np.identity(128, np.int8),
    dtype=nl.bfloat16)``): kernel-private HBM the launch fills with ``constant`` (cast to ``dtype``); load
    it with ``nl.load`` like any tensor. The numpy array is captured at trace time."""
    arr = np.asarray(constant)
    if arr.ndim == 0 or arr.dtype == object:
        raise TraceError(f"nl.shared_constant takes a numpy array of numbers, got {type(constant).__name__}")
    dt = _sem.as_dtype(dtype) if dtype is not None else _sem.as_dtype(arr.dtype)
    ref = _sem.ndarray(tuple(int(s) for s in arr.shape), dt, Space.HBM)
    ref.tensor.data = arr.astype(np.float32 if dt.is_float else arr.dtype).astype(dt.np)
    return ref


# elementwise --------------------------------------------------------------------------------
def _binary(alu: Alu) -> Any:
    def f(x: Any, y: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Any:
        return _masked(_sem.binary(alu, x, y, dtype), mask)

    f.__name__ = alu.value
    f.__doc__ = f"Elementwise ``{alu.value}(x, y)`` (numpy broadcasting); ``mask=`` limits the lanes written."
    f._alu = alu  # type: ignore[attr-defined]
    return f


def _unary(alu: Alu) -> Any:
    def f(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Tile:
        return _masked(_sem.unary(alu, x, dtype), mask)

    f.__name__ = alu.value
    f.__doc__ = f"Elementwise ``{alu.value}(x)``; ``mask=`` limits the lanes written."
    f._alu = alu  # type: ignore[attr-defined]
    return f


add = _binary(Alu.add)
subtract = _binary(Alu.subtract)
multiply = _binary(Alu.multiply)
divide = _binary(Alu.divide)
maximum = _binary(Alu.maximum)
minimum = _binary(Alu.minimum)
power = _binary(Alu.power)
fmod = _binary(Alu.fmod)
equal = _binary(Alu.equal)
not_equal = _binary(Alu.not_equal)
less = _binary(Alu.less)
less_equal = _binary(Alu.less_equal)
greater = _binary(Alu.greater)
greater_equal = _binary(Alu.greater_equal)
logical_and = _binary(Alu.logical_and)
logical_or = _binary(Alu.logical_or)
logical_xor = _binary(Alu.logical_xor)
bitwise_and = _binary(Alu.bitwise_and)
bitwise_or = _binary(Alu.bitwise_or)
bitwise_xor = _binary(Alu.bitwise_xor)

exp = _unary(Alu.exp)
log = _unary(Alu.log)
sqrt = _unary(Alu.sqrt)
rsqrt = _unary(Alu.rsqrt)
reciprocal = _unary(Alu.reciprocal)
abs = _unary(Alu.abs)  # noqa: A001 - NKI's name
negative = _unary(Alu.negative)
sign = _unary(Alu.sign)
floor = _unary(Alu.floor)
ceil = _unary(Alu.ceil)
square = _unary(Alu.square)
tanh = _unary(Alu.tanh)
sigmoid = _unary(Alu.sigmoid)
relu = _unary(Alu.relu)
gelu = _unary(Alu.gelu)
gelu_apprx_tanh = _unary(Alu.gelu_tanh)
silu = _unary(Alu.silu)
softplus = _unary(Alu.softplus)
erf = _unary(Alu.erf)
sin = _unary(Alu.sin)
cos = _unary(Alu.cos)
tan = _unary(Alu.tan)
arctan = _unary(Alu.atan)
trunc = _unary(Alu.trunc)
logical_not = _unary(Alu.logical_not)
invert = _unary(Alu.bitwise_not)
identity = _unary(Alu.copy)


def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Tile:
    """``x`` where ``condition`` else ``y``."""
    return _masked(_sem.where(condition, x, y, dtype), mask)


# reductions: a full free-axis reduction of [P, F] is [P, 1] (NKI) -------------------------------
def _reduction(alu: Alu, name: str) -> Any:
    def f(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any) -> Tile:
        return _masked(_semc.reduce(alu, x, axis, keepdims, dtype), mask)

    f.__name__ = name
    f.__doc__ = f"``{name}`` along free axes (``[P, F]`` -> ``[P, 1]``)."
    f._alu = alu  # type: ignore[attr-defined]
    return f


sum = _reduction(Alu.add, "sum")  # noqa: A001
max = _reduction(Alu.maximum, "max")  # noqa: A001
min = _reduction(Alu.minimum, "min")  # noqa: A001
prod = _reduction(Alu.multiply, "prod")
all = _reduction(Alu.logical_and, "all")  # noqa: A001
any = _reduction(Alu.logical_or, "any")  # noqa: A001


def mean(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Any = None, **_: Any) -> Tile:
    """Mean along free axes."""
    return _masked(_semc.mean(x, axis, keepdims), mask)


def var(x: Any, axis: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Tile:
    """Population variance along free axes."""
    return _masked(_semc.var(x, axis, False), mask)


def softmax(x: Any, axis: Any, dtype: Any = None, compute_dtype: Any = None, mask: Any = None, **_: Any) -> Tile:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (free axes)."""
    m = _semc.reduce(Alu.maximum, x, axis, True)
    e = _sem.unary(Alu.exp, _sem.binary(Alu.subtract, x, m))
    s = _semc.reduce(Alu.add, e, axis, True)
    return _masked(_sem.binary(Alu.divide, e, s, dtype), mask)


# matrix -----------------------------------------------------------------------------------
def matmul(x: Any, y: Any, transpose_x: bool = False, mask: Any = None, **_: Any) -> Tile:
    """``x @ y`` into PSUM fp32 (``transpose_x``: x is given as ``[K, M]``)."""
    return _masked(_semc.matmul(x, y, transpose_x), mask)


def transpose(x: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Tile:
    """Swap partition and free dimension of a 2-D tile (Tensor engine)."""
    t = _semc.transpose(x)
    return _masked(_sem.copy(t, dtype) if dtype is not None else t, mask)


def device_print(prefix: str, x: Any, **_: Any) -> None:
    """Print a tile at run time."""
    _semc.device_print(prefix, x)


# host side -----------------------------------------------------------------------------------
def static_cast(ndarray: Any, dtype: Any) -> np.ndarray:
    """Host-side cast of a numpy array to a NKI dtype (bf16 through ml_dtypes)."""
    return np.asarray(ndarray).astype(_sem.as_dtype(dtype).np)


def __getattr__(name: str) -> object:
    """A name NKI has but trnlang does not (yet): an AttributeError saying so, with the closest names."""
    from trnlang.frontend.errors import missing_name

    raise missing_name("trnlang.nki.language", name, [n for n in globals() if not n.startswith("_")],
                       "docs/nki.md")
