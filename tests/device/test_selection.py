"""Selection, unique, search and histograms (stdlib_kernels/reduction/selection.py, unique.py, search.py) on trn vs CPU.

kthvalue / median / nanmedian / mode with ties and NaN (the index torch's CPU kernels return), unique
(flat, dim, consecutive; inverse and counts), searchsorted (left/right/side/sorter/out_int32, batched,
NaN), bucketize, isin, repeat_interleave, histc / histogram / histogramdd (edge rules, weights,
density), equal and nonzero_static; forward and backward, bf16, empty / size-1 / non-contiguous
inputs, no fallbacks, and a profile of the binary-search kernel.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.reduction import search as SE
from stdlib_kernels.reduction import selection as SEL
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
nan, inf = math.nan, math.inf


def _mv(t):
    if isinstance(t, torch.Tensor):
        return t.to("trn")
    if isinstance(t, (list, tuple)):
        return type(t)(_mv(a) for a in t)
    return t


def _same(got, exp):
    if isinstance(exp, (tuple, list)):
        assert len(got) == len(exp)
        for g, e in zip(got, exp):
            _same(g, e)
    elif isinstance(exp, torch.Tensor):
        assert got.dtype == exp.dtype and got.shape == exp.shape, (got, exp)
        assert_same(got, exp, rtol=1e-5, atol=1e-6)
    else:
        assert got == exp


def _check(fn, *args, native=True, **kwargs):
    """``fn`` on trn (no fallback when ``native``) equals ``fn`` on the CPU."""
    trnlang.reset_fallback_stats()
    got = fn(*_mv(args), **{k: _mv(v) for k, v in kwargs.items()})
    stats = trnlang.fallback_stats()
    if native:
        assert stats == {}, stats
    _same(got, fn(*args, **kwargs))
    return stats


def _ties(shape, seed=0, hi=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, hi, shape, generator=g).float()


def _randn(shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------- selection

def test_median_ties_nan_and_dims():
    x = _ties((7, 33), 1)  # many ties: the index is the stable position (n - 1) // 2
    _check(torch.median, x, 1)
    _check(torch.median, x, 0, True)
    _check(torch.median, x)
    x[2, 5] = nan
    x[4, 1] = x[4, 30] = nan
    _check(torch.median, x, 1)      # NaN rows: NaN and the first NaN's index
    _check(torch.median, x)
    _check(torch.nanmedian, x, 1)
    _check(torch.nanmedian, x)
    for shape in [(), (1,), (2,), (3, 2, 1, 2)]:
        _check(torch.median, _randn(shape), -1)
        _check(torch.nanmedian, _randn(shape), 0, True)


def test_nanmedian_all_nan_rows_index():
    """All-NaN rows: the index libstdc++'s nth_element leaves in front (a function of n, replayed on the host)."""
    for n in (1, 2, 3, 4, 5, 7, 16, 37, 130):
        x = torch.full((2, n), nan)
        x[1, n // 2] = 1.0
        _check(torch.nanmedian, x, 1)
    _check(torch.nanmedian, torch.full((9,), nan))
    assert [SEL._allnan_index(n) for n in range(1, 9)] == [0, 0, 0, 2, 2, 3, 5, 6]


def test_kthvalue_and_tie_decline():
    x = _randn((5, 5, 5))
    for k, d, keep in [(2, -1, False), (1, 1, True), (5, 0, False)]:
        _check(torch.kthvalue, x, k, d, keep)
    y = torch.tensor([[3., nan, 1., 2.], [nan, 0., -1., 5.]])
    _check(torch.kthvalue, y, 4, 1)  # NaN counts as the largest
    t = _ties((6, 40), 2)            # tied k-th values: torch's quickselect decides -> the CPU runs it
    stats = _check(torch.kthvalue, t, 7, 1, native=False)
    assert stats == {"aten::kthvalue": 1}


def test_mode_small_rows_and_declines():
    _check(torch.mode, _ties((9, 16), 3), 1)      # <= 16: std::sort is stable -> last occurrence
    _check(torch.mode, _ties((5, 7), 4), 0, True)
    _check(torch.mode, _randn((3000,)))           # distinct values: the smallest, at its position
    _check(torch.mode, _randn(()))
    # a repeated mode in a long row: native; the value is the CPU's, the index its last occurrence (the CPU's
    # unstable sort picks some occurrence)
    x = _ties((4, 40), 5)
    trnlang.reset_fallback_stats()
    v, i = torch.mode(x.to("trn"), 1)
    assert trnlang.fallback_stats() == {}
    vc, _ = torch.mode(x, 1)
    assert torch.equal(v.cpu(), vc)
    last = torch.stack([(row == val).nonzero().max() for row, val in zip(x, vc)])
    assert torch.equal(i.cpu(), last)
    stats = _check(torch.mode, torch.tensor([nan, 1., nan, 1., 2.]), native=False)
    assert stats == {"aten::mode": 1}


@_SETTINGS
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple), data=st.data())
def test_selection_random(shape, data):
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = _ties(shape, data.draw(st.integers(0, 99)), hi=data.draw(st.sampled_from([3, 1000])))
    _check(torch.median, x, d)
    _check(torch.nanmedian, x, d, True)
    if shape[d] <= 16:
        _check(torch.mode, x, d)


