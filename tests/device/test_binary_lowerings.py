"""The binary elementwise family (stdlib_kernels/elementwise/pointwise.py): trn vs CPU, forward and backward, no
fallbacks."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.elementwise import pointwise as P
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])

#: name -> (function of two tensors, domain of the second operand: "any" | "pos" (> 0.5) | "nonzero").
OPS = {
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), "nonzero"),
    "div_trunc": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), "nonzero"),
    "floor_divide": (torch.floor_divide, "nonzero"),
    "pow": (lambda a, b: torch.pow(a.abs() + 0.1, b), "any"),
    "maximum": (torch.maximum, "any"), "minimum": (torch.minimum, "any"),
    "fmax": (torch.fmax, "any"), "fmin": (torch.fmin, "any"),
    "fmod": (torch.fmod, "nonzero"), "remainder": (torch.remainder, "nonzero"),
    "copysign": (torch.copysign, "any"), "hypot": (torch.hypot, "any"), "xlogy": (torch.xlogy, "pos"),
    "clamp_min": (torch.clamp_min, "any"), "clamp_max": (torch.clamp_max, "any"),
    "logaddexp": (torch.logaddexp, "any"),
}
#: ops with a gradient checked against the CPU.
GRAD_OPS = ("pow", "maximum", "minimum", "fmax", "remainder", "copysign", "hypot", "xlogy", "clamp_min", "logaddexp")


def _pair(sa, sb, dom, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(sa, generator=g) * 3
    b = torch.randn(sb, generator=g) * 2
    if dom == "pos":
        b = b.abs() + 0.5
    elif dom == "nonzero":
        b = torch.where(b.abs() < 0.25, torch.full_like(b, 0.75), b)
    return a.to(dtype), b.to(dtype)


def _native(fn, *args):
    trnlang.reset_fallback_stats()
    r = fn(*args)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return r


def _check(name, sa, sb, dtype=torch.float32, transpose=False):
    fn, dom = OPS[name]
    a, b = _pair(sa, sb, dom, dtype)
    da, db = a.to("trn"), b.to("trn")
    if transpose:
        a, b, da, db = a.t(), b.t(), da.t(), db.t()
    got = _native(fn, da, db)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    exp = fn(a, b)
    assert got.dtype == exp.dtype and got.shape == exp.shape
    assert_same(got, exp, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(OPS))
def test_fixed_shapes_fp32(name):
    for sa, sb in [((0,), (0,)), ((1,), (1,)), ((130, 33), (33,)), ((3, 1, 5), (4, 1)), ((5000,), (5000,))]:
        _check(name, sa, sb)
    _check(name, (40, 7), (40, 7), transpose=True)


@pytest.mark.parametrize("name", ["div_floor", "remainder", "hypot", "pow", "fmax"])
@_SETTINGS
@given(shape=st.lists(st.integers(1, 300), min_size=1, max_size=3).map(tuple), bdim=st.booleans())
def test_random_shapes_fp32(name, shape, bdim):
    sb = shape[-1:] if bdim else shape
    _check(name, shape, sb)


@pytest.mark.parametrize("name", sorted(OPS))
def test_bf16(name):
    _check(name, (130, 33), (1, 33), torch.bfloat16)


def test_special_values():
    v = torch.tensor([0.0, -0.0, 1.5, -1.5, math.inf, -math.inf, math.nan, 3.0, -7.0, 1e-30, 1e30])
    a = v.repeat_interleave(len(v))
    b = v.repeat(len(v))
    for name in ("div_floor", "div_trunc", "maximum", "minimum", "fmax", "fmin", "fmod", "remainder", "copysign",
                 "hypot", "xlogy"):
        fn = OPS[name][0]
        got = _native(fn, a.to("trn"), b.to("trn"))
        assert_same(got, fn(a, b), rtol=1e-6, atol=0)
    got = _native(torch.pow, a.to("trn"), b.to("trn"))
    assert_same(got, torch.pow(a, b), rtol=1e-6, atol=0)


def test_scalar_overloads_and_variants():
    a = torch.randn(33, 70) * 4
    t = a.to("trn")
    for fn in (lambda x: x.pow(2), lambda x: x ** 0.5, lambda x: 2.0 ** x, lambda x: torch.remainder(x, 1.5),
               lambda x: torch.fmod(x, -0.7), lambda x: x // 0.3, lambda x: torch.clamp_min(x, 0.1),
               lambda x: torch.div(x, 3, rounding_mode="trunc"), lambda x: torch.xlogy(2.0, x.abs() + 1)):
        assert_same(_native(fn, t), fn(a))
    x, y = t.clone(), a.clone()
    _native(lambda: x.pow_(2).remainder_(0.9).clamp_min_(0.2))
    assert_same(x, y.pow_(2).remainder_(0.9).clamp_min_(0.2))
    out = torch.empty(33, 70, device="trn")
    _native(lambda: torch.maximum(t, t[:1], out=out))
    assert_same(out, torch.maximum(a, a[:1]))


def test_integer_division_exact():
    g = torch.Generator().manual_seed(1)
    big = torch.randint(-2**31, 2**31 - 1, (3000,), dtype=torch.int32, generator=g)
    for d in (1, -1, 3, -7, 1000003, 2**30):
        for fn in (lambda x: torch.div(x, d, rounding_mode="floor"), lambda x: torch.div(x, d, rounding_mode="trunc"),
                   lambda x: torch.remainder(x, d), lambda x: torch.fmod(x, d), lambda x: x // d):
            got = _native(fn, big.to("trn"))
            assert got.dtype == torch.int32
            assert torch.equal(got.cpu(), fn(big))


def test_integer_tensor_divisor_and_zero_division_raises_like_torch():
    a = torch.arange(-6, 6, dtype=torch.int32)
    b = torch.tensor([3, 0] * 6, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.div(a, b, rounding_mode="floor")
    trnlang.reset_fallback_stats()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # a zero divisor is found on device: declined
        torch.div(a.to("trn"), b.to("trn"), rounding_mode="floor")
    assert trnlang.fallback_stats() == {"aten::div.Tensor_mode": 1}
    g = torch.Generator().manual_seed(4)
    x = torch.randint(-2**31, 2**31 - 1, (300, 7), dtype=torch.int32, generator=g)
    y = torch.randint(1, 2**20, (7,), dtype=torch.int32, generator=g) * torch.tensor([1, -1, 1, -1, 1, -1, 1]).int()
    for fn in (torch.remainder, torch.fmod, torch.floor_divide, lambda p, q: torch.div(p, q, rounding_mode="trunc")):
        got = _native(fn, x.to("trn"), y.to("trn"))
        assert torch.equal(got.cpu(), fn(x, y))


def test_integer_power_exact():
    x = torch.randint(-2**31, 2**31 - 1, (500,), dtype=torch.int32, generator=torch.Generator().manual_seed(5))
    for k in (0, 1, 2, 3, 12, 33):
        got = _native(torch.pow, x.to("trn"), k)
        assert torch.equal(got.cpu(), torch.pow(x, k))
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.pow(x.to("trn"), -1)
    e = torch.randint(-3, 70, (500,), dtype=torch.int32, generator=torch.Generator().manual_seed(6))
    x[:4] = torch.tensor([1, -1, -1, 0], dtype=torch.int32)
    e[:4] = torch.tensor([-3, -3, -4, -1], dtype=torch.int32)
    assert torch.equal(_native(torch.pow, x.to("trn"), e.to("trn")).cpu(), torch.pow(x, e))
    assert torch.equal(_native(torch.pow, 3, e.to("trn").abs()).cpu(), torch.pow(3, e.abs()))


def test_int64_bool_and_int_operands():
    g = torch.Generator().manual_seed(2)
    i = torch.randint(-1000, 1000, (70, 33), generator=g)  # int64
    j = torch.randint(-1000, 1000, (33,), dtype=torch.int32, generator=g)
    m = torch.rand(70, 33, generator=g) > 0.5
    f = torch.randn(70, 33, generator=g)
    for fn in (lambda x, y, z, w: x + y, lambda x, y, z, w: x * 3 - y, lambda x, y, z, w: x + z,
               lambda x, y, z, w: z * z, lambda x, y, z, w: x * w, lambda x, y, z, w: torch.maximum(x, y),
               lambda x, y, z, w: x // 7, lambda x, y, z, w: x.t() + 1, lambda x, y, z, w: z + 1,
               lambda x, y, z, w: (x + 5) / 2, lambda x, y, z, w: torch.sub(y.to(torch.int16), 4, alpha=3)):
        got = _native(fn, i.to("trn"), j.to("trn"), m.to("trn"), f.to("trn"))
        exp = fn(i, j, m, f)
        assert got.dtype == exp.dtype
        assert_same(got, exp)
    x = i.to("trn")
    _native(lambda: x.add_(1))
    assert_same(x, i + 1)


def test_int64_out_of_int32_range():
    """Sums and products beyond int32 run on the int32 words (int64_words), natively."""
    big = torch.tensor([2**40, -3, 5])
    trnlang.reset_fallback_stats()
    got = big.to("trn") + 1
    assert trnlang.fallback_stats() == {}
    assert torch.equal(got.cpu(), big + 1)
    i32 = torch.tensor([2**31 - 1, 5], dtype=torch.int32)  # an int64 sum of it does not fit int32
    got = i32.to("trn") + torch.tensor([5, 6]).to("trn")
    assert trnlang.fallback_stats() == {}
    assert torch.equal(got.cpu(), i32 + torch.tensor([5, 6]))
    got = big.to("trn") * 3
    assert trnlang.fallback_stats() == {}
    assert torch.equal(got.cpu(), big * 3)
    small = big[1:].to("trn")
    assert torch.equal(_native(lambda: torch.add(small, 4, alpha=-3)).cpu(), torch.add(big[1:], 4, alpha=-3))
    assert P.int64_ok(torch.tensor([2**31 - 2, -2**31 + 1]).to("trn"), 2**31)
    assert not P.int64_ok(torch.tensor([0, 2**31]).to("trn"), 2**31)
    assert not P.int64_ok(torch.tensor([-2**31 - 1, 0]).to("trn"), 2**31)
    assert not P.int64_ok(torch.tensor([[2**15], [0]]).to("trn"), 2**15)  # bounds per op (mul: 2**15)


@pytest.mark.parametrize("name", GRAD_OPS)
def test_backward(name):
    fn, dom = OPS[name]
    a, b = _pair((37, 20), (20,), dom)
    ca, cb = a.clone().requires_grad_(), b.clone().requires_grad_()
    ta, tb = a.to("trn").requires_grad_(), b.to("trn").requires_grad_()
    g = torch.randn(37, 20)
    fn(ca, cb).backward(g)
    trnlang.reset_fallback_stats()
    fn(ta, tb).backward(g.to("trn"))
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    assert_same(ta.grad, ca.grad, rtol=1e-4, atol=1e-5)
    assert_same(tb.grad, cb.grad, rtol=1e-4, atol=1e-5)


def test_div_backward_and_errors():
    a, b = _pair((30, 9), (9,), "pos")
    ca, cb = a.clone().requires_grad_(), b.clone().requires_grad_()
    ta, tb = a.to("trn").requires_grad_(), b.to("trn").requires_grad_()
    (ca / cb).pow(2).sum().backward()
    trnlang.reset_fallback_stats()
    (ta / tb).pow(2).sum().backward()
    assert trnlang.fallback_stats() == {}
    assert_same(ta.grad, ca.grad, rtol=1e-4, atol=1e-5)
    assert_same(tb.grad, cb.grad, rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="size of tensor a"):
        torch.maximum(torch.ones(3, device="trn"), torch.ones(4, device="trn"))
    with pytest.raises(RuntimeError, match="rounding_mode"):
        torch.div(torch.ones(3, device="trn"), 2, rounding_mode="round")


def test_profile_is_sane():
    a, b = _pair((256, 1000), (256, 1000), "nonzero")
    out = torch.empty(256, 1000, device="trn")
    prof = P.elementwise.profile(a.to("trn"), b.to("trn"), None, out, "remainder", (False, False), "f32")
    assert prof.time_us > 0 and prof.cycles > 0
    assert prof.engines and all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    assert prof.engines["vector"].instructions > 0 and 0 < prof.mbu <= 1
    assert prof.dma_bytes >= 3 * 4 * 256 * 1000  # two operands read, one result written
    assert_same(out, torch.remainder(a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_logaddexp_extremes(dtype, monkeypatch):
    """logaddexp over every pair of extreme values (equal infinities, NaN, overflowing exponents) as the CPU."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    v = torch.tensor([0.0, -0.0, 1.0, -1.0, 30.0, 88.7, -100.0, 1e4, -1e4, math.inf, -math.inf, math.nan]).to(dtype)
    a, b = v.repeat_interleave(len(v)), v.repeat(len(v))
    torch.testing.assert_close(torch.logaddexp(a.to("trn"), b.to("trn")).cpu(), torch.logaddexp(a, b), equal_nan=True)


