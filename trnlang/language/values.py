"""Values a kernel manipulates while traced: index values, predicates, tiles, HBM tensors.

Index values are symbolic: an ``Index`` has a shape and one sympy expression
over the axis symbols ``_a0.._a{ndim-1}`` of that shape (plus loop variables and
program ids). Broadcasting renames axes, so ``arange(128)[:, None]`` and
``arange(64)[None, :]`` combine into a ``(128, 64)`` index with expression
``_a0`` resp. ``_a1``. Nothing here emits IR except through ``semantic``.
"""

from __future__ import annotations

from typing import Any

import sympy

from trnlang.frontend.errors import NeedStatic, ShapeError, TraceError
from trnlang.ir.nodes import Access, HbmTensor, Region, SizeSym, axis_sym
from trnlang.ir.types import DType, Space

_CF_MSG = ("a traced value cannot be used in Python control flow (`if`, `while`, `and`/`or`, `bool()`); "
           "the kernel is traced once, not run: use tl.where(...) or a mask= instead")


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting of shapes; ShapeError at the user's line if incompatible."""
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, d in enumerate(s):
            j = nd - len(s) + i
            if out[j] == 1:
                out[j] = d
            elif d != 1 and d != out[j]:
                raise ShapeError(f"cannot broadcast shapes {' and '.join(str(tuple(x)) for x in shapes)}")
    return tuple(out)


def broadcasts_into(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether a value of shape ``src`` broadcasts into a destination of shape ``dst`` (numpy rules) without
    changing it; stores and assignments use it to raise their own error (naming the store) instead of
    ``broadcast_shapes``' generic one."""
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(src[::-1], dst[::-1]))


def check_partition_vectors(operands: Any, shape: tuple[int, ...], against: str = "a tile",
                            fixed: bool = False) -> None:
    """ShapeError if a ``[P]`` reduction result would broadcast against a 2-D (or wider) result.

    numpy rules align a 1-D tile with the *last* (free) axis, so ``t - tl.mean(t, axis=1)`` with ``t`` of shape
    ``[128, 128]`` would subtract column means, not row means; NKI keeps the partition dimension instead. trnlang
    refuses the ambiguous form (in operators, ``where``, stores, assignments and in-place updates) and names the
    fixes. ``against`` says what the value meets (``"the store's access"``); ``fixed`` says that shape is a
    destination's, and then only a destination with ``P`` rows is ambiguous (``[P]`` into ``[1, P]`` is a row).
    """
    if len(shape) < 2:
        return
    for v in operands:
        origin = getattr(v, "pvec", None)
        if origin is not None and getattr(v, "ndim", 0) == 1 and not (fixed and shape[0] != v.shape[0]):
            raise ShapeError(
                f"{origin} without keepdims=True gives a [{v.shape[0]}] tile: one value per partition. Against "
                f"{against} of shape {tuple(shape)} numpy rules would apply it along the last free axis, not per "
                f"partition (ambiguous). Write keepdims=True (or value[:, None]) for the per-partition [P, 1] value "
                f"(what NKI does), or tl.broadcast_to(value, {tuple(shape)}) if you do mean the free-axis broadcast")


def shift_axes(expr: Any, offset: int, start: int = 0) -> Any:
    """Rename axis symbols ``_a{k}`` to ``_a{k+offset}`` for k >= start (simultaneously)."""
    if offset == 0 or not isinstance(expr, sympy.Basic):
        return expr
    rep = {s: axis_sym(int(s.name[2:]) + offset) for s in expr.free_symbols
           if s.name.startswith("_a") and int(s.name[2:]) >= start}
    return expr.xreplace(rep) if rep else expr


def to_expr(v: Any) -> sympy.Expr:
    """An int or scalar Index as a sympy expression."""
    if isinstance(v, Index):
        if v.shape != ():
            raise TraceError(f"expected a scalar index value, got an index of shape {v.shape}")
        return v.expr
    if isinstance(v, bool) or not isinstance(v, (int, sympy.Expr)):
        if hasattr(v, "__index__") and not isinstance(v, (Tile, float)):
            return sympy.Integer(int(v.__index__()))
        raise TraceError(f"expected an integer index, got {type(v).__name__} {v!r}")
    return sympy.sympify(v)


