"""Inductor's loop-level IR for pointwise and reduction nodes, as ``@trn.kernel`` source.

Inductor's scheduler decides what fuses; for each fused group it hands a :class:`TrnKernel` the loop
bodies of its nodes, whose loads and stores index flat buffers with sympy expressions of the iteration
variables (``xindex`` over the kept elements, ``r0_index`` over the reduced ones). We map them to tiles:

- **pointwise**: ``xindex = row * F + col`` over ``[P, F]`` tiles, ``F`` the length of the innermost
  contiguous dimension Inductor split off (so ``x0 = xindex % F`` becomes ``col`` and ``x1 = xindex // F``
  becomes ``row``: affine DMA, no gathers) or 1024, ``P`` partitions so that a tile holds <= 16384
  elements;
- **reductions** (always persistent): ``xindex = row`` on the partitions and ``r0_index = col`` on the
  free axis, the whole reduced extent in one tile row, reduced with ``tl.sum``/``tl.max``/... on axis 1.

Loads and stores are masked with the runtime element count (``xindex < xnumel``), read from a size
carrier (:mod:`trnlang.compile.inductor.runtime`), so one compiled kernel serves every batch size. The
grid is ``(1,)``: the tile loop is an ``affine_range`` that the runtime splits into one contiguous block of
tiles per host thread when a launch is long enough to pay for it. Index expressions with
``//`` and ``%`` that do not simplify to affine ones stay as they are (a gathered DMA); indirect indexing
is not generated: those ops are lowered as extern calls of the device's own kernels
(:mod:`trnlang.compile.inductor`).

Example:
    >>> from trnlang.compile.inductor.kernel import pointwise_width
    >>> pointwise_width([512, 7], 4096), pointwise_width([], 100), pointwise_width([], None)
    (512, 100, 1024)
"""

from __future__ import annotations

import math
import re
from typing import Any

import sympy
import torch
from torch._inductor import ir
from torch._inductor.codegen.common import BackendFeature, DeferredLine, OpOverrides, PythonPrinter
from torch._inductor.codegen.simd import SIMDKernel, SIMDScheduling
from torch._inductor.utils import get_fused_kernel_name, get_kernel_metadata, prefix_is_reduction
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet
from torch.utils._sympy.symbol import SymT, symbol_is_type

from trnlang.compile.kernelgen import TILE_ELEMS, rows_per_tile

__all__ = ["TrnKernel", "TrnScheduling", "TrnOverrides", "pointwise_width", "Unsupported"]

_pexpr = PythonPrinter().doprint
#: the free size of a pointwise tile when no contiguous inner dimension suggests one.
DEFAULT_WIDTH = 1024
#: reduced extents up to this many elements fit one tile row (the Vector engine's free-size limit).
MAX_REDUCTION = 65536

_ROWS = sympy.Symbol("rows", integer=True, nonnegative=True)
_COLS = sympy.Symbol("cols", integer=True, nonnegative=True)
_TMP = re.compile(r"\btmp\d+\b")
_LITERAL = re.compile(r"^\(?-?(\d+(\.\d*)?(e[-+]?\d+)?|True|False|float\(\"-?(inf|nan)\"\))\)?$")

_TL_DTYPE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
             torch.int32: "int32", torch.int64: "int32", torch.int16: "int16", torch.int8: "int8",
             torch.uint8: "uint8", torch.bool: "bool_", torch.float64: "float32"}


class Unsupported(NotImplementedError):
    """A loop body this code generator does not express (the message says which part)."""


def tl_dtype(dtype: torch.dtype) -> str:
    """``tl.<name>`` of the tiles holding a torch dtype (int64 is HBM storage only: int32 tiles)."""
    name = _TL_DTYPE.get(dtype)
    if name is None:
        raise Unsupported(f"trn Inductor kernels: no tile dtype for {dtype}")
    return f"tl.{name}"


def pointwise_width(inner_lengths: list[int], xnumel: int | None) -> int:
    """The free size ``F`` of a pointwise kernel's tiles.

    ``inner_lengths`` are the static lengths of the innermost dimensions Inductor split off ``xindex``;
    the largest that fits a tile row wins. Otherwise ``xnumel`` if it is static and small, else
    :data:`DEFAULT_WIDTH`.
    """
    fits = [n for n in inner_lengths if 1 < n <= TILE_ELEMS]
    if fits:
        return max(fits)
    if xnumel is not None and 0 < xnumel < DEFAULT_WIDTH:
        return xnumel
    return DEFAULT_WIDTH


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    raise Unsupported(f"constant {value!r}")


