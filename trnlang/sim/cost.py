"""The cost model: cycles of one engine instruction, seconds of one DMA transfer (DEVICE.md "Cost model").

Every number comes from :class:`~trnlang.sim.targets.Target`; the formulas are
one table, ``CYCLES``, keyed by op (ARCHITECTURE.md: lowering is table-driven).
``N`` is the number of free elements per partition of the instruction's data
(the output for elementwise ops, the input for reductions and transposes).

| op | cycles (engine clock) |
|---|---|
| ``nc_matmul`` stationary ``[K, M]``, moving ``[K, N]`` | ``max(min(64, M), N)``; x4 fp32, / (fp8/bf16 peak) fp8 |
| ``nc_transpose`` on Tensor, input ``[P, F]`` | ``max(P, min(64, F))`` (the matmul dtype factor applies) |
| ``activation``, ``tensor_scalar``, ``tensor_copy``, ``memset`` | ``max(MIN_II, N / s)`` |
| ``tensor_tensor``, ``select`` | ``max(MIN_II, 2N)``; ``N`` when both inputs are bf16/fp16 in SBUF or one is in PSUM |
| ``tensor_reduce`` | ``max(MIN_II, N)``, ``N/2`` for bf16/fp16 add/max/min |
| reciprocal on Vector | ``max(MIN_II, 8N)`` |
| ``iota``, ``affine_select`` | ``150 + N`` |
| ``tensor_tensor_scan`` | ``max(MIN_II, 2N)`` |
| ``bn_stats``, ``bn_aggr``, Vector transpose | ``max(MIN_II, N)`` |

``s`` is the engine's throughput advantage for the operands' element type over
its fp32 rate (``elems_per_cycle(dtype) / elems_other`` of targets.py: 2 for
bf16 on trn2's Vector engine, 1 elsewhere on trn2), applied only where the
table has no dtype term of its own and every operand is in SBUF.

A DMA transfer occupies one of ``target.dma_engines`` (16) queues for
``dma_fixed_cost_s + effective_bytes / (aggregate bandwidth / 16)``. The
effective bytes are the bytes moved, except that each contiguous HBM run
shorter than ``target.dma_min_burst_bytes`` is charged as a full burst
(element-strided transfers such as transposing loads are slow).

Example:
    >>> from trnlang.sim.targets import get_target
    >>> t = get_target("trn2")
    >>> matmul_cycles(m=128, n=512, dtype="bf16", t=t), matmul_cycles(m=128, n=512, dtype="f32", t=t)
    (512, 2048)
    >>> round(dma_seconds(128 * 512 * 2, t) * 1e6, 2)  # a [128, 512] bf16 tile on one queue
    7.0
"""

from __future__ import annotations

import math
from typing import Callable, cast

from trnlang.ir.nodes import Access, Instr, Region
from trnlang.ir.ops import Alu, Op
from trnlang.ir.types import DType, Engine, Space
from trnlang.sim.targets import Target, dtype_class

__all__ = [
    "CYCLES", "clock_hz", "dma_queue_bandwidth", "dma_run_elems", "dma_seconds", "engine_of", "free_elems",
    "instr_cycles", "matmul_cycles", "matmul_flops", "matmul_peak",
]

_HALF = ("half",)


def engine_of(ins: Instr) -> Engine:
    """The engine that runs ``ins``: its ``engine`` field, else the op table's default."""
    from trnlang.ir.ops import OP_SPECS

    spec = OP_SPECS[ins.op]
    if ins.engine is not None:
        return ins.engine
    return spec.engines[0] if spec.engines else Engine.HOST


def clock_hz(engine: Engine, t: Target) -> float:
    """The clock of an on-chip engine (Tensor, Vector, Scalar, GpSimd)."""
    if engine is Engine.TENSOR:
        return t.tensor.clock_hz
    return t.engine(engine.value).clock_hz


def free_elems(r: Region) -> int:
    """Free elements per partition of a region's tile view."""
    return math.prod(r.shape[1:]) if r.shape else 1


def _tile_ins(ins: Instr) -> tuple[Region, ...]:
    """The inputs of a compute instruction whose inputs are all tiles (matmul, transpose, reduce, bn_*)."""
    return cast(tuple[Region, ...], ins.ins)


