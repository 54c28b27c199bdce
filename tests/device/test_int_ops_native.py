"""Integer inputs of gcd/lcm, atan2, special.zeta, threshold, native_dropout_backward, addbmm, scans, max pooling and
scatter/index reductions run natively and give the CPU's values and dtypes (issue 22: integer dtypes native)."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang

INTS = [torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8]
SHAPES = [(0,), (1,), (7, 13), (3, 1, 129), (130, 2)]


def _ints(shape: tuple[int, ...], dtype: torch.dtype, seed: int, lo: int = -100, hi: int = 100) -> torch.Tensor:
    lo = max(lo, 0) if dtype == torch.uint8 else max(lo, torch.iinfo(dtype).min)
    hi = min(hi, torch.iinfo(dtype).max)
    return torch.randint(lo, hi + 1, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _native(fn):  # type: ignore[no-untyped-def]
    trnlang.reset_fallback_stats()
    r = fn()
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return r


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want), (got.cpu(), want)


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from(INTS), shape=st.sampled_from(SHAPES), seed=st.integers(0, 99))
def test_gcd_lcm(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> None:
    x, y = _ints(shape, dtype, seed), _ints(shape, dtype, seed + 1)
    if x.numel():
        x.view(-1)[0] = 0
        y.view(-1)[0] = 0  # gcd(0, 0) = 0
    _same(_native(lambda: torch.gcd(x.to("trn"), y.to("trn"))), torch.gcd(x, y))
    if dtype in (torch.int32, torch.int64):  # lcm's product stays in range for these
        _same(_native(lambda: torch.lcm(x.to("trn"), y.to("trn"))), torch.lcm(x, y))


def test_gcd_worst_case_and_broadcast() -> None:
    """Consecutive Fibonacci numbers take Euclid the most steps (Lame); int32's largest values too."""
    a = torch.tensor([1836311903, 2**31 - 1, 1134903170, -(2**31) + 1, 0, 46], dtype=torch.int32)
    b = torch.tensor([1134903170, 2**30, 701408733, 7, 5, -12], dtype=torch.int32)
    _same(_native(lambda: torch.gcd(a.to("trn"), b.to("trn"))), torch.gcd(a, b))
    x, y = _ints((300, 70), torch.int32, 3, -5000, 5000), _ints((70,), torch.int32, 4, -5000, 5000)
    _same(_native(lambda: torch.gcd(x.to("trn"), y.to("trn"))), torch.gcd(x, y))
    out = torch.empty(300, 70, dtype=torch.int32, device="trn")
    _native(lambda: torch.gcd(x.to("trn"), y.to("trn"), out=out))
    _same(out, torch.gcd(x, y))


def test_gcd_of_floats_is_torchs_error() -> None:
    with pytest.raises(RuntimeError):
        torch.gcd(torch.ones(3, device="trn"), torch.ones(3, device="trn"))


