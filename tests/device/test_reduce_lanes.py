"""Fast lanes of the float row reductions (``sum.dim_IntList``, ``mean.dim``): a repeated call on one layout reruns
the lowering's one launch (the mean's divisor a frozen cached constant) and must give the CPU's values every time."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang  # noqa: F401
from trnlang.device import fastlane
from trnlang.device.registry import REGISTRY

OPS = {"sum": (torch.sum, "aten::sum.dim_IntList"), "mean": (torch.mean, "aten::mean.dim")}


def _lanes(name: str) -> dict:
    return REGISTRY[OPS[name][1]].fast.lanes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(OPS)), shape=st.sampled_from([(4, 8, 33), (1, 300), (7, 1, 5), (2, 129)]),
       dim=st.sampled_from([-1, 0, (0, -1)]), keepdim=st.sampled_from([True, False, None]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), view=st.booleans())
def test_reduction_lanes_match_cpu(op, shape, dim, keepdim, dtype, view) -> None:
    fn = OPS[op][0]
    g = torch.Generator().manual_seed(sum(shape))
    results = []
    for _ in range(5):  # the first calls make the lane, the later ones replay it (several results alive)
        x = torch.randn(shape, generator=g).to(dtype)
        xt = x.to("trn")
        if view:  # a transposed view: its strides are part of the key
            x, xt = x.transpose(0, -1), xt.transpose(0, -1)
        kw = {} if keepdim is None else {"keepdim": keepdim}
        results.append((fn(xt, dim, **kw), fn(x, dim, **kw)))
    for got, exp in results:
        assert got.shape == exp.shape and got.dtype == exp.dtype
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got.cpu(), exp, rtol=tol, atol=tol)


def test_mean_lane_keeps_each_shapes_divisor() -> None:
    """Two shapes, alternating: each lane reads its own count (a stale divisor would be off by the ratio)."""
    for _ in range(4):
        for n in (64, 96):
            x = torch.randn(8, n)
            torch.testing.assert_close(x.to("trn").mean(-1, keepdim=True).cpu(), x.mean(-1, keepdim=True))
    lanes = [v for k, v in _lanes("mean").items() if k[1] in (torch.Size([8, 64]), torch.Size([8, 96]))]
    assert lanes and all(isinstance(v, fastlane.Lane) for v in lanes)
    assert all(len(v.consts) == 1 for v in lanes)  # the divisor, frozen and kept


def test_int_and_kwarg_calls_take_the_lowering() -> None:
    """Integer sums (their range check reads the values) and dtype= calls have no lane and stay right."""
    i = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    for _ in range(3):
        assert torch.equal(i.to("trn").sum(-1, keepdim=True).cpu(), i.sum(-1, keepdim=True))
        x = torch.randn(3, 4)
        torch.testing.assert_close(x.to("trn").sum(-1, dtype=torch.bfloat16).cpu(), x.sum(-1, dtype=torch.bfloat16))
    assert not any(k[0] == torch.int32 for k in _lanes("sum"))


@pytest.mark.parametrize("op", sorted(OPS))
def test_reduction_lane_is_made(op) -> None:
    x = torch.randn(16, 40).to("trn")
    for _ in range(4):
        OPS[op][0](x, -1, keepdim=True)
    key = (torch.float32, torch.Size([16, 40]), (40, 1), (-1,), True)
    assert isinstance(_lanes(op).get(key), fastlane.Lane)
