"""count_nonzero natively in every device dtype with torch's dim checks, and amax/amin raise torch's errors for
empty slices natively (issue 22, test_reductions strict: count_nonzero had no lowering; the empty-slice checks were
declined to the CPU for the message). Compared with CPU torch under ``TRN_FALLBACK=error``."""

import pytest
import torch

_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
           torch.uint8, torch.bool, torch.complex64]


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


@pytest.mark.parametrize("dtype", _DTYPES)
def test_count_nonzero_vs_cpu(dtype):
    g = torch.Generator().manual_seed(11)
    x = torch.randint(-2, 3, (3, 4, 5), generator=g)
    x = x.to(dtype) if dtype != torch.complex64 else torch.complex(x.float(), (x.roll(1) > 1).float())
    if dtype == torch.int64:
        x[0, 0, 0] = 2**40  # a zero low word
    t = x.to("trn")
    for args in ((), (0,), (-1,), ((0, 2),), ([],), ((1,),)):
        got, want = torch.count_nonzero(t, *args), torch.count_nonzero(x, *args)
        assert got.dtype == want.dtype == torch.int64 and torch.equal(got.cpu(), want), args
    assert torch.equal(torch.count_nonzero(t.transpose(0, 2), 1).cpu(), torch.count_nonzero(x.transpose(0, 2), 1))


def _same_error(fn, x):
    with pytest.raises(Exception) as cpu:
        fn(x)
    with pytest.raises(type(cpu.value)) as trn:
        fn(x.to("trn"))
    assert str(trn.value).split("\n")[0] == str(cpu.value).split("\n")[0]


@pytest.mark.parametrize("fn", [lambda x: torch.count_nonzero(x, 3), lambda x: torch.count_nonzero(x, (0, 0)),
                                lambda x: torch.count_nonzero(x, (0, -3))])
def test_count_nonzero_dim_errors_like_cpu(fn):
    _same_error(fn, torch.ones(2, 3))


def test_count_nonzero_over_64_dims_like_cpu():
    _same_error(lambda x: torch.count_nonzero(x, list(range(65))), torch.ones([1] * 65))


@pytest.mark.parametrize("op", [torch.amax, torch.amin])
@pytest.mark.parametrize("shape,dim", [((0, 3), 0), ((0, 3), ()), ((0,), ()), ((2, 0, 3), (0, 1)), ((2, 0, 3), (2, 1))])
def test_amax_amin_empty_slice_errors_like_cpu(op, shape, dim):
    _same_error(lambda x: op(x, dim), torch.empty(shape))


@pytest.mark.parametrize("op", [torch.amax, torch.amin])
def test_amax_amin_of_empty_over_nonempty_dim(op):
    x = torch.empty(0, 3)
    got = op(x.to("trn"), 1)
    assert got.shape == op(x, 1).shape == (0,)


@pytest.mark.parametrize("src,dtype", [(torch.float32, torch.float16), (torch.bfloat16, torch.float16),
                                       (torch.float32, torch.bfloat16), (torch.float16, torch.bfloat16)])
def test_sum_into_a_narrower_float_converts_first_like_cpu(src, dtype):
    # torch converts the input to dtype= first (each element rounds), then sums: the CPU's value, not the
    # correctly rounded sum of the wider input (test_nansum_out_dtype caught the difference under cancellation)
    x = torch.tensor([1000.3, -1000.1, 0.45, 7.3, -3.2] * 40).to(src)
    for fn in (torch.sum, torch.nansum):
        got, want = fn(x.to("trn"), dtype=dtype).cpu(), fn(x, dtype=dtype)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.float(), want.float(), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool])