@settings(max_examples=20, deadline=None)
@given(dtype=st.sampled_from([*INTS, torch.bool]), shape=st.sampled_from(SHAPES), seed=st.integers(0, 99))
def test_atan2_and_zeta_of_integers_promote_to_float32(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> None:
    base = torch.int32 if dtype == torch.bool else dtype
    x, y = _ints(shape, base, seed).to(dtype), _ints(shape, base, seed + 7).to(dtype)
    got = _native(lambda: torch.atan2(x.to("trn"), y.to("trn")))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), torch.atan2(x, y), rtol=2e-6, atol=1e-6)
    mixed = _native(lambda: torch.atan2(x.to("trn"), y.float().to("trn")))
    torch.testing.assert_close(mixed.cpu(), torch.atan2(x, y.float()), rtol=2e-6, atol=1e-6)
    if dtype != torch.bool:
        xs, qs = x.abs().clamp(2, 6), y.abs().clamp(1, 50)  # x > 1, q > 0: the convergent region
        z = _native(lambda: torch.special.zeta(xs.to("trn"), qs.to("trn")))
        assert z.dtype == torch.float32
        torch.testing.assert_close(z.cpu(), torch.special.zeta(xs, qs), rtol=1e-5, atol=1e-6)
        # any integers: x >= 7 with q <= 0 is a pole (inf), not the cancelling sum of a non-integral q < 0
        z = _native(lambda: torch.special.zeta(x.to("trn"), y.to("trn")))
        torch.testing.assert_close(z.cpu(), torch.special.zeta(x, y), rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("th, value", [(-0.5, 7), (1.9, 2.5), (3, -2), (0.5, 3.7), (0, 0)])
def test_threshold_of_integers(dtype: torch.dtype, th: float, value: float) -> None:
    if dtype == torch.uint8 and (th < 0 or value < 0):
        pytest.skip("torch raises: the numbers do not fit uint8")
    x = _ints((5, 9), dtype, 1, -6, 6)
    _same(_native(lambda: F.threshold(x.to("trn"), th, value)), F.threshold(x, th, value))


@pytest.mark.parametrize("dtype", INTS)
def test_native_dropout_backward_of_integers(dtype: torch.dtype) -> None:
    g, m = _ints((6, 11), dtype, 5), _ints((6, 11), torch.int32, 6, 0, 1).bool()
    op = torch.ops.aten.native_dropout_backward
    _same(_native(lambda: op(g.to("trn"), m.to("trn"), 1.5)), op(g, m, 1.5))


@settings(max_examples=20, deadline=None)
@given(dtype=st.sampled_from(INTS), b=st.sampled_from([0, 1, 3]), n=st.sampled_from([1, 4, 33]),
       k=st.sampled_from([0, 1, 5]), p=st.sampled_from([1, 6]), ab=st.sampled_from([(1, 1), (0, 1), (2, 3)]))
def test_addbmm_of_integers(dtype: torch.dtype, b: int, n: int, k: int, p: int, ab: tuple[int, int]) -> None:
    beta, alpha = ab
    hi = 4
    if dtype in (torch.uint8, torch.int8):  # sums that could wrap these are the CPU's (declined on purpose)
        beta, alpha, hi = min(beta, 1), 1, 2
    b1, b2 = _ints((b, n, k), dtype, n, 0, hi), _ints((b, k, p), dtype, p, 0, hi)
    s = _ints((p,), dtype, k, 0, hi)
    _same(_native(lambda: torch.addbmm(s.to("trn"), b1.to("trn"), b2.to("trn"), beta=beta, alpha=alpha)),
          torch.addbmm(s, b1, b2, beta=beta, alpha=alpha))


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from(INTS), shape=st.sampled_from([(5, 7, 3), (1,), (0, 4), (130, 9)]),
       dim=st.integers(-1, 2), odt=st.sampled_from([None, torch.int32, torch.float32]), seed=st.integers(0, 99))
def test_integer_scans(dtype: torch.dtype, shape: tuple[int, ...], dim: int, odt: torch.dtype | None,
                       seed: int) -> None:
    """cumsum and cumprod (int64 by default, or the dtype= asked) and cummax/cummin (ties: the latest index) of
    small integers."""
    dim = dim % len(shape)
    x = _ints(shape, dtype, seed, -9, 9)
    kw = {} if odt is None else {"dtype": odt}
    _same(_native(lambda: torch.cumsum(x.to("trn"), dim, **kw)), torch.cumsum(x, dim, **kw))
    if shape != (130, 9):  # products of 130 factors would pass 2^24: the CPU's
        xp = x.clamp(-4, 4) if dtype != torch.uint8 else x.clamp(0, 4)
        _same(_native(lambda: torch.cumprod(xp.to("trn"), dim, **kw)), torch.cumprod(xp, dim, **kw))
    for fn in (torch.cummax, torch.cummin):
        v, i = _native(lambda: fn(x.to("trn"), dim))
        ve, ie = fn(x, dim)
        _same(v, ve)
        _same(i, ie)


