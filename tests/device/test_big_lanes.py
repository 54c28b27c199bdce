"""Big contiguous elementwise ops are one launch that the runtime spreads over the host threads
(``runtime/split.py``), and their fast lanes keep that split: a lane of a splittable launch runs it through
``Launch.run`` (timed whole at first, then in one part per thread) instead of the one-thread trampoline.
Results equal torch's call after call: across the split decision, with new operand and output addresses every
call (more than its launch plan keeps launches for), for tensor-tensor, tensor-scalar, unary and copy ops, and for
in-place ops (which the runtime does not split: they take per-thread flat pieces)."""

from __future__ import annotations

import pytest
import torch

import trnlang
from trnlang.device import fastlane
from trnlang.device.registry import REGISTRY
from trnlang.runtime import launch

# below, at and above PARALLEL_MIN_WORK (2^20) and the in-place split (2^18); ragged and 2-/3-D row shapes
RAGGED_BIG = ((1 << 20) + 77,)
SHAPES = [(1 << 18,), (4, 128, 512), (1024, 1031), (4, 128, 2048), RAGGED_BIG, (3, 1, 349525)]


def _rand(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


@pytest.mark.parametrize("shape", SHAPES)
def test_binary_and_scalar_lanes_split_and_match(shape):
    trnlang.reset_fallback_stats()
    keep = []
    for k in range(20):  # new tensors (addresses) each call; 20 > the launches a plan keeps
        x, y = _rand(shape, k), _rand(shape, 100 + k)
        a, b = x.to("trn"), y.to("trn")
        keep.append((a, b))  # the addresses stay taken: every call binds new ones
        torch.testing.assert_close((a * b).cpu(), x * y, rtol=0, atol=0)
        torch.testing.assert_close((a - 0.75).cpu(), x - 0.75, rtol=0, atol=0)
        torch.testing.assert_close(torch.tanh(a).cpu(), torch.tanh(x), rtol=2e-6, atol=2e-7)
    assert trnlang.fallback_stats() == {}
    lane = REGISTRY["aten::mul.Tensor"].fast.lanes.get((torch.float32, torch.Size(shape)))
    if shape != RAGGED_BIG:  # one launch (a ragged big 1-D op is one flat launch per thread: no lane)
        assert isinstance(lane, fastlane.Lane)
        if launch.num_threads() > 1 and lane.split is not None:  # decided after the timed runs: it splits
            assert len(lane.split._recent) <= launch.RECENT_LAUNCHES  # the plan's cache stays bounded


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_big_copy_and_inplace_match(dtype):
    shape = (4, 128, 2048)
    x, y = _rand(shape, 1, dtype), _rand(shape, 2, dtype)
    a, b = x.to("trn"), y.to("trn")
    for k in range(4):
        c = torch.empty(shape, device="trn", dtype=dtype)
        c.copy_(a)
        torch.testing.assert_close(c.cpu(), x, rtol=0, atol=0)
        a.add_(b)
        x.add_(y)
        torch.testing.assert_close(a.cpu(), x, rtol=0, atol=0)
        d = torch.empty(shape, device="trn", dtype=torch.float32)
        d.copy_(a)  # a casting copy
        torch.testing.assert_close(d.cpu(), x.float(), rtol=0, atol=0)


def test_big_lane_single_thread_matches(monkeypatch):
    monkeypatch.setenv("TRN_NUM_THREADS", "1")
    trnlang.config.refresh()
    try:
        shape = (3, 1000, 700)
        for k in range(4):
            x, y = _rand(shape, 10 + k), _rand(shape, 20 + k)
            torch.testing.assert_close((x.to("trn") + y.to("trn")).cpu(), x + y, rtol=0, atol=0)
    finally:
        monkeypatch.delenv("TRN_NUM_THREADS")
        trnlang.config.refresh()
