"""``trnlang.isa``: one call = one engine instruction (LANGUAGE.md section 6).

Every function takes ``engine=`` where several engines can run the instruction;
the allowed set comes from the op table (``trnlang.ir.ops.OP_SPECS``).
"""

from __future__ import annotations

from typing import Any

from trnlang.frontend.errors import ShapeError, TraceError
from trnlang.ir.nodes import Imm
from trnlang.ir.ops import Op
from trnlang.ir.types import DType, Engine
from trnlang.language import semantic as _sem
from trnlang.language import semantic_compute as _semc
from trnlang.language.values import AccessPattern, Index, Pred, Tile

tensor_engine = Engine.TENSOR
vector_engine = Engine.VECTOR
scalar_engine = Engine.SCALAR
gpsimd_engine = Engine.GPSIMD


def nc_matmul(stationary: Tile, moving: Tile) -> Tile:
    """Tensor engine: ``stationary[K, M].T @ moving[K, N]`` -> PSUM fp32 ``[M, N]`` (K, M <= 128, N <= 512)."""
    return _semc.nc_matmul(stationary, moving)


def nc_transpose(x: Tile, engine: Any = None) -> Tile:
    """Transpose a 2-D tile (Tensor engine into PSUM, or Vector engine into SBUF)."""
    return _semc.transpose(x, engine)


def activation(op: Any, data: Tile, scale: float = 1.0, bias: Any = None, reduce_op: Any = None,
               engine: Any = None, dtype: Any = None) -> Any:
    """Scalar engine ``op(data * scale + bias)``; with ``reduce_op`` also returns the free-axis reduction [P, 1]."""
    return _semc.activation(op, data, scale, bias, reduce_op, engine, dtype)


def tensor_tensor(a: Tile, b: Tile, op: Any, engine: Any = None, dtype: Any = None) -> Tile:
    """Elementwise ``a op b`` of two tiles."""
    if not isinstance(a, Tile) or not isinstance(b, Tile):
        raise TraceError("isa.tensor_tensor takes two tiles; use isa.tensor_scalar for a scalar operand")
    return _sem.binary(_sem.as_alu(op), a, b, dtype, engine=engine or Engine.VECTOR)


def tensor_scalar(data: Tile, op0: Any, operand0: Any, op1: Any = None, operand1: Any = None,
                  reverse0: bool = False, reverse1: bool = False, engine: Any = None, dtype: Any = None) -> Tile:
    """``(data op0 operand0) op1 operand1``; operands are immediates or per-partition ``[P, 1]`` tiles."""
    return _semc.tensor_scalar(data, op0, operand0, op1, operand1, reverse0, reverse1, engine, dtype)


def tensor_scalar_reduce(data: Tile, op0: Any, operand0: Any, reduce_op: Any, reverse0: bool = False,
                         engine: Any = None, dtype: Any = None) -> tuple[Tile, Tile]:
    """One instruction: ``y = data op0 operand0`` and its free-axis ``reduce_op`` reduction ``[P, 1]``.

    Example:
        >>> import numpy as np, trnlang as trn, trnlang.language as tl, trnlang.isa as isa
        >>> @trn.kernel
        ... def k(x, y, m):
        ...     t, r = isa.tensor_scalar_reduce(tl.load(x[0:4, 0:8]), tl.multiply, 2.0, tl.maximum)
        ...     tl.store(y[0:4, 0:8], t)
        ...     tl.store(m[0:4, 0:1], r)
        >>> x = np.arange(32, dtype=np.float32).reshape(4, 8)
        >>> y = np.zeros_like(x); m = np.zeros((4, 1), np.float32); k(x, y, m)
        >>> m.ravel().tolist()
        [14.0, 30.0, 46.0, 62.0]
    """
    return _semc.tensor_scalar(data, op0, operand0, None, None, reverse0, False, engine, dtype, reduce_op)


def tensor_reduce(op: Any, data: Tile, axis: Any, keepdims: bool = False, engine: Any = None,
                  dtype: Any = None) -> Tile:
    """Reduce along free axes."""
    return _semc.reduce(_sem.as_alu(op), data, axis, keepdims, dtype, engine)


def tensor_tensor_scan(a: Any, b: Any, initial: Any, op0: Any, op1: Any) -> Tile:
    """Along the last axis: ``acc = (acc op0 a[j]) op1 b[j]``, starting from ``initial``."""
    return _semc.scan(a, b, initial, op0, op1)


def tensor_copy(x: Tile, dtype: Any = None, engine: Any = None) -> Tile:
    """Copy/cast a tile (evicts PSUM)."""
    return _sem.copy(x, dtype, engine)


def iota(expr: Any, dtype: Any = DType.int32) -> Tile:
    """A tile holding an index expression (``isa.iota(tl.arange(128)[:, None] * 4 + tl.arange(4)[None, :])``)."""
    if not isinstance(expr, (Index, Pred)):
        raise TraceError("isa.iota takes an index expression built from tl.arange / tl.mgrid / loop variables")
    shape = expr.shape or (1,)
    t = _sem.new_tile(shape, _sem.as_dtype(dtype))
    _sem._emit(Op.IOTA, (t.region,), (), {"expr": expr.expr}, Engine.GPSIMD)
    return t


def memset(tile: Tile, value: Any, engine: Any = None) -> Tile:
    """Fill a tile with a constant."""
    _sem._emit(Op.MEMSET, (tile.region,), (), {"value": value}, _sem._pick_engine(engine, Op.MEMSET, Engine.VECTOR))
    return tile


def affine_select(pred: Pred, on_true: Any, on_false: Any) -> Tile:
    """GpSimd: ``on_true`` where the affine predicate holds, else ``on_false``."""
    if not isinstance(pred, Pred):
        raise TraceError("isa.affine_select needs an index predicate such as ix >= iy")
    return _sem.where(pred, on_true, on_false)


def bn_stats(x: Tile) -> Tile:
    """Per-partition ``(count, mean, M2)`` of the free elements -> ``[P, 3]``."""
    return _semc.bn_stats(x)


def bn_aggr(stats: Tile) -> Tile:
    """Combine ``[P, 3k]`` bn_stats groups into ``[P, 2]`` = (mean, variance)."""
    return _semc.bn_aggr(stats)


def dma_copy(dst: Any, src: Any) -> None:
    """One DMA between an HBM access pattern and an SBUF tile (either direction)."""
    if isinstance(dst, Tile) and isinstance(src, AccessPattern):
        if dst.shape != src.shape:
            raise ShapeError(f"dma_copy shapes differ: {dst.shape} <- {src.shape}")
        from trnlang.frontend.tracer import current
        from trnlang.ir.nodes import Instr

        current().emit(Instr(Op.DMA_COPY, (dst.region,), (src.access,), {"other": 0}, Engine.DMA))
        return
    if isinstance(src, Tile) and isinstance(dst, AccessPattern):
        _sem.store(dst, src)
        return
    raise TraceError("isa.dma_copy copies between an HBM access pattern and an SBUF tile")


__all__ = ["nc_matmul", "nc_transpose", "activation", "tensor_tensor", "tensor_scalar", "tensor_scalar_reduce",
           "tensor_reduce", "tensor_tensor_scan", "tensor_copy", "iota", "memset", "affine_select", "bn_stats",
           "bn_aggr", "dma_copy", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "Imm"]