def _unary(fn: str) -> Any:
    return staticmethod(lambda x: f"tl.{fn}({x})")


def _binary(fn: str) -> Any:
    return staticmethod(lambda a, b: f"tl.{fn}({a}, {b})")


class TrnOverrides(OpOverrides):
    """Inductor's pointwise ops as trnlang expressions (operators on tiles are ``tl`` builtins)."""

    @staticmethod
    def constant(value: Any, dtype: torch.dtype) -> str:
        return _literal(value)

    @staticmethod
    def to_dtype(x: Any, dtype: torch.dtype, src_dtype: Any = None, use_compute_types: bool = True) -> str:
        if V.kernel.is_literal(str(x)):
            return f"{'float' if dtype.is_floating_point else 'bool' if dtype == torch.bool else 'int'}({x})"
        return f"tl.copy({x}, dtype={tl_dtype(dtype)})"

    @staticmethod
    def where(c: Any, a: Any, b: Any) -> str:
        return f"tl.where({c}, {a}, {b})"

    maximum = _binary("maximum")
    minimum = _binary("minimum")
    pow = _binary("power")
    logical_and = _binary("logical_and")
    logical_or = _binary("logical_or")
    logical_not = _unary("logical_not")

    @staticmethod
    def isnan(x: Any) -> str:
        return f"tl.not_equal({x}, {x})"

    @staticmethod
    def identity(x: Any) -> str:
        return f"{x}"

    @staticmethod
    def index_expr(expr: sympy.Expr, dtype: torch.dtype) -> str:
        return V.kernel.index_value(expr, dtype)

    @staticmethod
    def value_expr(expr: sympy.Expr, dtype: torch.dtype) -> str:
        return V.kernel.index_value(expr, dtype)

    exp = _unary("exp")
    exp2 = _unary("exp2")
    expm1 = _unary("expm1")
    log = _unary("log")
    log1p = _unary("log1p")
    log2 = _unary("log2")
    sqrt = _unary("sqrt")
    rsqrt = _unary("rsqrt")
    abs = _unary("abs")
    reciprocal = _unary("reciprocal")
    square = _unary("square")
    tanh = _unary("tanh")
    sigmoid = _unary("sigmoid")
    relu = _unary("relu")
    erf = _unary("erf")
    erfc = _unary("erfc")
    sin = _unary("sin")
    cos = _unary("cos")
    tan = _unary("tan")
    floor = _unary("floor")
    ceil = _unary("ceil")
    trunc = _unary("trunc")
    round = _unary("round")
    sign = _unary("sign")
    atan = _unary("atan")
    sinh = _unary("sinh")
    cosh = _unary("cosh")


