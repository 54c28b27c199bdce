"""The special-function family (stdlib_kernels/elementwise/special.py): trn vs CPU, torch's special cases, no
fallbacks."""

import itertools
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.elementwise import special as SP
from stdlib_kernels.elementwise import unary as UN
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
S = torch.special
POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
         "legendre_polynomial_p"]
#: x and n values that hit every branch: |x| == 1, x == 0 (shifted), closed forms (n > 4/6/8), n < 0, fractional,
#: NaN / inf n, the Hermite limit (128), |x| > 1 growth to inf / NaN.
XS = [-math.inf, -9.0, -3.0, -1.5, -1.0, -0.999, -0.7, -0.3, 0.0, 0.2, 0.5, 0.75, 0.9999, 1.0, 1.7, 4.0, 8.9, math.inf]
NS = [-math.inf, -3.0, -0.5, 0.0, 0.9, 1.0, 2.0, 3.0, 4.7, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0, 25.0, 60.0, 127.0,
      128.0, 129.0, 300.0, 1e19, math.inf, math.nan]
BITS_DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SPECIAL_F = [0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-40, -3e-39, 1.1754944e-38, 3.4028235e38, -3.4028235e38,
             math.inf, -math.inf, math.nan, 0.5, -2.5, 7.0, 1e10, 6e-8, 1e-5]


def _no_fallback(fn):
    trnlang.reset_fallback_stats()
    r = fn()
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return r


