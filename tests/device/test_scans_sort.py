"""Scans (stdlib_kernels/reduction/scans.py) and sorting (stdlib_kernels/reduction/sort.py) on trn vs CPU, no fallbacks.

cumsum/cumprod/cummax/cummin forward and backward, sort/argsort (stable, both directions, NaN/inf/-0),
topk (both paths: extraction and the bitonic network), ragged / size-1 / empty / non-contiguous
inputs, bf16, and a profile of the scan kernel.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.reduction import scans as S
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
OURS = ("cumsum", "cumprod", "_cummax_helper", "_cummin_helper", "sort", "topk", "max", "min", "sum", "amax")


def _nofb(fn, *args):
    trnlang.reset_fallback_stats()
    r = fn(*args)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return r


def _cmp(got, exp, tol=0.0):
    got = got if isinstance(got, tuple) else (got,)
    exp = exp if isinstance(exp, tuple) else (exp,)
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        assert_same(g, e, rtol=tol, atol=tol)


def _input(shape, seed=0, ties=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 4, shape, generator=g).float() if ties else torch.randn(shape, generator=g)


SCANS = {
    "cumsum": (lambda x, d: x.cumsum(d), 1e-4),
    "cumprod": (lambda x, d: (1 + 0.05 * x).cumprod(d), 1e-4),
    "cummax": (lambda x, d: x.cummax(d), 0),
    "cummin": (lambda x, d: x.cummin(d), 0),
}
SHAPES = [((0,), 0), ((1,), 0), ((), 0), ((130, 37), 1), ((130, 37), 0), ((3, 5, 7), 1), ((2, 2500), -1)]


@pytest.mark.parametrize("name", sorted(SCANS))
def test_scans_fixed_shapes(name):
    fn, tol = SCANS[name]
    for shape, d in SHAPES:
        x = _input(shape, ties=name in ("cummax", "cummin"))
        _cmp(_nofb(fn, x.to("trn"), d), fn(x, d), tol)


@_SETTINGS
@given(shape=st.lists(st.integers(1, 140), min_size=1, max_size=3).map(tuple), data=st.data())
def test_scans_random(shape, data):
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    for name in sorted(SCANS):
        fn, tol = SCANS[name]
        x = _input(shape, 3, ties=name in ("cummax", "cummin"))
        _cmp(_nofb(fn, x.to("trn"), d), fn(x, d), tol)


def test_scans_nan_inf_and_noncontiguous():
    nan, inf = math.nan, math.inf
    x = torch.tensor([[1., nan, 3., nan, 2.], [1., 5., 5., 2., 5.], [-inf, -inf, 1., inf, inf]])
    for name in ("cummax", "cummin", "cumsum"):
        fn, _ = SCANS[name]
        _cmp(_nofb(fn, x.to("trn"), 1), fn(x, 1))
    y = _input((40, 60), ties=True)
    for name in sorted(SCANS):
        fn, tol = SCANS[name]
        _cmp(_nofb(fn, y.to("trn").t()[2:], 1), fn(y.t()[2:], 1), tol)


def test_scans_bf16_and_bool():
    x = _input((70, 90)).bfloat16()
    _cmp(_nofb(lambda t: t.cumsum(1), x.to("trn")), x.cumsum(1), 5e-2)
    _cmp(_nofb(lambda t: t.cumsum(1, dtype=torch.float32), x.to("trn")), x.cumsum(1, dtype=torch.float32), 1e-4)
    _cmp(_nofb(lambda t: t.cummax(0), x.to("trn")), x.cummax(0))
    b = _input((30, 50)) > 0
    _cmp(_nofb(lambda t: t.cumsum(1), b.to("trn")), b.cumsum(1))


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_scan_backward(name):
    fn, _ = SCANS[name]
    x = _input((23, 31))
    xc = x.clone().requires_grad_()
    fn(xc, 1).backward(torch.ones(23, 31))
    xt = x.to("trn").requires_grad_()
    _nofb(lambda: fn(xt, 1).backward(torch.ones(23, 31, device="trn")))
    assert_same(xt.grad, xc.grad, rtol=1e-4, atol=1e-4)


def test_cummax_backward_ours_native():
    """cummax's backward scatters (the indexing family's op); the forward stays native."""
    x = _input((13, 17))
    xc = x.clone().requires_grad_()
    xc.cummax(1)[0].sum().backward()
    xt = x.to("trn").requires_grad_()
    trnlang.reset_fallback_stats()
    xt.cummax(1)[0].sum().backward()
    assert not [k for k in trnlang.fallback_stats() if k.split("::")[1].split(".")[0] in OURS]
    assert_same(xt.grad, xc.grad)


SORTS = {
    "sort_asc": lambda x, d: x.sort(dim=d, stable=True),
    "sort_desc": lambda x, d: x.sort(dim=d, descending=True, stable=True),
    "argsort": lambda x, d: x.argsort(dim=d, stable=True),
    "argsort_desc": lambda x, d: x.argsort(dim=d, descending=True, stable=True),
}


@pytest.mark.parametrize("name", sorted(SORTS))
def test_sort_fixed_shapes(name):
    fn = SORTS[name]
    for shape, d in SHAPES[:-1] + [((5, 300), 1)]:
        x = _input(shape, ties=True)
        _cmp(_nofb(fn, x.to("trn"), d), fn(x, d))


def test_sort_nan_inf_zero():
    nan, inf = math.nan, math.inf
    x = torch.tensor([[1., nan, 3., nan, 2., inf, -inf, -0.0, 0.0], [1., 5., 5., 2., 5., 0., 0., 5., 1.]])
    for fn in SORTS.values():
        _cmp(_nofb(fn, x.to("trn"), 1), fn(x, 1))
    vals = _nofb(lambda t: t.sort(dim=1, stable=True)[0], x.to("trn")).cpu()
    assert torch.equal(torch.signbit(vals), torch.signbit(x.sort(dim=1, stable=True)[0]))  # -0.0 kept before 0.0


def test_sort_bf16():
    x = _input((33, 40), ties=False).bfloat16()
    for fn in SORTS.values():
        _cmp(_nofb(fn, x.to("trn"), 1), fn(x, 1))


def _check_topk(x, k, d, largest):
    vt, it = _nofb(lambda t: t.topk(k, d, largest=largest), x.to("trn"))
    vc, _ = x.topk(k, d, largest=largest)
    assert_same(vt, vc, rtol=0, atol=0)
    # ties may pick other positions than the CPU: the indices must point at the values
    assert it.dtype == torch.int64 and it.shape == vc.shape and it.device.type == "trn"
    torch.testing.assert_close(x.gather(d, it.cpu()), vt.cpu(), equal_nan=True, rtol=0, atol=0)


@_SETTINGS
@given(rows=st.integers(1, 140), cols=st.integers(1, 300), data=st.data())
def test_topk_random(rows, cols, data):
    k = data.draw(st.integers(0, min(cols, 24)))
    largest = data.draw(st.booleans())
    _check_topk(_input((rows, cols), 5, ties=data.draw(st.booleans())), k, 1, largest)


def test_topk_paths_and_nan():
    nan, inf = math.nan, math.inf
    x = torch.tensor([[1., nan, 3., nan, 2., inf, -inf], [-inf, -inf, -inf, -inf, -inf, -inf, -inf]])
    for k in (1, 3, 7):
        _check_topk(x, k, 1, True)   # extraction
        _check_topk(x, k, 1, False)  # network
    _check_topk(_input((30, 100)), 40, 1, True)  # k > 16: network
    _check_topk(_input((3, 20, 6)), 4, 1, True)  # a leading dim
    _check_topk(_input((37,)).bfloat16().float(), 5, 0, True)


def test_sort_errors_match_torch():
    x = _input((4, 5))
    for fn in (lambda t: t.topk(9, 1), lambda t: t.sort(dim=3)):
        with pytest.raises((RuntimeError, IndexError)) as cpu_err:
            fn(x)
        with pytest.raises(cpu_err.type) as trn_err:
            fn(x.to("trn"))
        assert str(trn_err.value) == str(cpu_err.value)


def test_profile_scan():
    x = _input((256, 3000)).to("trn")
    out = torch.empty(256, 3000, device="trn")
    idx = torch.empty(256, 3000, dtype=torch.int64, device="trn")
    prof = S.row_scan.profile(x, out, idx, "max", False)
    ref = x.cpu().cummax(1)
    assert_same(out, ref[0])
    assert_same(idx, ref[1])
    assert prof.time_us > 0
    for name, e in prof.engines.items():
        assert 0 <= e.utilization <= 1.0 + 1e-9, (name, e)
    assert prof.engines["vector"].instructions > 0 and prof.engines["gpsimd"].instructions > 0  # scans, iota
    assert 0 < prof.mbu <= 1.0


def test_int64_cumsum_native_when_bounded_else_declined():
    import trnlang

    g = torch.Generator().manual_seed(3)
    y = torch.randint(-1000, 1000, (300, 50), generator=g)
    mask = torch.randint(0, 2, (2, 37), generator=g)  # attention-mask positions, as transformers compute them
    trnlang.reset_fallback_stats()
    assert torch.equal(y.to("trn").cumsum(0).cpu(), y.cumsum(0))
    assert torch.equal(y.to("trn").t().cumsum(1).cpu(), y.t().cumsum(1))
    assert torch.equal(mask.to("trn").cumsum(-1).cpu(), mask.cumsum(-1))
    assert trnlang.fallback_stats() == {}
    big = torch.tensor([2**40, 1, -(2**35)])
    assert torch.equal(big.to("trn").cumsum(0).cpu(), big.cumsum(0))  # too big for the fp32 scan: the CPU does it
    assert trnlang.fallback_stats() == {"aten::cumsum": 1}


def test_logcumsumexp_forward_backward_special_values():
    nan, inf = math.nan, math.inf
    x = torch.tensor([[-inf, -inf, 1., -inf, 2.], [1., inf, 2., -inf, inf], [1., nan, 2., 3., 4.],
                      [-inf, inf, -inf, nan, 1.], [-200., 0., -300., 5., 100.], [3., 3., 3., 3., 3.]])
    _cmp(_nofb(lambda t: t.logcumsumexp(1), x.to("trn")), x.logcumsumexp(1))
    for shape, d in SHAPES + [((3, 5000), 1)]:
        y = 4 * _input(shape, 2)
        _cmp(_nofb(lambda t: t.logcumsumexp(d), y.to("trn")), y.logcumsumexp(d), 1e-5)
    z = _input((40, 60), 4)
    _cmp(_nofb(lambda t: t.t()[2:].logcumsumexp(1), z.to("trn")), z.t()[2:].logcumsumexp(1), 1e-5)
    b = _input((20, 33), 5).bfloat16()
    _cmp(_nofb(lambda t: t.logcumsumexp(1), b.to("trn")), b.logcumsumexp(1), 1e-2)
    xc = z.clone().requires_grad_()
    xc.logcumsumexp(0).backward(z.cos())
    xt = z.to("trn").requires_grad_()
    _nofb(lambda: xt.logcumsumexp(0).backward(z.cos().to("trn")))
    assert_same(xt.grad, xc.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n,dtype", [(9000, torch.float32), (20000, torch.float32), (12000, torch.bfloat16)])
def test_long_rows_with_nan_sort_natively(n, dtype):
    """Rows longer than one tile (8192) holding NaN and infinities: NaN sorts last (first descending, after/before
    +inf), ties and NaNs in index order, as the CPU's stable sort; median/nanmedian of all elements follow."""
    g = torch.Generator().manual_seed(n)
    x = torch.rand(3, n, generator=g).to(dtype)
    x.masked_fill_(x < 0.1, float("nan"))
    x[0, 5], x[1, 7] = float("inf"), -float("inf")
    t = x.to("trn")
    trnlang.reset_fallback_stats()
    for desc in (False, True):
        v, i = torch.sort(t, dim=-1, descending=desc, stable=True)
        vc, ic = torch.sort(x, dim=-1, descending=desc, stable=True)
        assert torch.equal(v.cpu().isnan(), vc.isnan()) and torch.equal(v.cpu().nan_to_num(), vc.nan_to_num())
        assert torch.equal(i.cpu(), ic)
    flat = x[0]
    assert torch.equal(torch.nanmedian(t[0]).cpu(), torch.nanmedian(flat)) and torch.median(t[0]).cpu().isnan()
    assert trnlang.fallback_stats() == {}