def test_integer_cumsum_beyond_fp32_goes_to_the_cpu() -> None:
    x = torch.full((4, 3), 2**23, dtype=torch.int32)
    trnlang.reset_fallback_stats()
    _same(torch.cumsum(x.to("trn"), 0), torch.cumsum(x, 0))  # still right: the CPU computed it
    assert "aten::cumsum" in trnlang.fallback_stats()


@settings(max_examples=20, deadline=None)
@given(dtype=st.sampled_from(INTS), k=st.sampled_from([1, 2, 3]), s=st.sampled_from([1, 2]), p=st.sampled_from([0, 1]),
       d=st.sampled_from([1, 2]), ceil=st.booleans(), seed=st.integers(0, 99))
def test_integer_max_pool(dtype: torch.dtype, k: int, s: int, p: int, d: int, ceil: bool, seed: int) -> None:
    if p * 2 > k:
        p = 0  # torch: padding at most half the kernel
    x = _ints((2, 3, 9, 10), dtype, seed, -50, 50)
    r, i = _native(lambda: F.max_pool2d(x.to("trn"), k, s, p, d, ceil_mode=ceil, return_indices=True))
    e, ie = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
    _same(r, e)
    _same(i, ie)
    x3 = _ints((1, 2, 6, 7, 8), dtype, seed + 1, -50, 50)
    r3, i3 = _native(lambda: F.max_pool3d(x3.to("trn"), k, s, p, d, ceil_mode=ceil, return_indices=True))
    e3, ie3 = F.max_pool3d(x3, k, s, p, d, ceil_mode=ceil, return_indices=True)
    _same(r3, e3)
    _same(i3, ie3)


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from(INTS), reduce=st.sampled_from(["sum", "prod", "mean", "amax", "amin"]),
       include_self=st.booleans(), dim=st.sampled_from([0, 1]), seed=st.integers(0, 99))
def test_integer_scatter_and_index_reduce(dtype: torch.dtype, reduce: str, include_self: bool, dim: int,
                                          seed: int) -> None:
    """Through the fp32 kernels when every result is exact there; integer means divide with floor, as torch."""
    hi = 3 if reduce == "prod" else 9
    s, src = _ints((5, 6), dtype, seed, -hi, hi), _ints((4, 6) if dim == 0 else (5, 4), dtype, seed + 1, -hi, hi)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, s.shape[dim], src.shape, generator=g)
    if not (dtype in (torch.int8, torch.uint8) and reduce == "prod"):  # 3^5 could wrap these: the CPU's (declined)
        _same(_native(lambda: s.to("trn").scatter_reduce(dim, idx.to("trn"), src.to("trn"), reduce,
                                                         include_self=include_self)),
              s.scatter_reduce(dim, idx, src, reduce, include_self=include_self))
    if reduce != "sum":
        i1 = torch.randint(0, s.shape[dim], (src.shape[dim],), generator=g)
        want = s.index_reduce(dim, i1, src, reduce, include_self=include_self)
        if not (dtype in (torch.int8, torch.uint8) and reduce == "prod"):
            _same(_native(lambda: s.to("trn").index_reduce(dim, i1.to("trn"), src.to("trn"), reduce,
                                                           include_self=include_self)), want)


def test_integer_scatter_reduce_beyond_fp32_goes_to_the_cpu() -> None:
    s = torch.full((3,), 2**22, dtype=torch.int32)  # 9 * 2^22 in one element: past fp32's exact integers
    src, idx = torch.full((8,), 2**22, dtype=torch.int32), torch.zeros(8, dtype=torch.int64)
    trnlang.reset_fallback_stats()
    _same(s.to("trn").scatter_reduce(0, idx.to("trn"), src.to("trn"), "sum"), s.scatter_reduce(0, idx, src, "sum"))
    assert "aten::scatter_reduce.two" in trnlang.fallback_stats()


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from([torch.int32, torch.int16, torch.int8, torch.uint8]), seed=st.integers(0, 99),
       shape=st.sampled_from([(0,), (1,), (300,), (7, 33)]))
