"""Fast lanes of in-place binary ops (``x.add_(y)``, ``x.mul_(2.5)``) and of broadcasting ones (``x + bias``): the
replayed launch writes operand 0 (in place) or a pooled contiguous output, results equal the CPU's call after call,
and calls the lane cannot serve as torch does (partly overlapping operands, non-contiguous views) take the
lowering."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from trnlang.device import fastlane
from trnlang.device.registry import REGISTRY

INPLACE = {"add": "aten::add_.Tensor", "sub": "aten::sub_.Tensor", "mul": "aten::mul_.Tensor",
           "div": "aten::div_.Tensor"}
FUNCTIONAL = {"add": "aten::add.Tensor", "sub": "aten::sub.Tensor", "mul": "aten::mul.Tensor",
              "div": "aten::div.Tensor"}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) + 0.25).to(dtype)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(INPLACE)), dtype=st.sampled_from(DTYPES),
       shape=st.sampled_from([(16,), (1,), (3, 130), (2, 3, 5), ()]))
def test_inplace_tensor_lane_matches_cpu(op, dtype, shape):
    x, y = _rand(shape, dtype, 1), _rand(shape, dtype, 2)
    a, b = x.to("trn"), y.to("trn")
    trnlang.reset_fallback_stats()
    for k in range(5):  # new values every call: the first makes the lane, the rest replay it
        bk, yk = (b * float(k + 1), y * float(k + 1)) if k else (b, y)
        r = getattr(a, op + "_")(bk)
        getattr(x, op + "_")(yk)
        assert r is a
        torch.testing.assert_close(a.cpu(), x, rtol=0, atol=0, equal_nan=True)
    lane = REGISTRY[INPLACE[op]].fast.lanes.get((dtype, torch.Size(shape)))
    assert isinstance(lane, fastlane.Lane) and lane.inplace
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("dtype", DTYPES)
def test_inplace_scalar_lane_matches_cpu(dtype):
    x = _rand((4, 33), dtype, 3)
    a = x.to("trn")
    for s in [2.5, -0.5, 1e-3, 3.0, -0.0, 7.0]:
        assert a.mul_(s) is a and a.add_(s) is a and a.sub_(s) is a and a.div_(s + 1.0) is a
        x.mul_(s).add_(s).sub_(s).div_(s + 1.0)
        torch.testing.assert_close(a.cpu(), x, rtol=0, atol=0, equal_nan=True)
    assert isinstance(REGISTRY[INPLACE["mul"]].fast.scalar_lanes.get((dtype, torch.Size([4, 33]), float)),
                      fastlane.Lane)


@pytest.mark.parametrize("shapes", [((6, 130), (130,)), ((130,), (6, 130)), ((6, 130), (6, 1)), ((2, 3, 4), (3, 1)),
                                    ((5, 7), (1, 7))])
def test_broadcast_lane_matches_cpu(shapes):
    sa, sb = shapes
    for k in range(4):
        x, y = _rand(sa, torch.float32, 10 + k), _rand(sb, torch.float32, 20 + k)
        a, b = x.to("trn"), y.to("trn")
        for op in ("add", "mul", "sub", "div"):
            got = getattr(torch, op)(a, b)
            assert got.is_contiguous()
            torch.testing.assert_close(got.cpu(), getattr(torch, op)(x, y), rtol=0, atol=0)
        if torch.broadcast_shapes(sa, sb) == torch.Size(sa):  # in place only where the result fits operand 0
            a.add_(b)
            torch.testing.assert_close(a.cpu(), x + y, rtol=0, atol=0)
    assert isinstance(REGISTRY[FUNCTIONAL["add"]].fast.lanes.get((torch.float32, torch.Size(sa), torch.Size(sb))),
                      fastlane.Lane)


def test_partly_overlapping_inplace_raises_as_cpu_after_a_lane_exists():
    t = torch.randn(10)
    d = t.to("trn")
    d[0:5].add_(d[5:10])  # a lane for (float32, [5]) now exists
    d[0:5].add_(d[5:10])
    t[0:5].add_(t[5:10])
    t[0:5].add_(t[5:10])
    torch.testing.assert_close(d.cpu(), t, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="single memory location"):
        t[1:6].add_(t[0:5])
    with pytest.raises(RuntimeError, match="single memory location"):
        d[1:6].add_(d[0:5])
    torch.testing.assert_close(d.cpu(), t, rtol=0, atol=0)  # nothing written


def test_self_operand_and_views_take_the_right_path():
    x = torch.randn(8, 8)
    a = x.to("trn")
    a.add_(a.clone())
    a.add_(a)  # the same tensor twice, on the lane made by the line above
    x.add_(x.clone())
    x.add_(x)
    torch.testing.assert_close(a.cpu(), x, rtol=0, atol=0)
    at, xt = a.t(), x.t()  # non-contiguous: the lowering
    at.mul_(torch.full((8, 8), 0.5).to("trn"))
    xt.mul_(torch.full((8, 8), 0.5))
    torch.testing.assert_close(a.cpu(), x, rtol=0, atol=0)


def test_inplace_lane_keeps_autograd_version_counter():
    a = torch.randn(5, device="trn")
    b = torch.randn(5, device="trn")
    a.add_(b)
    v = a._version
    a.add_(b)  # a lane hit
    assert a._version == v + 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_same_operand_twice_and_own_kernel_powers_have_lanes(dtype):
    """``x * x`` has a lane of its own (its launch reads operand 0 twice), which ``x * y`` of the same dtype and
    shape never takes; ``x ** 2`` / ``x ** 3`` (kernels of their own) have lanes keyed on the exponent."""
    x, y = _rand((5, 40), dtype, 7), _rand((5, 40), dtype, 8)
    a, b = x.to("trn"), y.to("trn")
    REGISTRY[FUNCTIONAL["mul"]].fast.lanes.clear()  # a full table (earlier tests) makes no new lanes
    REGISTRY["aten::pow.Tensor_Scalar"].fast.scalar_lanes.clear()
    trnlang.reset_fallback_stats()
    for _ in range(4):  # calls interleaved: every lane serves only its own kind of call
        torch.testing.assert_close((a * a).cpu(), x * x, rtol=0, atol=0)
        torch.testing.assert_close((a * b).cpu(), x * y, rtol=0, atol=0)
        torch.testing.assert_close((b * b).cpu(), y * y, rtol=0, atol=0)
        torch.testing.assert_close(a.pow(2).cpu(), x.pow(2), rtol=0, atol=0)
        torch.testing.assert_close(a.pow(3).cpu(), x.pow(3), rtol=0, atol=0)
        torch.testing.assert_close(b.pow(2.5).cpu(), y.pow(2.5), equal_nan=True)
    c, z = a.clone(), x.clone()
    for _ in range(3):
        c.mul_(c)
        z.mul_(z)
        torch.testing.assert_close(c.cpu(), z, rtol=0, atol=0, equal_nan=True)
    key = (dtype, torch.Size([5, 40]))
    assert isinstance(REGISTRY[FUNCTIONAL["mul"]].fast.lanes.get((key, fastlane._DUP)), fastlane.Lane)
    powl = REGISTRY["aten::pow.Tensor_Scalar"].fast.scalar_lanes
    assert isinstance(powl.get((*key, int, 2)), fastlane.Lane) and isinstance(powl.get((*key, int, 3)), fastlane.Lane)
    assert trnlang.fallback_stats() == {}
