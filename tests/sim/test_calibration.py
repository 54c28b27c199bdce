"""The simulator against published NKI figures: every row of docs/calibration.md, within its stated tolerance.

Rows outside tolerance in the page are held to the simulator value the page states (so the page stays true) and
to the direction of the documented discrepancy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import trnlang as trn
from tests.sim import published as P


def _active(p: trn.Profile, dma: bool) -> float:
    """Fraction of the kernel's time at least one DMA engine (``dma``) or the Tensor engine is busy."""
    s = p.schedule
    sel = s.is_dma if dma else s.res == 0
    st, en = s.start[sel], s.start[sel] + s.dur[sel]
    order = np.argsort(st)
    total, cs, ce = 0.0, None, None
    for a, b in zip(st[order].tolist(), en[order].tolist()):
        if cs is None or a > ce:
            if cs is not None:
                total += ce - cs
            cs, ce = a, b
        else:
            ce = max(ce, b)
    if cs is not None:
        total += ce - cs
    return total / s.makespan


def _first_load(shape, dtype):
    x = torch.randn(*shape).to(dtype)
    p = P.one_transfer.profile(x, torch.empty_like(x), simulate_only=True)
    return [r for r in p.instructions if r.engine == "dma"][0]


def test_rows_1_2_dma_overview_example_1():
    ld = _first_load((4, 4096), torch.bfloat16)
    assert ld.dma_engines == 1 and ld.nbytes == 32768
    assert ld.duration_us * 1e3 == pytest.approx(1416, rel=0.02)  # fitted: dma_packet_setup_s


def test_row_3_dma_overview_example_2():
    ld = _first_load((128, 128), torch.bfloat16)
    assert ld.dma_engines == 16 and ld.nbytes / ld.dma_engines == 2048


def test_row_4_perf_guide_large_transfer_structure():
    ld = _first_load((128, 1024), torch.float32)
    assert ld.dma_engines == 16 and ld.nbytes / ld.dma_engines == 32 * 1024


def test_row_5_perf_guide_large_transfers_reach_about_70_percent():
    x = torch.randn(8192, 1024)
    p = P.copy_rows.profile(x, torch.empty_like(x), simulate_only=True)
    assert abs(p.mbu - 0.70) <= 0.15, p.mbu


def _fp32(k, m, n):
    return P.matmul_inputs(k, m, n, dtype=torch.float32)


def test_rows_6_7_kernel_optimization_tiled():
    p = P.matmul_tiled.profile(*_fp32(8192, 256, 8192), simulate_only=True)
    assert abs(_active(p, True) - 0.9993) <= 0.05
    pe = _active(p, False)
    assert 0.6983 <= pe <= 0.8728  # between the guide's two figures for this kernel (text 69.83%, table 87.28%)


def test_rows_8_9_kernel_optimization_hoisted():
    p = P.matmul_hoisted.profile(*_fp32(8192, 256, 8192), simulate_only=True)
    assert abs(_active(p, True) - 0.9973) <= 0.05
    assert abs(_active(p, False) - 0.9985) <= 0.05


def test_rows_10_11_kernel_optimization_blocked_free_dims():
    p = P.matmul_blocked_free.profile(*_fp32(2048, 1024, 8192), 2, 2, simulate_only=True)
    assert abs(_active(p, False) - 0.9952) <= 0.05
    dma = _active(p, True)
    assert dma == pytest.approx(0.557, abs=0.02) and dma < 0.957  # (b): no spilling, fewer bytes


def test_rows_12_14_kernel_optimization_blocked_mnk():
    p = P.matmul_blocked_mnk.profile(*_fp32(2048, 2048, 2048), 16, 2, 8, simulate_only=True)
    assert abs(_active(p, True) - 0.2154) <= 0.05
    assert abs(_active(p, False) - 0.9950) <= 0.10
    vec = p.engines["vector"].utilization
    assert vec == pytest.approx(0.284, abs=0.02) and vec > 0.1055  # (c): more Vector work than NKI's


def test_rows_15_16_third_party_trn1_times():
    args = P.matmul_inputs(1024, 4096, 2048)
    tiled = trn.kernel(P.matmul_tiled.fn, target="trn1").profile(*args, simulate_only=True)
    best = trn.kernel(P.matmul_blocked_mnk.fn, target="trn1").profile(*args, 16, 2, 8, simulate_only=True)
    # (d): as written, the tiled kernel's reloads alone need more than the measured 463 us at peak bandwidth
    assert tiled.dma_bytes / tiled.target.dma_bandwidth_bytes_per_s * 1e6 > 463
    assert tiled.time_us == pytest.approx(967, rel=0.03)
    assert best.time_us == pytest.approx(348, rel=0.03) and best.time_us > 273  # (c)
    assert best.engines["vector"].utilization > 0.7
