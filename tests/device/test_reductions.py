"""The reduction family (stdlib_kernels/reduction/reduce.py, log_softmax in softmax.py): trn vs CPU, no fallbacks.

Forward over ragged / size-1 / empty / non-contiguous shapes and leading, trailing and multiple dims,
bf16, NaN/inf semantics, the 128-partition spread of long full reductions; backward through
autograd compared with CPU (sub-ops owned by other families may fall back; ours never do).
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels import _util as U
from stdlib_kernels import tiling as T
from stdlib_kernels.reduction import reduce as R
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
#: ATen ops lowered by this family (a fallback of any of them is a failure).
OURS = ("sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "var_mean",
        "std_mean", "linalg_vector_norm", "logsumexp", "all", "any", "_log_softmax", "_log_softmax_backward_data",
        "_softmax", "_softmax_backward_data")

#: name -> (fn(x) on a float tensor, rtol/atol for fp32)
OPS = {
    "sum_all": (lambda x: x.sum(), 1e-4),
    "sum_last": (lambda x: x.sum(-1), 1e-4),
    "sum_first_keep": (lambda x: x.sum(0, keepdim=True), 1e-4),
    "sum_dims_dtype": (lambda x: x.sum((0, -1) if x.dim() > 1 else 0, dtype=torch.float32), 1e-4),
    "mean_first": (lambda x: x.mean(0), 1e-4),
    "prod_last": (lambda x: (1 + 0.01 * x).prod(-1), 1e-4),
    "prod_all": (lambda x: (1 + 0.001 * x).prod(), 1e-4),
    "amax_first": (lambda x: x.amax(0), 0),
    "amin_all": (lambda x: x.amin(), 0),
    "max_all": (lambda x: x.max(), 0),
    "max_dim": (lambda x: x.max(-1), 0),
    "min_dim_keep": (lambda x: x.min(0, keepdim=True), 0),
    "argmax_all": (lambda x: x.argmax(), 0),
    "argmin_last": (lambda x: x.argmin(-1), 0),
    "var_last": (lambda x: x.var(-1), 1e-4),
    "std_first_c0": (lambda x: x.std(0, correction=0), 1e-4),
    "var_mean_all": (lambda x: torch.var_mean(x), 1e-4),
    "std_mean_keep": (lambda x: torch.std_mean(x, -1, keepdim=True), 1e-4),
    "norm2": (lambda x: torch.linalg.vector_norm(x, 2, -1), 1e-4),
    "norm1_all": (lambda x: torch.linalg.vector_norm(x, 1), 1e-4),
    "norm_inf": (lambda x: torch.linalg.vector_norm(x, math.inf, 0), 0),
    "norm_ninf": (lambda x: torch.linalg.vector_norm(x, -math.inf, -1), 0),
    "norm0": (lambda x: torch.linalg.vector_norm(x, 0, -1), 0),
    "norm_p": (lambda x: torch.linalg.vector_norm(x, 3.5, -1), 1e-4),
    "logsumexp_last": (lambda x: x.logsumexp(-1), 1e-4),
    "logsumexp_first": (lambda x: x.logsumexp(0), 1e-4),
    "log_softmax_last": (lambda x: torch.log_softmax(x, -1), 1e-5),
    "log_softmax_first": (lambda x: torch.log_softmax(x, 0), 1e-5),
    "all_last": (lambda x: (x > -1.5).all(-1), 0),
    "any_all": (lambda x: x.any(), 0),
    "sum_bool": (lambda x: (x > 0).sum(-1), 0),
}
SHAPES = [(1,), (130, 37), (3, 5, 7), (2, 2500)]


def _nofb(fn, *args):
    trnlang.reset_fallback_stats()
    r = fn(*args)
    fb = {k: v for k, v in trnlang.fallback_stats().items() if not k.startswith("aten::gt")}  # gt: compare family
    assert fb == {}, fb
    return r


def _cmp(got, exp, tol):
    got = got if isinstance(got, tuple) else (got,)
    exp = exp if isinstance(exp, tuple) else (exp,)
    for g, e in zip(got, exp):
        assert_same(g, e, rtol=tol, atol=tol)


def _input(shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(OPS))
def test_forward_fixed_shapes(name):
    fn, tol = OPS[name]
    for shape in SHAPES:
        x = _input(shape)
        _cmp(_nofb(fn, x.to("trn")), fn(x), tol)


@pytest.mark.parametrize("name", ["sum_last", "max_dim", "var_last", "logsumexp_first", "argmin_last", "norm2"])
def test_non_contiguous(name):
    fn, tol = OPS[name]
    x = _input((40, 70))
    xt = x.to("trn")
    _cmp(_nofb(fn, xt.t()[3:]), fn(x.t()[3:]), tol)
    _cmp(_nofb(fn, xt[:, ::2]), fn(x[:, ::2]), tol)


@_SETTINGS
@given(shape=st.lists(st.integers(1, 150), min_size=1, max_size=3).map(tuple), data=st.data())
def test_random_shapes_and_dims(shape, data):
    dims = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                              unique_by=lambda d: d % len(shape)))
    keep = data.draw(st.booleans())
    x = _input(shape, 1)
    xt = x.to("trn")
    for fn, tol in [(lambda t: t.sum(dims, keepdim=keep), 1e-4), (lambda t: t.amax(dims, keepdim=keep), 0),
                    (lambda t: t.var(dims, keepdim=keep), 1e-4),
                    (lambda t: torch.logsumexp(t, dims, keepdim=keep), 1e-4),
                    (lambda t: t.max(dims[0], keepdim=keep), 0)]:
        _cmp(_nofb(fn, xt), fn(x), tol)


def test_empty_and_scalar():
    for x in (torch.randn(0, 4), torch.randn(4, 0), torch.tensor(2.5)):
        xt = x.to("trn")
        for fn in (lambda t: t.sum(-1), lambda t: t.mean(0), lambda t: t.prod(-1), lambda t: t.any(-1),
                   lambda t: t.all(), lambda t: t.logsumexp(-1), lambda t: torch.linalg.vector_norm(t, 2, -1)):
            _cmp(_nofb(fn, xt), fn(x), 1e-6)
    for fn in (lambda t: t.max(), lambda t: t.argmax(0), lambda t: t.amax(0)):  # torch raises on empty
        with pytest.raises((RuntimeError, IndexError)) as cpu_err:
            fn(torch.randn(0, 3))
        with pytest.raises(cpu_err.type) as trn_err:
            fn(torch.randn(0, 3).to("trn"))
        assert str(trn_err.value) == str(cpu_err.value)


def test_nan_inf_semantics():
    nan, inf = math.nan, math.inf
    x = torch.tensor([[1., nan, 3., nan], [inf, 1., inf, 2.], [-inf, -inf, -inf, -inf], [2., 5., 5., 1.]])
    xt = x.to("trn")
    for fn in (lambda t: t.max(1), lambda t: t.min(1), lambda t: t.argmax(1), lambda t: t.amax(1),
               lambda t: t.logsumexp(1), lambda t: torch.log_softmax(t, 1), lambda t: t.any(1), lambda t: t.all(1),
               lambda t: torch.linalg.vector_norm(t, inf, 1)):
        _cmp(_nofb(fn, xt), fn(x), 1e-5)


def test_spread_long_full_reductions():
    """A long contiguous full reduction runs over 128 partitions plus a tail, then combines the partials."""
    x = _input((20000 + 37,))
    xt = x.to("trn")
    for fn, tol in [(lambda t: t.sum(), 1e-4), (lambda t: t.mean(), 1e-4), (lambda t: t.amax(), 0),
                    (lambda t: t.logsumexp(0), 1e-4), (lambda t: torch.linalg.vector_norm(t), 1e-4),
                    (lambda t: (t > 4).any(), 0), (lambda t: t.argmax(), 0)]:
        _cmp(_nofb(fn, xt), fn(x), tol)


def test_bf16():
    x = _input((130, 70)).bfloat16()
    xt = x.to("trn")
    for fn in (lambda t: t.sum(-1), lambda t: t.mean(0), lambda t: t.amax(-1), lambda t: t.var(0),
               lambda t: t.logsumexp(-1), lambda t: torch.log_softmax(t, -1), lambda t: t.max(0)[0],
               lambda t: t.sum(-1, dtype=torch.float32)):
        _cmp(_nofb(fn, xt), fn(x), 2e-2)


def test_int_and_bool_inputs():
    xi = torch.randint(-50, 50, (33, 17), dtype=torch.int32)
    xb = xi > 0
    for fn, x in [(lambda t: t.amax(1), xi), (lambda t: t.max(0), xi), (lambda t: t.argmin(1), xi),
                  (lambda t: t.any(1), xi), (lambda t: t.sum(0), xb), (lambda t: t.all(), xb), (lambda t: t.sum(), xb)]:
        _cmp(_nofb(fn, x.to("trn")), fn(x), 0)


def test_var_std_empty_and_zero_dof_warn_like_torch():
    """Empty reductions give NaN (an empty output stays empty) with torch's degrees-of-freedom warning."""
    import warnings

    for x in (torch.randn(0), torch.randn(0, 5), torch.randn(3, 0), torch.randn(1, 4)):
        for fn in (lambda t: t.std(), lambda t: t.var(0), lambda t: torch.var_mean(t, -1, correction=0),
                   lambda t: torch.std_mean(t, 0, keepdim=True)):
            with warnings.catch_warnings(record=True) as wc:
                warnings.simplefilter("always")
                exp = fn(x)
            with warnings.catch_warnings(record=True) as wt:
                warnings.simplefilter("always")
                got = _nofb(fn, x.to("trn"))
            _cmp(got, exp, 1e-6)
            assert [str(w.message) for w in wt] == [str(w.message).split(" (Triggered")[0] for w in wc]