def _rand(shape, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * scale


def _bits(t):
    return t.view({torch.float32: torch.int32}.get(t.dtype, torch.int16))


# ------------------------------------------------------------------------------------------- polynomials
@pytest.mark.parametrize("name", POLYS)
def test_polynomial_branches(name):
    x = torch.tensor([a for a, _ in itertools.product(XS, NS)])
    n = torch.tensor([b for _, b in itertools.product(XS, NS)])
    fn = getattr(S, name)
    out = _no_fallback(lambda: fn(x.to("trn"), n.to("trn")))
    assert_same(out, fn(x, n), rtol=1e-4, atol=1e-4)


def test_polynomial_nan_x():
    # torch returns NaN, or an uninitialised value for some kinds; the device returns NaN for n >= 2
    x = torch.tensor([math.nan] * 4)
    n = torch.tensor([-1.0, 0.0, 1.0, 5.0])
    out = _no_fallback(lambda: S.chebyshev_polynomial_u(x.to("trn"), n.to("trn"))).cpu()
    assert out[0] == 0 and out[1] == 1 and out[2].isnan() and out[3].isnan()


@_SETTINGS
@given(xs=st.sampled_from([(), (1,), (5,), (129, 3), (2, 0, 3), (3, 130)]),
       ns=st.sampled_from([(), (1,), (3, 1)]), name=st.sampled_from(["chebyshev_polynomial_t", "legendre_polynomial_p",
                                                                     "hermite_polynomial_he"]))
def test_polynomial_shapes_broadcast(xs, ns, name):
    try:
        shape = torch.broadcast_shapes(xs, ns)
    except RuntimeError:
        return
    x = torch.tanh(_rand(xs, 1)) * 1.2
    n = torch.randint(-1, 12, ns, generator=torch.Generator().manual_seed(2)).float()
    fn = getattr(S, name)
    out = _no_fallback(lambda: fn(x.to("trn"), n.to("trn")))
    assert out.shape == shape
    assert_same(out, fn(x, n), rtol=1e-4, atol=1e-4)


def test_polynomial_strided_out_and_scalars():
    x = _rand((40, 30), 3).t()  # a transposed view
    n = torch.randint(0, 10, (30, 40), generator=torch.Generator().manual_seed(4)).float()
    xt, nt = x.to("trn"), n.to("trn")
    assert_same(_no_fallback(lambda: S.laguerre_polynomial_l(xt, nt)), S.laguerre_polynomial_l(x, n), 1e-4, 1e-4)
    out = torch.empty(30, 40, device="trn")
    _no_fallback(lambda: torch.special.legendre_polynomial_p(xt, nt, out=out))
    assert_same(out, S.legendre_polynomial_p(x, n), 1e-4, 1e-4)
    assert_same(_no_fallback(lambda: S.hermite_polynomial_h(xt, 7)), S.hermite_polynomial_h(x, 7), 1e-4, 1e-4)
    assert_same(_no_fallback(lambda: S.chebyshev_polynomial_w(0.3, nt)), S.chebyshev_polynomial_w(0.3, n), 1e-4, 1e-4)
    assert_same(_no_fallback(lambda: S.chebyshev_polynomial_t(xt, torch.tensor(5.0))),
                S.chebyshev_polynomial_t(x, torch.tensor(5.0)), 1e-4, 1e-4)


def test_polynomial_long_recurrences():
    # |x| > 1 with a huge n: the recurrence provably overflows to NaN within a bounded number of steps (native)
    x = torch.tensor([3.0, -3.0, 1e5, 2.5, 0.5])
    n = torch.tensor([1e6, 1e7, 1e9, 3e5, 1e6])
    for name, k in (("chebyshev_polynomial_t", 5), ("shifted_chebyshev_polynomial_u", 5), ("legendre_polynomial_p", 4)):
        fn = getattr(S, name)  # (Legendre at |x| < 1 has no closed form: x = 0.5 would be a 1e6-step loop)
        assert_same(_no_fallback(lambda: fn(x[:k].to("trn"), n[:k].to("trn"))), fn(x[:k], n[:k]), 1e-4, 1e-4)
    # a long bounded recurrence (Laguerre / Legendre at |x| < 1) above MAX_STEPS is declined to the CPU
    x, n = torch.tensor([0.5, 0.25]), torch.tensor([3.0, float(SP.MAX_STEPS + 10)])
    trnlang.reset_fallback_stats()
    out = S.laguerre_polynomial_l(x.to("trn"), n.to("trn"))
    assert trnlang.fallback_stats() != {}
    assert_same(out, S.laguerre_polynomial_l(x, n), rtol=1e-4, atol=1e-4)


def test_polynomial_moderate_degrees():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(3000, generator=g) * 2.4 - 1.2
    n = torch.randint(0, 60, (3000,), generator=g).float()
    for name in POLYS:
        fn = getattr(S, name)
        xx = (x + 1) / 2 if name.startswith("shifted") else x
        assert_same(_no_fallback(lambda: fn(xx.to("trn"), n.to("trn"))), fn(xx, n), rtol=1e-4, atol=1e-3)


# ------------------------------------------------------------------------------------ erfcx, log_ndtr, ndtri
EDGE = [-30.0, -27.0, -26.0, -10.0, -6.2, -6.0, -3.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 2.0, 5.0, 10.0, 49.0, 51.0,
        1e3, 1e6, 4e7, 6e7, 1e10, 1e30, math.inf, -math.inf, math.nan, 3e38]


@pytest.mark.parametrize("name", ["erfcx", "log_ndtr"])
def test_erfcx_log_ndtr(name):
    fn = getattr(S, name)
    x = torch.cat([torch.tensor(EDGE), _rand((200, 7)).flatten() * 2])
    assert_same(_no_fallback(lambda: fn(x.to("trn"))), fn(x), rtol=1e-5, atol=1e-6)


def test_ndtri():
    g = torch.Generator().manual_seed(6)
    y = torch.cat([torch.tensor([0.0, 1.0, -0.1, 1.1, math.nan, 1e-30, 1e-10, 1e-20, 0.5, 0.1353, 0.8647, 1 - 1e-7]),
                   torch.rand(2000, generator=g)])
    assert_same(_no_fallback(lambda: S.ndtri(y.to("trn"))), S.ndtri(y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["erfcx", "log_ndtr", "ndtri"])
def test_special_backward(name):
    fn = getattr(S, name)
    x = torch.sigmoid(_rand((33, 17), 7)) if name == "ndtri" else _rand((33, 17), 7)
    g = _rand((33, 17), 8)
    xc = x.clone().requires_grad_()
    fn(xc).backward(g)
    xt = x.to("trn").requires_grad_()
    _no_fallback(lambda: fn(xt).backward(g.to("trn")))
    assert_same(xt.grad, xc.grad, rtol=1e-4, atol=1e-5)


@_SETTINGS
@given(shape=st.sampled_from([(0,), (), (1,), (129,), (5000,), (2, 130, 3)]), transpose=st.booleans())
def test_erfcx_shapes_strides(shape, transpose):
    x = _rand(shape, 9)
    if transpose and x.dim() >= 2:
        x = x.transpose(0, -1)
    assert_same(_no_fallback(lambda: S.erfcx(x.to("trn"))), S.erfcx(x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------- angle, nextafter, frexp
@pytest.mark.parametrize("dtype", BITS_DTYPES)
def test_angle(dtype):
    x = torch.cat([torch.tensor([-1.0, 0.0, -0.0, 2.0, math.nan, -math.inf, math.inf]), _rand(50).flatten()])
    x = x.to(dtype)
    assert_same(_no_fallback(lambda: torch.angle(x.to("trn"))), torch.angle(x), rtol=0, atol=0)
    xc = x.float().clone().requires_grad_()
    xt = x.float().to("trn").requires_grad_()
    _no_fallback(lambda: torch.angle(xt).sum().backward())
    torch.angle(xc).sum().backward()
    assert_same(xt.grad, xc.grad)


@pytest.mark.parametrize("dtype", BITS_DTYPES)
def test_nextafter_bits(dtype):
    x = torch.tensor([a for a in SPECIAL_F for _ in SPECIAL_F]).to(dtype)
    y = torch.tensor([b for _ in SPECIAL_F for b in SPECIAL_F]).to(dtype)
    got = _no_fallback(lambda: torch.nextafter(x.to("trn"), y.to("trn"))).cpu()
    exp = torch.nextafter(x, y)
    same = (_bits(got) == _bits(exp)) | (got.isnan() & exp.isnan())
    assert bool(same.all()), (x[~same], y[~same], got[~same], exp[~same])


def test_nextafter_broadcast_strided_out():
    x = _rand((30, 20), 10).t()
    y = _rand((20,), 11)[:, None]
    out = torch.empty(20, 30, device="trn")
    _no_fallback(lambda: torch.nextafter(x.to("trn"), y.to("trn"), out=out))
    assert torch.equal(out.cpu(), torch.nextafter(x, y))
    s = torch.tensor(0.0)
    assert torch.equal(_no_fallback(lambda: torch.nextafter(x.to("trn"), s.to("trn"))).cpu(), torch.nextafter(x, s))


@pytest.mark.parametrize("dtype", BITS_DTYPES)
def test_frexp_bits(dtype):
    x = torch.cat([torch.tensor(SPECIAL_F), _rand(200, 12) * torch.exp(_rand(200, 13) * 10)]).to(dtype)
    m, e = _no_fallback(lambda: torch.frexp(x.to("trn")))
    em, ee = torch.frexp(x)
    m = m.cpu()
    assert m.dtype == dtype and e.dtype == torch.int32
    assert bool(((_bits(m) == _bits(em)) | (m.isnan() & em.isnan())).all())
    assert torch.equal(e.cpu(), ee)


def test_frexp_shapes_and_inplace():
    for shape in [(), (0, 3), (7, 1), (130, 5)]:
        x = _rand(shape, 14) * 1e3
        m, e = _no_fallback(lambda: torch.frexp(x.to("trn")))
        em, ee = torch.frexp(x)
        assert torch.equal(m.cpu(), em) and torch.equal(e.cpu(), ee)
    x = _rand((40, 30), 15)
    xt = x.to("trn")
    e = torch.empty(40, 30, dtype=torch.int32, device="trn")
    _no_fallback(lambda: torch.frexp(xt, out=(xt, e)))  # mantissa written over the input
    em, ee = torch.frexp(x)
    assert torch.equal(xt.cpu(), em) and torch.equal(e.cpu(), ee)


# ------------------------------------------------------------------------------------------------ hash_tensor
@pytest.mark.parametrize("dtype", BITS_DTYPES + [torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool])
def test_hash_tensor_dtypes(dtype):
    x = (torch.cat([torch.tensor(SPECIAL_F), _rand(40, 16).flatten() * 50]) if dtype.is_floating_point
         else _rand(60, 16) * 50).to(dtype)
    assert torch.equal(_no_fallback(lambda: torch.hash_tensor(x.to("trn"))).cpu(), torch.hash_tensor(x))


@pytest.mark.parametrize("kw", [{}, {"dim": 1}, {"dim": (0, 2), "keepdim": True}, {"dim": -1}, {"dim": ()}])
def test_hash_tensor_dims(kw):
    x = _rand((3, 5, 7), 17).transpose(0, 2)
    assert torch.equal(_no_fallback(lambda: torch.hash_tensor(x.to("trn"), **kw)).cpu(), torch.hash_tensor(x, **kw))


def test_hash_tensor_errors_match_cpu():
    with pytest.raises(RuntimeError):
        torch.hash_tensor(torch.empty(0, device="trn"))
    with pytest.raises(IndexError):
        torch.hash_tensor(torch.empty(0, 3, device="trn"), dim=0)


# ------------------------------------------------------------------------------------------------ profile
def test_profile_polynomial_kernel():
    x = (torch.rand(256, 512) * 2 - 1).to("trn")
    n = torch.full((256, 512), 6.0, device="trn")
    out = torch.empty(256, 512, device="trn")
    prof = UN.ew.profile(x, n, None, out, "special_poly", ("legendre_polynomial_p", 8), "f32")
    assert_same(out, S.legendre_polynomial_p(x.cpu(), n.cpu()), rtol=1e-4, atol=1e-5)
    assert prof.time_us > 0
