"""Bessel / gamma-family special functions (stdlib_kernels/elementwise/bessel.py, gamma_fns.py) on trn vs the CPU,
no fallbacks.

Every function on wide ranges plus torch's special values (0, -0, +-inf, NaN, negative arguments, branch
boundaries), fp32 and bf16, non-contiguous and broadcast inputs, hypothesis shapes (ragged, size 1, empty),
in-place / ``out=`` / scalar overloads, the backward ops that reuse these kernels (i0 -> i1, digamma ->
polygamma(1), igamma w.r.t. x), the big-tensor path (no padding) and a profile of one kernel.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
_SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-6, -1e-6, 1e-5, 0.5, -0.5, 2.0, -2.0, 2.09, -2.09, 5.0,
            -5.0, 8.0, -8.0, 25.0, 88.5, 89.0, 103.9, -103.9, 1e4, -1e4, 1e30]


def _nofb(fn, *args, **kw):
    trnlang.reset_fallback_stats()
    r = fn(*args, **kw)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return r


def _wide(seed=0):
    """Values over the whole range of every branch (plus the special values), as a transposed [n, 23] view."""
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(400, generator=g) * 3, torch.rand(400, generator=g) * 240 - 120,
             torch.logspace(-7, 7, 80), -torch.logspace(-7, 7, 80), torch.tensor(_SPECIAL)]
    x = torch.cat(parts)
    x = torch.cat([x, torch.zeros((-x.numel()) % 23)])
    return x.reshape(23, -1).t()


UNARY = {
    "i0": torch.i0, "i0e": torch.special.i0e, "i1": torch.special.i1, "i1e": torch.special.i1e,
    "modified_bessel_i0": torch.special.modified_bessel_i0, "modified_bessel_i1": torch.special.modified_bessel_i1,
    "modified_bessel_k0": torch.special.modified_bessel_k0, "modified_bessel_k1": torch.special.modified_bessel_k1,
    "scaled_modified_bessel_k0": torch.special.scaled_modified_bessel_k0,
    "scaled_modified_bessel_k1": torch.special.scaled_modified_bessel_k1,
    "bessel_j0": torch.special.bessel_j0, "bessel_j1": torch.special.bessel_j1,
    "bessel_y0": torch.special.bessel_y0, "bessel_y1": torch.special.bessel_y1,
    "spherical_bessel_j0": torch.special.spherical_bessel_j0, "airy_ai": torch.special.airy_ai,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_cpu(name):
    fn = UNARY[name]
    x = _wide()
    assert not x.is_contiguous()
    assert_same(_nofb(fn, x.to("trn")), fn(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e"])
def test_bf16(name):
    fn = UNARY[name]
    x = (torch.randn(50, 7) * 4).bfloat16()  # computed by the fp32 kernel, rounded once
    assert_same(_nofb(fn, x.to("trn")), fn(x), rtol=1.6e-2, atol=1e-2)


@_SETTINGS
@given(shape=st.lists(st.integers(0, 12), min_size=0, max_size=3), name=st.sampled_from(["i1e", "bessel_j1"]))
def test_shapes(shape, name):
    fn = UNARY[name]
    x = torch.randn(shape) * 6
    assert_same(_nofb(fn, x.to("trn")), fn(x), rtol=1e-4, atol=1e-4)


def test_big_strided_launch_and_variants():
    """Above the padding threshold the kernel runs on the strided views directly; in-place and out= variants."""
    x = (torch.randn(700, 400) * 10).t()
    assert_same(_nofb(torch.special.bessel_j0, x.to("trn")), torch.special.bessel_j0(x), rtol=1e-4, atol=1e-4)
    xt = x[:2].to("trn")
    _nofb(xt.i0_)
    assert_same(xt, x[:2].i0(), rtol=1e-4, atol=1e-4)
    out = torch.empty(0, device="trn")
    _nofb(torch.special.bessel_y0, x[:3].abs().to("trn"), out=out)
    assert_same(out, torch.special.bessel_y0(x[:3].abs()), rtol=1e-4, atol=1e-4)


def test_backward_through_i0_i1():
    x = torch.randn(40) * 5
    for fn in (torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e):
        xt = x.to("trn").requires_grad_()
        trnlang.reset_fallback_stats()
        fn(xt).sum().backward()
        assert trnlang.fallback_stats() == {}
        xc = x.clone().requires_grad_()
        fn(xc).sum().backward()
        assert_same(xt.grad, xc.grad, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------ polygamma / zeta
def test_polygamma_and_digamma_backward():
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.randn(300, generator=g) * 6, torch.tensor([0.0, -1.0, -2.0, 1.0, 0.5, -0.5, -7.25, 1e-3,
                                                                     100.5, -30.5, math.inf, -math.inf, math.nan])])
    for n in range(5):
        assert_same(_nofb(torch.polygamma, n, x.to("trn")), torch.polygamma(n, x), rtol=1e-4, atol=1e-4)
    xb = x.bfloat16()  # bf16 runs the fp32 kernels (same shift length: min(x) = -30.5)
    for n in (1, 2):
        assert_same(_nofb(torch.polygamma, n, xb.to("trn")), torch.polygamma(n, xb), rtol=1.6e-2, atol=1e-2)
    xt = x.to("trn")
    _nofb(xt.polygamma_, 2)  # the in-place method takes (self, n): arguments arrive swapped
    assert_same(xt, x.polygamma(2), rtol=1e-4, atol=1e-4)
    xg = x[:50].to("trn").requires_grad_()
    trnlang.reset_fallback_stats()
    torch.digamma(xg).sum().backward()
    assert trnlang.fallback_stats() == {}
    xc = x[:50].clone().requires_grad_()
    torch.digamma(xc).sum().backward()
    assert_same(xg.grad, xc.grad, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="negative n"):
        torch.polygamma(-1, xt)


def test_zeta():
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.rand(200, generator=g) * 12 - 2, torch.tensor([1.0, 0.5, 2.0, 3.0, 2.0, 2.5, math.inf,
                                                                         math.nan, 4.0, 2.0, 3.0])])
    q = torch.cat([torch.randn(200, generator=g).clamp(-3, 3) * 8, torch.tensor([2.0, 2.0, 0.0, -3.0, -2.5, -2.5, 2.0,
                                                                                  1.0, math.inf, -math.inf, -30.5])])
    assert_same(_nofb(torch.special.zeta, x.to("trn"), q.to("trn")), torch.special.zeta(x, q), rtol=1e-4, atol=1e-4)
    # broadcasting and the scalar overloads (every q >= -30.5 here, so the same direct-sum length)
    a, b = torch.rand(4, 1, 3) * 4 + 1, torch.rand(5, 1) * 4 - 30.5
    assert_same(_nofb(torch.special.zeta, a.to("trn"), b.to("trn")), torch.special.zeta(a, b), rtol=1e-4, atol=1e-4)
    assert_same(_nofb(torch.special.zeta, 3.0, b.to("trn")), torch.special.zeta(3.0, b), rtol=1e-4, atol=1e-4)
    assert_same(_nofb(torch.special.zeta, a.to("trn"), -20.5), torch.special.zeta(a, -20.5), rtol=1e-4, atol=1e-4)
    # integral x >= 7 with q < 0: the fp32 sum would cancel where torch sums in double: declined to the CPU
    x7, q7 = torch.tensor([9.0, 2.5]), torch.tensor([-5.5, 1.0])
    trnlang.reset_fallback_stats()
    assert_same(torch.special.zeta(x7.to("trn"), q7.to("trn")), torch.special.zeta(x7, q7), rtol=1e-4, atol=1e-4)
    assert trnlang.fallback_stats() == {"aten::special_zeta": 1}


def test_polygamma_large_n_and_reflection():
    """n >= 2 at q < 0 by reflection (no cancelling sum); n > 34 (fp32 n! = inf) declined to the CPU."""
    import mpmath  # sympy's dependency

    x = torch.tensor([-5.5, -5.25, -0.75, -2.0, 0.0, 0.3, 7.0])
    for n in (7, 12):
        got = _nofb(torch.polygamma, n, x.to("trn")).cpu()
        # torch's own sum cancels at -5.5 for n = 12 even in double: the reference is exact (30 digits)
        with mpmath.workdps(30):
            ref = torch.tensor([float(mpmath.polygamma(n, float(v))) if v > 0 or v != math.floor(v)
                                else (math.inf if n % 2 else -math.inf) for v in x.tolist()])
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    trnlang.reset_fallback_stats()
    assert_same(torch.polygamma(40, x.to("trn")), torch.polygamma(40, x), rtol=1e-4, atol=1e-4)
    assert trnlang.fallback_stats() == {"aten::polygamma": 1}


# ------------------------------------------------------------------------------------------ igamma / igammac
def _igamma_grid():
    g = torch.Generator().manual_seed(3)
    n = 600
    a = torch.cat([torch.rand(n, generator=g) * 10, torch.rand(n, generator=g) * 400, torch.logspace(-4, 3, 60),
                   torch.tensor([0.0, 1.0, 0.0, math.inf, math.inf, math.nan, 2.0, 0.0, -1.0, 5.0, 5.0, 30.0, 4e3])])
    x = torch.cat([torch.rand(n, generator=g) * 12, a[n:2 * n] * (0.5 + torch.rand(n, generator=g)),
                   torch.logspace(-4, 3, 60).flip(0),
                   torch.tensor([0.0, 0.0, 1.0, 1.0, math.inf, 1.0, math.nan, -1.0, 1.0, math.inf, 0.0, 31.0, 4.1e3])])
    return a, x


@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_igamma(name):
    fn = getattr(torch, name)
    a, x = _igamma_grid()
    assert_same(_nofb(fn, a.to("trn"), x.to("trn")), fn(a, x), rtol=1e-4, atol=1e-4)
    ab, xb = torch.cat([a[:39], a.nan_to_num(0, 0, 0).amax().view(1)]).reshape(5, 1, 8), x[:8]  # same max(a)
    assert_same(_nofb(fn, ab.to("trn"), xb.to("trn")), fn(ab, xb), rtol=1e-4, atol=1e-4)
    assert_same(_nofb(fn, ab.bfloat16().to("trn"), xb.bfloat16().to("trn")), fn(ab.bfloat16(), xb.bfloat16()),
                rtol=1.6e-2, atol=1e-2)


def test_igamma_grad_wrt_x():
    a, x = torch.rand(30) * 5 + 0.1, torch.rand(30) * 5 + 0.1
    a[0] = 4e3  # the series length of test_igamma's grid: its compiled kernel
    xt = x.to("trn").requires_grad_()
    trnlang.reset_fallback_stats()
    torch.igamma(a.to("trn"), xt).sum().backward()
    assert trnlang.fallback_stats() == {}
    xc = x.clone().requires_grad_()
    torch.igamma(a, xc).sum().backward()
    assert_same(xt.grad, xc.grad, rtol=1e-4, atol=1e-5)


def test_profile_of_a_bessel_kernel():
    from stdlib_kernels.elementwise.unary import ew

    x = (torch.rand(2048) * 20).to("trn")  # the padded launch's shape: the kernel compiled for the tests above
    out = torch.empty(2048, device="trn")
    prof = ew.profile(x, None, None, out, "special_modified_bessel_k1", (), "f32")
    assert_same(out, torch.special.modified_bessel_k1(x.cpu()), rtol=1e-4, atol=1e-4)
    assert prof.time_us > 0
    assert all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    assert prof.engines["dma"].instructions >= 2