def test_int_sums():
    """int64/int32 sums (masked means count mask elements as int64) accumulate in int32 when a device check
    bounds the values; larger values are declined (the CPU sums them in int64)."""
    xl = torch.randint(-1000, 1000, (3, 2, 1, 2))
    for x in (xl, xl.to(torch.int32), xl.transpose(0, 3), torch.tensor(7), torch.zeros(0, 3, dtype=torch.int64)):
        fns = [lambda t: t.sum(), lambda t: t.sum(-1), lambda t: t.sum(0, dtype=torch.int64)]
        for fn in fns + ([lambda t: t.sum((0, -1), keepdim=True)] if x.dim() > 1 else []):
            _cmp(_nofb(fn, x.to("trn")), fn(x), 0)
    big = torch.tensor([2**40, 3, -5])
    trnlang.reset_fallback_stats()
    assert_same(big.to("trn").sum(), big.sum(), 0, 0)
    assert trnlang.fallback_stats() == {"aten::sum": 1}
    xl = torch.randint(-2**31, 2**31 - 1, (10, 5))  # int64 min/max: values that fit int32 reduce natively
    for x in (xl, xl.t(), torch.tensor(5)):
        for fn in (lambda t: t.amin(-1, keepdim=True), lambda t: t.amax(), lambda t: t.max(), lambda t: t.min()):
            _cmp(_nofb(fn, x.to("trn")), fn(x), 0)
    mask = torch.rand(5, 6) > 0.5  # masked.mean's count
    _cmp(_nofb(lambda t: t.to(torch.int64).sum(1, dtype=torch.int64), mask.to("trn")), mask.long().sum(1), 0)


