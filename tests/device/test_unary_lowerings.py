"""The unary family (stdlib_kernels/elementwise/unary.py): trn vs CPU, no fallbacks, strided inputs, in-place / out= /
declines."""

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

#: test name -> (function, input domain: "any" | "pos" (> 0) | "gt-1" (> -1) | "unit" (-1, 1) | "ge1" | "prob").
OPS = {
    "exp": (torch.exp, "any"), "log": (torch.log, "pos"), "log1p": (torch.log1p, "gt-1"),
    "sqrt": (torch.sqrt, "pos"), "rsqrt": (torch.rsqrt, "pos"),
    "reciprocal": (torch.reciprocal, "pos"), "abs": (torch.abs, "any"), "neg": (torch.neg, "any"),
    "sign": (torch.sign, "any"), "floor": (torch.floor, "any"), "ceil": (torch.ceil, "any"),
    "tanh": (torch.tanh, "any"), "sigmoid": (torch.sigmoid, "any"), "relu": (torch.relu, "any"),
    "silu": (F.silu, "any"), "softplus": (F.softplus, "any"), "erf": (torch.erf, "any"),
    "cos": (torch.cos, "any"), "square": (torch.square, "any"), "sin": (torch.sin, "any"),
    "expm1": (torch.expm1, "any"),
    # issue 6
    "trunc": (torch.trunc, "any"), "round": (torch.round, "any"), "frac": (torch.frac, "any"),
    "round_dec2": (lambda t: torch.round(t, decimals=2), "any"),
    "round_dec-1": (lambda t: torch.round(t, decimals=-1), "any"),
    "sinh": (torch.sinh, "any"), "cosh": (torch.cosh, "any"), "tan": (torch.tan, "any"),
    "asin": (torch.asin, "unit"), "acos": (torch.acos, "unit"), "atan": (torch.atan, "any"),
    "asinh": (torch.asinh, "any"), "acosh": (torch.acosh, "ge1"), "atanh": (torch.atanh, "unit"),
    "log2": (torch.log2, "pos"), "log10": (torch.log10, "pos"), "exp2": (torch.exp2, "any"),
    "erfc": (torch.erfc, "any"), "erfinv": (torch.erfinv, "unit"), "lgamma": (torch.lgamma, "pos"),
    "digamma": (torch.digamma, "any"), "lgamma_any": (torch.lgamma, "any"),
    "logit": (torch.logit, "prob"), "logit_eps": (lambda t: torch.logit(t, eps=0.2), "prob"),
    "deg2rad": (torch.deg2rad, "any"), "rad2deg": (torch.rad2deg, "any"), "sgn": (torch.sgn, "any"),
    "gelu": (F.gelu, "any"), "gelu_tanh": (lambda t: F.gelu(t, approximate="tanh"), "any"),
    "softplus_b2": (lambda t: F.softplus(t, beta=2.0, threshold=5.0), "any"),
    "sinc": (torch.sinc, "any"), "entr": (torch.special.entr, "any"),
    "nan_to_num": (torch.nan_to_num, "special"),
    "nan_to_num_args": (lambda t: torch.nan_to_num(t, nan=1.5, posinf=7.0, neginf=-3.0), "special"),
}
#: boolean-valued ops, checked for equality
BOOL_OPS = {"isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite, "isposinf": torch.isposinf,
            "isneginf": torch.isneginf, "signbit": torch.signbit, "logical_not": torch.logical_not}
