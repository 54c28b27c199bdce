"""Activations and their backward ops (stdlib_kernels/elementwise/activations.py): forward + autograd on trn vs CPU."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])


def _prelu(t):
    w = torch.linspace(-0.5, 0.5, t.shape[1] if t.dim() > 1 else 1).to(t.dtype).to(t.device)
    return F.prelu(t, w)


#: name -> (function of one tensor, input domain: "any" | "prob"). Each exercises a forward op and its backward.
ACTS = {
    "relu": (F.relu, "any"), "sigmoid": (torch.sigmoid, "any"), "tanh": (torch.tanh, "any"), "silu": (F.silu, "any"),
    "softplus": (F.softplus, "any"), "softplus_b": (lambda t: F.softplus(t, beta=1.5, threshold=4.0), "any"),
    "gelu": (F.gelu, "any"), "gelu_tanh": (lambda t: F.gelu(t, approximate="tanh"), "any"),
    "elu": (F.elu, "any"), "elu_alpha": (lambda t: F.elu(t, alpha=0.3), "any"), "selu": (F.selu, "any"),
    "celu": (lambda t: F.celu(t, alpha=0.7), "any"),
    "elu_inplace": (lambda t: F.elu(t * 1.0, inplace=True), "any"),  # backward from the result
    "leaky_relu": (lambda t: F.leaky_relu(t, 0.2), "any"), "hardtanh": (lambda t: F.hardtanh(t, -2.0, 1.5), "any"),
    "relu6": (F.relu6, "any"), "hardsigmoid": (F.hardsigmoid, "any"), "hardswish": (F.hardswish, "any"),
    "mish": (F.mish, "any"), "softshrink": (lambda t: F.softshrink(t, 0.7), "any"),
    "hardshrink": (lambda t: F.hardshrink(t, 0.7), "any"), "threshold": (lambda t: F.threshold(t, 0.3, -2.0), "any"),
    "glu": (lambda t: F.glu(t, -1), "even"), "glu0": (lambda t: F.glu(t, 0), "even0"),
    "logit": (torch.logit, "prob"), "logit_eps": (lambda t: torch.logit(t, eps=0.1), "prob"),
    "prelu": (_prelu, "any"), "logsigmoid": (F.logsigmoid, "any"),
}


def _input(domain: str, shape, dtype, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    shape = list(shape)
    if domain in ("even", "even0"):
        shape = [2 * max(n // 2, 1) if n else 0 for n in shape]
    x = torch.randn(shape, generator=g) * 3
    if domain == "prob":
        x = torch.sigmoid(x)
    return x.to(dtype)


def _check(name: str, shape, dtype=torch.float32, transpose: bool = False) -> None:
    fn, domain = ACTS[name]
    x = _input(domain, shape, dtype)
    gen = torch.Generator().manual_seed(1)
    xc = x.clone().requires_grad_()
    xt = x.to("trn").requires_grad_()
    xc_in, xt_in = (xc.transpose(0, 1), xt.transpose(0, 1)) if transpose and x.dim() >= 2 else (xc, xt)
    g = torch.randn(fn(x.transpose(0, 1) if transpose and x.dim() >= 2 else x).shape, generator=gen).to(dtype)
    trnlang.reset_fallback_stats()
    yt = fn(xt_in)
    yt.backward(g.to("trn"))
    stats = trnlang.fallback_stats()
    assert stats == {}, (name, shape, stats)
    y = fn(xc_in)
    y.backward(g)
    tol = {torch.float32: dict(rtol=2e-5, atol=2e-5), torch.float16: dict(rtol=2e-3, atol=5e-3)}.get(
        dtype, dict(rtol=2e-2, atol=5e-2))
    assert_same(yt, y, **tol)
    assert_same(xt.grad, xc.grad, **tol)


#: one activation per kind of formula / launch pattern, for the compile-heavy random-shape test
REPRESENTATIVE = ["gelu_tanh", "elu_inplace", "hardswish", "glu0", "prelu", "logit_eps"]


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_forward_backward(name, dtype):
    _check(name, (130, 34), dtype, transpose=dtype == torch.bfloat16)


@pytest.mark.parametrize("name", REPRESENTATIVE)
@_SETTINGS
@given(shape=st.lists(st.integers(1, 200), min_size=2, max_size=3).map(tuple), transpose=st.booleans())
def test_random_shapes(name, shape, transpose):
    _check(name, shape, transpose=transpose)


@pytest.mark.parametrize("name", REPRESENTATIVE + ["silu", "mish"])
def test_fp16(name):
    _check(name, (70, 34), torch.float16)


@pytest.mark.parametrize("name", ["relu", "gelu", "hardswish", "glu", "mish"])
def test_empty_and_scalar_shapes(name):
    fn, domain = ACTS[name]
    for shape in ((0, 4), (1, 2)):
        _check(name, shape)


def test_special_values_forward_and_backward():
    s = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 0.0, -3.0, 3.0, 20.0, -20.0, 100.0, -100.0, 0.3, 0.7])
    for name in ("relu", "silu", "softplus", "elu", "leaky_relu", "hardtanh", "hardsigmoid", "hardswish",
                 "softshrink", "hardshrink", "threshold", "gelu_tanh", "mish", "tanh", "sigmoid", "logsigmoid"):
        fn, _ = ACTS[name]
        xc = s.clone().requires_grad_()
        xt = s.to("trn").requires_grad_()
        y = fn(xc)
        yt = fn(xt)
        torch.testing.assert_close(yt.detach().cpu(), y.detach(), rtol=2e-6, atol=1e-6, equal_nan=True, msg=name)
        g = torch.ones_like(s)
        y.backward(g)
        yt.backward(g.to("trn"))
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=2e-6, atol=1e-6, equal_nan=True, msg=name)


def test_backward_ops_directly_with_out_and_strides():
    x = torch.randn(40, 50)
    g = torch.randn(50, 40)
    xt, gt = x.to("trn"), g.to("trn")
    trnlang.reset_fallback_stats()
    cases = [
        (torch.ops.aten.threshold_backward, (0.1,)), (torch.ops.aten.silu_backward, ()),
        (torch.ops.aten.hardswish_backward, ()), (torch.ops.aten.mish_backward, ()),
        (torch.ops.aten.softplus_backward, (2.0, 3.0)), (torch.ops.aten.hardtanh_backward, (-0.5, 0.5)),
        (torch.ops.aten.leaky_relu_backward, (0.3, False)), (torch.ops.aten.softshrink_backward, (0.4,)),
    ]
    for op, args in cases:
        got = op(gt.t(), xt, *args)  # a transposed gradient
        assert_same(got, op(g.t(), x, *args), rtol=2e-5, atol=2e-6)
    dest = torch.empty(40, 50, device="trn")
    torch.ops.aten.sigmoid_backward(gt.t(), xt, grad_input=dest)
    assert_same(dest, torch.ops.aten.sigmoid_backward(g.t(), x), rtol=2e-6, atol=1e-6)
    assert_same(torch.ops.aten.gelu_backward(gt.t(), xt, approximate="tanh"),
                torch.ops.aten.gelu_backward(g.t(), x, approximate="tanh"), rtol=2e-5, atol=2e-6)
    assert_same(torch.ops.aten.elu_backward(gt.t(), 1.0, 1.0, 1.0, True, xt.tanh()),
                torch.ops.aten.elu_backward(g.t(), 1.0, 1.0, 1.0, True, x.tanh()), rtol=2e-5, atol=2e-6)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_scalar_arguments_round_like_torch(dtype):
    p = 0.3  # not representable: torch compares in fp32 in some kernels and in the tensor dtype in others
    pr = float(torch.tensor(p, dtype=dtype))
    x = torch.tensor([pr, -pr, 0.5, -0.1], dtype=dtype)
    g = torch.ones(4, dtype=dtype)
    xt, gt = x.to("trn"), g.to("trn")
    A = torch.ops.aten
    for fn in (lambda x, g: F.threshold(x, p, 9.0), lambda x, g: A.threshold_backward(g, x, p),
               lambda x, g: F.hardtanh(x, -p, p), lambda x, g: A.hardtanh_backward(g, x, -p, p),
               lambda x, g: F.softshrink(x, p), lambda x, g: A.softshrink_backward(g, x, p),
               lambda x, g: F.hardshrink(x, p), lambda x, g: A.hardshrink_backward(g, x, p),
               lambda x, g: F.leaky_relu(x, p)):
        assert torch.equal(fn(xt, gt).cpu(), fn(x, g))


def test_glu_odd_dim_raises_torchs_error():
    with pytest.raises(RuntimeError, match="even"):
        F.glu(torch.randn(3, 5, device="trn"), -1)


def test_inplace_activations():
    x = torch.randn(33, 17)
    for fn in (lambda t: F.hardtanh_(t, -0.5, 0.5), lambda t: F.leaky_relu_(t, 0.1), lambda t: F.elu_(t),
               lambda t: F.hardswish(t, inplace=True), lambda t: F.threshold_(t, 0.2, 9.0)):
        xt = x.to("trn")
        trnlang.reset_fallback_stats()
        r = fn(xt)
        assert r is xt and trnlang.fallback_stats() == {}
        assert_same(xt, fn(x.clone()), rtol=2e-6, atol=1e-6)


def test_profile_of_an_activation_backward():
    from stdlib_kernels.elementwise.unary import ew

    x = torch.randn(256, 512, device="trn")
    g = torch.randn(256, 512, device="trn")
    out = torch.empty_like(x)
    p = ew.profile(g, x, None, out, "gelu_bw", ("none",), "f32")
    assert_same(out, torch.ops.aten.gelu_backward(g.cpu(), x.cpu()), rtol=2e-5, atol=2e-6)
    assert p.time_us > 0
    assert all(0 <= e.utilization <= 1 for e in p.engines.values()), p.engines
    assert p.engines["dma"].instructions >= 3