def sizes_in(v: Any) -> tuple[SizeSym, ...]:
    """The runtime sizes (``SizeSym``) an int-like value depends on (a scalar ``Index`` included)."""
    e = v.expr if isinstance(v, Index) and not v.shape else v
    if isinstance(e, sympy.Basic):
        return tuple(s for s in e.free_symbols if isinstance(s, SizeSym))
    return ()


def require_int(v: Any, what: str) -> None:
    """``NeedStatic`` when ``v`` depends on runtime sizes (the launch then specializes them), else TraceError."""
    sizes = sizes_in(v)
    if sizes:
        raise NeedStatic(sizes, f"{what} needs a compile-time int, got the runtime size {v}")
    raise TraceError(f"{what} needs a Python int, got {v!r}")


def const_int(e: Any, what: str) -> int:
    """A compile-time integer or a TraceError naming what needed it."""
    e = sympy.simplify(to_expr(e)) if not isinstance(e, int) else e
    if isinstance(e, int):
        return e
    if e.is_Integer:
        return int(e)
    sizes = tuple(s for s in e.free_symbols if isinstance(s, SizeSym))
    if sizes:  # a runtime size where a constant is needed: the launch specializes it and traces again
        raise NeedStatic(sizes, f"{what} must be a compile-time constant, got the runtime size {e}")
    raise TraceError(f"{what} must be a compile-time constant, got the symbolic value {e}")