def test_bitwise_shifts(dtype: torch.dtype, seed: int, shape: tuple[int, ...]) -> None:
    """Every value of the dtype, shifts from negative to past the width (torch: 0 / the sign fill there)."""
    info = torch.iinfo(dtype)
    x = _ints(shape, dtype, seed, info.min, info.max)
    s = _ints(shape, dtype, seed + 1, -3 if dtype != torch.uint8 else 0, 40)
    for fn in (torch.bitwise_left_shift, torch.bitwise_right_shift):
        _same(_native(lambda: fn(x.to("trn"), s.to("trn"))), fn(x, s))
    _same(_native(lambda: x.to("trn") << 3), x << 3)
    _same(_native(lambda: x.to("trn") >> 2), x >> 2)
    y = x.to("trn")
    _native(lambda: y.__ilshift__(s.to("trn")))
    _same(y, x << s)


@settings(max_examples=20, deadline=None)
@given(dtype=st.sampled_from(INTS), n=st.sampled_from([0, 1, 37, 500]), hi=st.sampled_from([0, 3, 100]),
       minlength=st.sampled_from([0, 4, 130]), weighted=st.booleans(), seed=st.integers(0, 99))
def test_bincount(dtype: torch.dtype, n: int, hi: int, minlength: int, weighted: bool, seed: int) -> None:
    """int64 counts, or float32 weight sums accumulated in input order (bit-equal to the CPU's)."""
    x = _ints((n,), dtype, seed, 0, hi)
    w = torch.randn(n, generator=torch.Generator().manual_seed(seed)) if weighted else None
    got = _native(lambda: torch.bincount(x.to("trn"), w.to("trn") if w is not None else None, minlength))
    _same(got, torch.bincount(x, w, minlength))


@pytest.mark.parametrize("dtype", INTS)
def test_mode_of_integers(dtype: torch.dtype) -> None:
    """Rows up to 16 long (ties reproducible): the smallest most frequent value, values in the input's dtype."""
    x = _ints((6, 9), dtype, 3, 0, 4)
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            v, i = _native(lambda: torch.mode(x.to("trn"), dim, keepdim))
            ve, ie = torch.mode(x, dim, keepdim)
            _same(v, ve)
            _same(i, ie)


@pytest.mark.parametrize("alpha, beta", [(0.5, 1), (1, 0.2), (-1.7, 2.9), (0.6, 0.2)])
def test_integer_products_truncate_fractional_alpha_beta(alpha: float, beta: float) -> None:
    """torch casts alpha/beta to the operands' integer type (toward zero) instead of raising."""
    g = torch.Generator().manual_seed(2)
    b1, b2 = torch.randint(-3, 4, (2, 3, 4), generator=g), torch.randint(-3, 4, (2, 4, 5), generator=g)
    s, v = torch.randint(-3, 4, (3, 5), generator=g), torch.randint(-3, 4, (4,), generator=g)
    kw = {"alpha": alpha, "beta": beta}
    for dt in (torch.int32, torch.int64):
        B1, B2, S, V = (t.to(dt) for t in (b1, b2, s, v))
        _same(_native(lambda: torch.addbmm(S.to("trn"), B1.to("trn"), B2.to("trn"), **kw)),
              torch.addbmm(S, B1, B2, **kw))
        _same(_native(lambda: torch.baddbmm(S.to("trn"), B1.to("trn"), B2.to("trn"), **kw)),
              torch.baddbmm(S, B1, B2, **kw))
        _same(_native(lambda: torch.addmm(S.to("trn"), B1[0].to("trn"), B2[0].to("trn"), **kw)),
              torch.addmm(S, B1[0], B2[0], **kw))
        _same(_native(lambda: torch.addmv(S[:, 0].to("trn"), B1[0].to("trn"), V.to("trn"), **kw)),
              torch.addmv(S[:, 0], B1[0], V, **kw))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
