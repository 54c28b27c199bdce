"""``nki.isa`` (``nisa``) on the trnlang core: one call, one engine instruction.

Both NKI styles work: the functional one (``t = nisa.tensor_copy(src)``) and the ``dst=`` one
(``nisa.tensor_copy(dst=t, src=src)``), where the instruction writes ``dst`` itself (no extra copy).
``nc_matmul(dst=psum_tile, ...)`` accumulates into ``dst``; the first matmul into a fresh PSUM tile starts
the group (see ``trnlang.language.semantic_compute.nc_matmul_into``).

Example:
    >>> import numpy as np
    >>> import trnlang.nki as nki
    >>> import trnlang.nki.isa as nisa
    >>> import trnlang.nki.language as nl
    >>> @nki.jit
    ... def scaled_exp(x, s):
    ...     out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ...     t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ...     nisa.dma_copy(dst=t, src=x)
    ...     y = nisa.activation(op=nl.exp, data=t, scale=nl.load(s))   # per-partition scale tile
    ...     nl.store(out, value=y)
    ...     return out
    >>> x = np.ones((2, 3), np.float32); s = np.array([[0.0], [1.0]], np.float32)
    >>> bool(np.allclose(scaled_exp(x, s), np.exp(x * s)))
    True
"""

from __future__ import annotations

import enum
from typing import Any

from trnlang.frontend.errors import ShapeError, TraceError
from trnlang.ir.nodes import Instr, Region
from trnlang.ir.ops import Alu, Op
from trnlang.ir.types import DType, Engine
from trnlang.language import semantic as _sem
from trnlang.language import semantic_compute as _semc
from trnlang.language.values import AccessPattern, HbmRef, Index, Pred, Tile
from trnlang.nki.language import _masked

tensor_engine = Engine.TENSOR
vector_engine = Engine.VECTOR
scalar_engine = Engine.SCALAR
gpsimd_engine = Engine.GPSIMD
unknown_engine = None


class reduce_cmd(enum.Enum):  # noqa: N801 - NKI spelling
    """The Scalar engine's accumulation-register command of ``activation`` (one fp32 register per
    partition): ``reset`` zeroes them, ``reset_reduce`` sets them to this instruction's reduction,
    ``reduce`` accumulates this instruction's reduction onto them, ``idle`` leaves them alone. With
    ``reduce_res=`` the instruction also writes the registers' new value there."""

    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    #: load the registers from a tile: not supported yet (``activation`` raises a ``TraceError`` naming the fix)
    load_reduce = "load_reduce"


class _Regs:
    """The registers of one trace: a ``[128, 1]`` fp32 SBUF buffer allocated at the top of the kernel, and
    the instruction whose reduction they hold but that does not write them yet (``pending``: written only
    once some later instruction reads them, so kernels that never read them pay nothing)."""

    def __init__(self) -> None:
        from trnlang.frontend.tracer import current
        from trnlang.ir.types import Space

        ctx = current()
        buf = ctx.new_buf((128, 1), DType.float32, Space.SBUF)
        alloc = ctx.blocks[-1].pop()
        ctx.blocks[0].insert(0, alloc)
        self.tile = Tile(Region.whole(buf))
        self.pending: Instr | None = None
        self.valid = False

    @staticmethod
    def of_trace() -> _Regs:
        from trnlang.frontend.tracer import current

        ctx = current()
        regs = getattr(ctx, "_nki_reduce_regs", None)
        if regs is None:
            regs = _Regs()
            ctx._nki_reduce_regs = regs  # type: ignore[attr-defined]
        return regs

    def rows(self, p: int) -> Tile:
        return self.tile[0:p, 0:1] if p != 128 else self.tile

    def read(self, p: int, cmd: str) -> Tile:
        """The registers for an instruction that reads them: the pending instruction now writes them too."""
        if self.pending is not None:
            prev = self.pending
            self.pending = None
            prev.outs = (*prev.outs, self.rows(prev.outs[0].shape[0] if prev.outs[0].shape else 1).region)
        elif not self.valid:
            raise TraceError(f"activation reduce_cmd={cmd} reads the reduction registers, but no earlier "
                             "instruction set them: start with reduce_cmd=reset or reset_reduce")
        return self.rows(p)