class TrnKernel(SIMDKernel):
    """One fused group of Inductor nodes, generated as one ``@trn.kernel`` (see the module docstring)."""

    overrides = TrnOverrides
    kexpr = _pexpr

    def __init__(self, tiling: dict[str, sympy.Expr], **kwargs: Any) -> None:
        super().__init__(tiling, **kwargs)
        # one buffer in program order: loads, compute and stores interleave as Inductor emits them
        self.compute = self.loads = self.stores = self.body
        self.width = DEFAULT_WIDTH
        self.exact_width = False
        self.shapes: dict[str, tuple[bool, bool]] = {}  # CSE var -> (varies along rows, along cols)
        self.origins = ""

    # -- Inductor hooks -------------------------------------------------------------------------
    def should_use_persistent_reduction(self) -> bool:
        return True

    def want_no_x_dim(self) -> bool:
        return False

    def dtype_to_str(self, dtype: torch.dtype) -> str:
        return tl_dtype(dtype)

    def check_bounds(self, expr: sympy.Expr, size: sympy.Expr, lower: bool, upper: bool) -> None:
        return None

    def is_reduction_kernel(self) -> bool:
        return bool(self.features.is_reduction())

    def finalize_indexing(self, indices: Any) -> None:
        """Pick the pointwise tile width from the innermost split Inductor made of ``xindex``."""
        if self.is_reduction_kernel():
            return
        xtree = self.range_trees[0]
        lengths = [int(e.length) for e in xtree.nodes.values()
                   if e.divisor == 1 and isinstance(e.length, (int, sympy.Integer))
                   and e.length != self.numels["x"]]
        numel = self.numels["x"]
        static = int(numel) if isinstance(numel, (int, sympy.Integer)) else None
        self.width = pointwise_width(lengths, static)
        self.exact_width = bool(lengths) and self.width in lengths

    # -- indexing -------------------------------------------------------------------------------
    def _translate(self, index: sympy.Expr) -> tuple[sympy.Expr, set[sympy.Symbol]]:
        """(expression in ``rows``/``cols`` and kernel size names, which of rows/cols it depends on)."""
        index = self.prepare_indexing(index)
        index = index.xreplace({s: e.expr for s, e in self.range_tree_nodes.items()})
        sub: dict[sympy.Symbol, sympy.Expr] = {}
        ranges: dict[sympy.Symbol, sympy.Expr] = {}
        for tree in self.range_trees:
            reduced = prefix_is_reduction(tree.prefix)  # what tree.is_reduction computes (a cached property)
            if reduced and not self.is_reduction_kernel():
                sub[tree.symbol()] = sympy.S.Zero
            elif reduced:
                sub[tree.symbol()] = _COLS
                ranges[_COLS] = tree.numel
            elif self.is_reduction_kernel():
                sub[tree.symbol()] = _ROWS
                ranges[_ROWS] = tree.numel
            else:
                sub[tree.symbol()] = _ROWS * self.width + _COLS
                ranges[_COLS] = sympy.Integer(self.width)
                ranges[_ROWS] = tree.numel
        index = V.graph.sizevars.simplify_with_ranges(index.xreplace(sub), ranges)
        for s in index.free_symbols:
            if s in (_ROWS, _COLS):
                continue
            if not symbol_is_type(s, (SymT.SIZE, SymT.PRECOMPUTED_SIZE)):
                raise Unsupported(f"index {index} uses {s} (indirect indexing is lowered as an extern op)")
        return self.rename_indexing(index), {s for s in index.free_symbols if s in (_ROWS, _COLS)}

    def _index_text(self, expr: sympy.Expr, deps: set[sympy.Symbol], full: bool) -> str:
        text = _pexpr(expr)
        if full:  # broadcast the index itself over the whole tile
            if _ROWS not in deps:
                text = f"{text} + rows * 0"
            if _COLS not in deps:
                text = f"{text} + cols * 0"
        elif not deps:
            text = f"{text} + z11"
        return text

    def _mask(self, deps: set[sympy.Symbol]) -> tuple[str | None, bool]:
        """(mask for an access depending on ``deps``, whether the index must cover the whole tile)."""
        if self.is_reduction_kernel():
            return ("xmask" if _ROWS in deps else None), False
        if deps == {_ROWS, _COLS}:
            return "xmask", False
        if deps == {_ROWS} and self.exact_width:
            return "rmask", False
        if _ROWS not in deps and self.exact_width:
            return None, False
        return "xmask", True

    def index_value(self, expr: sympy.Expr, dtype: torch.dtype) -> str:
        """An index expression used as a value (``ops.index_expr``)."""
        e, deps = self._translate(expr)
        if not deps:
            text = _pexpr(e)
            return f"float({text})" if dtype.is_floating_point and e.is_number else text
        return f"tl.full(({self._dims(deps)}), 0, dtype={tl_dtype(dtype)}) + ({self._index_text(e, deps, False)})"

    def _dims(self, deps: set[sympy.Symbol]) -> str:
        return f"{'p' if _ROWS in deps else 1}, {'w' if _COLS in deps else 1}"

    # -- shapes of values (for broadcasts before stores and reductions) -------------------------
    def is_literal(self, name: str) -> bool:
        line = self._definition(name)
        return line is not None and bool(_LITERAL.match(line.strip()))

    def _definition(self, name: str) -> str | None:
        prefix = f"{name} = "
        for line in reversed(self.body._lines):
            if isinstance(line, str) and line.startswith(prefix):
                return line[len(prefix):]
        return None

    def _shape(self, name: str) -> tuple[bool, bool]:
        hit = self.shapes.get(name)
        if hit is not None:
            return hit
        rows = cols = False
        line = self._definition(name)
        for t in _TMP.findall(line or ""):
            if t != name:
                r, c = self._shape(t)
                rows, cols = rows or r, cols or c
        if line is not None and ("rows" in line or "tl.full((p" in line):
            rows = True
        if line is not None and ("cols" in line or ", w)" in line):
            cols = True
        self.shapes[name] = (rows, cols)
        return rows, cols

    def _broadcast(self, value: Any, rows: bool, cols: bool, dtype: torch.dtype) -> str:
        name = str(value)
        dims = f"{'p' if rows else 1}, {'w' if cols else 1}"
        if self.is_literal(name):
            return f"tl.full(({dims}), {name}, dtype={tl_dtype(dtype)})"
        if self._shape(name) == (rows, cols):
            return name
        return f"tl.broadcast_to({name}, ({dims}))"

    # -- loads, stores, reductions --------------------------------------------------------------
    def load(self, name: str, index: sympy.Expr) -> Any:
        if self._load_mask:
            raise Unsupported("loads under ops.masked")
        var = self.args.input(name)
        expr, deps = self._translate(index)
        mask, full = self._mask(deps)
        text = self._index_text(expr, deps, full)
        line = f"tl.load({var}[{text}]" + (f", mask={mask})" if mask else ")")
        out = self.cse.generate(self.body, line, dtype=V.graph.get_dtype(name))
        self.shapes[str(out)] = (full or _ROWS in deps, full or _COLS in deps)
        return out

    def store(self, name: str, index: sympy.Expr, value: Any, mode: Any = None) -> None:
        if mode is not None:
            raise Unsupported(f"store mode {mode}")
        var = self.args.output(name)
        expr, deps = self._translate(index)
        mask, full = self._mask(deps)
        if not self.is_reduction_kernel() and mask == "rmask":
            mask, full = "xmask", True
        text = self._index_text(expr, deps, full)
        dtype = V.graph.get_dtype(name)
        val = self._broadcast(value, full or _ROWS in deps, full or _COLS in deps, dtype)
        vdt = getattr(value, "dtype", None)
        if vdt is not None and vdt != dtype and not self.is_literal(str(value)):
            val = f"tl.copy({val}, dtype={tl_dtype(dtype)})"
        m = f", mask={mask}" if mask else ""
        self.body.writeline(DeferredLine(name, f"tl.store({var}[{text}], {val}{m})"))

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value: Any) -> Any:
        if reduction_type == "welford_reduce":
            return self.welford_reduce_fallback(dtype, value)
        if reduction_type == "online_softmax_reduce":
            return self.prepare_softmax_twopass_fallback(dtype, value)
        fn = {"sum": "sum", "max": "max", "min": "min", "prod": "prod", "any": "any"}.get(reduction_type)
        if fn is None or isinstance(value, tuple):
            raise Unsupported(f"reduction {reduction_type}")
        key: Any = (src_dtype, reduction_type, value)
        cache: Any = self.cse.reduction_cache
        if key in cache:
            return cache[key]
        full = self._broadcast(value, True, True, src_dtype)
        out = self.cse.generate(self.body, f"tl.{fn}({full}, axis=1, keepdims=True)", dtype=dtype)
        self.shapes[str(out)] = (True, False)
        cache[key] = out
        return out

    # -- the kernel's source and its call ---------------------------------------------------------
    def _header(self, kinds: dict[str, str]) -> list[str]:
        lines = []
        for name, kind in kinds.items():
            if kind == "size":
                lines.append(f"    {name} = {name}_n.shape[1]")
        xnumel = _pexpr(self.rename_indexing(self.numels["x"]))
        lines.append(f"    xnumel = {xnumel}")
        if self.is_reduction_kernel():
            rnumel = self.numels["r0_"]
            if isinstance(rnumel, (int, sympy.Integer)) and int(rnumel) > MAX_REDUCTION:
                raise Unsupported(f"a persistent reduction over {rnumel} > {MAX_REDUCTION} elements")
            lines += [f"    w = {_pexpr(self.rename_indexing(rnumel))}",
                      "    p = rows_per_tile(w)",
                      "    cols = tl.arange(w)[None, :]",
                      "    z11 = tl.arange(1)[None, :]",
                      "    for j in tl.affine_range(tl.cdiv(xnumel, p)):",
                      "        rows = j * p + tl.arange(p)[:, None]",
                      "        xmask = rows < xnumel"]
        else:
            w = self.width
            lines += [f"    w = {w}",
                      f"    p = {rows_per_tile(w)}",
                      "    cols = tl.arange(w)[None, :]",
                      "    z11 = tl.arange(1)[None, :]",
                      f"    for j in tl.affine_range(tl.cdiv(xnumel, {w * rows_per_tile(w)})):",
                      "        rows = j * p + tl.arange(p)[:, None]",
                      "        xmask = rows * w + cols < xnumel",
                      "        rmask = rows * w < xnumel"]
        return lines

    def codegen_kernel(self, name: str | None = None) -> str:
        """The ``@trn.kernel`` source; its name is ``KERNEL_NAME`` until :meth:`TrnScheduling.define_kernel`."""
        # the numels' symbols become size parameters before the argument list is read
        self.rename_indexing(self.numels["x"])
        if self.is_reduction_kernel():
            self.rename_indexing(self.numels["r0_"])
        arg_defs, _, precompile, _ = self.args.python_argdefs()
        kinds = {}
        for a, pre in zip(arg_defs, precompile):
            kinds[a.name] = "size" if type(pre).__name__ == "SizeArg" else "buf"
        params = [f"{n}_n" if k == "size" else n for n, k in kinds.items()]
        kind = "reduction" if self.is_reduction_kernel() else "pointwise"
        lines = ["@trn.kernel", f"def KERNEL_NAME({', '.join(params)}):",
                 f"    # Inductor {kind} kernel{': ' + self.origins if self.origins else ''}"]
        lines += self._header(kinds)
        for line in self.body._lines:
            text = line() if isinstance(line, DeferredLine) else line
            if isinstance(text, str) and text.strip():
                lines.append("        " + text)
        self.kinds = list(kinds.values())
        return "\n".join(lines) + "\n"

    def call_kernel(self, name: str, node: Any = None, deallocate_ws: bool = True) -> None:
        _, call_args, _, _ = self.args.python_argdefs()
        V.graph.wrapper_code.writeline(f"{name}.run({', '.join(map(str, call_args))})")


