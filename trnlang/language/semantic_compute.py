"""Semantics of reductions, scans, matmul, transpose, statistics and debug printing."""

from __future__ import annotations

from typing import Any

from trnlang.frontend.errors import DTypeError, ShapeError, TraceError
from trnlang.frontend.tracer import current
from trnlang.ir.nodes import Imm, Region
from trnlang.ir.ops import ALU_SPECS, Alu, AluKind, Op
from trnlang.ir.types import DType, Engine, Space
from trnlang.language.semantic import (
    _emit,
    _is_num,
    _operand,
    _pick_engine,
    _sbuf_operand,
    as_alu,
    binary,
    copy,
    new_tile,
    to_tile,
)
from trnlang.language.values import Tile

MAX_K = 128
MAX_M = 128
MAX_N = 512


def _axes(axis: Any, ndim: int, what: str) -> tuple[int, ...]:
    if axis is None:
        axes = tuple(range(1, ndim))
        if not axes:
            raise ShapeError(f"{what}: a 1-D tile has no free axis to reduce; reductions run along free axes only "
                             "(axis 0 is the partition axis)")
        return axes
    given = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in given:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TraceError(f"{what}: axis must be a Python int, got {a!r}")
        aa = a + ndim if a < 0 else a
        if not 0 <= aa < ndim:
            raise ShapeError(f"{what}: axis {a} out of range for a tile with {ndim} dimensions")
        if aa == 0:
            raise ShapeError(f"{what}: cannot reduce along axis 0, the partition axis; reductions run along free "
                             "axes only (transpose the tile with tl.transpose, or reduce with a matmul by ones)")
        out.append(aa)
    return tuple(sorted(set(out)))


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


_REDUCE_NAMES = {"add": "sum", "maximum": "max", "minimum": "min", "multiply": "product", "logical_and": "all",
                 "logical_or": "any"}


def reduce(alu: Alu, x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None,
           engine: Any = None) -> Tile:
    """tensor_reduce along free axes."""
    from trnlang.language.semantic import as_dtype

    if not ALU_SPECS[alu].reducible:
        raise TraceError(f"{alu.value} cannot be used as a reduction")
    t = to_tile(x)
    axes = _axes(axis, t.ndim, alu.value)
    if alu in (Alu.argmax, Alu.argmin) and len(axes) != 1:
        raise ShapeError(f"{alu.value} reduces exactly one axis, got axes {axes}")
    if dtype is not None:
        dt = as_dtype(dtype)
    elif alu in (Alu.argmax, Alu.argmin):
        dt = DType.int32
    elif alu in (Alu.logical_and, Alu.logical_or):
        dt = DType.bool_
    elif t.dtype.is_int:
        dt = DType.int32 if alu in (Alu.add, Alu.multiply) else t.dtype
    elif t.dtype in (DType.float8_e4m3, DType.float8_e5m2):
        dt = DType.float32
    else:
        dt = t.dtype
    if not keepdims and t.ndim == 2 and current().nki:
        keepdims = True  # NKI: a full free-axis reduction of [P, F] is [P, 1]
    out = new_tile(_reduced_shape(t.shape, axes, keepdims) or (t.shape[0],), dt)
    _emit(Op.TENSOR_REDUCE, (out.region,), (t.region,), {"op": alu, "axes": axes, "keepdims": bool(keepdims)},
          _pick_engine(engine, Op.TENSOR_REDUCE, Engine.VECTOR))
    if out.ndim == 1 and t.ndim >= 2:
        name = _REDUCE_NAMES.get(alu.value, alu.value)
        out.pvec = f"the {name} over axis {axes[0] if len(axes) == 1 else axes} of a {t.shape} tile"
    return out


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Tile:
    t = to_tile(x)
    axes = _axes(axis, t.ndim, "mean")
    n = 1
    for a in axes:
        n *= t.shape[a]
    s = reduce(Alu.add, t, axes, keepdims, dtype=DType.float32 if t.dtype.is_int else None)
    return binary(Alu.multiply, s, 1.0 / n if n else float("nan"))


def var(x: Any, axis: Any = None, keepdims: bool = False) -> Tile:
    """Population variance (like numpy's default, NKI's nl.var)."""
    t = to_tile(x)
    axes = _axes(axis, t.ndim, "var")
    m = mean(t, axes, keepdims=True)
    d = binary(Alu.subtract, t, m)
    sq = binary(Alu.multiply, d, d)
    return mean(sq, axes, keepdims)