def _regions(ins: Instr) -> list[Region]:
    return [x for x in (*ins.outs, *ins.ins) if isinstance(x, Region)]


def _dtype_factor_matmul(dtype: DType | str, t: Target) -> float:
    """Cycle multiplier of the Tensor engine for an input type (fp32 x4, bf16/fp16 x1, fp8 faster)."""
    cls = dtype_class(dtype)
    if cls == "fp32":
        return float(t.matmul_fp32_slowdown)
    if cls == "fp8" and t.tensor.peak_fp8_flops:
        return t.tensor.peak_bf16_flops / t.tensor.peak_fp8_flops
    return 1.0


def _slowest(dtypes: list[DType], t: Target) -> DType:
    return max(dtypes, key=lambda d: _dtype_factor_matmul(d, t))


def matmul_cycles(m: int, n: int, dtype: DType | str, t: Target) -> int:
    """Tensor-engine cycles of one matmul: ``max(min(64, M), N)`` times the dtype factor.

    Example:
        >>> from trnlang.sim.targets import get_target
        >>> matmul_cycles(32, 16, "bf16", get_target("trn2"))
        32
    """
    return math.ceil(max(min(64, m), n) * _dtype_factor_matmul(dtype, t))


def matmul_flops(ins: Instr) -> int:
    """Useful flops of a matmul instruction (2 K M N); 0 for anything else."""
    if ins.op is not Op.MATMUL:
        return 0
    st, mv = _tile_ins(ins)[:2]
    k, m = st.shape[0], free_elems(st)
    return 2 * k * m * free_elems(mv)


def matmul_peak(ins: Instr, t: Target) -> float:
    """Peak FLOP/s of the Tensor engine for this matmul's inputs (the slower input type counts)."""
    st, mv = _tile_ins(ins)[:2]
    d = _slowest([st.dtype, mv.dtype], t)
    return t.tensor.peak_flops(d)


def _speed(ins: Instr, engine: Engine, t: Target) -> float:
    """Throughput advantage of the engine for the operands' type over its fp32 rate (1 if any is in PSUM)."""
    regs = _regions(ins)
    if engine is Engine.TENSOR or not regs or any(r.space is Space.PSUM for r in regs):
        return 1.0
    spec = t.engine(engine.value)
    return min(spec.elems_per_cycle(r.dtype) for r in regs) / spec.elems_other


def _floor(t: Target, cycles: float) -> int:
    return max(t.min_ii_cycles, math.ceil(cycles))


def _is_recip(ins: Instr) -> bool:
    keys = ("func",) if ins.op is Op.ACTIVATION else ("op0", "op1")
    return any(ins.attrs.get(k) is Alu.reciprocal for k in keys)


def _elementwise(ins: Instr, engine: Engine, t: Target) -> int:
    n = free_elems(ins.outs[0])
    if engine is Engine.VECTOR and _is_recip(ins):
        return _floor(t, t.reciprocal_cycles_per_elem * n)
    return _floor(t, n / _speed(ins, engine, t))


def _tensor_tensor(ins: Instr, engine: Engine, t: Target) -> int:
    n = free_elems(ins.outs[0])
    ins_r = [x for x in ins.ins if isinstance(x, Region)]
    fast = any(r.space is Space.PSUM for r in ins_r) or (
        len(ins_r) >= 2 and all(r.space is Space.SBUF and dtype_class(r.dtype) in _HALF for r in ins_r))
    return _floor(t, n if fast else 2 * n)


def _reduce(ins: Instr, engine: Engine, t: Target) -> int:
    src = _tile_ins(ins)[0]
    n = free_elems(src)
    half = dtype_class(src.dtype) in _HALF and ins.attrs.get("op") in (Alu.add, Alu.maximum, Alu.minimum)
    return _floor(t, n / 2 if half else n)


def _generated(ins: Instr, engine: Engine, t: Target) -> int:
    return t.gpsimd_fixed_cycles + free_elems(ins.outs[0])


def _scan(ins: Instr, engine: Engine, t: Target) -> int:
    return _floor(t, 2 * free_elems(ins.outs[0]))


def _per_input(ins: Instr, engine: Engine, t: Target) -> int:
    return _floor(t, free_elems(_tile_ins(ins)[0]))