def _activation_regs(cmd: str, op: Any, data: Tile, bias: Any, scale: Any, reduce_op: Any, reduce_res: Any,
                     dtype: Any) -> Tile:
    """``activation`` with an explicit ``reduce_cmd`` (one instruction; see ``reduce_cmd``)."""
    from trnlang.frontend.tracer import current

    regs = _Regs.of_trace()
    p = data.shape[0]
    if cmd == "idle":
        if reduce_res is None:  # the registers are not touched: a plain activation
            return _semc.activation(op, data, scale, bias, None, None, dtype)
        old = regs.read(p, cmd)
        return _semc.activation(op, data, scale, bias, None, None, dtype, reduce_res, "idle", old)[0]
    if cmd == "reset_reduce":
        if reduce_op is None:
            raise TraceError("activation reduce_cmd=reset_reduce needs reduce_op= (nl.add)")
        if reduce_res is not None:  # one instruction writing reduce_res; the registers follow when read
            y = _semc.activation(op, data, scale, bias, reduce_op, None, dtype, reduce_res, "reset_reduce")[0]
            regs.pending, regs.valid = current().last_instr(), True
            return y
        r = _semc.activation(op, data, scale, bias, reduce_op, None, dtype, regs.rows(p), "reset_reduce")
    elif cmd == "reduce":
        if reduce_op is None:
            raise TraceError("activation reduce_cmd=reduce needs reduce_op= (nl.add)")
        old = regs.read(p, cmd)
        r = _semc.activation(op, data, scale, bias, reduce_op, None, dtype, old, "reduce", old, reduce_res)
    else:  # reset
        regs.pending = None
        r = _semc.activation(op, data, scale, bias, None, None, dtype, regs.rows(p), "reset", None, reduce_res)
    regs.pending, regs.valid = None, True
    return r[0]


def _out(dst: Any, result: Any, mask: Any = None) -> Any:
    """Functional style returns ``result``; the ``dst=`` style writes it into ``dst`` (the producing
    instruction is retargeted, so nothing is copied)."""
    result = _masked(result, mask)
    if dst is None:
        return result
    if not isinstance(dst, Tile):
        raise TraceError(f"dst= must be an SBUF or PSUM tile, got {type(dst).__name__}")
    _sem.assign(dst, result)
    return dst


def _engine(engine: Any) -> Any:
    return None if engine is unknown_engine else engine


def nc_matmul(*args: Any, dst: Any = None, stationary: Any = None, moving: Any = None,
              is_stationary_onezero: bool = False, is_moving_onezero: bool = False, is_transpose: bool = False,
              mask: Any = None, **_: Any) -> Any:
    """``stationary[K, M].T @ moving[K, N]`` -> PSUM ``[M, N]``; ``nc_matmul(dst, stationary, moving)``
    accumulates into ``dst``; ``is_transpose=True`` transposes ``stationary`` (moving is the identity)."""
    pos = list(args)
    if len(pos) == 3 and dst is None:
        dst = pos.pop(0)
    if pos and stationary is None:
        stationary = pos.pop(0)
    if pos and moving is None:
        moving = pos.pop(0)
    if pos or stationary is None or moving is None:
        raise TraceError("nc_matmul takes (stationary, moving) or (dst, stationary, moving)")
    if is_transpose:
        return _out(dst, _semc.transpose(stationary, Engine.TENSOR), mask)
    if dst is not None:
        return _semc.nc_matmul_into(dst, stationary, moving)
    return _masked(_semc.nc_matmul(stationary, moving), mask)


def nc_transpose(data: Any, mask: Any = None, dtype: Any = None, engine: Any = None, dst: Any = None,
                 **_: Any) -> Any:
    """Transpose a 2-D tile (Tensor engine into PSUM, or Vector into SBUF)."""
    t = _semc.transpose(data, _engine(engine))
    return _out(dst, _sem.copy(t, dtype) if dtype is not None and _sem.as_dtype(dtype) != t.dtype else t, mask)