def test_integer_arange_hardtanh_index_add_cast_their_numbers(dtype: torch.dtype) -> None:
    """torch casts float numbers toward zero for integer outputs: arange's start/step (int64: end too, and its
    integer size formula), hardtanh's bounds, index_add's alpha."""
    for a, b, s in [(0.5, 10, 2.7), (2.9, 13.1, 1.6), (1.5, 7.9, 2.2), (0, 10, 3), (3.5, 0.2, -1.2)]:
        o = torch.empty(0, dtype=dtype)
        try:
            want = torch.arange(a, b, s, out=o)
        except (RuntimeError, ValueError):
            continue
        _same(_native(lambda: torch.arange(a, b, s, out=torch.empty(0, dtype=dtype, device="trn"))), want)
    x = _ints((40,), dtype, 1, -5, 6)
    for lo, hi in [(0.5, 2.5), (0.2, 4.9), (1, 3)] + ([(-1.5, 1.7)] if dtype != torch.uint8 else []):
        _same(_native(lambda: F.hardtanh(x.to("trn"), lo, hi)), F.hardtanh(x, lo, hi))
    if dtype != torch.int64:  # int64 accumulation is the CPU's
        s_, src, i = _ints((4, 3), dtype, 2, -5, 5), _ints((3, 3), dtype, 3, -5, 5), torch.tensor([0, 2, 0])
        for al in (2.5, -1.5, 0.7, 3):
            if dtype == torch.uint8 and al < 0:
                continue
            _same(_native(lambda: s_.to("trn").index_add(0, i.to("trn"), src.to("trn"), alpha=al)),
                  s_.index_add(0, i, src, alpha=al))


def test_integer_cumprod_beyond_fp32_goes_to_the_cpu() -> None:
    x = torch.full((30,), 3, dtype=torch.int64)  # 3^30 > 2^24
    trnlang.reset_fallback_stats()
    _same(torch.cumprod(x.to("trn"), 0), torch.cumprod(x, 0))
    assert "aten::cumprod" in trnlang.fallback_stats()


@pytest.mark.parametrize("k", [-2, 0, 1, 9, -9])
def test_int64_tril_triu(k: int) -> None:
    """Values past 2^32 kept bit-exact (a bool triangle and a native int64 where); transposed input, out=, in place."""
    x = torch.randint(-(2**40), 2**40, (3, 5, 7), generator=torch.Generator().manual_seed(k + 20))
    for fn in (torch.tril, torch.triu):
        _same(_native(lambda: fn(x.to("trn"), k)), fn(x, k))
        _same(_native(lambda: fn(x[0].to("trn").t(), k)), fn(x[0].t(), k))
    out = torch.empty(3, 5, 7, dtype=torch.int64, device="trn")
    _native(lambda: torch.tril(x.to("trn"), k, out=out))
    _same(out, torch.tril(x, k))
    y = x.to("trn")
    _native(lambda: y.triu_(k))
    _same(y, x.triu(k))


def _conv_cases():  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(0)

    def ri(*s: int) -> torch.Tensor:
        return torch.randint(-5, 6, s, generator=g)

    return [(F.conv1d, ri(2, 4, 9), ri(6, 4, 3), ri(6), {"padding": 1}),
            (F.conv2d, ri(2, 4, 7, 8), ri(6, 2, 3, 3), ri(6), {"stride": 2, "groups": 2}),
            (F.conv3d, ri(1, 2, 5, 5, 5), ri(3, 2, 2, 2, 2), None, {}),
            (F.conv_transpose1d, ri(2, 4, 6), ri(4, 3, 3), ri(3), {"stride": 2}),
            (F.conv_transpose2d, ri(1, 4, 5, 5), ri(4, 2, 3, 3), ri(4), {"groups": 2, "padding": 1}),
            (F.conv_transpose3d, ri(1, 2, 3, 3, 3), ri(2, 3, 2, 2, 2), None, {})]