def _matmul(ins: Instr, engine: Engine, t: Target) -> int:
    st, mv = _tile_ins(ins)[:2]
    return matmul_cycles(free_elems(st), free_elems(mv), _slowest([st.dtype, mv.dtype], t), t)


def _transpose(ins: Instr, engine: Engine, t: Target) -> int:
    x = _tile_ins(ins)[0]
    if engine is not Engine.TENSOR:
        return _floor(t, free_elems(x))
    p, f = x.shape[0], free_elems(x)
    return math.ceil(max(p, min(64, f)) * _dtype_factor_matmul(x.dtype, t))


def _zero(ins: Instr, engine: Engine, t: Target) -> int:
    return 0


#: cycles(instr, engine, target) of every op that runs on an on-chip engine (DMA: see dma_seconds).
CYCLES: dict[Op, Callable[[Instr, Engine, Target], int]] = {
    Op.MATMUL: _matmul,
    Op.TRANSPOSE: _transpose,
    Op.ACTIVATION: _elementwise,
    Op.TENSOR_SCALAR: _elementwise,
    Op.TENSOR_COPY: _elementwise,
    Op.MEMSET: _elementwise,
    Op.TENSOR_TENSOR: _tensor_tensor,
    Op.SELECT: _tensor_tensor,
    Op.TENSOR_REDUCE: _reduce,
    Op.IOTA: _generated,
    Op.AFFINE_SELECT: _generated,
    Op.SCAN: _scan,
    Op.BN_STATS: _per_input,
    Op.BN_AGGR: _per_input,
    Op.PRINT: _zero,
    Op.ALLOC: _zero,
}


def instr_cycles(ins: Instr, t: Target, engine: Engine | None = None) -> int:
    """Cycles of an on-chip instruction on its engine (``engine`` overrides :func:`engine_of`).

    Raises:
        KeyError: for DMA (use :func:`dma_seconds`) or an op missing from ``CYCLES``.

    Example:
        >>> from trnlang.sim.targets import get_target
        >>> from trnlang.ir.nodes import Buf
        >>> b = Buf("t", (128, 1024), DType.float32, Space.SBUF)
        >>> ins = Instr(Op.TENSOR_TENSOR, (Region.whole(b),), (Region.whole(b), Region.whole(b)), {"op": Alu.add})
        >>> instr_cycles(ins, get_target("trn2"), Engine.VECTOR)
        2048
    """
    if ins.op is Op.DMA_COPY:
        raise KeyError("dma_copy is costed in seconds by dma_seconds(), not in engine cycles")
    return CYCLES[ins.op](ins, engine or engine_of(ins), t)


def dma_queue_bandwidth(t: Target) -> float:
    """Bytes per second of one DMA queue: the aggregate bandwidth over the ``dma_engines`` queues."""
    return t.dma_bandwidth_bytes_per_s / t.dma_engines


def dma_seconds(effective_bytes: float, t: Target) -> float:
    """Time one transfer occupies its queue: the fixed cost plus the bytes at one queue's bandwidth."""
    return t.dma_fixed_cost_s + effective_bytes / dma_queue_bandwidth(t)


def dma_run_elems(acc: Access) -> int:
    """Contiguous HBM elements per run of an access along the tile's innermost axis (1 if strided).

    Example:
        >>> from trnlang.ir.nodes import HbmTensor, axis_sym
        >>> x = HbmTensor("x", (256, 64), DType.float32)
        >>> a0, a1 = axis_sym(0), axis_sym(1)
        >>> dma_run_elems(Access(x, (128, 64), (a0, a1))), dma_run_elems(Access(x, (64, 128), (a1, a0)))
        (64, 1)
    """
    import sympy

    from trnlang.ir.bounds import affine_form
    from trnlang.ir.nodes import axis_sym

    if len(acc.shape) < 2 or not acc.index:
        return 1
    last = axis_sym(len(acc.shape) - 1)
    for e in acc.index[:-1]:
        if last in sympy.sympify(e).free_symbols:
            return 1
    f = affine_form(acc.index[-1])
    if f is None or f[1].get(last) != 1:
        return 1
    if any(str(s).startswith("_g") for s in f[1]):
        return 1
    return int(acc.shape[-1])