#: op -> (in-place method name, out= callable) for the variants test.
VARIANTS = {
    "exp": ("exp_", torch.exp), "sqrt": ("sqrt_", torch.sqrt), "tanh": ("tanh_", torch.tanh),
    "sigmoid": ("sigmoid_", torch.sigmoid), "relu": ("relu_", None), "erf": ("erf_", torch.erf),
    "sign": ("sign_", torch.sign), "reciprocal": ("reciprocal_", torch.reciprocal),
    "sinh": ("sinh_", torch.sinh), "atan": ("atan_", torch.atan), "trunc": ("trunc_", torch.trunc),
    "erfinv": ("erfinv_", torch.erfinv), "log2": ("log2_", torch.log2),
}
FIXED_SHAPES = [(0,), (), (1000, 37)]
MORE_SHAPES = [(5000,), (2, 3, 4, 5, 6), (1,)]
#: representative ops for the (compile-heavy) random-shape and extra-shape tests: one per kind of formula
REPRESENTATIVE = ["exp", "asinh", "erfinv", "round_dec2", "nan_to_num", "gelu", "lgamma", "logit_eps"]
SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e-30, -1e-30, 3e38, -3e38, 0.5, -0.5, 2.5, -2.5]


def _input(domain: str, shape, dtype=torch.float32, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    if domain == "pos":
        x = x.abs() + 0.05
    elif domain == "gt-1":
        x = x.abs() - 0.9
    elif domain == "unit":
        x = torch.tanh(x) * 0.999
    elif domain == "ge1":
        x = x.abs() + 1.0
    elif domain == "prob":
        x = torch.sigmoid(x)
    elif domain == "special" and x.numel():
        flat = x.view(-1)
        k = min(len(SPECIAL), flat.numel())
        flat[:k] = torch.tensor(SPECIAL[:k])
    return x.to(dtype)


def _tols(name: str) -> tuple[float, float]:
    # lgamma / tan / sinh / cosh: torch's own fp32 kernels are a few ulp off (near roots, poles and overflow)
    return {"lgamma": (2e-5, 2e-5), "lgamma_any": (2e-5, 2e-5), "tan": (1e-5, 1e-5), "erfinv": (1e-5, 1e-5),
            "digamma": (2e-5, 2e-5)}.get(name, (2e-6, 1e-6))


def _check(name: str, shape, dtype=torch.float32, transpose: bool = False) -> None:
    fn, domain = OPS[name]
    x = _input(domain, shape, dtype)
    xt = x.to("trn")
    if transpose and x.dim() >= 2:
        x, xt = x.transpose(0, 1), xt.transpose(0, 1)
    trnlang.reset_fallback_stats()
    got = fn(xt)
    assert trnlang.fallback_stats() == {}, (name, shape, trnlang.fallback_stats())
    if dtype == torch.float32:
        # tight against the correctly rounded (fp64) result, looser against torch's fp32 kernels
        rtol, atol = _tols(name)
        # nan_to_num: its defaults are the float64 limits there; round_dec: x * 10**d rounds differently in fp64
        if not name.startswith(("nan_to_num", "round_dec")):
            assert_same(got, fn(x.double()).float(), rtol=rtol, atol=atol)
        loose = name in ("sinh", "cosh", "lgamma", "lgamma_any", "digamma")  # torch's fp32 kernels
        assert_same(got, fn(x), rtol=1e-4 if loose else 1e-5, atol=1e-5 if loose else 2e-6)
    elif dtype == torch.float16:
        assert_same(got, fn(x), rtol=2e-3, atol=2e-3)
    else:
        assert_same(got, fn(x), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("name", sorted(OPS))
def test_fixed_shapes_fp32(name):
    for shape in FIXED_SHAPES:
        _check(name, shape)


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_more_shapes_fp32(name):
    for shape in MORE_SHAPES:
        _check(name, shape)


@pytest.mark.parametrize("name", REPRESENTATIVE)
@_SETTINGS
@given(shape=st.lists(st.integers(0, 300), min_size=1, max_size=3).map(tuple), transpose=st.booleans())
def test_random_shapes_fp32(name, shape, transpose):
    _check(name, shape, transpose=transpose)


@pytest.mark.parametrize("name", sorted(OPS))
def test_bf16(name):
    _check(name, (130, 33), torch.bfloat16, transpose=name in REPRESENTATIVE)


@pytest.mark.parametrize("name", REPRESENTATIVE + ["sinh", "trunc", "erfc"])
def test_fp16(name):
    _check(name, (130, 33), torch.float16, transpose=True)


@pytest.mark.parametrize("name", sorted(BOOL_OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bool_valued(name, dtype):
    fn = BOOL_OPS[name]
    x = _input("special", (67, 29), dtype)
    for xs, xts in ((x, x.to("trn")), (x.t(), x.to("trn").t()), (x[::2, 3:], x.to("trn")[::2, 3:])):
        trnlang.reset_fallback_stats()
        got = fn(xts)
        assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
        assert got.dtype == torch.bool
        assert torch.equal(got.cpu(), fn(xs))


def test_signbit_of_signed_zeros():
    x = torch.tensor([-0.0, 0.0, -1.0, 1.0, -math.inf])
    assert torch.signbit(x.to("trn")).cpu().tolist() == torch.signbit(x).tolist()


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool])
def test_int_and_bool_ops(dtype):
    x = torch.tensor([[0, 1, -5, 2**31 - 1, -2**31, 7]], dtype=torch.int32).to(dtype)
    trnlang.reset_fallback_stats()
    assert torch.equal(torch.bitwise_not(x.to("trn")).cpu(), torch.bitwise_not(x))
    assert torch.equal(torch.logical_not(x.to("trn")).cpu(), torch.logical_not(x))
    assert torch.equal((~x.to("trn").t()).cpu(), ~x.t())
    for name, fn in BOOL_OPS.items():
        assert torch.equal(fn(x.to("trn")).cpu(), fn(x)), name
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_atan2_broadcast_and_strided(dtype):
    a = torch.randn(40, 70).to(dtype)
    b = torch.randn(70).to(dtype)
    trnlang.reset_fallback_stats()
    got = torch.atan2(a.to("trn").t(), b.to("trn")[:40])
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    tol = 2e-6 if dtype == torch.float32 else 1e-2
    assert_same(got, torch.atan2(a.t(), b[:40]), rtol=tol, atol=tol)
    s = torch.tensor([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan])
    x, y = torch.meshgrid(s, s, indexing="ij")
    assert_same(torch.atan2(x.to("trn"), y.to("trn")), torch.atan2(x, y), rtol=0, atol=0)


def test_special_values_match_torch():
    x = torch.tensor(SPECIAL + [1.0, -1.0, 2.0, -3.0, 0.9999999, 89.0, -89.0, 100.0])
    for name in ("trunc", "round", "frac", "sinh", "cosh", "atan", "asinh", "exp2", "erfc", "sgn", "gelu",
                 "gelu_tanh", "deg2rad", "nan_to_num", "log2", "erfinv", "asin", "acosh", "atanh", "entr",
                 "digamma"):
        fn, _ = OPS[name]
        got = fn(x.to("trn")).cpu()
        want = fn(x.double()).float() if name != "nan_to_num" else fn(x)
        if name == "gelu":  # torch's fp32 gelu(+inf) is NaN (and so is ours); float64's is inf
            assert math.isnan(got[1]) and math.isnan(F.gelu(x)[1])
            want[1] = math.nan
        torch.testing.assert_close(got, want, rtol=2e-6, atol=0, equal_nan=True, msg=name)


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
        assert_same(dest, ref, rtol=1e-5, atol=1e-6)
        empty = torch.empty(0, device="trn")
        out_fn(x.to("trn"), out=empty)
        assert_same(empty, ref, rtol=1e-5, atol=1e-6)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    assert_same(xt, ref, rtol=1e-5, atol=1e-6)


def test_inplace_on_a_transposed_view():
    x = torch.randn(50, 60)
    xt = x.to("trn")
    v = xt.t()
    trnlang.reset_fallback_stats()
    v.sinh_()
    assert trnlang.fallback_stats() == {}
    assert_same(xt, torch.sinh(x), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["exp", "tanh", "silu", "softplus", "asinh", "erfinv"])
def test_non_contiguous_runs_natively(name):
    fn, domain = OPS[name]
    x = _input(domain, (40, 70))
    trnlang.reset_fallback_stats()
    xt = x.to("trn")
    for got, want in ((fn(xt.t()), fn(x.t())), (fn(xt[3:, ::3]), fn(x[3:, ::3])),
                      (fn(xt.unsqueeze(0).expand(3, 40, 70)), fn(x.unsqueeze(0).expand(3, 40, 70)))):
        assert_same(got, want, rtol=1e-5, atol=1e-6)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()


def test_other_dtypes_and_bad_out_fall_back():
    x = torch.randn(20, 30, dtype=torch.float64)
    trnlang.reset_fallback_stats()
    got = torch.exp(x.to("trn"))
    assert got.dtype == torch.float64
    assert_same(got, torch.exp(x), rtol=1e-12, atol=1e-12)
    assert sum(trnlang.fallback_stats().values()) >= 1
    # an out= of a dtype the lowering does not store: computed in the result dtype, then cast, as torch does
    trnlang.reset_fallback_stats()
    y = torch.randn(5, 6)
    dest = torch.empty(5, 6, dtype=torch.float64, device="trn")
    torch.sinh(y.to("trn"), out=dest)
    assert_same(dest, torch.sinh(y, out=torch.empty(5, 6, dtype=torch.float64)), rtol=1e-6, atol=1e-6)
    assert trnlang.fallback_stats() == {}


def test_errors_are_torchs():
    with pytest.raises(RuntimeError):
        torch.atan2(torch.randn(3, 4, device="trn"), torch.randn(5, device="trn"))


def test_profile_of_the_unary_kernel():
    from stdlib_kernels.elementwise.unary import ew

    x = torch.randn(256, 1024, device="trn")
    out = torch.empty_like(x)
    p = ew.profile(x, None, None, out, "gelu_tanh", (), "f32")
    assert_same(out, F.gelu(x.cpu(), approximate="tanh"), rtol=2e-6, atol=1e-6)
    assert p.time_us > 0
    assert all(0 <= e.utilization <= 1 for e in p.engines.values()), p.engines
    assert p.engines["dma"].instructions > 0 and p.engines["scalar"].instructions > 0


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool])
def test_integer_inputs_promote_to_float32(dtype):
    """exp2/sin/sqrt/... of an integer tensor: computed in fp32 into a float32 result, as torch promotes."""
    x = torch.arange(-5, 7).to(dtype) if dtype in (torch.int32, torch.int16, torch.int8) else torch.arange(12).to(dtype)
    for f in (torch.exp2, torch.sin, torch.sqrt, torch.sigmoid, torch.log1p, torch.rsqrt):
        trnlang.reset_fallback_stats()
        got = f(x.to("trn"))
        assert trnlang.fallback_stats() == {}, (f, trnlang.fallback_stats())
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), f(x), equal_nan=True, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_integer_relu(dtype):
    """relu / relu_ of integer tensors (int64 across the whole range: cumprod's backward uses it)."""
    if dtype == torch.int64:
        x = torch.tensor([[-3, 5], [2**40, -(2**40)], [0, 7], [-(2**63), 2**63 - 1]], dtype=dtype)
    else:
        info = torch.iinfo(dtype)
        x = torch.tensor([info.min, -1, 0, 1, info.max], dtype=dtype)
    t = x.to("trn")
    trnlang.reset_fallback_stats()
    got = torch.relu(t)
    t.relu_()
    assert trnlang.fallback_stats() == {}
    assert torch.equal(got.cpu(), torch.relu(x)) and torch.equal(t.cpu(), torch.relu(x))


def test_complex_sgn():
    """sgn of complex64 (polar's backward): z / |z|, 0 at 0, no overflow for huge parts."""
    z = torch.tensor([3 + 4j, 0j, -1e30 + 1e30j, 1j, -2 + 0j, 1e-30 - 1e-30j], dtype=torch.complex64)
    z = torch.cat([z, torch.randn(37, dtype=torch.complex64)]).reshape(43)[::2]  # non-contiguous too
    trnlang.reset_fallback_stats()
    got = torch.sgn(z.to("trn"))
    assert trnlang.fallback_stats() == {}
    torch.testing.assert_close(got.cpu(), torch.sgn(z), rtol=1e-6, atol=1e-6)