def activation(op: Any = None, data: Any = None, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None,
               reduce_res: Any = None, reduce_cmd: Any = None, dtype: Any = None, mask: Any = None,
               dst: Any = None, **_: Any) -> Any:
    """``op(data * scale + bias)`` on the Scalar engine; ``scale`` a number or a ``[P, 1]`` tile;
    ``reduce_op`` + ``reduce_res``: also the free-axis reduction of the result into ``reduce_res``;
    ``reduce_cmd``: the engine's accumulation registers (``nisa.reduce_cmd``), in the same instruction."""
    if data is None or op is None:
        raise TraceError("activation needs op= and data=")
    if reduce_res is not None and not isinstance(reduce_res, Tile):
        raise TraceError("reduce_res= must be a [P, 1] tile")
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if cmd == "load_reduce":
        raise TraceError("activation reduce_cmd=load_reduce (loading the reduce registers from a tile) is not "
                         "supported yet: start the accumulation with reduce_cmd=reset_reduce, or add the tile "
                         "to the reduce_res= result afterwards (nl.add)")
    if cmd is not None and cmd not in ("idle", "reset", "reduce", "reset_reduce"):
        raise TraceError(f"activation reduce_cmd={reduce_cmd!r}: use a nisa.reduce_cmd member")
    if cmd is None and reduce_op is not None and reduce_res is not None:
        cmd = "reset_reduce"  # NKI: activation_reduce / reduce_res without a command reset the registers
    if cmd is not None:
        y = _activation_regs(cmd, op, _sem.to_tile(data), bias, scale, reduce_op, reduce_res, dtype)
        return _out(dst, y, mask)
    r = _semc.activation(op, data, scale, bias, reduce_op if reduce_res is not None else None, None, dtype,
                         reduce_res)
    y = r[0] if isinstance(r, tuple) else r
    return _out(dst, y, mask)


def activation_reduce(op: Any, data: Any, reduce_op: Any, reduce_res: Any, bias: Any = None, scale: Any = 1.0,
                      dtype: Any = None, mask: Any = None, **_: Any) -> Tile:
    """``activation`` with its free-axis reduction written into ``reduce_res``."""
    return activation(op=op, data=data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                      dtype=dtype, mask=mask)


def tensor_tensor(data1: Any = None, data2: Any = None, op: Any = None, dtype: Any = None, mask: Any = None,
                  engine: Any = None, dst: Any = None, **_: Any) -> Any:
    """Elementwise ``data1 op data2``."""
    if not isinstance(data1, Tile) or not isinstance(data2, Tile):
        raise TraceError("tensor_tensor takes two tiles; use tensor_scalar for a scalar operand")
    if dst is not None and dst is data1 and dtype is None and mask is None and data2.shape == dst.shape:
        _sem.inplace(_sem.as_alu(op).name, dst, data2)  # acc = acc op x: one instruction, in place
        return dst
    return _out(dst, _sem.binary(_sem.as_alu(op), data1, data2, dtype, engine=_engine(engine) or Engine.VECTOR),
                mask)


def tensor_scalar(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, dtype: Any = None, mask: Any = None,
                  engine: Any = None, dst: Any = None, **_: Any) -> Any:
    """``(data op0 operand0) op1 operand1``; operands are numbers or ``[P, 1]`` tiles."""
    return _out(dst, _semc.tensor_scalar(data, op0, operand0, op1, operand1, reverse0, reverse1, _engine(engine),
                                         dtype), mask)


def tensor_scalar_reduce(data: Any, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Any,
                         reverse0: bool = False, dtype: Any = None, mask: Any = None, dst: Any = None,
                         **_: Any) -> Any:
    """One Vector-engine instruction: ``data op0 operand0`` and its free-axis ``reduce_op`` reduction into
    ``reduce_res`` ([P, 1])."""
    if not isinstance(reduce_res, Tile):
        raise TraceError("tensor_scalar_reduce needs reduce_res=, a [P, 1] tile")
    y, _red = _semc.tensor_scalar(data, op0, operand0, None, None, reverse0, False, None, dtype, reduce_op,
                                  reduce_res)
    return _out(dst, y, mask)


def tensor_reduce(op: Any, data: Any, axis: Any, mask: Any = None, dtype: Any = None, negate: bool = False,
                  keepdims: bool = False, dst: Any = None, **_: Any) -> Any:
    """Reduce along free axes (``[P, F]`` -> ``[P, 1]``); ``negate``: the negated result."""
    r = _semc.reduce(_sem.as_alu(op), data, axis, keepdims, dtype)
    if negate:
        r = _sem.binary(Alu.multiply, r, -1.0 if r.dtype.is_float else -1)
    return _out(dst, r, mask)


def tensor_tensor_scan(data0: Any, data1: Any, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                       reverse1: bool = False, dtype: Any = None, mask: Any = None, dst: Any = None,
                       **_: Any) -> Any:
    """Along the last axis: ``acc = (acc op0 data0[j]) op1 data1[j]``, from ``initial`` (number or [P, 1])."""
    if reverse0 or reverse1:
        raise TraceError("tensor_tensor_scan reverse0/reverse1 are not supported")
    r = _semc.scan(data0, data1, initial, op0, op1)
    if dtype is not None and _sem.as_dtype(dtype) != r.dtype:
        r = _sem.copy(r, dtype)
    return _out(dst, r, mask)


