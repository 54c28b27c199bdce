"""The unary family (stdlib_kernels/unary.py): trn vs CPU, no fallbacks, in-place / out= / declines."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])

#: test name -> (function, input domain: "any" | "pos" (> 0) | "gt-1" (> -1)).
OPS = {
    "exp": (torch.exp, "any"), "log": (torch.log, "pos"), "log1p": (torch.log1p, "gt-1"),
    "sqrt": (torch.sqrt, "pos"), "rsqrt": (torch.rsqrt, "pos"),
    "reciprocal": (torch.reciprocal, "pos"), "abs": (torch.abs, "any"), "neg": (torch.neg, "any"),
    "sign": (torch.sign, "any"), "floor": (torch.floor, "any"), "ceil": (torch.ceil, "any"),
    "tanh": (torch.tanh, "any"), "sigmoid": (torch.sigmoid, "any"), "relu": (torch.relu, "any"),
    "silu": (F.silu, "any"), "softplus": (F.softplus, "any"), "erf": (torch.erf, "any"),
    "cos": (torch.cos, "any"), "square": (torch.square, "any"), "sin": (torch.sin, "any"),
    "expm1": (torch.expm1, "any"),
}
#: op -> (in-place method name, out= callable) for the variants test.
VARIANTS = {
    "exp": ("exp_", torch.exp), "sqrt": ("sqrt_", torch.sqrt), "tanh": ("tanh_", torch.tanh),
    "sigmoid": ("sigmoid_", torch.sigmoid), "relu": ("relu_", None), "erf": ("erf_", torch.erf),
    "sign": ("sign_", torch.sign), "reciprocal": ("reciprocal_", torch.reciprocal),
}
FIXED_SHAPES = [(0,), (1,), (1000, 37), (3, 5, 7), (5000,)]


def _input(domain: str, shape, dtype=torch.float32, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    if domain == "pos":
        x = x.abs() + 0.05
    elif domain == "gt-1":
        x = x.abs() - 0.9
    return x.to(dtype)


def _check(name: str, shape, dtype=torch.float32) -> None:
    fn, domain = OPS[name]
    x = _input(domain, shape, dtype)
    trnlang.reset_fallback_stats()
    got = fn(x.to("trn"))
    assert trnlang.fallback_stats() == {}, (name, shape, trnlang.fallback_stats())
    if dtype == torch.float32:
        # tight against the correctly rounded (fp64) result: torch's own fp32 gelu is off by ~1e-6 near -3
        assert_same(got, fn(x.double()).float(), rtol=2e-6, atol=1e-6)
        assert_same(got, fn(x), rtol=1e-5, atol=2e-6)
    else:
        assert_same(got, fn(x), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("name", sorted(OPS))
def test_fixed_shapes_fp32(name):
    for shape in FIXED_SHAPES:
        _check(name, shape)


@pytest.mark.parametrize("name", sorted(OPS))
@_SETTINGS
@given(shape=st.lists(st.integers(0, 300), min_size=1, max_size=3).map(tuple))
def test_random_shapes_fp32(name, shape):
    _check(name, shape)


@pytest.mark.parametrize("name", sorted(OPS))
def test_bf16(name):
    _check(name, (130, 33), torch.bfloat16)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_inplace_and_out(name):
    method, out_fn = VARIANTS[name]
    fn, domain = OPS[name]
    x = _input(domain, (129, 40))
    ref = fn(x)
    trnlang.reset_fallback_stats()
    xt = x.to("trn")
    r = getattr(xt, method)()
    assert r is xt
    if out_fn is not None:
        dest = torch.empty_like(x).to("trn")
        out_fn(x.to("trn"), out=dest)
        assert_same(dest, ref, rtol=2e-6, atol=1e-6)
        empty = torch.empty(0, device="trn")
        out_fn(x.to("trn"), out=empty)
        assert_same(empty, ref, rtol=2e-6, atol=1e-6)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    assert_same(xt, ref, rtol=2e-6, atol=1e-6)


def test_softplus_variants():
    x = _input("any", (64, 50))
    trnlang.reset_fallback_stats()
    xt = x.to("trn")
    dest = torch.empty_like(xt)
    torch.ops.aten.softplus.out(xt, 1, 20, out=dest)
    assert_same(dest, F.softplus(x), rtol=2e-6, atol=1e-6)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    # unsupported arguments are declined (CPU fallback), still correct
    trnlang.reset_fallback_stats()
    assert_same(F.softplus(xt, beta=2.0, threshold=5.0), F.softplus(x, beta=2.0, threshold=5.0))
    assert sum(v for k, v in trnlang.fallback_stats().items() if "softplus" in k) == 1


@pytest.mark.parametrize("name", ["exp", "tanh", "silu", "softplus"])
def test_non_contiguous_falls_back(name):
    fn, domain = OPS[name]
    x = _input(domain, (40, 70))
    trnlang.reset_fallback_stats()
    got = fn(x.to("trn").t())
    assert_same(got, fn(x.t()), rtol=2e-6, atol=1e-6)
    assert sum(trnlang.fallback_stats().values()) >= 1


def test_other_dtypes_fall_back():
    x = torch.randn(20, 30, dtype=torch.float64)
    trnlang.reset_fallback_stats()
    got = torch.exp(x.to("trn"))
    assert got.dtype == torch.float64
    assert_same(got, torch.exp(x), rtol=1e-12, atol=1e-12)
    assert sum(trnlang.fallback_stats().values()) >= 1