@pytest.mark.parametrize("case", range(6))
def test_int64_convolutions(case: int) -> None:
    fn, x, w, b, kw = _conv_cases()[case]
    _same(_native(lambda: fn(x.to("trn"), w.to("trn"), b.to("trn") if b is not None else None, **kw)),
          fn(x, w, b, **kw))


def test_int64_convolution_beyond_fp32_goes_to_the_cpu() -> None:
    x, w = torch.full((1, 2, 5), 2**12), torch.full((3, 2, 3), 2**12)
    trnlang.reset_fallback_stats()
    _same(F.conv1d(x.to("trn"), w.to("trn")), F.conv1d(x, w))
    assert "aten::convolution_overrideable" in trnlang.fallback_stats()


@settings(max_examples=20, deadline=None)
@given(dim=st.sampled_from([0, 1]), big=st.booleans(), seed=st.integers(0, 99))
def test_int64_fills_and_adds_by_index(dim: int, big: bool, seed: int) -> None:
    """int64 data moves as int32 word pairs: a fill scatters a filled source (values past 2^32 kept); adds go
    through fp32 when bounded. one_hot (a scatter of 1s into int64 zeros) is native."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-(2**40), 2**40, (5, 4), generator=g) if big else torch.randint(-1000, 1000, (5, 4), generator=g)
    idx = torch.randint(0, x.shape[dim], (3, 4) if dim == 0 else (5, 3), generator=g)
    v = 2**35 + 3 if big else -7
    _same(_native(lambda: x.to("trn").scatter(dim, idx.to("trn"), v)), x.scatter(dim, idx, v))
    i1 = torch.randint(0, x.shape[dim], (3,), generator=g)
    _same(_native(lambda: x.to("trn").index_fill(dim, i1.to("trn"), v)), x.index_fill(dim, i1, v))
    tv = torch.tensor(v)  # index_fill with a 0-dim tensor value
    _same(_native(lambda: x.to("trn").index_fill(dim, i1.to("trn"), tv.to("trn"))), x.index_fill(dim, i1, tv))
    if not big:
        src = torch.randint(-100, 100, idx.shape, generator=g)
        _same(_native(lambda: x.to("trn").scatter_add(dim, idx.to("trn"), src.to("trn"))), x.scatter_add(dim, idx, src))
        s1 = torch.randint(-100, 100, (3, 4) if dim == 0 else (5, 3), generator=g)
        _same(_native(lambda: x.to("trn").index_add(dim, i1.to("trn"), s1.to("trn"))), x.index_add(dim, i1, s1))
    labels = torch.randint(0, 6, (17,), generator=g)
    _same(_native(lambda: F.one_hot(labels.to("trn"), 6)), F.one_hot(labels, 6))


def test_int64_accumulation_beyond_fp32_names_its_reason() -> None:
    """An int64 multiply-scatter is native through fp32 when exact; past 2^24 it goes to the CPU and the recorded
    reason says so (not an index error)."""
    x, idx = torch.arange(6).view(2, 3), torch.tensor([[0, 1, 0]])
    two = torch.full((1, 3), 2)
    _same(_native(lambda: x.to("trn").scatter(0, idx.to("trn"), two.to("trn"), reduce="multiply")),
          x.scatter(0, idx, two, reduce="multiply"))
    big = x * 2**30
    trnlang.reset_fallback_stats()
    _same(big.to("trn").scatter(0, idx.to("trn"), two.to("trn"), reduce="multiply"),
          big.scatter(0, idx, two, reduce="multiply"))
    reasons = trnlang.fallback_reasons().get("aten::scatter.reduce", {})
    assert any("2^24" in r for r in reasons), reasons


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 999), reduce=st.sampled_from(["add", "multiply"]), dim=st.sampled_from([0, 1, -1]),
       value=st.sampled_from([None, 3, -2.5, 2.99]))
def test_int64_legacy_scatter_reduce(seed: int, reduce: str, dim: int, value: float | None) -> None:
    """``scatter(..., reduce=)`` on int64 with a tensor or a number (a float cast toward zero, as torch does)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-9, 9, (6, 5), generator=g)
    idx = torch.randint(0, x.shape[dim], (4, 3), generator=g)
    src = torch.randint(-9, 9, (5, 4), generator=g) if value is None else value
    dev = src.to("trn") if isinstance(src, torch.Tensor) else src
    _same(_native(lambda: x.to("trn").scatter(dim, idx.to("trn"), dev, reduce=reduce)),
          x.scatter(dim, idx, src, reduce=reduce))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 999), n=st.integers(0, 40), bcast=st.booleans(), neg=st.booleans())