def cumsum(x: Any, axis: int = -1) -> Tile:
    """Inclusive prefix sum along the last free axis (a Vector-engine scan)."""
    t = to_tile(x)
    ax = axis + t.ndim if axis < 0 else axis
    if ax == 0:
        raise ShapeError("cumsum: cannot scan along axis 0, the partition axis; scans run along free axes only")
    if ax != t.ndim - 1:
        raise ShapeError(f"cumsum runs along the last axis ({t.ndim - 1}); got axis {axis}: reshape or transpose")
    dt = t.dtype if t.dtype.is_float and t.dtype.itemsize > 1 else (DType.float32 if t.dtype.is_float else DType.int32)
    out = new_tile(t.shape, dt)
    _emit(Op.SCAN, (out.region,), (Imm(1), t.region, Imm(0)), {"op0": Alu.multiply, "op1": Alu.add}, Engine.VECTOR)
    return out


def scan(a: Any, b: Any, initial: Any, op0: Any, op1: Any) -> Tile:
    """isa.tensor_tensor_scan: along the last axis, acc = (acc op0 a[j]) op1 b[j]."""
    ta = None if _is_num(a) else to_tile(a)
    tb = None if _is_num(b) else to_tile(b)
    ref = tb if tb is not None else ta
    if ref is None:
        raise TraceError("tensor_tensor_scan needs at least one tile operand")
    init = initial if _is_num(initial) else to_tile(initial)
    out = new_tile(ref.shape, DType.float32)
    _emit(Op.SCAN, (out.region,), (_operand(ta if ta is not None else a), _operand(tb if tb is not None else b),
                                   _operand(init)), {"op0": as_alu(op0), "op1": as_alu(op1)}, Engine.VECTOR)
    return out


def _check_mm_dtype(t: Tile, what: str) -> None:
    if not t.dtype.is_float:
        raise DTypeError(f"matmul {what} must be a float tile (fp32, bf16, fp16, fp8), got {t.dtype.name}")


def nc_matmul(stationary: Any, moving: Any, out: Tile | None = None, accumulate: bool = False) -> Tile:
    """Tensor engine: PSUM[M, N] (+)= stationary[K, M].T @ moving[K, N]."""
    s = _sbuf_operand(to_tile(stationary))
    m = _sbuf_operand(to_tile(moving))
    _check_mm_dtype(s, "stationary")
    _check_mm_dtype(m, "moving")
    if s.ndim != 2 or m.ndim != 2:
        raise ShapeError(f"matmul operands must be 2-D tiles, got {s.shape} and {m.shape}")
    k, mm = s.shape
    k2, n = m.shape
    if k != k2:
        raise ShapeError(f"matmul contraction sizes differ: stationary [K={k}, M={mm}] vs moving [K={k2}, N={n}]")
    if k > MAX_K or mm > MAX_M:
        raise ShapeError(f"matmul K={k}, M={mm} exceed the 128x128 systolic array (K <= 128, M <= 128)")
    if n > MAX_N:
        raise ShapeError(f"matmul N={n} exceeds 512 (one PSUM bank of 2 KiB fp32 per partition); tile N")
    if out is None:
        out = new_tile((mm, n), DType.float32, Space.PSUM)
    elif out.buffer is not Space.PSUM:
        raise ShapeError("matmul writes PSUM only: the output tile must be in tl.psum")
    _emit(Op.MATMUL, (out.region,), (s.region, m.region), {"accumulate": bool(accumulate)}, Engine.TENSOR)
    return out


def nc_matmul_into(dst: Any, stationary: Any, moving: Any) -> Tile:
    """``dst[M, N] += stationary.T @ moving`` into a PSUM tile (NKI's ``nc_matmul(dst=...)``).

    A PSUM buffer no instruction has written yet starts an accumulation group: written whole with no loop
    opened since its allocation, the matmul overwrites it; otherwise the buffer is zeroed once, right after
    its allocation (a Vector memset), and every matmul accumulates.
    """
    if not isinstance(dst, Tile) or dst.buffer is not Space.PSUM:
        raise ShapeError("nc_matmul(dst=...) writes a PSUM tile (nl.ndarray(..., buffer=nl.psum))")
    from trnlang.language.semantic import psum_group_start

    d = to_tile(dst)
    accumulate = psum_group_start(d) if id(d.region.buf) not in current().written else True
    return nc_matmul(stationary, moving, out=d, accumulate=accumulate)