def test_selection_noncontiguous_bf16_empty():
    x = _randn((40, 60)).t()[3:]
    _check(torch.median, x, 1)
    _check(torch.kthvalue, x, 3, 0)
    b = (torch.randperm(200, generator=torch.Generator().manual_seed(0)).view(10, 20) - 100).bfloat16()  # no ties
    _check(torch.median, b, 1)
    _check(torch.nanmedian, b)
    _check(torch.kthvalue, b, 4, 1)
    _check(torch.mode, b, 0)
    _check(torch.median, torch.zeros(0, 5), 1)
    _check(torch.median, torch.zeros(0))


def test_selection_backward():
    x = _randn((6, 9))
    for fn in (lambda t: t.median(1)[0], lambda t: t.nanmedian(0)[0], lambda t: t.kthvalue(3, 1)[0],
               lambda t: t.mode(1)[0], lambda t: t.median()):
        xc = x.clone().requires_grad_()
        fn(xc).sum().backward()
        xt = x.to("trn").requires_grad_()
        trnlang.reset_fallback_stats()
        fn(xt).sum().backward()
        assert trnlang.fallback_stats() == {}
        assert_same(xt.grad, xc.grad)


# ---------------------------------------------------------------------------------------- unique

def test_unique_flat_flags():
    x = _ties((5, 6), 6)
    x[2, 3] = nan  # a single NaN keeps torch's order determined
    for ret_inv in (False, True):
        for ret_cnt in (False, True):
            _check(torch.ops.aten._unique2, x, True, ret_inv, ret_cnt)
            _check(torch.ops.aten._unique2, x, False, ret_inv, ret_cnt)
            _check(torch.ops.aten.unique_consecutive, x, ret_inv, ret_cnt, None)
    _check(torch.ops.aten._unique, torch.tensor([3, 1, 4, 1, 5]), False, True)  # int64 (index_fill's path)
    _check(torch.unique, torch.tensor([True, False, True]), return_counts=True)
    _check(torch.unique, _randn(300).bfloat16(), return_inverse=True)
    _check(torch.unique, torch.tensor(2.), return_inverse=True, return_counts=True)
    _check(torch.unique, torch.zeros(5, 0, 5), return_inverse=True, return_counts=True)
    _check(torch.unique_consecutive, torch.tensor([nan, nan, 1., 1., -0.0, 0.0]), return_counts=True)


def test_unique_many_nans_declined():
    x = torch.tensor([nan, 1., nan, 0., 3., nan])
    stats = _check(torch.unique, x, return_inverse=True, native=False)
    assert stats == {"aten::_unique2": 1}