def tensor_copy(src: Any = None, mask: Any = None, dtype: Any = None, engine: Any = None, dst: Any = None,
                **_: Any) -> Any:
    """Copy / cast a tile (evicts PSUM); the ``dst=`` form writes ``dst`` (cast to its dtype)."""
    if src is None:
        raise TraceError("tensor_copy needs src=")
    want = dtype if dtype is not None else (dst.dtype if isinstance(dst, Tile) else None)
    return _out(dst, _sem.copy(src, want, _engine(engine)), mask)


def reciprocal(data: Any, dtype: Any = None, mask: Any = None, dst: Any = None, **_: Any) -> Any:
    """``1 / data`` (Vector engine)."""
    return _out(dst, _sem.unary(Alu.reciprocal, data, dtype), mask)


def memset(*args: Any, dst: Any = None, value: Any = None, shape: Any = None, dtype: Any = None,
           engine: Any = None, mask: Any = None, **_: Any) -> Any:
    """``memset(dst=tile, value=v)`` fills a tile; ``memset(shape, value, dtype)`` returns a new one."""
    pos = list(args)
    if pos and isinstance(pos[0], Tile) and dst is None:
        dst = pos.pop(0)
    elif pos and shape is None and dst is None:
        shape = pos.pop(0)
    if pos and value is None:
        value = pos.pop(0)
    if pos and dtype is None:
        dtype = pos.pop(0)
    if value is None:
        raise TraceError("memset needs value=")
    t = dst if dst is not None else _sem.ndarray(shape, dtype if dtype is not None else DType.float32)
    _sem._emit(Op.MEMSET, (_sem.to_tile(t).region,), (), {"value": value},
               _sem._pick_engine(_engine(engine), Op.MEMSET, Engine.VECTOR))
    return t


def iota(expr: Any, dtype: Any = DType.int32, mask: Any = None, dst: Any = None, **_: Any) -> Any:
    """A tile holding an index expression (``nisa.iota(nl.arange(128)[:, None] + 0 * nl.arange(4)[None, :])``)."""
    if not isinstance(expr, (Index, Pred)):
        raise TraceError("iota takes an index expression built from nl.arange / nl.mgrid / loop variables")
    t = _sem.new_tile(expr.shape or (1,), _sem.as_dtype(dtype))
    _sem._emit(Op.IOTA, (t.region,), (), {"expr": expr.expr}, Engine.GPSIMD)
    return _out(dst, t, mask)


def affine_select(pred: Any, on_true_tile: Any, on_false_value: Any, dtype: Any = None, mask: Any = None,
                  dst: Any = None, **_: Any) -> Any:
    """GpSimd: ``on_true_tile`` where the affine predicate holds, else ``on_false_value``."""
    if not isinstance(pred, Pred):
        raise TraceError("affine_select needs an index predicate such as i_p >= i_f")
    return _out(dst, _sem.where(pred, on_true_tile, on_false_value, dtype), mask)


def _always(mask: Any) -> bool:
    """Whether an affine ``lhs < rhs`` / ``lhs <= rhs`` predicate holds over every lane and loop iteration."""
    import sympy

    from trnlang.frontend.tracer import current

    e = mask.expr
    if not isinstance(e, (sympy.StrictLessThan, sympy.LessThan)):
        return False
    d = sympy.expand(e.lhs - e.rhs)
    if not d.is_polynomial() or sympy.Poly(d, *d.free_symbols).total_degree() > 1 if d.free_symbols else False:
        return False
    ranges = {lp.var: (lp.start, lp.stop - 1) for lp in current().loops}
    ranges.update({sympy.Symbol(f"_a{k}", integer=True): (0, n - 1) for k, n in enumerate(mask.shape)})
    hi = d.as_coeff_add()[0]
    for term in d.as_coeff_add()[1]:
        c, syms = term.as_coeff_mul()
        if len(syms) != 1 or syms[0] not in ranges:
            return False
        lo_v, hi_v = ranges[syms[0]]
        hi += c * (hi_v if c > 0 else lo_v)
    hi = sympy.simplify(hi)
    return bool(hi.is_number and (hi < 0 if isinstance(e, sympy.StrictLessThan) else hi <= 0))


