"""The simulated NeuronCore targets (trn1, trn2, trn3) as plain data.

Every number of the target table in ``DEVICE.md`` lives here, once, together with
the limits the compiler enforces and the constants of the cost model. Everything
else (the verifier's legality checks, the memory planner, the cost model, the
``trn info`` command, ``torch.trn`` memory stats) reads them from a :class:`Target`
instead of repeating them.

Units are SI throughout: clocks in Hz, peaks in FLOP/s, bandwidth in bytes/s,
times in seconds, sizes in bytes, rates in elements per cycle.

Example:
    >>> from trnlang.sim.targets import get_target
    >>> t = get_target("trn2")
    >>> t.sbuf_partitions, t.sbuf_bytes_per_partition // 1024
    (128, 224)
    >>> t.tensor.peak_flops("bf16") / 1e12
    79.0
    >>> t.vector.elems_per_cycle("bf16"), t.vector.elems_per_cycle("f32")
    (512, 256)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "DEFAULT_TARGET",
    "TARGETS",
    "DtypeClass",
    "EngineSpec",
    "Target",
    "TensorEngineSpec",
    "device_table",
    "dtype_class",
    "get_target",
]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: Name of the target used when neither an explicit name nor ``TRN_TARGET`` is given.
DEFAULT_TARGET = "trn2"

#: How engine throughput classifies an element type: the published rates distinguish
#: 16-bit floats (bf16/fp16), fp8 and "other" (fp32 and integers); TensorE also needs fp32 apart.
DtypeClass = Literal["half", "fp8", "fp32", "int"]

_DTYPE_CLASSES: dict[str, DtypeClass] = {
    **dict.fromkeys(("f32", "fp32", "float32", "float"), "fp32"),
    **dict.fromkeys(("bf16", "bfloat16", "f16", "fp16", "float16", "half"), "half"),
    **dict.fromkeys(
        ("fp8", "mxfp8", "f8e4m3", "f8e5m2", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "fp8_e4m3", "fp8_e5m2"),
        "fp8",
    ),
    **dict.fromkeys(
        ("i64", "i32", "i16", "i8", "u8", "bool", "bool_", "int64", "int32", "int16", "int8", "uint8", "int"), "int"
    ),
}


def dtype_class(dtype: object) -> DtypeClass:
    """Classify an element type for throughput purposes.

    Accepts the IR spelling (``"bf16"``), trnlang's ``DType`` members, torch and
    numpy dtypes (and ml_dtypes' ``bfloat16``), or their names.

    Args:
        dtype: the element type, as an object or a name.

    Returns:
        ``"half"`` (bf16/fp16), ``"fp8"``, ``"fp32"`` or ``"int"`` (integers and bool).

    Raises:
        ValueError: for a type the targets know nothing about.

    Example:
        >>> dtype_class("bfloat16"), dtype_class("f8e4m3"), dtype_class("i32")
        ('half', 'fp8', 'int')
    """
    if isinstance(dtype, str):
        name = dtype
    else:
        # trnlang DType has .short ("bf16"); numpy dtypes have .name; numpy scalar types have __name__;
        # torch dtypes only print as "torch.bfloat16".
        found = getattr(dtype, "short", None) or getattr(dtype, "name", None) or getattr(dtype, "__name__", None)
        name = found if isinstance(found, str) else str(dtype)
    key = name.strip().lower().removeprefix("torch.").removeprefix("tl.")
    try:
        return _DTYPE_CLASSES[key]
    except KeyError:
        raise ValueError(f"unknown element type {dtype!r} for the device targets") from None


@dataclass(frozen=True)
class EngineSpec:
    """Clock and element throughput of one elementwise engine (Vector, Scalar or GpSimd).

    Rates are elements per cycle per engine (all 128 partitions together), by the
    dtype classes the published figures distinguish; integers and fp32 run at the
    ``other`` rate.

    Example:
        >>> v = EngineSpec("Vector", 0.96e9, elems_half=512, elems_fp8=256, elems_other=256)
        >>> v.elems_per_cycle("fp16"), v.elems_per_second("f32") / 1e9
        (512, 245.76)
    """

    name: str
    clock_hz: float
    elems_half: int
    elems_fp8: int
    elems_other: int

    def elems_per_cycle(self, dtype: object) -> int:
        """Elements per cycle for operands of ``dtype`` (see :func:`dtype_class`)."""
        cls = dtype_class(dtype)
        if cls == "half":
            return self.elems_half
        if cls == "fp8":
            return self.elems_fp8
        return self.elems_other

    def elems_per_second(self, dtype: object) -> float:
        """Peak elements per second for operands of ``dtype``."""
        return self.elems_per_cycle(dtype) * self.clock_hz

    def describe_rates(self) -> str:
        """The rates as DEVICE.md writes them, e.g. ``"512 elem/cycle bf16/fp16, 256 other"``.

        Example:
            >>> EngineSpec("GpSimd", 1.2e9, 128, 128, 128).describe_rates()
            '128 elem/cycle'
        """
        if self.elems_half == self.elems_fp8 == self.elems_other:
            return f"{self.elems_other} elem/cycle"
        groups: dict[int, list[str]] = {}
        for label, rate in (("bf16/fp16", self.elems_half), ("fp8", self.elems_fp8)):
            if rate != self.elems_other:
                groups.setdefault(rate, []).append(label)
        parts = [(rate, "/".join(labels)) for rate, labels in groups.items()] + [(self.elems_other, "other")]
        first, *rest = parts
        return ", ".join([f"{first[0]} elem/cycle {first[1]}", *(f"{rate} {label}" for rate, label in rest)])


@dataclass(frozen=True)
class TensorEngineSpec:
    """The Tensor engine: a systolic array and its published peaks.

    ``peak_fp8_flops`` is ``None`` where the generation publishes no fp8 figure
    (trn1); ``fp8_format`` names the published format (``"fp8"``, ``"mxfp8"``).
    16-bit floats (bf16 and fp16) run at the bf16 rate.

    Example:
        >>> t = TensorEngineSpec(2.4e9, 128, 128, peak_bf16_flops=79e12, peak_fp32_flops=20e12)
        >>> t.peak_flops("float32") / 1e12
        20.0
    """

    clock_hz: float
    rows: int
    cols: int
    peak_bf16_flops: float
    peak_fp32_flops: float
    peak_fp8_flops: float | None = None
    fp8_format: str | None = None

    def peak_flops(self, dtype: object) -> float:
        """Peak FLOP/s of matmuls whose inputs have element type ``dtype``.

        Raises:
            ValueError: for integer inputs, or fp8 on a target without an fp8 figure.
        """
        cls = dtype_class(dtype)
        if cls == "half":
            return self.peak_bf16_flops
        if cls == "fp32":
            return self.peak_fp32_flops
        if cls == "fp8" and self.peak_fp8_flops is not None:
            return self.peak_fp8_flops
        raise ValueError(f"the Tensor engine has no published peak for {dtype!r} inputs on this target")


@dataclass(frozen=True)
class Target:
    """One NeuronCore generation: engines, on-chip memories, DMA, HBM, limits and cost constants.

    Instances are frozen and hashable (usable in cache keys). To change a
    configurable figure, such as HBM per core, derive a new one with
    :meth:`replace`.

    Example:
        >>> t = TARGETS["trn1"]
        >>> t.sbuf_bytes // MiB, t.psum_bytes // MiB, t.dma_bandwidth_bytes_per_s / 1e9
        (24, 2, 272.0)
        >>> t.replace(hbm_bytes_per_core=4 * GiB).hbm_bytes_per_core // GiB
        4
    """

    name: str
    core: str  # the NeuronCore generation, e.g. "NeuronCore-v3"

    tensor: TensorEngineSpec
    vector: EngineSpec
    scalar: EngineSpec
    gpsimd: EngineSpec

    # On-chip memories, per NeuronCore.
    sbuf_partitions: int
    sbuf_bytes_per_partition: int
    psum_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes: int

    # DMA (cost.py "DMA model"): 16 engines, each serving a group of partitions; a transfer is split into one
    # packet per engine its partitions touch; each engine moves its packets one at a time.
    dma_engines: int
    dma_queues_per_engine: int
    dma_fixed_cost_s: float  # latency from a transfer's trigger to its first byte (does not occupy the engines)
    dma_bandwidth_bytes_per_s: float  # aggregate per core: HBM-limited, shared by the engines
    hbm_bytes_per_core: int  # device HBM / cores; what torch.trn memory stats report
    dma_engine_bandwidth_bytes_per_s: float = 27.2e9  # theoretical bandwidth of one DMA engine

    # Rules the compiler enforces (DEVICE.md "Rules").
    pmax: int = 128  # partition dimension of any tile
    matmul_k_max: int = 128  # contraction size (partitions of both operands)
    matmul_m_max: int = 128  # stationary free size
    matmul_n_max: int = 512  # moving free size: one 2 KiB PSUM bank of fp32 per partition
    free_max_sbuf: int = 64 * 1024  # Vector/Scalar instruction free size, operands in SBUF
    free_max_psum: int = 4 * 1024  # ... with an operand in PSUM

    # Cost-model constants, in cycles of the engine's own clock (DEVICE.md "Cost model").
    min_ii_cycles: int = 64  # fixed issue cost of any instruction
    dependent_stall_cycles: int = 100  # extra cost of a dependent back-to-back instruction on one engine
    matmul_fp32_slowdown: int = 4  # fp32 matmul inputs take 4x the cycles
    gpsimd_fixed_cycles: int = 150  # iota / affine_select: 150 + N
    reciprocal_cycles_per_elem: int = 8  # Vector reciprocal: 8N
    dma_partitions_per_engine: int = 8  # SBUF partitions served by one DMA engine (128 / 16)
    dma_descriptor_overhead_bytes: int = 256  # per contiguous run: efficiency = run / (run + this)
    dma_packet_setup_s: float = 0.17e-6  # per packet (one engine's share of a transfer), pipelined with bytes

    @property
    def sbuf_bytes(self) -> int:
        """Total SBUF bytes (partitions x bytes per partition)."""
        return self.sbuf_partitions * self.sbuf_bytes_per_partition

    @property
    def psum_bytes(self) -> int:
        """Total PSUM bytes (partitions x bytes per partition)."""
        return self.sbuf_partitions * self.psum_bytes_per_partition

    @property
    def dma_queues(self) -> int:
        """Number of DMA queues (engines x queues per engine)."""
        return self.dma_engines * self.dma_queues_per_engine

    def engine(self, name: str) -> EngineSpec:
        """The elementwise engine called ``name`` (``"vector"``, ``"scalar"`` or ``"gpsimd"``, any case)."""
        key = name.lower()
        if key not in ("vector", "scalar", "gpsimd"):
            raise ValueError(f"unknown elementwise engine {name!r}; valid engines: vector, scalar, gpsimd")
        spec: EngineSpec = getattr(self, key)
        return spec

    def partition_starts(self, num_partitions: int) -> tuple[int, ...]:
        """Start partitions legal for a tile spanning ``num_partitions`` partitions.

        Tiles spanning more than 64 partitions start at 0; 33-64 start at 0 or 64;
        up to 32 start at 0, 32, 64 or 96.

        Raises:
            ValueError: if ``num_partitions`` is not in ``1..pmax``.

        Example:
            >>> TARGETS["trn2"].partition_starts(48)
            (0, 64)
        """
        if not 1 <= num_partitions <= self.pmax:
            raise ValueError(f"a tile spans 1..{self.pmax} partitions, not {num_partitions}")
        quarter = self.pmax // 4
        if num_partitions > 2 * quarter:
            return (0,)
        if num_partitions > quarter:
            return (0, 2 * quarter)
        return tuple(range(0, self.pmax, quarter))

    def replace(self, **changes: Any) -> Target:
        """A copy of this target with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


TARGETS: dict[str, Target] = {
    "trn1": Target(
        name="trn1",
        core="NeuronCore-v2",
        tensor=TensorEngineSpec(2.8e9, 128, 128, peak_bf16_flops=92e12, peak_fp32_flops=23e12),
        vector=EngineSpec("Vector", 1.12e9, elems_half=128, elems_fp8=128, elems_other=128),
        scalar=EngineSpec("Scalar", 1.4e9, elems_half=128, elems_fp8=128, elems_other=128),
        gpsimd=EngineSpec("GpSimd", 1.4e9, elems_half=128, elems_fp8=128, elems_other=128),
        sbuf_partitions=128,
        sbuf_bytes_per_partition=192 * KiB,
        psum_bytes_per_partition=16 * KiB,
        psum_banks=8,
        psum_bank_bytes=2 * KiB,
        dma_engines=16,
        dma_queues_per_engine=16,
        dma_fixed_cost_s=1.3e-6,
        dma_bandwidth_bytes_per_s=272e9,
        hbm_bytes_per_core=16 * GiB,
    ),
    "trn2": Target(
        name="trn2",
        core="NeuronCore-v3",
        tensor=TensorEngineSpec(
            2.4e9, 128, 128, peak_bf16_flops=79e12, peak_fp32_flops=20e12, peak_fp8_flops=158e12, fp8_format="fp8"
        ),
        vector=EngineSpec("Vector", 0.96e9, elems_half=512, elems_fp8=256, elems_other=256),
        scalar=EngineSpec("Scalar", 1.2e9, elems_half=128, elems_fp8=128, elems_other=128),
        gpsimd=EngineSpec("GpSimd", 1.2e9, elems_half=128, elems_fp8=128, elems_other=128),
        sbuf_partitions=128,
        sbuf_bytes_per_partition=224 * KiB,
        psum_bytes_per_partition=16 * KiB,
        psum_banks=8,
        psum_bank_bytes=2 * KiB,
        dma_engines=16,
        dma_queues_per_engine=16,
        dma_fixed_cost_s=1.3e-6,
        dma_bandwidth_bytes_per_s=368e9,
        hbm_bytes_per_core=12 * GiB,
    ),
    "trn3": Target(
        name="trn3",
        core="NeuronCore-v4",
        tensor=TensorEngineSpec(
            2.4e9, 128, 128, peak_bf16_flops=79e12, peak_fp32_flops=20e12, peak_fp8_flops=315e12, fp8_format="mxfp8"
        ),
        vector=EngineSpec("Vector", 1.2e9, elems_half=512, elems_fp8=512, elems_other=256),
        scalar=EngineSpec("Scalar", 1.2e9, elems_half=256, elems_fp8=256, elems_other=128),
        gpsimd=EngineSpec("GpSimd", 1.2e9, elems_half=128, elems_fp8=128, elems_other=128),
        sbuf_partitions=128,
        sbuf_bytes_per_partition=256 * KiB,
        psum_bytes_per_partition=16 * KiB,
        psum_banks=8,
        psum_bank_bytes=2 * KiB,
        dma_engines=16,
        dma_queues_per_engine=16,
        dma_fixed_cost_s=1.3e-6,
        dma_bandwidth_bytes_per_s=528e9,
        hbm_bytes_per_core=18 * GiB,
        dma_engine_bandwidth_bytes_per_s=38.4e9,
    ),
}


def get_target(name: str | None = None) -> Target:
    """Look up a target by name; with no name, ``$TRN_TARGET`` or else ``trn2``.

    Names are case-insensitive.

    Args:
        name: ``"trn1"``, ``"trn2"`` or ``"trn3"``; ``None`` (or empty) to use the environment.

    Raises:
        ValueError: for an unknown name; the message lists the valid ones and says
            whether the name came from ``TRN_TARGET``.

    Example:
        >>> get_target("TRN3").core
        'NeuronCore-v4'
    """
    source = ""
    if not name:
        from trnlang import config  # TRN_TARGET, read once like every TRN_* setting

        name = (config.current.target or "").strip()
        source = " (from TRN_TARGET)" if name else ""
        name = name or DEFAULT_TARGET
    target = TARGETS.get(name.strip().lower())
    if target is None:
        raise ValueError(f"unknown target {name!r}{source}; valid targets: {', '.join(TARGETS)}")
    return target


def _num(x: float) -> str:
    return f"{x:g}"


def _size(n: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _pct(t: Target, run: int) -> str:
    return f"{100 * run / (run + t.dma_descriptor_overhead_bytes):.0f}%" if run >= 64 else \
        f"{100 * run / (run + t.dma_descriptor_overhead_bytes):.1f}%"


def _rows(t: Target) -> list[tuple[str, str]]:
    te = t.tensor
    peaks = [f"{_num(te.peak_bf16_flops / 1e12)} TF bf16"]
    if te.peak_fp8_flops is not None:
        peaks.append(f"{_num(te.peak_fp8_flops / 1e12)} TF {te.fp8_format or 'fp8'}")
    peaks.append(f"{_num(te.peak_fp32_flops / 1e12)} TF fp32")
    starts = "; ".join(
        f"span {lo}-{hi} at {'/'.join(map(str, t.partition_starts(hi)))}"
        for lo, hi in ((t.pmax // 2 + 1, t.pmax), (t.pmax // 4 + 1, t.pmax // 2), (1, t.pmax // 4))
    )
    return [
        ("Tensor engine", f"{te.rows}x{te.cols} systolic, {_num(te.clock_hz / 1e9)} GHz"),
        ("TensorE peak", ", ".join(peaks)),
        *(
            (f"{e.name} engine", f"{e.describe_rates()}, {_num(e.clock_hz / 1e9)} GHz")
            for e in (t.vector, t.scalar, t.gpsimd)
        ),
        ("SBUF", f"{_size(t.sbuf_bytes)} = {t.sbuf_partitions} partitions x {_size(t.sbuf_bytes_per_partition)}"),
        (
            "PSUM",
            f"{_size(t.psum_bytes)} = {t.sbuf_partitions} x {_size(t.psum_bytes_per_partition)}, "
            f"{t.psum_banks} banks of {_size(t.psum_bank_bytes)} per partition",
        ),
        (
            "DMA",
            f"{t.dma_engines} engines x ~{_num(t.dma_engine_bandwidth_bytes_per_s / 1e9)} GB/s, "
            f"~{_num(t.dma_bandwidth_bytes_per_s / 1e9)} GB/s aggregate (HBM-limited); a transfer is split over "
            f"the engines of its partitions ({t.dma_partitions_per_engine} per engine)",
        ),
        (
            "DMA costs",
            f"~{_num(t.dma_fixed_cost_s * 1e6)} us latency per transfer, {_num(t.dma_packet_setup_s * 1e6)} us setup "
            f"per packet (overlapping the previous packet's bytes); efficiency run / (run + "
            f"{t.dma_descriptor_overhead_bytes} B) per contiguous run "
            f"({_pct(t, 4096)} at 4 KiB, {_pct(t, 512)} at 512 B, {_pct(t, 4)} at 4 B)",
        ),
        ("HBM per core", _size(t.hbm_bytes_per_core)),
        ("Partitions", f"<= {t.pmax}; tiles start: {starts}"),
        (
            "Matmul",
            f"K <= {t.matmul_k_max}, M <= {t.matmul_m_max} (stationary), N <= {t.matmul_n_max} (moving); "
            f"fp32 into PSUM, <= {t.psum_banks} live banks",
        ),
        ("Free size", f"<= {t.free_max_sbuf} elements from SBUF, <= {t.free_max_psum} from PSUM (Vector/Scalar)"),
        ("Issue cost", f"MIN_II {t.min_ii_cycles} cycles; +{t.dependent_stall_cycles} dependent back-to-back"),
    ]


def device_table(target: Target | None = None) -> str:
    """Format a target as an aligned two-column text table (what ``trn info`` prints).

    Args:
        target: the target to describe; ``None`` for :func:`get_target`'s default.

    Example:
        >>> print(device_table(TARGETS["trn2"]).splitlines()[4])
        Vector engine  512 elem/cycle bf16/fp16, 256 other, 0.96 GHz
    """
    t = target if target is not None else get_target()
    rows = _rows(t)
    width = max(len(k) for k, _ in rows)
    title = f"target {t.name} ({t.core})"
    lines = [title, "-" * len(title)]
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)