def test_int64_index_put_and_put_accumulate(seed: int, n: int, bcast: bool, neg: bool) -> None:
    """int64 ``index_put(accumulate=True)`` (in place, out of place, a mask, a broadcast value) and ``put_``:
    repeated indices all add, exactly, through fp32 when bounded below 2^24."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1000, 1000, (7, 5), generator=g)
    i = torch.randint(-7 if neg else 0, 7, (n,), generator=g)
    v = torch.randint(-1000, 1000, () if bcast else (n, 5), generator=g)
    _same(_native(lambda: x.to("trn").index_put((i.to("trn"),), v.to("trn"), accumulate=True)),
          x.index_put((i,), v, accumulate=True))
    xt = x.to("trn")
    _native(lambda: xt.index_put_((i.to("trn"),), v.to("trn"), accumulate=True))
    _same(xt, x.clone().index_put_((i,), v, accumulate=True))
    m = torch.rand(7, 5, generator=g) > 0.5
    _same(_native(lambda: x.to("trn").index_put((m.to("trn"),), torch.tensor(3).to("trn"), accumulate=True)),
          x.index_put((m,), torch.tensor(3), accumulate=True))
    j = torch.randint(-35, 35, (n,), generator=g)
    s_ = torch.randint(-1000, 1000, (n,), generator=g)
    xt = x.to("trn")
    _native(lambda: xt.put_(j.to("trn"), s_.to("trn"), accumulate=True))
    _same(xt, x.clone().put_(j, s_, accumulate=True))


def test_int64_index_put_accumulate_beyond_fp32_goes_to_the_cpu() -> None:
    x = torch.full((3,), 1 << 30)
    i, v = torch.tensor([0, 0]), torch.tensor([5, 6])
    trnlang.reset_fallback_stats()
    _same(x.to("trn").index_put((i.to("trn"),), v.to("trn"), accumulate=True), x.index_put((i,), v, accumulate=True))
    assert "aten::index_put" in trnlang.fallback_stats()


@pytest.mark.parametrize("dtype", INTS + [torch.bool, torch.complex64])
def test_number_values_into_integers_cast_toward_zero_or_raise_like_torch(dtype: torch.dtype) -> None:
    """masked_fill / scatter / index_fill with a number into an integer tensor: a float is cast toward zero; NaN,
    inf and values outside the dtype raise torch's error (the CPU's, through the fallback)."""
    x, m, i = torch.zeros(3, dtype=dtype), torch.tensor([True, False, True]), torch.tensor([0, 2])
    ops = [lambda a, mm, ii, v: a.masked_fill(mm, v), lambda a, mm, ii, v: a.scatter(0, ii, v),
           lambda a, mm, ii, v: a.index_fill(0, ii, v), lambda a, mm, ii, v: a.scatter(0, ii, v, reduce="add")]
    for v in (2.5, -2.5, 2.99, -0.5, float("nan"), 3e9, 300, -1, 127.9, 255.5, -128.5, 1):
        for op in ops:
            try:
                want = op(x, m, i, v)
            except RuntimeError as e:
                with pytest.raises(RuntimeError, match="cannot be converted"):
                    op(x.to("trn"), m.to("trn"), i.to("trn"), v)
                assert "cannot be converted" in str(e)
                continue
            got = op(x.to("trn"), m.to("trn"), i.to("trn"), v)
            assert got.dtype == want.dtype and torch.equal(got.cpu().isnan(), want.isnan())
            assert torch.equal(got.cpu().nan_to_num(), want.nan_to_num())


def test_gcd_broadcasts_a_single_element_first_operand(monkeypatch) -> None:
    """gcd where the first operand broadcasts from one element ([1, 1] tile) against a full second operand."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(5)
    for xs, ys in (((1, 1), (3, 70)), ((1,), (5, 66)), ((4, 1), (4, 65)), ((2, 3, 2), ())):
        x = torch.randint(-50, 50, xs, generator=g, dtype=torch.int64)
        y = torch.randint(-50, 50, ys, generator=g, dtype=torch.int64)
        for p, q in ((x, y), (y, x)):
            assert torch.equal(torch.gcd(p.to("trn"), q.to("trn")).cpu(), torch.gcd(p, q))


