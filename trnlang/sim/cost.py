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

DMA model (the NKI DMA overview and DMA bandwidth guide; DEVICE.md's DMA row):

- A transfer is split by its shape: partition ``p`` of the SBUF tile is served by DMA engine
  ``p // dma_partitions_per_engine`` (8 partitions per engine, 16 engines), so a 128-partition tile uses all
  16 engines and a 4-partition tile one. Each engine gets one *packet*: its partitions' bytes.
- Each engine moves one packet at a time, at ``min(engine bandwidth, aggregate / engines of the transfer)``
  (27.2 GB/s per engine, capped by the HBM-limited aggregate: 368 GB/s / 16 = 23 GB/s per engine on trn2
  when all 16 engines stream), times the efficiency of the transfer's contiguous run (bytes per descriptor):
  ``run / (run + dma_descriptor_overhead_bytes)`` (256 B: 94% at 4 KiB, 89% at 2 KiB, 50% at 256 B, 1.5% at
  4 B), plus ``dma_packet_setup_s`` per packet.
- Each engine is a two-stage pipeline: a packet's setup overlaps the previous packet's bytes on the same engine,
  so in a stream of packets an engine is held ``max(setup, bytes)`` per packet (:func:`dma_packet_stages`)
  while one packet alone still takes ``setup + bytes``. Packets of more than ~4 KiB per engine are
  bandwidth-bound; smaller ones are bound by the setup rate (the Neuron Explorer DMA guide: with small
  transfers the engines spend most of their time between packets).
- A transfer's first byte moves ``dma_fixed_cost_s`` (~1.3 us) after it is triggered (descriptor generation,
  semaphores); that latency does not occupy the engines, so transfers in flight overlap it.
- Concurrent transfers share the engines: the scheduler places each packet in a free interval of its engine.

Example:
    >>> from trnlang.sim.targets import get_target
    >>> t = get_target("trn2")
    >>> matmul_cycles(m=128, n=512, dtype="bf16", t=t), matmul_cycles(m=128, n=512, dtype="f32", t=t)
    (512, 2048)
    >>> round(dma_seconds(128 * 512 * 2, t, partitions=128, run_bytes=1024) * 1e6, 2)  # [128, 512] bf16 tile
    1.92
"""

from __future__ import annotations

import math
from typing import Callable, cast

from trnlang.ir.nodes import Access, Instr, Region
from trnlang.ir.ops import Alu, Op
from trnlang.ir.types import DType, Engine, Space
from trnlang.sim.targets import Target, dtype_class

__all__ = [
    "CYCLES", "clock_hz", "dma_efficiency", "dma_engine_rate", "dma_engines_of", "dma_packet_seconds",
    "dma_packet_stages",
    "dma_run_elems", "dma_seconds", "engine_of", "free_elems", "instr_cycles", "matmul_cycles", "matmul_flops",
    "matmul_peak",
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
        KeyError: for DMA (see :func:`dma_packet_seconds`) or an op missing from ``CYCLES``.

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


def dma_efficiency(run_bytes: float, t: Target) -> float:
    """Fraction of an engine's bandwidth achieved with contiguous runs of ``run_bytes`` (one descriptor each).

    ``run / (run + t.dma_descriptor_overhead_bytes)``: the NKI DMA bandwidth guide's curve, severely
    overhead-bound below 256 B, near peak from 2 KiB, saturated from 4 KiB.

    Example:
        >>> from trnlang.sim.targets import get_target
        >>> t = get_target("trn2")
        >>> [round(dma_efficiency(b, t), 3) for b in (4, 256, 2048, 4096, 8192)]
        [0.015, 0.5, 0.889, 0.941, 0.97]
    """
    run = max(1.0, float(run_bytes))
    return run / (run + t.dma_descriptor_overhead_bytes)


def dma_engines_of(p0: int, partitions: int, t: Target) -> tuple[int, int]:
    """``(first engine, number of engines)`` serving SBUF partitions ``p0 .. p0 + partitions - 1``.

    Example:
        >>> from trnlang.sim.targets import get_target
        >>> t = get_target("trn2")
        >>> dma_engines_of(0, 128, t), dma_engines_of(0, 4, t), dma_engines_of(64, 32, t)
        ((0, 16), (0, 1), (8, 4))
    """
    ppe = t.dma_partitions_per_engine
    n = max(1, partitions)
    lo = min(max(0, p0) // ppe, t.dma_engines - 1)
    hi = min((max(0, p0) + n - 1) // ppe, t.dma_engines - 1)
    return lo, hi - lo + 1


def dma_engine_rate(n_engines: int, t: Target) -> float:
    """Bytes per second of one engine while a transfer streams on ``n_engines`` engines (HBM-capped).

    Example:
        >>> from trnlang.sim.targets import get_target
        >>> t = get_target("trn2")
        >>> dma_engine_rate(1, t) / 1e9, dma_engine_rate(16, t) / 1e9
        (27.2, 23.0)
    """
    return min(t.dma_engine_bandwidth_bytes_per_s, t.dma_bandwidth_bytes_per_s / max(1, n_engines))


def dma_packet_stages(engine_bytes: float, run_bytes: float, n_engines: int, t: Target) -> tuple[float, float]:
    """``(setup, bytes)`` seconds of one engine's packet: its setup, then its bytes at the effective rate.

    The engine pipelines the two (the next packet's setup overlaps this one's bytes), so a stream of such
    packets holds the engine ``max(setup, bytes)`` each; one packet alone takes ``setup + bytes``.

    Example:
        >>> from trnlang.sim.targets import get_target
        >>> t = get_target("trn2")
        >>> [round(x * 1e6, 3) for x in dma_packet_stages(8 * 256, 256, 16, t)]  # [128, 128] bf16: 2 KiB each
        [0.17, 0.178]
    """
    return t.dma_packet_setup_s, engine_bytes / (dma_engine_rate(n_engines, t) * dma_efficiency(run_bytes, t))


def dma_packet_seconds(engine_bytes: float, run_bytes: float, n_engines: int, t: Target) -> float:
    """Time one engine's packet of a transfer takes on an idle engine: setup plus its bytes at the effective
    rate (:func:`dma_packet_stages`)."""
    return sum(dma_packet_stages(engine_bytes, run_bytes, n_engines, t))


def dma_seconds(nbytes: float, t: Target, partitions: int = 128, run_bytes: float | None = None) -> float:
    """Trigger-to-done time of one transfer on idle engines: latency plus the busiest engine's packet.

    Args:
        nbytes: bytes moved.
        t: the target.
        partitions: SBUF partitions of the tile (from partition 0).
        run_bytes: contiguous bytes per descriptor (default: the bytes per partition, a contiguous row).

    Example:
        >>> from trnlang.sim.targets import get_target
        >>> round(dma_seconds(4 * 4096 * 2, get_target("trn2"), partitions=4) * 1e9)  # NKI's A[4, 4096] bf16
        2712
    """
    _, n = dma_engines_of(0, partitions, t)
    per_partition = nbytes / max(1, partitions)
    run = per_partition if run_bytes is None else run_bytes
    engine_bytes = per_partition * min(partitions, t.dma_partitions_per_engine)
    return t.dma_fixed_cost_s + dma_packet_seconds(engine_bytes, run, n, t)


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