def test_logaddexp_complex64(monkeypatch):
    """complex64 logaddexp natively (broadcast, out=), equal to the CPU's within fp32 rounding."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(40, 9, dtype=torch.complex64, generator=g) * 6
    y = torch.randn(9, dtype=torch.complex64, generator=g) * 6
    torch.testing.assert_close(torch.logaddexp(x.to("trn"), y.to("trn")).cpu(), torch.logaddexp(x, y))
    out = torch.empty(0, dtype=torch.complex64, device="trn")
    torch.logaddexp(y.to("trn"), x.to("trn"), out=out)
    torch.testing.assert_close(out.cpu(), torch.logaddexp(y, x))


def test_copysign_takes_the_sign_bit_of_nan(monkeypatch):
    """copysign reads a float ``other``'s sign bit (NaN's too: a compare cannot see it), any dtype pair, as the CPU."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    v = torch.tensor([0.0, -0.0, 1.5, -2.5, math.inf, -math.inf, math.nan, -math.nan])
    a, b = v.repeat_interleave(len(v)), v.repeat(len(v))
    for da in (torch.float32, torch.bfloat16, torch.float16, torch.int32):
        x = a.to(da) if da.is_floating_point else torch.arange(len(a), dtype=da) - 30
        for db in (torch.float32, torch.bfloat16, torch.float16):
            exp, got = torch.copysign(x, b.to(db)), torch.copysign(x.to("trn"), b.to(db).to("trn")).cpu()
            assert got.dtype == exp.dtype and torch.equal(torch.signbit(got), torch.signbit(exp)), (da, db)
            torch.testing.assert_close(got, exp, equal_nan=True)
    # a CPU scalar self with a NaN-holding trn other (upstream test_copysign's sign check)
    y = b.to("trn")
    assert torch.equal(torch.signbit(torch.copysign(torch.tensor(1.0), y).cpu()), torch.signbit(b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                                   torch.int8, torch.uint8, torch.bool])