@pytest.mark.parametrize("fn", [torch.bitwise_left_shift, torch.bitwise_right_shift])
def test_int64_shifts_on_words(fn, monkeypatch) -> None:
    """int64 shifts natively on the two int32 words: every amount in [-3, 70) (torch's 0 / sign fill outside the
    width), full-range values, number and int32 amounts, broadcasting, in place."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(9)
    x = torch.cat([torch.randint(-2**62, 2**62, (66,), generator=g),
                   torch.tensor([0, 1, -1, 2**63 - 1, -2**63, 12345, -98765])])
    s = torch.arange(-3, 70)
    assert torch.equal(fn(x.to("trn"), s.to("trn")).cpu(), fn(x, s))
    assert torch.equal(fn(x.to("trn"), s.to(torch.int32).to("trn")).cpu(), fn(x, s.to(torch.int32)))
    for k in (0, 1, 31, 32, 33, 62, 63, 64, -1):
        assert torch.equal(fn(x.to("trn"), k).cpu(), fn(x, k)), k
    assert torch.equal(fn(x[:, None].to("trn"), s[::9].to("trn")).cpu(), fn(x[:, None], s[::9]))
    assert torch.equal(fn(5, s.to("trn")).cpu(), fn(torch.tensor(5), s))
    y, e = x.to("trn"), x.clone()
    if fn is torch.bitwise_left_shift:
        y <<= s.to("trn")
        e <<= s
    else:
        y >>= s.to("trn")
        e >>= s
    assert torch.equal(y.cpu(), e)


def test_int64_powers_within_int32(monkeypatch) -> None:
    """int64 ``**`` natively where every result fits int32 (tensor/number bases and exponents, broadcast, in place,
    negative exponents); results past int32 (torch wraps them modulo 2^64) take the CPU fallback, still exact."""
    from trnlang import config

    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(1)
    x, e = torch.randint(-9, 10, (200,), generator=g), torch.randint(-2, 10, (200,), generator=g)
    for a, b in ((x, e), (x, 3), (2, e.clamp(min=0)), (x[:, None], e[:7])):
        ta = a.to("trn") if isinstance(a, torch.Tensor) else a
        tb = b.to("trn") if isinstance(b, torch.Tensor) else b
        exp, got = torch.pow(a, b), torch.pow(ta, tb).cpu()
        assert got.dtype == exp.dtype and torch.equal(got, exp)
    y = x.to("trn")
    y.pow_(e.clamp(min=0).to("trn"))
    assert torch.equal(y.cpu(), x.pow(e.clamp(min=0)))
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        x.to("trn").pow(-2)  # a negative number exponent raises (a tensor of exponents does not)
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    config.refresh()
    try:
        big, ee = torch.tensor([3, 10, -7]), torch.tensor([40, 19, 25])
        assert torch.equal(torch.pow(big.to("trn"), ee.to("trn")).cpu(), torch.pow(big, ee))
    finally:
        monkeypatch.undo()
        config.refresh()
