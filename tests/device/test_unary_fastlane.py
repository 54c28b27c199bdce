"""Unary ops and activations take the fast lane (stdlib_kernels/elementwise/unary.py ``_fast``).

A repeated call on a same-layout contiguous float tensor reruns the lowering's one flat or row launch
(trnlang/device/fastlane.py). The results must equal the lowering's and torch's, outputs must be new tensors,
and anything that is not one plain contiguous float operand (out=, in-place, views, ints) takes the lowering.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from trnlang.device import fastlane
from trnlang.device.registry import REGISTRY

F = torch.nn.functional
OPS = {"exp": torch.exp, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": F.silu, "gelu": F.gelu,
       "sin": torch.sin, "log1p": torch.log1p}


def _lane(op, dtype, shape):
    return REGISTRY[f"aten::{op}"].fast.lanes.get((dtype, torch.Size(shape)))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(OPS)), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       shape=st.sampled_from([(1,), (40,), (1000,), (300, 128), (3, 5, 7), (2, 129)]))
def test_lane_matches_torch(op, dtype, shape):
    g = torch.Generator().manual_seed(len(shape))
    x = (torch.rand(shape, generator=g) * 4 - 1).to(dtype)  # log1p: inputs above -1
    a = x.to("trn")
    trnlang.reset_fallback_stats()
    first = OPS[op](a)
    assert isinstance(_lane(op, dtype, shape), fastlane.Lane)  # made by the first call
    outs = [OPS[op](a) for _ in range(4)]  # hits, several alive at once
    assert trnlang.fallback_stats() == {}
    exp = OPS[op](x.float()).to(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    for r in [first, *outs]:
        assert r.device.type == "trn" and r.dtype == dtype and r.shape == x.shape
        torch.testing.assert_close(r.cpu(), exp, **tol)
    assert len({r.data_ptr() for r in outs}) == len(outs)


def test_a_new_input_gives_new_values():
    a, b = torch.randn(257), torch.randn(257)
    ta, tb = a.to("trn"), b.to("trn")
    torch.exp(ta)  # makes the lane
    torch.testing.assert_close(torch.exp(tb).cpu(), torch.exp(b))
    torch.testing.assert_close(torch.exp(ta).cpu(), torch.exp(a))


def test_other_calls_take_the_lowering():
    x = torch.randn(6, 8)
    a = x.to("trn")
    torch.sigmoid(a)  # the lane for (float32, [6, 8])
    torch.testing.assert_close(torch.sigmoid(a[:, :4]).cpu(), torch.sigmoid(x[:, :4]))  # a view
    torch.testing.assert_close(torch.sigmoid(a.t()).cpu(), torch.sigmoid(x.t()))  # transposed
    o = torch.empty(6, 8, device="trn")
    r = torch.sigmoid(a, out=o)
    assert r.data_ptr() == o.data_ptr()
    torch.testing.assert_close(o.cpu(), torch.sigmoid(x))
    b = a.clone()
    b.sigmoid_()  # in place: the same tensor
    torch.testing.assert_close(b.cpu(), torch.sigmoid(x))
    i = torch.arange(-3, 9, dtype=torch.int32)
    torch.testing.assert_close(torch.exp(i.to("trn")).cpu(), torch.exp(i))  # int -> float: the lowering
    torch.testing.assert_close(F.gelu(a, approximate="tanh").cpu(), F.gelu(x, approximate="tanh"))


@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_empty_tensors(shape):
    x = torch.randn(shape)
    for _ in range(2):
        r = torch.tanh(x.to("trn"))
        assert r.shape == x.shape and r.device.type == "trn"
