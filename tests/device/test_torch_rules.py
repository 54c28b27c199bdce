"""Argument, dtype and warning rules the trn lowerings share with torch's CPU kernels (issue 22).

Each case runs on the CPU and on trn; trn must raise the same exception type (natively: with
``TRN_FALLBACK=error``) or give the same result.
"""

import warnings

import pytest
import torch

from trnlang.device.registry import check_dims


def _both(fn):
    """(CPU outcome, trn outcome): a tensor result moved to the CPU, or the exception type and text."""
    res = []
    for dev in ("cpu", "trn"):
        try:
            r = fn(dev)
            res.append(r.cpu() if isinstance(r, torch.Tensor) else r)
        except Exception as e:  # noqa: BLE001 - compared below
            res.append((type(e), str(e)))
    return res


X = [[1.0, 0.0], [2.0, 3.0]]

RAISING = {
    "sum duplicate dims": lambda d: torch.sum(torch.tensor(X, device=d), dim=[0, 0]),
    "sum dim out of range": lambda d: torch.sum(torch.tensor(X, device=d), dim=[2]),
    "amax repeated negative dim": lambda d: torch.amax(torch.tensor(X, device=d), dim=(1, -1)),
    "mean over 65 dims": lambda d: torch.ones([1] * 65, device=d).mean(dim=0),
    "argmax over 65 dims": lambda d: torch.ones([1] * 65, device=d).argmax(dim=0),
    "max.dim over 65 dims": lambda d: torch.ones([1] * 65, device=d).max(dim=0).values,
    "flip duplicate dims": lambda d: torch.ones(2, 3, device=d).flip(0, 0),
    "flip over 65 dims": lambda d: torch.ones([1] * 65, device=d).flip(0),
    "max.dim values out of another dtype": lambda d: torch.max(
        torch.tensor(X, device=d), 0, out=(torch.empty(2, dtype=torch.int32, device=d),
                                           torch.empty(2, dtype=torch.long, device=d)))[0],
    "amax out of another dtype": lambda d: torch.amax(torch.tensor(X, device=d), 0,
                                                      out=torch.empty(2, dtype=torch.int32, device=d)),
    "neg into a wider float": lambda d: torch.neg(torch.tensor(X, device=d),
                                                  out=torch.empty(0, dtype=torch.float64, device=d)),
    "floor of int64 into float": lambda d: torch.floor(torch.tensor([1, 2], device=d),
                                                       out=torch.empty(0, dtype=torch.float32, device=d)),
    "abs of int32 into int64": lambda d: torch.abs(torch.tensor([1, -2], dtype=torch.int32, device=d),
                                                   out=torch.empty(0, dtype=torch.int64, device=d)),
}


