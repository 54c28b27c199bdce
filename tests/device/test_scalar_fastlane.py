"""Tensor-scalar fast lanes (stdlib_kernels/elementwise/lanes.py, trnlang/device/fastlane.py ``scalar_call``).

``x * 2.5``, ``x + 1``, ``x > 0.5``, ``x ** 2`` repeated on a contiguous tensor rerun the lowering's launch with
the number written into the lane's own ``[1, 1]`` device tensor. Results must equal torch's CPU op (dtype
promotion included) for every value, dtype and shape, with one compiled variant for all values; calls the lane
cannot take (int64, in-place, out=, views, other default dtypes) must still be right.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from trnlang.device import fastlane
from trnlang.device.registry import REGISTRY
from trnlang.runtime import stats

OPS = {"add": (torch.add, "aten::add.Tensor"), "sub": (torch.sub, "aten::sub.Tensor"),
       "mul": (torch.mul, "aten::mul.Tensor"), "div": (torch.div, "aten::div.Tensor"),
       "pow": (torch.pow, "aten::pow.Tensor_Scalar"),
       **{c: (getattr(torch, c), f"aten::{c}.Scalar") for c in ("eq", "ne", "lt", "le", "gt", "ge")}}
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int16, torch.uint8, torch.bool,
          torch.int64]
SHAPES = [(), (1,), (16,), (129,), (3, 130), (2, 3, 5)]
NUMBERS = st.one_of(st.booleans(), st.integers(-9, 9), st.sampled_from([2.5, -0.5, 0.1, 1e-3, -3.0, 0.0, -0.0]))


def _input(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else -7
        return torch.randint(lo, 8, shape, generator=g, dtype=dtype)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


def _expect(op, x, s):
    try:
        return OPS[op][0](x, s)
    except RuntimeError:
        return None


def _same(got, exp, op):
    assert got.device.type == "trn" and got.dtype == exp.dtype and got.shape == exp.shape
    if op == "pow" and exp.dtype.is_floating_point:  # the power is a vector-math function: ulps apart
        torch.testing.assert_close(got.cpu(), exp, equal_nan=True)
    else:
        torch.testing.assert_close(got.cpu(), exp, rtol=0, atol=0, equal_nan=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(OPS)), dtype=st.sampled_from(DTYPES), shape=st.sampled_from(SHAPES),
       nums=st.lists(NUMBERS, min_size=3, max_size=3))
def test_tensor_scalar_matches_cpu(op, dtype, shape, nums):
    """Same number type, new values: the lane's results equal the CPU op's, promotion included."""
    x = _input(dtype, shape)
    a = x.to("trn")
    nums = [type(nums[0])(v) for v in nums]  # one number type per example: one lane key
    if op == "pow" or dtype == torch.uint8:
        # int ** negative raises in torch; uint8 vs a negative int: torch wraps the number to uint8 first, the
        # lowering compares in int32 (a lowering matter for the integer-dtype work, not the lane's: no lane there)
        nums = [abs(v) if not isinstance(v, bool) else v for v in nums]
    for s in nums * 2:
        exp = _expect(op, x, s)
        if exp is None:
            with pytest.raises(RuntimeError):
                OPS[op][0](a, s)
            continue
        _same(OPS[op][0](a, s), exp, op)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["mul", "add", "sub", "div", "gt", "pow"])
def test_one_lane_and_one_variant_serve_every_value(op, dtype):
    x = _input(dtype, (5, 7), seed=1)
    a = x.to("trn")
    fast = REGISTRY[OPS[op][1]].fast
    if len(fast.scalar_lanes) >= fastlane.MAX_LANES:  # the process's table, filled by earlier tests' shapes: no room
        fast.scalar_lanes.clear()
    OPS[op][0](a, 1.25)
    lane = fast.scalar_lanes.get((dtype, torch.Size((5, 7)), float))
    assert isinstance(lane, fastlane.Lane)
    trnlang.reset_fallback_stats()
    before = sum(v.get("compile", 0) for v in stats.compile_stats().get("kernels", {}).values())
    outs = [(v, OPS[op][0](a, v)) for v in (0.5, -2.0, 3.75, 1e-3, 7.0, 0.5)]
    after = sum(v.get("compile", 0) for v in stats.compile_stats().get("kernels", {}).values())
    assert trnlang.fallback_stats() == {} and after == before
    assert len({r.data_ptr() for _, r in outs}) == len(outs)  # new outputs, all alive
    for v, r in outs:
        _same(r, OPS[op][0](x, v), op)


def test_integer_promotion_and_default_dtype():
    """int tensor * 2.5 is float (torch's default dtype); int32 + int stays int32 (wrapping like torch)."""
    xi = torch.tensor([1, -2, 3, 2**30], dtype=torch.int32)
    a = xi.to("trn")
    for _ in range(3):
        _same(a * 2.5, xi * 2.5, "mul")
        _same(a + 3, xi + 3, "add")
        _same(a * 4, xi * 4, "mul")  # 2**32 wraps
        _same(a / 2, xi / 2, "div")
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for _ in range(2):
            r = a * 2.5
            assert r.dtype == torch.float64
            torch.testing.assert_close(r.cpu(), xi * 2.5)
    finally:
        torch.set_default_dtype(old)
    _same(a * 2.5, xi * 2.5, "mul")


def test_values_the_lane_leaves_to_the_lowering():
    x = torch.tensor([1.0, -2.0, 3e38], dtype=torch.float32)
    a = x.to("trn")
    a * 1e300  # the first call (the lane's capture) beyond float32 too
    a * 2.0
    torch.testing.assert_close((a * float("inf")).cpu(), x * float("inf"))
    torch.testing.assert_close((a * float("nan")).cpu(), x * float("nan"), equal_nan=True)
    torch.testing.assert_close((a * 10).cpu(), x * 10)  # overflows to inf, as torch
    xi = torch.tensor([1, 2], dtype=torch.int32)
    b = xi.to("trn")
    b + 1
    b + 1
    for v in (2**31 - 1, -(2**31), 3):  # the int32 range's ends
        assert torch.equal((b + v).cpu(), xi + v)
    torch.testing.assert_close((a * 1e300).cpu(), x * 1e300)  # beyond float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_in_place_and_out_variants(dtype):
    x = _input(dtype, (4, 9), seed=2)
    a = x.to("trn")
    a * 3  # a lane exists: the variants must not take it
    c, d = a.clone(), x.clone()
    for v in (3, 2, -1):
        c.mul_(v)
        d.mul_(v)
        c.add_(v)
        d.add_(v)
    _same(c, d, "mul")
    o = torch.empty(4, 9, dtype=torch.float32, device="trn")
    torch.mul(a, 1.5, out=o)
    _same(o, torch.mul(x, 1.5).to(torch.float32), "mul")
    ob = torch.empty(4, 9, dtype=torch.bool, device="trn")
    torch.gt(a, 0, out=ob)
    _same(ob, x > 0, "gt")


def test_views_and_shared_outputs():
    x = torch.randn(6, 8)
    a = x.to("trn")
    a * 2.0
    a * 2.0
    torch.testing.assert_close((a.t() * 2.0).cpu(), x.t() * 2.0)  # not contiguous
    torch.testing.assert_close((a[:, 1:5] + 1).cpu(), x[:, 1:5] + 1)
    torch.testing.assert_close((torch._neg_view(a) * 2.0).cpu(), -x * 2.0)
    keep = [a * float(k) for k in range(8)]  # pooled outputs: never handed out while alive
    for k, r in enumerate(keep):
        torch.testing.assert_close(r.cpu(), x * float(k))


def test_autograd_through_the_scalar_lane():
    x = torch.randn(8, 5, requires_grad=True)
    a = x.detach().to("trn").requires_grad_()
    for _ in range(3):
        loss = (a * 2.5 + 1).pow(2).sum()
    loss.backward()
    (x * 2.5 + 1).pow(2).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), x.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_squares_and_cubes_are_torchs_products(dtype):
    """x ** 2 and x ** 3 are multiplications in torch (bit-exact here too), whatever ran before on that lane key."""
    x = (torch.randn(3, 301, generator=torch.Generator().manual_seed(3)) * 7).to(dtype)
    a = x.to("trn")
    a ** 2.5  # a pow lane for (dtype, shape, float)
    for e in (3.0, 2.0, 3, 2, 2.5, 3.0):
        r = a ** e
        if e in (2, 3):
            assert torch.equal(r.cpu(), x ** e), e
        else:
            torch.testing.assert_close(r.cpu(), x ** e, equal_nan=True)