class _Symbolic:
    """Shared behaviour of Index and Pred: shape, broadcasting, no Python control flow."""

    shape: tuple[int, ...]
    expr: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __bool__(self) -> bool:
        raise TraceError(_CF_MSG)

    def _aligned(self, nd: int) -> Any:
        return shift_axes(self.expr, nd - self.ndim)

    def _getitem(self, key: Any) -> tuple[tuple[int, ...], Any]:
        if not isinstance(key, tuple):
            key = (key,)
        shape: list[int] = []
        expr = self.expr
        src = 0  # source axis
        # Rename source axes to temporaries first, then map to output axes.
        tmp = {axis_sym(k): sympy.Symbol(f"_src{k}", integer=True) for k in range(self.ndim)}
        expr = expr.xreplace(tmp) if isinstance(expr, sympy.Basic) else expr
        rep: dict[Any, Any] = {}
        for k in key:
            if k is None:
                shape.append(1)
                continue
            if src >= self.ndim:
                raise TraceError(f"too many indices for an index value of shape {self.shape}")
            n = self.shape[src]
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                size = max(0, (stop - start + step - 1) // step)
                rep[tmp[axis_sym(src)]] = start + step * axis_sym(len(shape))
                shape.append(size)
            elif isinstance(k, int):
                rep[tmp[axis_sym(src)]] = k % n if n else k
            else:
                raise TraceError("index values support slices, ints and None in [...]")
            src += 1
        for s in range(src, self.ndim):
            rep[tmp[axis_sym(s)]] = axis_sym(len(shape))
            shape.append(self.shape[s])
        if isinstance(expr, sympy.Basic):
            expr = expr.xreplace(rep)
        return tuple(shape), expr


def _binop_index(a: Any, b: Any, fn: Any, cls: type) -> Any:
    sa = a.shape if isinstance(a, _Symbolic) else ()
    sb = b.shape if isinstance(b, _Symbolic) else ()
    shape = broadcast_shapes(sa, sb)
    ea = a._aligned(len(shape)) if isinstance(a, _Symbolic) else sympy.sympify(a)
    eb = b._aligned(len(shape)) if isinstance(b, _Symbolic) else sympy.sympify(b)
    return cls(shape, fn(ea, eb))


def _is_scalar_number(x: Any) -> bool:
    """An int, or an integer expression of runtime sizes (``x.shape[0]`` of a shape-polymorphic kernel)."""
    if isinstance(x, (int, sympy.Integer)):
        return not isinstance(x, bool)
    return isinstance(x, sympy.Expr) and bool(x.is_integer)


class Index(_Symbolic):
    """A symbolic integer index value (loop variable, program id, arange, affine combinations)."""

    __array_priority__ = 1000

    def __init__(self, shape: tuple[int, ...], expr: Any) -> None:
        self.shape = tuple(shape)
        self.expr = sympy.sympify(expr)

    def __repr__(self) -> str:
        return f"Index(shape={self.shape}, expr={self.expr})"

    def __index__(self) -> int:
        from trnlang.frontend.tracer import NeedUnroll, active

        msg = ("a traced index value (loop variable, program_id, arange) cannot be used as a Python int "
               "(e.g. in range() or as a list index); use tl.static_range for trace-time loops")
        ctx = active()
        if ctx is not None and ctx.nki and not self.shape:
            locs = frozenset((lp.loc.filename, lp.loc.lineno) for lp in ctx.loops
                             if lp.var in self.expr.free_symbols and lp.loc is not None)
            if locs:
                raise NeedUnroll(msg, locs)
        raise TraceError(msg)

    def __getitem__(self, key: Any) -> Index:
        shape, expr = self._getitem(key)
        return Index(shape, expr)

    def _arith(self, other: Any, fn: Any, rev: bool = False) -> Any:
        if isinstance(other, Index) or _is_scalar_number(other):
            a, b = (other, self) if rev else (self, other)
            return _binop_index(a, b, fn, Index)
        return NotImplemented

    def __add__(self, o: Any) -> Any:
        r = self._arith(o, lambda x, y: x + y)
        return r if r is not NotImplemented else _tile_op("add", self, o)

    def __radd__(self, o: Any) -> Any:
        r = self._arith(o, lambda x, y: x + y, True)
        return r if r is not NotImplemented else _tile_op("add", o, self)

    def __sub__(self, o: Any) -> Any:
        r = self._arith(o, lambda x, y: x - y)
        return r if r is not NotImplemented else _tile_op("subtract", self, o)

    def __rsub__(self, o: Any) -> Any:
        r = self._arith(o, lambda x, y: x - y, True)
        return r if r is not NotImplemented else _tile_op("subtract", o, self)

    def __mul__(self, o: Any) -> Any:
        r = self._arith(o, lambda x, y: x * y)
        return r if r is not NotImplemented else _tile_op("multiply", self, o)

    def __rmul__(self, o: Any) -> Any:
        r = self._arith(o, lambda x, y: x * y, True)
        return r if r is not NotImplemented else _tile_op("multiply", o, self)

    def __floordiv__(self, o: Any) -> Any:
        return self._arith(o, lambda x, y: sympy.floor(x / y))

    def __rfloordiv__(self, o: Any) -> Any:
        return self._arith(o, lambda x, y: sympy.floor(x / y), True)

    def __mod__(self, o: Any) -> Any:
        return self._arith(o, lambda x, y: sympy.Mod(x, y))

    def __neg__(self) -> Index:
        return Index(self.shape, -self.expr)

    def __truediv__(self, o: Any) -> Any:
        return _tile_op("divide", self, o)

    def __rtruediv__(self, o: Any) -> Any:
        return _tile_op("divide", o, self)

    def _cmp(self, o: Any, fn: Any, name: str) -> Any:
        if isinstance(o, Index) or _is_scalar_number(o):
            return _binop_index(self, o, fn, Pred)
        return _tile_op(name, self, o)

    def __lt__(self, o: Any) -> Any:
        return self._cmp(o, lambda x, y: sympy.StrictLessThan(x, y), "less")

    def __le__(self, o: Any) -> Any:
        return self._cmp(o, lambda x, y: sympy.LessThan(x, y), "less_equal")

    def __gt__(self, o: Any) -> Any:
        return self._cmp(o, lambda x, y: sympy.StrictGreaterThan(x, y), "greater")

    def __ge__(self, o: Any) -> Any:
        return self._cmp(o, lambda x, y: sympy.GreaterThan(x, y), "greater_equal")

    def __eq__(self, o: Any) -> Any:
        return self._cmp(o, lambda x, y: sympy.Eq(x, y), "equal")

    def __ne__(self, o: Any) -> Any:
        return self._cmp(o, lambda x, y: sympy.Ne(x, y), "not_equal")

    __hash__ = object.__hash__


class Pred(_Symbolic):
    """A symbolic predicate over index values (used for masks, affine_select, where)."""

    def __init__(self, shape: tuple[int, ...], expr: Any) -> None:
        self.shape = tuple(shape)
        self.expr = expr

    def __repr__(self) -> str:
        return f"Pred(shape={self.shape}, expr={self.expr})"

    def __getitem__(self, key: Any) -> Pred:
        shape, expr = self._getitem(key)
        return Pred(shape, expr)

    def _logic(self, o: Any, fn: Any, name: str, rev: bool = False) -> Any:
        if isinstance(o, bool):
            o = Pred((), sympy.true if o else sympy.false)
        if isinstance(o, Pred):
            a, b = (o, self) if rev else (self, o)
            return _binop_index(a, b, fn, Pred)
        return _tile_op(name, self, o) if not rev else _tile_op(name, o, self)

    def __and__(self, o: Any) -> Any:
        return self._logic(o, lambda x, y: sympy.And(x, y), "logical_and")

    def __rand__(self, o: Any) -> Any:
        return self._logic(o, lambda x, y: sympy.And(x, y), "logical_and", True)

    def __or__(self, o: Any) -> Any:
        return self._logic(o, lambda x, y: sympy.Or(x, y), "logical_or")

    def __ror__(self, o: Any) -> Any:
        return self._logic(o, lambda x, y: sympy.Or(x, y), "logical_or", True)

    def __xor__(self, o: Any) -> Any:
        return self._logic(o, lambda x, y: sympy.Xor(x, y), "logical_xor")

    def __invert__(self) -> Pred:
        return Pred(self.shape, sympy.Not(self.expr))


class ParDim(int):
    """``nl.par_dim(128)``: marks the partition dimension in a tile shape; dimensions before it are block
    dimensions (``nl.ndarray((4, nl.par_dim(128), 512), ...)``: four ``[128, 512]`` blocks)."""

    def __repr__(self) -> str:
        return f"par_dim({int(self)})"


class DynSlice:
    """``tl.ds(start, size)``: a slice with a symbolic start and a constant size."""

    def __init__(self, start: Any, size: int) -> None:
        self.start = start
        self.size = size

    def __repr__(self) -> str:
        return f"ds({self.start}, {self.size})"


def _tile_op(name: str, a: Any, b: Any) -> Any:
    from trnlang.language import semantic

    return semantic.binary_by_name(name, a, b)


class Tile:
    """An on-chip value: a region of an SBUF or PSUM buffer, viewed as a tile.

    ``nblock`` > 0: a tile with NKI block dimensions, ``(b0, .., par_dim(P), f..)``; the buffer keeps the
    partition dimension first (``[P, b0, .., f..]``, so each block is its own slice of every partition) and
    ``shape`` and indexing use the written order. Compute needs the blocks indexed away first.
    """

    __array_priority__ = 1000
    #: set on the ``[P]`` result of a free-axis reduction without ``keepdims`` (and on values computed from it
    #: elementwise): says which call made it, for the error where numpy rules would broadcast it along a free axis
    pvec: str | None = None

    def __init__(self, region: Region, nblock: int = 0) -> None:
        self.region = region
        self.nblock = nblock

    # --- metadata -------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        s = self.region.shape
        if self.nblock:
            return s[1:1 + self.nblock] + s[:1] + s[1 + self.nblock:]
        return s

    @property
    def ndim(self) -> int:
        return len(self.region.shape)

    @property
    def dtype(self) -> DType:
        return self.region.dtype

    def ap(self, pattern: Any, offset: Any = 0, **_: Any) -> Tile:
        """NKI's explicit access pattern: ``t.ap(pattern=[[partition_step, n_p], [step, n], ...], offset=k)``
        (steps in elements of the tile's buffer), a strided view read and written in place."""
        from trnlang.language.semantic_views import explicit_ap

        return explicit_ap(self, pattern, offset)

    def broadcast_to(self, shape: Any) -> Tile:
        """This tile broadcast to ``shape`` (numpy rules, also along partitions): ``t.broadcast_to((128, n))``."""
        from trnlang.language import semantic

        return semantic.broadcast_to(self, shape)

    def reshape(self, shape: Any) -> Tile:
        """This tile with its free dimensions reshaped (``tl.reshape``)."""
        from trnlang.language import semantic

        return semantic.reshape(self, shape)

    @property
    def buffer(self) -> Space:
        return self.region.space

    def __repr__(self) -> str:
        return f"Tile({self.region.buf.name}, shape={self.shape}, dtype={self.dtype.name}, buffer={self.buffer.value})"

    def __bool__(self) -> bool:
        raise TraceError(_CF_MSG)

    def __index__(self) -> int:
        raise TraceError("a tile cannot be used as a Python int")

    def __iter__(self) -> Any:
        raise TraceError("tiles cannot be iterated in Python; use tl.affine_range over indices")

    def __len__(self) -> int:
        return self.shape[0]

    # --- sub-tiles ------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Tile:
        from trnlang.language import semantic

        return semantic.subtile(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        from trnlang.language import semantic

        semantic.assign(self if key is Ellipsis else self[key], value)

    # --- arithmetic -----------------------------------------------------------------
    def astype(self, dtype: Any) -> Tile:
        from trnlang.language import semantic

        return semantic.copy(self, dtype)

    def __add__(self, o: Any) -> Any:
        return _tile_op("add", self, o)

    def __radd__(self, o: Any) -> Any:
        return _tile_op("add", o, self)

    def __sub__(self, o: Any) -> Any:
        return _tile_op("subtract", self, o)

    def __rsub__(self, o: Any) -> Any:
        return _tile_op("subtract", o, self)

    def __mul__(self, o: Any) -> Any:
        return _tile_op("multiply", self, o)

    def __rmul__(self, o: Any) -> Any:
        return _tile_op("multiply", o, self)

    def __truediv__(self, o: Any) -> Any:
        return _tile_op("divide", self, o)

    def __rtruediv__(self, o: Any) -> Any:
        return _tile_op("divide", o, self)

    def __pow__(self, o: Any) -> Any:
        return _tile_op("power", self, o)

    def __rpow__(self, o: Any) -> Any:
        return _tile_op("power", o, self)

    def __mod__(self, o: Any) -> Any:
        return _tile_op("fmod", self, o)

    def __neg__(self) -> Any:
        from trnlang.language import semantic

        return semantic.unary_by_name("negative", self)

    def __pos__(self) -> Tile:
        return self

    def __abs__(self) -> Any:
        from trnlang.language import semantic

        return semantic.unary_by_name("abs", self)

    def __invert__(self) -> Any:
        from trnlang.language import semantic

        name = "logical_not" if self.dtype == DType.bool_ else "bitwise_not"
        return semantic.unary_by_name(name, self)

    def __and__(self, o: Any) -> Any:
        return _tile_op("bitwise_and" if self.dtype.is_int and self.dtype != DType.bool_ else "logical_and", self, o)

    def __rand__(self, o: Any) -> Any:
        return self.__and__(o)

    def __or__(self, o: Any) -> Any:
        return _tile_op("bitwise_or" if self.dtype.is_int and self.dtype != DType.bool_ else "logical_or", self, o)

    def __ror__(self, o: Any) -> Any:
        return self.__or__(o)

    def __xor__(self, o: Any) -> Any:
        return _tile_op("bitwise_xor" if self.dtype.is_int and self.dtype != DType.bool_ else "logical_xor", self, o)

    def __lt__(self, o: Any) -> Any:
        return _tile_op("less", self, o)

    def __le__(self, o: Any) -> Any:
        return _tile_op("less_equal", self, o)

    def __gt__(self, o: Any) -> Any:
        return _tile_op("greater", self, o)

    def __ge__(self, o: Any) -> Any:
        return _tile_op("greater_equal", self, o)

    def __eq__(self, o: Any) -> Any:
        return _tile_op("equal", self, o)

    def __ne__(self, o: Any) -> Any:
        return _tile_op("not_equal", self, o)

    __hash__ = object.__hash__

    # in-place: write into this tile's own region (loop-carried state, PSUM accumulation)
    def __iadd__(self, o: Any) -> Tile:
        from trnlang.language import semantic

        semantic.inplace("add", self, o)
        return self

    def __isub__(self, o: Any) -> Tile:
        from trnlang.language import semantic

        semantic.inplace("subtract", self, o)
        return self

    def __imul__(self, o: Any) -> Tile:
        from trnlang.language import semantic

        semantic.inplace("multiply", self, o)
        return self

    def __itruediv__(self, o: Any) -> Tile:
        from trnlang.language import semantic

        semantic.inplace("divide", self, o)
        return self


class HbmRef:
    """A tensor in HBM as seen inside a kernel: shape, dtype, indexing gives access patterns."""

    def __init__(self, tensor: HbmTensor, view: tuple[int, ...] | None = None) -> None:
        self.tensor = tensor
        self.view = view  # a reshaped view of the tensor (row-major), see ``reshape``

    @property
    def shape(self) -> tuple[int, ...]:
        if self.view is not None:
            return self.view
        return tuple(int(s) if isinstance(s, (int, sympy.Integer)) else s for s in self.tensor.shape)

    def reshape(self, shape: Any) -> HbmRef:
        """A row-major reshaped view of this tensor (no copy): ``g.reshape((1, n))[0:1, 0:n]``."""
        from trnlang.language import semantic

        return semantic.hbm_reshape(self, shape)

    @property
    def dtype(self) -> DType:
        return self.tensor.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def buffer(self) -> Space:
        return self.tensor.space

    def __repr__(self) -> str:
        return f"HbmTensor({self.tensor.name}, shape={self.shape}, dtype={self.dtype.name})"

    def __getitem__(self, key: Any) -> AccessPattern:
        from trnlang.language import semantic

        return semantic.make_access(self, key)

    def ap(self, *args: Any, **kwargs: Any) -> AccessPattern:
        """NKI's explicit access pattern on an HBM tensor: not supported yet (a ``TraceError`` naming the forms
        that are: index values, ``reshape``, or ``.ap()`` on the loaded tile)."""
        raise TraceError(
            ".ap() on an HBM tensor is not supported yet (only tiles take an explicit access pattern). Write the "
            "access with index values (x[i_p, 2 * i_f], x[i_p * n + i_f]) or a row-major x.reshape(...) view, or "
            "load a dense block and call .ap(pattern=..., offset=...) on the tile")

    def __setitem__(self, key: Any, value: Any) -> None:
        from trnlang.language import semantic

        semantic.store(self[key], value)

    def __bool__(self) -> bool:
        raise TraceError(_CF_MSG)


class AccessPattern:
    """``tensor[...]`` inside a kernel: only loaded, stored, or passed to DMA ops."""

    def __init__(self, access: Access) -> None:
        self.access = access

    @property
    def shape(self) -> tuple[int, ...]:
        return self.access.shape

    @property
    def dtype(self) -> DType:
        return self.access.dtype

    def __repr__(self) -> str:
        return f"AccessPattern({self.access.tensor.name}, shape={self.shape})"

    def __bool__(self) -> bool:
        raise TraceError(_CF_MSG)

    def _no_math(self, *_: Any) -> Any:
        raise TraceError("an HBM access pattern cannot be used in arithmetic; tl.load(...) it into a tile first")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _no_math