def _valid_prefix(mask: Any, n: int) -> int | None:
    """The number of leading lanes of the last free axis an affine read mask ``c + i_f < d`` keeps (None: not
    such a prefix over constants)."""
    import sympy

    e = mask.expr
    if not isinstance(e, (sympy.StrictLessThan, sympy.LessThan)):
        return None
    diff = sympy.expand(e.lhs - e.rhs)
    last = sympy.Symbol(f"_a{len(mask.shape) - 1}", integer=True)
    rest = sympy.expand(diff - last)
    if diff.coeff(last) != 1 or rest.free_symbols or not rest.is_Integer:
        return None
    bound = -int(rest) + (1 if isinstance(e, sympy.LessThan) else 0)   # lanes a with a < bound
    return max(0, min(n, bound))


def bn_stats(data: Any, mask: Any = None, dtype: Any = None, dst: Any = None, **_: Any) -> Any:
    """Per-partition statistics of up to ``nl.tile_size.bn_stats_fmax`` elements -> ``[P, 6]``: one
    ``(count, mean, M2)`` group and an empty group (count 0), NKI's six-column layout for ``bn_aggr``.

    ``mask=`` limits the lanes read: a prefix of the row (``j * 512 + i_f < d``, a ragged last chunk) reads
    only those lanes. A mask over loop variables unrolls the kernel's constant-trip loops (as NKI does for
    Python-level indexing) so each chunk's valid length is a constant."""
    from trnlang.frontend.tracer import NeedUnroll

    t = _sem.to_tile(data)
    if mask is not None and not (isinstance(mask, Pred) and _always(mask)):
        syms: set[Any] = getattr(getattr(mask, "expr", None), "free_symbols", set())
        if isinstance(mask, Pred) and any(not s.name.startswith("_a") for s in syms):
            raise NeedUnroll("bn_stats mask= over loop variables: the loops are unrolled", frozenset())
        keep = _valid_prefix(mask, t.shape[-1]) if isinstance(mask, Pred) and t.ndim == 2 else None
        if keep is None:
            raise ShapeError("bn_stats mask= must keep a prefix of the row (c + i_f < d, a ragged last chunk) or "
                             "every lane; mask the load (other=0) for other patterns")
        if keep == 0:
            out = _sem.new_tile((t.shape[0], 6), DType.float32)
            _sem._emit(Op.MEMSET, (out.region,), (), {"value": 0.0}, Engine.VECTOR)
            return _out(dst, out, None)
        t = t[:, 0:keep]
    s = _semc.bn_stats(t)
    out = _sem.new_tile((s.shape[0], 6), DType.float32)
    _sem.assign(out[:, 0:3], s)
    _sem._emit(Op.MEMSET, (out[:, 3:6].region,), (), {"value": 0.0}, Engine.VECTOR)
    return _out(dst, out, None)


def bn_aggr(data: Any, mask: Any = None, dtype: Any = None, dst: Any = None, **_: Any) -> Any:
    """Combine ``[P, 3k]`` statistics into ``[P, 2]`` = (mean, variance)."""
    return _out(dst, _semc.bn_aggr(data), mask)


def dma_copy(dst: Any = None, src: Any = None, mask: Any = None, **_: Any) -> None:
    """One DMA between HBM (a tensor or an access of one) and an SBUF tile, either direction."""
    if isinstance(src, HbmRef):
        src = _sem.make_access(src, ())
    if isinstance(dst, HbmRef):
        dst = _sem.make_access(dst, ())
    if isinstance(dst, Tile) and isinstance(src, AccessPattern):
        if dst.shape != src.shape:
            raise ShapeError(f"dma_copy shapes differ: dst {dst.shape} <- src {src.shape}")
        _sem._emit(Op.DMA_COPY, (_sem.to_tile(dst).region,), (src.access,), {"other": 0}, Engine.DMA)
        return
    if isinstance(src, Tile) and isinstance(dst, AccessPattern):
        _sem.store(dst, src, mask)
        return
    if isinstance(src, Tile) and isinstance(dst, Tile):
        _sem.assign(dst, _sem.copy(src))
        return
    raise TraceError(f"dma_copy copies between HBM and SBUF, got dst {type(dst).__name__} and src "
                     f"{type(src).__name__}")


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "annotations", "enum", "Any", "ShapeError", "TraceError", "Instr", "Region", "Alu", "Op", "DType", "Engine",
    "AccessPattern", "HbmRef", "Index", "Pred", "Tile")]


def __getattr__(name: str) -> object:
    """A name NKI has but trnlang does not (yet): an AttributeError saying so, with the closest names."""
    from trnlang.frontend.errors import missing_name

    raise missing_name("trnlang.nki.isa", name, [n for n in globals() if not n.startswith("_")],
                       "docs/nki.md")
