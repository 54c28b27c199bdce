"""Target data against DEVICE.md's table, target selection, and the device table text."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from trnlang.ir.types import DType
from trnlang.sim.targets import DEFAULT_TARGET, TARGETS, device_table, dtype_class, get_target

KiB, MiB, GiB = 1024, 1024**2, 1024**3


def test_three_targets_default_trn2() -> None:
    assert list(TARGETS) == ["trn1", "trn2", "trn3"]
    assert DEFAULT_TARGET == "trn2"
    assert [t.core for t in TARGETS.values()] == ["NeuronCore-v2", "NeuronCore-v3", "NeuronCore-v4"]


@pytest.mark.parametrize(
    ("name", "per_partition", "total"),
    [("trn1", 192 * KiB, 24 * MiB), ("trn2", 224 * KiB, 28 * MiB), ("trn3", 256 * KiB, 32 * MiB)],
)
def test_sbuf(name: str, per_partition: int, total: int) -> None:
    t = TARGETS[name]
    assert (t.sbuf_partitions, t.sbuf_bytes_per_partition, t.sbuf_bytes) == (128, per_partition, total)


@pytest.mark.parametrize("name", list(TARGETS))
def test_psum_and_matmul_limits_agree(name: str) -> None:
    t = TARGETS[name]
    assert t.psum_bytes == 2 * MiB and t.psum_bytes_per_partition == 16 * KiB
    assert (t.psum_banks, t.psum_bank_bytes) == (8, 2 * KiB)
    assert t.psum_banks * t.psum_bank_bytes == t.psum_bytes_per_partition
    # N <= 512 because one moving row of fp32 results fills exactly one PSUM bank.
    assert t.matmul_n_max * 4 == t.psum_bank_bytes
    assert (t.pmax, t.matmul_k_max, t.matmul_m_max) == (128, 128, 128)
    assert (t.free_max_sbuf, t.free_max_psum) == (65536, 4096)
    assert (t.min_ii_cycles, t.dependent_stall_cycles, t.gpsimd_fixed_cycles) == (64, 100, 150)


@pytest.mark.parametrize(
    ("name", "bandwidth", "hbm"), [("trn1", 272e9, 16 * GiB), ("trn2", 368e9, 12 * GiB), ("trn3", 528e9, 18 * GiB)]
)
def test_dma_and_hbm(name: str, bandwidth: float, hbm: int) -> None:
    t = TARGETS[name]
    assert t.dma_bandwidth_bytes_per_s == bandwidth
    assert t.hbm_bytes_per_core == hbm
    assert (t.dma_engines, t.dma_queues_per_engine, t.dma_queues) == (16, 16, 256)
    assert t.dma_fixed_cost_s == pytest.approx(1.3e-6)


@pytest.mark.parametrize(
    ("name", "clock", "bf16", "fp8", "fp32"),
    [("trn1", 2.8e9, 92e12, None, 23e12), ("trn2", 2.4e9, 79e12, 158e12, 20e12), ("trn3", 2.4e9, 79e12, 315e12, 20e12)],
)
def test_tensor_engine(name: str, clock: float, bf16: float, fp8: float | None, fp32: float) -> None:
    te = TARGETS[name].tensor
    assert (te.rows, te.cols, te.clock_hz) == (128, 128, clock)
    assert te.peak_flops("bf16") == te.peak_flops(DType.float16) == bf16
    assert te.peak_flops(np.float32) == fp32
    # The published peaks are one MAC (2 flops) per PE per cycle, rounded; fp32 runs at a quarter rate.
    assert bf16 == pytest.approx(2 * te.rows * te.cols * clock, rel=0.01)
    assert fp32 == pytest.approx(bf16 / 4, rel=0.02)
    if fp8 is None:
        with pytest.raises(ValueError, match="no published peak"):
            te.peak_flops("f8e4m3")
    else:
        assert te.peak_flops(DType.float8_e4m3) == fp8
    with pytest.raises(ValueError):
        te.peak_flops("i32")


def test_engine_rates() -> None:
    t1, t2, t3 = TARGETS.values()
    assert [t1.vector.clock_hz, t2.vector.clock_hz, t3.vector.clock_hz] == [1.12e9, 0.96e9, 1.2e9]
    assert [t1.scalar.clock_hz, t2.scalar.clock_hz, t3.scalar.clock_hz] == [1.4e9, 1.2e9, 1.2e9]
    assert [t.gpsimd.elems_per_cycle("f32") for t in (t1, t2, t3)] == [128, 128, 128]
    assert [t1.vector.elems_per_cycle(d) for d in ("bf16", "f8e5m2", "f32")] == [128, 128, 128]
    assert [t2.vector.elems_per_cycle(d) for d in ("bf16", "f8e5m2", "f32", "i32")] == [512, 256, 256, 256]
    assert [t3.vector.elems_per_cycle(d) for d in ("f16", "f8e4m3", "f32")] == [512, 512, 256]
    assert [t2.scalar.elems_per_cycle(d) for d in ("bf16", "f32")] == [128, 128]
    assert [t3.scalar.elems_per_cycle(d) for d in ("bf16", "f8e4m3", "f32")] == [256, 256, 128]
    assert t2.vector.elems_per_second("bf16") == pytest.approx(512 * 0.96e9)
    assert t2.engine("Vector") is t2.vector
    with pytest.raises(ValueError, match="valid engines"):
        t2.engine("tensor")


def test_dtype_class_accepts_many_spellings() -> None:
    assert dtype_class(ml_dtypes.bfloat16) == dtype_class(np.dtype(ml_dtypes.bfloat16)) == "half"
    assert dtype_class(DType.bfloat16) == dtype_class("torch.bfloat16") == "half"
    assert dtype_class(np.dtype(np.float32)) == dtype_class("float32") == "fp32"
    assert dtype_class(DType.bool_) == dtype_class(np.uint8) == "int"
    assert dtype_class("mxfp8") == "fp8"
    with pytest.raises(ValueError, match="unknown element type"):
        dtype_class("complex64")


def test_partition_start_rules() -> None:
    t = get_target("trn2")
    assert t.partition_starts(128) == t.partition_starts(65) == (0,)
    assert t.partition_starts(64) == t.partition_starts(33) == (0, 64)
    assert t.partition_starts(32) == t.partition_starts(1) == (0, 32, 64, 96)
    for bad in (0, 129):
        with pytest.raises(ValueError):
            t.partition_starts(bad)


def test_targets_are_frozen_and_hashable() -> None:
    t = TARGETS["trn2"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.pmax = 64  # type: ignore[misc]
    assert {t: 1}[TARGETS["trn2"]] == 1
    smaller = t.replace(hbm_bytes_per_core=1 * GiB)
    assert smaller.hbm_bytes_per_core == GiB and t.hbm_bytes_per_core == 12 * GiB and smaller != t


def test_get_target_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRN_TARGET", raising=False)
    assert get_target().name == "trn2"
    monkeypatch.setenv("TRN_TARGET", "")
    assert get_target().name == "trn2"
    monkeypatch.setenv("TRN_TARGET", "trn1")
    assert get_target() is TARGETS["trn1"]
    assert get_target(None).name == "trn1"
    assert get_target("TRN3").name == "trn3"  # an explicit name wins and is case-insensitive


def test_get_target_unknown_names(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"unknown target 'trn4'; valid targets: trn1, trn2, trn3"):
        get_target("trn4")
    monkeypatch.setenv("TRN_TARGET", "inf2")
    with pytest.raises(ValueError, match=r"'inf2' \(from TRN_TARGET\)"):
        get_target()


@pytest.mark.parametrize("name", list(TARGETS))
def test_device_table(name: str) -> None:
    t = TARGETS[name]
    text = device_table(t)
    lines = text.splitlines()
    assert lines[0] == f"target {name} ({t.core})"
    assert f"{t.sbuf_bytes // MiB} MiB = 128 partitions x {t.sbuf_bytes_per_partition // KiB} KiB" in text
    assert f"~{t.dma_bandwidth_bytes_per_s / 1e9:g} GB/s" in text
    assert f"{t.hbm_bytes_per_core // GiB} GiB" in text
    assert "N <= 512" in text and "MIN_II 64" in text
    # Two aligned columns: every value starts at the same column.
    body = lines[2:]
    starts = {len(line) - len(line[line.index("  ") :].lstrip()) for line in body}
    assert len(starts) == 1, text


def test_device_table_default_follows_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_TARGET", "trn3")
    assert device_table().startswith("target trn3")