class TrnScheduling(SIMDScheduling):
    """Inductor's SIMD scheduling (fusion, tiling of loop nests) with :class:`TrnKernel` as the code generator."""

    kernel_type = TrnKernel

    @classmethod
    def get_backend_features(cls, device: torch.device) -> OrderedSet[BackendFeature]:
        return OrderedSet()

    @classmethod
    def get_tiling_and_scores(cls, node_schedule: Any, numel: Any, reduction_numel: Any = sympy.S.One,
                              coalesce_analysis: Any = None) -> tuple[dict[str, sympy.Expr], None]:
        """One ``x`` range (the kept elements, flattened) and one ``r0_`` range (the reduced ones)."""
        return dict(cls.create_tiling([numel], [reduction_numel])), None

    def define_kernel(self, src_code: str, node_schedule: Any, kernel: Any) -> str:
        wrapper = V.graph.wrapper_code
        if src_code in wrapper.src_to_kernel:
            return str(wrapper.src_to_kernel[src_code])
        fused = get_fused_kernel_name(node_schedule, "original_aten")
        kind = "red" if kernel.is_reduction_kernel() else "poi"
        kernel_name = f"trn_{kind}_{fused}_{wrapper.next_kernel_suffix()}"
        wrapper.src_to_kernel[src_code] = kernel_name
        source = src_code.replace("KERNEL_NAME", kernel_name)
        wrapper.add_import_once("from trnlang.compile.inductor.runtime import load_kernel as trn_load_kernel")
        body = (f"trn_load_kernel({kernel_name!r}, {kernel.kinds!r}, 1, '''\n"
                f"{source}''')")
        origins, detailed = get_kernel_metadata(node_schedule, wrapper)
        wrapper.define_kernel(kernel_name, body, f"{origins}\n{detailed}", gpu=False)
        return kernel_name


def is_supported_node(node: ir.IRNode) -> bool:
    """Whether a node's device is ``trn`` (for the lowering filters)."""
    dev = node.get_device() if hasattr(node, "get_device") else None
    return dev is not None and dev.type == "trn"