BACKWARD = {
    "sum": lambda x: x.sum(0),
    "mean": lambda x: x.mean((0, 1)),
    "prod": lambda x: (1 + 0.1 * x).prod(-1),
    "amax": lambda x: x.amax(-1),
    "var": lambda x: x.var(0),
    "std": lambda x: x.std(-1),
    "norm": lambda x: torch.linalg.vector_norm(x, 2, -1),
    "logsumexp": lambda x: x.logsumexp(-1),
    "log_softmax": lambda x: torch.log_softmax(x, 0),
    "max_dim": lambda x: x.max(-1)[0],
}


@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_backward_matches_cpu(name):
    fn = BACKWARD[name]
    x = _input((37, 45))
    g = _input(fn(x).shape, 2)
    xc = x.clone().requires_grad_()
    fn(xc).backward(g)
    xt = x.to("trn").requires_grad_()
    trnlang.reset_fallback_stats()
    fn(xt).backward(g.to("trn"))
    ours = {k for k in trnlang.fallback_stats() if k.split("::")[1].split(".")[0] in OURS}
    assert ours == set(), trnlang.fallback_stats()  # prod's backward: its int64 zero counts sum natively
    assert_same(xt.grad, xc.grad, rtol=1e-4, atol=1e-5)


def test_profile_row_reduce():
    x = _input((512, 1024)).to("trn")
    out = torch.empty(512, 1, device="trn")
    prof = R.row_reduce.profile(x, out, R.Op.LSE, R.Pre.NONE, R.Post.NONE, 1.0, 0.0, R.Acc.F32)
    assert_same(out, torch.logsumexp(x.cpu(), 1, keepdim=True), rtol=1e-5, atol=1e-5)
    assert prof.time_us > 0
    for name, e in prof.engines.items():
        assert 0 <= e.utilization <= 1.0 + 1e-9, (name, e)
    assert prof.engines["vector"].instructions > 0 and prof.engines["scalar"].busy_us > 0  # max/sum, exp/log
    assert 0 < prof.mbu <= 1.0