def test_unique_dim_and_consecutive_dim():
    for shape, d in [((6, 3), 0), ((3, 6), 1), ((5, 5, 5), 2), ((5, 1, 5), 1), ((5, 0, 5), 1)]:
        x = _ties(shape, 7, hi=2)
        _check(torch.unique, x, dim=d, return_inverse=True, return_counts=True)
        _check(torch.unique, x, dim=d)
        _check(torch.unique_consecutive, x, dim=d, return_inverse=True, return_counts=True)
    _check(torch.unique, _ties((7, 4), 8, hi=2).bfloat16(), dim=0, return_counts=True)
    _check(torch.unique_consecutive, _ties((4, 9), 9, hi=2).t(), dim=0)  # non-contiguous


@_SETTINGS
@given(n=st.integers(1, 3000), hi=st.sampled_from([2, 50, 10 ** 6]), seed=st.integers(0, 99))
def test_unique_random(n, hi, seed):
    x = _ties((n,), seed, hi)
    _check(torch.unique, x, return_inverse=True, return_counts=True)
    _check(torch.unique_consecutive, x, return_inverse=True, return_counts=True)


def test_index_fill_backward_native():
    x = _randn((5, 5))
    idx = torch.tensor([2, 1, 4, 2, 2])
    v = torch.tensor(-1.5, requires_grad=True)
    xc = x.clone().requires_grad_()
    xc.index_fill(-1, idx, v).sum().backward()
    xt = x.to("trn").requires_grad_()
    vt = v.detach().to("trn").requires_grad_()
    trnlang.reset_fallback_stats()
    xt.index_fill(-1, idx.to("trn"), vt).sum().backward()
    assert trnlang.fallback_stats() == {}
    assert_same(xt.grad, xc.grad)
    assert_same(vt.grad, v.grad)


# ------------------------------------------------------------------------------------------ search

def test_searchsorted_variants():
    s = _randn(10, 1).sort().values
    v = _randn((4, 5), 2)
    v[0, 0], v[0, 1], v[1, 1] = s[3], nan, s[9]
    for kw in [{}, {"right": True}, {"side": "right"}, {"side": "left", "out_int32": True}]:
        _check(torch.searchsorted, s, v, **kw)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))
    _check(torch.searchsorted, s[perm], v, sorter=torch.argsort(s[perm]), right=True)
    sb = _randn((3, 4, 7), 3).sort(-1).values
    vb = _randn((3, 4, 5), 4)
    _check(torch.searchsorted, sb, vb)
    _check(torch.searchsorted, sb, vb, sorter=torch.argsort(sb, -1), side="right")
    _check(torch.searchsorted, s, 0.3)
    _check(torch.searchsorted, s, s[4].item(), right=True)
    _check(torch.searchsorted, torch.tensor([1., 2., nan]), torch.tensor([1.5, nan, 3.]))  # torch's NaN walk
    _check(torch.searchsorted, s.bfloat16(), v.bfloat16())
    _check(torch.searchsorted, torch.zeros(0), torch.zeros(0))
    _check(torch.searchsorted, torch.zeros(0), v)
    _check(torch.bucketize, v, s, right=True)
    _check(torch.bucketize, v.t(), s)  # non-contiguous values


def test_searchsorted_errors_match_torch():
    s = _randn(10).sort().values
    bad_sorter = torch.arange(10).flip(0) + 1
    for fn in (lambda a: torch.searchsorted(a, a, sorter=bad_sorter.to(a.device)),
               lambda a: torch.searchsorted(a, a, side="left", right=True),
               lambda a: torch.searchsorted(a.view(2, 5), a.view(5, 2))):
        with pytest.raises(RuntimeError) as cpu_err:
            fn(s)
        with pytest.raises(RuntimeError) as trn_err:
            fn(s.to("trn"))
        assert str(trn_err.value) == str(cpu_err.value)