def test_logsumexp_of_integers_is_float32_like_cpu(dtype):
    x = torch.randint(0, 20, (4, 7), generator=torch.Generator().manual_seed(5)).to(dtype)
    for dim in (0, 1, (0, 1)):
        got, want = torch.logsumexp(x.to("trn"), dim), torch.logsumexp(x, dim)
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("op", [torch.argmax, torch.argmin, torch.max, torch.min])
@pytest.mark.parametrize("shape,dim", [((0, 3), 0), ((0,), None), ((2, 0, 4), 1), ((0, 0), 1)])
def test_arg_reductions_empty_slice_errors_like_cpu(op, shape, dim):
    if dim is None and op in (torch.max, torch.min):
        return  # max()/min() without dim: another op
    _same_error(lambda x: op(x) if dim is None else op(x, dim), torch.empty(shape))


@pytest.mark.parametrize("op", [torch.argmax, torch.argmin, torch.max, torch.min])
@pytest.mark.parametrize("keepdim", [False, True])
def test_arg_reductions_over_a_nonempty_dim_of_an_empty_tensor(op, keepdim):
    x = torch.empty(2, 0, 4)
    got, want = op(x.to("trn"), 2, keepdim=keepdim), op(x, 2, keepdim=keepdim)
    for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert a.shape == b.shape and a.dtype == b.dtype


@pytest.mark.parametrize("name", ["median", "nanmedian", "mode", "kthvalue"])
def test_selection_into_out_tuples_natively(name):
    # the int64 indices of out= used to fail the registry's dtype check (test_dim_reduction, test_mode float32)
    x = torch.randn(4, 7, generator=torch.Generator().manual_seed(2))
    fn = getattr(torch, name)
    args = (2, 1) if name == "kthvalue" else (1,)
    v, i = torch.empty(0, device="trn"), torch.empty(0, dtype=torch.int64, device="trn")
    fn(x.to("trn"), *args, out=(v, i))
    want = fn(x, *args)
    assert torch.equal(v.cpu(), want.values) and torch.equal(i.cpu(), want.indices)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_integer_median_and_kthvalue_vs_cpu(dtype):
    # float32 keys are exact within 2^24: values, ties (index order) and indices are the CPU's
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0 if dtype == torch.uint8 else -50, 50, (5, 9), generator=g).to(dtype)
    if dtype in (torch.int32, torch.int64):
        x[0, :3] = torch.tensor([2**24, -(2**24), 7])
    t = x.to("trn")
    for dim in (0, 1, -1):
        for fn in (torch.median, torch.nanmedian):
            got, want = fn(t, dim), fn(x, dim)
            assert got.values.dtype == want.values.dtype and torch.equal(got.values.cpu(), want.values)
            assert torch.equal(got.indices.cpu(), want.indices)
        got, want = torch.median(t, dim, keepdim=True), torch.median(x, dim, keepdim=True)
        assert torch.equal(got.values.cpu(), want.values) and torch.equal(got.indices.cpu(), want.indices)
    assert torch.equal(torch.median(t).cpu(), torch.median(x)) and torch.median(t).dtype == dtype
    u = torch.arange(45).reshape(5, 9).to(dtype)  # distinct values: kthvalue's index is unique
    assert torch.equal(torch.kthvalue(u.to("trn"), 3, 1).values.cpu(), torch.kthvalue(u, 3, 1).values)


def test_integer_median_beyond_2_24_declines_with_its_reason():
    import trnlang.device as td

    with pytest.raises(td.FallbackError, match="beyond 2\\^24"):
        torch.median(torch.tensor([2**24 + 1, 3, 5]).to("trn"), 0)


@pytest.mark.parametrize("name", ["median", "nanmedian", "mode", "kthvalue"])
def test_selection_over_an_empty_dim_errors_like_cpu(name):
    fn = getattr(torch, name)
    x = torch.randn(2, 0, 4)
    args = (1,) if name == "kthvalue" else ()
    _same_error(lambda t: fn(t, *args, 1), x)  # the empty dim: torch's IndexError, natively
    got, want = fn(x.to("trn"), *args, 2), fn(x, *args, 2)  # a non-empty dim of an empty tensor: empty results
    assert got.values.shape == want.values.shape and got.indices.dtype == want.indices.dtype