_PRE_REF = {R.Pre.NONE: lambda x, p: x, R.Pre.ABS: lambda x, p: x.abs(), R.Pre.SQ: lambda x, p: x * x,
            R.Pre.POW: lambda x, p: x.abs() ** p, R.Pre.NZ: lambda x, p: (x != 0).float()}
_POST_REF = {R.Post.NONE: lambda a, s, p: a, R.Post.DIV: lambda a, s, p: a / s, R.Post.SQRT: lambda a, s, p: a.sqrt(),
             R.Post.ROOT: lambda a, s, p: a ** (1 / p)}


@pytest.mark.parametrize("pre,post", [(R.Pre.NONE, R.Post.DIV), (R.Pre.ABS, R.Post.NONE), (R.Pre.SQ, R.Post.SQRT),
                                      (R.Pre.POW, R.Post.ROOT), (R.Pre.NZ, R.Post.NONE)], ids=lambda m: m.name)
def test_row_reduce_modes(pre, post):
    """Every :class:`Pre` and :class:`Post` member has a body and computes its map (row_reduce launched directly,
    ragged rows and columns, one pass and the chunked loop)."""
    assert set(R._PRE) == set(R.Pre) and set(R._POST) == set(R.Post)
    g = torch.Generator().manual_seed(3)
    p, scale = 2.5, 7.0
    for shape in [(130, 37), (3, 5000)]:
        x = torch.randn(shape, generator=g)
        x[0, :3] = 0.0
        out = torch.empty(shape[0], 1, device="trn")
        # the host's tile buckets, as the lowerings pass them (no tile would make the sizes constants for good)
        R.row_reduce(x.to("trn"), out, R.Op.SUM, pre, post, scale, p, R.Acc.F32, T.tile_of(*shape, U.FREE_CHUNK))
        want = _POST_REF[post](_PRE_REF[pre](x, p).sum(1, keepdim=True), scale, p)
        assert_same(out, want, rtol=1e-4, atol=1e-4)


def test_int64_arg_and_dim_extrema_native_within_int32_range():
    """int64 argmax/argmin/max.dim/min.dim run natively when every value fits int32 (checked on the device),
    and still give the CPU's answer (through the fallback) when one does not."""
    import trnlang

    g = torch.Generator().manual_seed(5)
    trnlang.reset_fallback_stats()
    for shape in [(7,), (5, 9), (3, 4, 5), (1,)]:
        x = torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int64, generator=g)
        x.view(-1)[0] = x.view(-1)[-1]  # a tie: the first index wins, as on the CPU
        xt = x.to("trn")
        for d in range(len(shape)):
            for got, want in ((xt.max(d), x.max(d)), (xt.min(d), x.min(d))):
                assert torch.equal(got.values.cpu(), want.values) and torch.equal(got.indices.cpu(), want.indices)
            assert torch.equal(xt.argmax(d).cpu(), x.argmax(d))
            assert torch.equal(xt.argmin(d, keepdim=True).cpu(), x.argmin(d, keepdim=True))
    assert trnlang.fallback_stats() == {}
    big = torch.tensor([2**40, 1, -3])
    assert big.to("trn").argmax().item() == 0


@settings(max_examples=25, deadline=None, derandomize=True)
@given(shape=st.sampled_from([(2, 3), (5, 5), (3, 5, 7), (1, 1), (4, 129), (2, 2049), (7,)]),
       fill=st.booleans(), step=st.integers(2, 9), data=st.data())
def test_bool_reductions_with_ragged_rows(shape, fill, step, data):
    """bool max/min (values and indices), amax/amin, any/all and sum over rows of any length: an all-False row
    of odd length once gave True at index n (the masked-off load's -2^31 identity read as True)."""
    m = torch.full(shape, fill, dtype=torch.bool)
    m.view(-1)[::step] = not fill
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    t = m.to("trn")
    for f in (lambda x: x.max(d)[0], lambda x: x.max(d)[1], lambda x: x.min(d)[0], lambda x: x.min(d)[1],
              lambda x: x.amax(d), lambda x: x.amin(d), lambda x: x.any(d), lambda x: x.all(d), lambda x: x.sum(d)):
        got, want = f(t), f(m)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