@_SETTINGS
@given(m=st.integers(1, 700), n=st.integers(1, 300), seed=st.integers(0, 99), right=st.booleans())
def test_searchsorted_random(m, n, seed, right):
    s = _ties((m,), seed, hi=max(2, m // 3)).sort().values
    v = _ties((n,), seed + 1, hi=max(2, m // 3)) + 0.5 * (seed % 2)
    _check(torch.searchsorted, s, v, right=right)
    _check(torch.isin, v, s[: max(1, m // 2)])


def test_repeat_interleave():
    _check(torch.repeat_interleave, torch.tensor([1, 0, 2, 3]))
    _check(torch.repeat_interleave, torch.tensor([2, 0, 1], dtype=torch.int32))
    _check(torch.repeat_interleave, torch.randint(0, 5, (300,), generator=torch.Generator().manual_seed(1)))
    _check(torch.repeat_interleave, torch.zeros(0, dtype=torch.int64))
    _check(lambda x, r: torch.repeat_interleave(x, r, dim=1), _randn((2, 3, 4)), torch.tensor([1, 0, 2]))
    x = _randn((4, 1))
    xc = x.clone().requires_grad_()
    torch.repeat_interleave(xc, torch.tensor([2, 0, 3, 1]), dim=0, output_size=6).sum().backward()
    xt = x.to("trn").requires_grad_()
    trnlang.reset_fallback_stats()
    torch.repeat_interleave(xt, torch.tensor([2, 0, 3, 1]).to("trn"), dim=0, output_size=6).sum().backward()
    assert trnlang.fallback_stats() == {}
    assert_same(xt.grad, xc.grad)
    with pytest.raises(RuntimeError) as cpu_err:
        torch.repeat_interleave(torch.tensor([1, -1, 2]))
    with pytest.raises(RuntimeError) as trn_err:
        torch.repeat_interleave(torch.tensor([1, -1, 2]).to("trn"))
    assert str(trn_err.value) == str(cpu_err.value)


# -------------------------------------------------------------------------------------- histograms

def test_histc_edges_and_dtypes():
    x = _randn((5, 5), 5) * 5
    x[0, 0], x[0, 1], x[0, 2] = 10.0, -10.0, nan  # max goes in the last bin, NaN is skipped
    for bins, lo, hi in [(3, -10, 10), (1, 0, 10), (100, -2, 2), (4, -10, 0)]:
        _check(torch.histc, x, bins=bins, min=lo, max=hi)
        _check(torch.histc, x.bfloat16(), bins=bins, min=lo, max=hi)
    with pytest.raises(RuntimeError, match="is not finite"):
        torch.histc(x.to("trn"), bins=10)  # the data range holds NaN: torch's error
    y = torch.nan_to_num(x)
    for bins, lo, hi in [(10, 0, 0), (7, 1, 1)]:  # min == max: the data's range
        _check(torch.histc, y, bins=bins, min=lo, max=hi)
        _check(torch.histc, y.bfloat16(), bins=bins, min=lo, max=hi)
    _check(torch.histc, torch.full((4,), 2.0), bins=4)  # min == max == data: widened by 1
    _check(torch.histc, torch.zeros(0), bins=4)
    _check(torch.histc, torch.tensor(3.0), bins=3, min=0, max=10)
    _check(torch.histc, _randn((50, 70), 6).t(), bins=17)  # non-contiguous, data range


def test_histogram_and_histogramdd():
    x = _randn((5, 5), 7) * 3
    w = torch.rand((5, 5), generator=torch.Generator().manual_seed(8))
    _check(torch.histogram, x, 7)
    _check(torch.histogram, x, 4, range=(-1.0, 1.0), weight=w, density=True)
    _check(torch.histogram, x, torch.tensor([-3., -1., 0., 2.5, 4.]), weight=w)
    _check(torch.histogram, torch.tensor([1.0, 1.0]), 3)  # equal extrema: widened by 0.5
    _check(torch.histogram, torch.zeros(5, 0, 5), 2)
    pts = _randn((60, 3), 9)
    _check(torch.histogramdd, pts, [2, 3, 4])
    _check(torch.histogramdd, _randn((5, 5, 3), 10), [2, 3, 2], weight=w, density=True)
    _check(torch.histogramdd, pts[:, :2], [torch.tensor([-1., 0., 1.]), torch.tensor([-2., 0.5, 3.])])


# ------------------------------------------------------------------------------- equal, nonzero_static

def test_equal_dtypes_and_shapes():
    x = _randn((10, 5))
    assert _check(torch.equal, x, x.clone()) == {}
    _check(torch.equal, x, x + 1)
    _check(torch.equal, torch.tensor([nan]), torch.tensor([nan]))
    _check(torch.equal, torch.tensor([0.0]), torch.tensor([-0.0]))
    _check(torch.equal, x, x.t())
    _check(torch.equal, x.t(), x.t().contiguous())
    _check(torch.equal, torch.tensor(True), torch.tensor(True))
    big = torch.tensor([2 ** 40, 5])
    _check(torch.equal, big, big + torch.tensor([2 ** 33, 0]))
    _check(torch.equal, big, big.clone())
    _check(torch.equal, x.bfloat16(), x.bfloat16())


def test_nonzero_static():
    x = _ties((5, 5, 5), 11, hi=2)
    for size in (0, 1, 30, 200):
        _check(torch.nonzero_static, x, size=size)
        _check(torch.nonzero_static, x, size=size, fill_value=7)
    _check(torch.nonzero_static, torch.tensor(1.0), size=3)
    _check(torch.nonzero_static, torch.zeros(5, 0, 5), size=2)


def test_profile_bsearch():
    s = _randn(1000, 12).sort().values.to("trn")
    v = _randn((128, 64), 13).to("trn")
    out = torch.empty(128, 64, dtype=torch.int64, device="trn")
    prof = SE.bsearch.profile(s, None, v, out, 1000, False, True, 0)
    torch.testing.assert_close(out.cpu(), torch.searchsorted(s.cpu(), v.cpu()))
    assert prof.time_us > 0
    for name, e in prof.engines.items():
        assert 0 <= e.utilization <= 1.0 + 1e-9, (name, e)
    assert prof.engines["vector"].instructions > 0 and prof.mbu > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64])
@pytest.mark.parametrize("n", [8193, 29791])
def test_median_of_all_elements_past_the_sort_row_limit(dtype, n):
    """median()/nanmedian() of more than 8192 elements: the chunked merge sort's middle element (NaN for median
    when any element is NaN), natively."""
    x = (torch.randn(n, generator=torch.Generator().manual_seed(n)) * 1000).to(dtype)
    trnlang.reset_fallback_stats()
    for f in (torch.median, torch.nanmedian):
        got = f(x.to("trn"))
        assert got.dtype == dtype and torch.equal(got.cpu(), f(x))
    if dtype.is_floating_point:
        x[7] = float("nan")
        assert torch.median(x.to("trn")).cpu().isnan()
    assert trnlang.fallback_stats() == {}


def test_unique_dim_with_nan_slices_as_the_cpu():
    """Up to 16 slices holding NaN: the CPU's result is its insertion sort's with a comparator NaN never decides;
    trn reproduces it natively (150 random cases; more slices with NaN decline)."""
    import random

    for s in range(150):
        random.seed(s)
        n, k = random.randint(1, 16), random.randint(1, 3)
        x = torch.tensor([[random.choice([0.0, 1.0, 2.0, nan]) for _ in range(k)] for _ in range(n)])
        dim = s % 2
        xx = x if dim == 0 else x.t().contiguous()
        want = torch.unique(xx, dim=dim, return_inverse=True, return_counts=True)
        trnlang.reset_fallback_stats()
        got = torch.unique(xx.to("trn"), dim=dim, return_inverse=True, return_counts=True)
        assert trnlang.fallback_stats() == {}
        assert torch.equal(got[0].cpu().nan_to_num(7), want[0].nan_to_num(7))
        assert torch.equal(got[1].cpu(), want[1]) and torch.equal(got[2].cpu(), want[2])