def test_heaviside(dtype, monkeypatch):
    """heaviside natively for one dtype (NaN steps to 0, broadcasting), torch's errors for mixed dtypes / complex."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    if dtype.is_floating_point:
        x = torch.tensor([0.0, -0.0, 1.5, -2.5, math.inf, -math.inf, math.nan]).to(dtype)
        y = torch.tensor([0.5, 2, 3, 4, 5, 6, math.nan]).to(dtype)
    else:
        x, y = torch.tensor([0, 1, -3, 5, 0, 2, 0]).to(dtype), torch.tensor([7, 0, 1, 2, 3, 1, 9]).to(dtype)
    for p, q in ((x, y), (x[:, None], y[:3])):
        exp, got = torch.heaviside(p, q), torch.heaviside(p.to("trn"), q.to("trn")).cpu()
        assert got.dtype == exp.dtype
        torch.testing.assert_close(got, exp, equal_nan=True)
    other = torch.float16 if dtype != torch.float16 else torch.float32
    with pytest.raises(RuntimeError, match="different dtypes"):
        torch.heaviside(x.to("trn"), y.to(other).to("trn"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.int8, torch.uint8])
def test_number_remainder_and_inplace_floor_divide(dtype, monkeypatch):
    """``number % tensor`` (remainder.Scalar_Tensor) and ``t //= other`` (floor_divide_.Tensor/.Scalar, overloads
    the functional op's routing does not find) natively, as the CPU; torch's errors for a zero integer divisor and
    a float result into an integer tensor."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    b = torch.tensor([3, 3, 5, 7, 1, 2] if dtype == torch.uint8 else [3, -3, 5, -7, 1, 2]).to(dtype)
    for s in (7, 0, 2.5) if dtype == torch.uint8 else (7, -7, 0, 2.5, -1.5):
        exp, got = s % b, (s % b.to("trn")).cpu()
        assert got.dtype == exp.dtype
        torch.testing.assert_close(got, exp)
    a = (torch.arange(6) * 5 + 1).to(dtype)
    for other in (b, 4):
        x, e = a.to("trn"), a.clone()
        x //= other.to("trn") if isinstance(other, torch.Tensor) else other
        e //= other
        assert torch.equal(x.cpu(), e)
    if not dtype.is_floating_point:
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            torch.remainder(3, torch.zeros(2, dtype=dtype, device="trn"))
        with pytest.raises(RuntimeError, match="can't be cast"):
            x = a.to("trn")
            x //= 2.5