def transpose(x: Any, engine: Any = None) -> Tile:
    """[P, F] -> [F, P] (Tensor engine, into PSUM; the Vector engine writes SBUF)."""
    t = to_tile(x)
    if t.ndim != 2:
        raise ShapeError(f"transpose needs a 2-D tile, got shape {t.shape}")
    if t.shape[0] > 128 or t.shape[1] > 128:
        raise ShapeError(f"transpose is limited to 128 x 128 tiles, got {t.shape}")
    eng = _pick_engine(engine, Op.TRANSPOSE, Engine.TENSOR)
    if eng is Engine.TENSOR:
        t = _sbuf_operand(t)
    space = Space.PSUM if eng is Engine.TENSOR else Space.SBUF
    dt = DType.float32 if eng is Engine.TENSOR and t.dtype.is_float else t.dtype
    out = new_tile((t.shape[1], t.shape[0]), dt, space)
    _emit(Op.TRANSPOSE, (out.region,), (t.region,), {}, eng)
    return out


def matmul(x: Any, y: Any, transpose_x: bool = False) -> Tile:
    """``x[M,K] @ y[K,N]`` -> PSUM fp32 ``[M,N]``; with ``transpose_x`` x is given as ``[K, M]``."""
    tx = to_tile(x)
    if tx.ndim != 2:
        raise ShapeError(f"matmul needs 2-D tiles, got x of shape {tx.shape}")
    if not transpose_x:
        ty = to_tile(y)
        if ty.ndim == 2 and tx.shape[1] != ty.shape[0]:
            raise ShapeError(f"matmul shapes do not match: x {tx.shape} @ y {ty.shape} (x[M, K] @ y[K, N])")
        if tx.shape[1] > MAX_K or tx.shape[0] > MAX_M:
            raise ShapeError(f"matmul K={tx.shape[1]}, M={tx.shape[0]} exceed the 128x128 systolic array")
        tt = transpose(tx)
        tx = copy(tt, dtype=tx.dtype)
    return nc_matmul(tx, y)


def activation(func: Any, data: Any, scale: Any = 1.0, bias: Any = None, reduce_op: Any = None,
               engine: Any = None, dtype: Any = None, reduce_res: Tile | None = None,
               reduce_cmd: str | None = None, regs: Tile | None = None, readout: Tile | None = None) -> Any:
    """isa.activation: func(data * scale + bias) on the Scalar engine, optional free-axis reduction.

    ``scale``: a number or a per-partition ``[P, 1]`` tile; ``reduce_res``: the ``[P, 1]`` tile the reduction
    writes (a new one when None). ``reduce_cmd`` (ir/ops.py ``REDUCE_CMDS``) drives the engine's
    accumulation registers ``regs`` (a ``[P, 1]`` fp32 tile the caller owns; ``reduce_res`` is then the
    registers' tile and ``readout`` an extra ``[P, 1]`` tile receiving their new value)."""
    from trnlang.language.semantic import _result_dtype, as_dtype

    alu = as_alu(func)
    t = to_tile(data)
    dt = as_dtype(dtype) if dtype is not None else _result_dtype(alu, t.dtype, None)
    if dt.is_int and (scale != 1.0 or bias is not None):
        dt = DType.float32
    out = new_tile(t.shape, dt)
    ins: tuple[Any, ...] = (t.region,)
    if bias is not None:
        ins = (t.region, _operand(bias if _is_num(bias) else to_tile(bias)))
    if not _is_num(scale):  # a per-partition [P, 1] scale tile: a third operand (bias -0.0 adds nothing)
        st = to_tile(scale)
        if st.ndim != t.ndim or st.shape[0] != t.shape[0] or any(d != 1 for d in st.shape[1:]):
            raise ShapeError(f"activation scale must be a number or a per-partition [{t.shape[0]}, 1] tile, got "
                             f"a tile of shape {st.shape}")
        ins = (ins[0], ins[1] if len(ins) > 1 else Imm(-0.0), st.region)
        scale = 1.0
    if reduce_cmd in ("reduce", "idle") and regs is not None:  # the registers' old value: a fourth operand
        ins = (ins[0], ins[1] if len(ins) > 1 else Imm(-0.0), ins[2] if len(ins) > 2 else Imm(1.0), regs.region)
    outs: tuple[Region, ...] = (out.region,)
    red = None
    r = as_alu(reduce_op) if reduce_op is not None else None
    if reduce_op is not None or reduce_cmd in ("reset", "idle"):
        red = reduce_res if reduce_res is not None else new_tile((t.shape[0], 1), DType.float32)
        outs = (out.region, _rows(red, t.shape[0]).region)
        if readout is not None:
            outs = (*outs, _rows(readout, t.shape[0]).region)
    attrs: dict[str, Any] = {"func": alu, "scale": float(scale), "reduce_op": r}
    if reduce_cmd is not None:
        attrs["reduce_cmd"] = reduce_cmd
    _emit(Op.ACTIVATION, outs, ins, attrs, _pick_engine(engine, Op.ACTIVATION, Engine.SCALAR))
    return (out, red) if red is not None else out