@pytest.mark.parametrize("case", sorted(RAISING))
def test_raises_like_cpu_natively(case, monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    cpu, trn = _both(RAISING[case])
    assert isinstance(cpu, tuple), "the CPU accepted it"
    assert trn == cpu  # same type and message, raised by the trn checks (no fallback allowed)


def test_dim_none_and_empty_pass_on_65_dims(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    t = torch.ones([1] * 65, device="trn")
    assert t.sum().item() == 1.0  # dim=None is fine, as on the CPU
    check_dims(65, [], True)


@pytest.mark.parametrize("op", [torch.all, torch.any])
@pytest.mark.parametrize("keepdim", [False, True])
def test_all_any_with_empty_dim_list_is_a_no_op(op, keepdim, monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    cpu, trn = _both(lambda d: op(torch.tensor(X, device=d), dim=[], keepdim=keepdim))
    assert trn.dtype == torch.bool and torch.equal(trn, cpu)
    cpu, trn = _both(lambda d: op(torch.tensor(X, device=d), dim=[1], keepdim=keepdim))
    assert torch.equal(trn, cpu)


def test_sum_out_takes_the_out_dtype():
    cpu, trn = _both(lambda d: torch.sum(torch.tensor([[0.6, 0.7], [1.2, 3.5]], device=d), 0,
                                         out=torch.empty(2, dtype=torch.float16, device=d)))
    assert trn.dtype == cpu.dtype == torch.float16
    torch.testing.assert_close(trn, cpu, rtol=1e-3, atol=1e-3)  # fp16 rounding of the sums may differ by an ulp


def test_uint8_masks_warn_once_per_mask_and_call():
    counts = []
    for dev in ("cpu", "trn"):
        v = torch.arange(105.0).reshape(5, 7, 3).to(dev)
        m1, m2 = torch.tensor([1, 0, 1, 1, 0], dtype=torch.uint8).to(dev), torch.ones(3, dtype=torch.uint8).to(dev)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = v[m1, :, m2]
        with warnings.catch_warnings(record=True) as w2:
            warnings.simplefilter("default")
            a = v[m1]
            b = v[m1]
        assert torch.equal(a.cpu(), b.cpu())
        counts.append((len(w), len(w2), r.cpu(), [str(x.message).split(" (Triggered")[0] for x in w]))
    assert counts[0][:2] == counts[1][:2] == (2, 2)
    assert torch.equal(counts[0][2], counts[1][2]) and counts[0][3] == counts[1][3]


def test_bool_index_put_accumulate_ors():
    def f(d):
        y = torch.zeros(4, dtype=torch.bool, device=d)
        return y.index_put_((torch.tensor([0, 0, 1], device=d),), torch.tensor([True, True, False], device=d),
                            accumulate=True)

    cpu, trn = _both(f)
    assert torch.equal(trn, cpu)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.int8, torch.uint8])
def test_integer_rounding_and_nan_checks_run_natively(dtype, monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    x = torch.tensor([[0, 3, 100], [7, 1, 2]], dtype=dtype)
    t = x.to("trn")
    for op in (torch.floor, torch.ceil, torch.trunc):
        r = op(t)
        assert r.dtype == dtype and torch.equal(r.cpu(), op(x))
        assert r.data_ptr() != t.data_ptr()  # a copy, as torch returns
    for op in (torch.isnan, torch.isinf, torch.isfinite, torch.isposinf, torch.isneginf):
        assert torch.equal(op(t).cpu(), op(x))
    assert torch.equal(torch.isnan(t.t()).cpu(), torch.isnan(x.t()))


def test_make_tensor_bool_runs_natively(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    from torch.testing import make_tensor

    t = make_tensor((64, 64), dtype=torch.bool, device="trn").cpu()
    assert t.dtype == torch.bool and 0.3 < t.float().mean().item() < 0.7
    x = torch.zeros(4, 6, dtype=torch.bool, device="trn")
    x[:, ::2].random_(0, 2)
    assert not x[:, 1::2].cpu().any()  # only the view was written


@pytest.mark.parametrize("policy", ["error", "f64only", "warn"])
def test_out_of_a_dtype_the_result_cannot_cast_to_raises_the_ops_own_error(monkeypatch, policy):
    """An out= the result cannot be cast into: torch's error in the op's own words (linalg ops say "safely
    castable", TensorIterator ops "can't be cast"), under every fallback policy; a castable out= still works."""
    monkeypatch.setenv("TRN_FALLBACK", policy)
    a = torch.randn(3, 3, generator=torch.Generator().manual_seed(7))
    low = torch.linalg.cholesky(a @ a.T + 3 * torch.eye(3))
    for fn in (lambda o: torch.cholesky_inverse(low.to(o.device), out=o),
               lambda o: torch.add(low.to(o.device), 1.0, out=o)):
        with pytest.raises(RuntimeError) as cpu:
            fn(torch.empty(3, 3, dtype=torch.int32))
        with pytest.raises(RuntimeError) as trn:
            fn(torch.empty(3, 3, dtype=torch.int32, device="trn"))
        assert str(trn.value) == str(cpu.value)
    o = torch.empty(3, 3, dtype=torch.complex64, device="trn")
    torch.cholesky_inverse(low.to("trn"), out=o)
    torch.testing.assert_close(o.cpu(), torch.cholesky_inverse(low).to(torch.complex64), atol=1e-4, rtol=1e-4)