def _rows(t: Tile, p: int) -> Tile:
    """The first ``p`` partitions of a ``[P, 1]`` tile (registers / results sized for 128 partitions)."""
    if t.ndim == 2 and t.shape[0] > p and t.shape[1] == 1:
        return t[0:p, 0:1]
    if t.shape != (p, 1):
        raise ShapeError(f"a reduction result must be a [{p}, 1] tile, got a tile of shape {t.shape}")
    return t


def tensor_scalar(data: Any, op0: Any, operand0: Any, op1: Any = None, operand1: Any = None,
                  reverse0: bool = False, reverse1: bool = False, engine: Any = None, dtype: Any = None,
                  reduce_op: Any = None, reduce_res: Tile | None = None) -> Any:
    """``(data op0 operand0) op1 operand1``; with ``reduce_op`` the same instruction also reduces its result
    along the free axes into ``reduce_res`` (``[P, 1]``, a new fp32 tile when None): returns (out, reduced)."""
    from trnlang.language.semantic import _result_dtype, _scalar_dtype, as_dtype

    t = to_tile(data)
    a0 = as_alu(op0)
    ops = [operand0 if _is_num(operand0) else to_tile(operand0)]
    d = _result_dtype(a0, t.dtype, _scalar_dtype(operand0) if _is_num(operand0) else ops[0].dtype, False,
                      _is_num(operand0))
    a1 = None
    if op1 is not None:
        a1 = as_alu(op1)
        ops.append(operand1 if _is_num(operand1) else to_tile(operand1))
        d = _result_dtype(a1, d, _scalar_dtype(operand1) if _is_num(operand1) else ops[1].dtype, False,
                          _is_num(operand1))
    out = new_tile(t.shape, as_dtype(dtype) if dtype is not None else d)
    attrs: dict[str, Any] = {"op0": a0, "op1": a1, "reverse": (bool(reverse0), bool(reverse1))}
    outs: tuple[Region, ...] = (out.region,)
    red = None
    if reduce_op is not None:
        r = as_alu(reduce_op)
        if not ALU_SPECS[r].reducible or ALU_SPECS[r].kind is not AluKind.BINARY:
            raise TraceError(f"tensor_scalar reduce_op {r.value} is not a reduction (add, multiply, maximum, minimum)")
        attrs["reduce_op"] = r
        red = reduce_res if reduce_res is not None else new_tile((t.shape[0], 1), DType.float32)
        outs = (out.region, _rows(red, t.shape[0]).region)
    _emit(Op.TENSOR_SCALAR, outs, (t.region, *(_operand(o) for o in ops)), attrs,
          _pick_engine(engine, Op.TENSOR_SCALAR, Engine.VECTOR))
    return (out, red) if red is not None else out


def bn_stats(x: Any) -> Tile:
    t = to_tile(x)
    out = new_tile((t.shape[0], 3), DType.float32)
    _emit(Op.BN_STATS, (out.region,), (t.region,), {}, Engine.VECTOR)
    return out


def bn_aggr(stats: Any) -> Tile:
    t = to_tile(stats)
    if t.ndim != 2 or t.shape[1] % 3:
        raise ShapeError(f"bn_aggr expects [P, 3k] statistics from bn_stats, got {t.shape}")
    out = new_tile((t.shape[0], 2), DType.float32)
    _emit(Op.BN_AGGR, (out.region,), (t.region,), {}, Engine.VECTOR)
    return out


def device_print(label: str, x: Any) -> None:
    t = to_tile(x)
    _emit(Op.PRINT, (), (t.region,), {"label": str(label)}, Engine.HOST)
