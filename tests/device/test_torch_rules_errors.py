"""Calls torch rejects raise torch's own error natively on trn (so TRN_FALLBACK=error reports torch's error, not a
FallbackError): an out=/in-place dtype the result cannot be cast to, order comparisons and rounding of complex
tensors, a complex neg into a real out=."""

import pytest
import torch

import trnlang


def _both(fn):
    """The CPU's exception (type and message) and trn's, with no fallback on trn."""
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    trnlang.reset_fallback_stats()
    with pytest.raises(type(cpu.value)) as dev:
        fn("trn")
    assert trnlang.fallback_stats() == {}
    return str(cpu.value), str(dev.value)


@pytest.mark.parametrize("case", ["div_", "div_out", "add_out", "add_"])
def test_result_type_cannot_be_cast_to_out(case):
    def fn(d):
        i, f = torch.ones(3, dtype=torch.int64, device=d), torch.ones(3, device=d)
        o = torch.empty(3, dtype=torch.int64, device=d)
        {"div_": lambda: i.div_(f), "div_out": lambda: torch.div(i, i, out=o),
         "add_out": lambda: torch.add(f, f, out=o), "add_": lambda: i.add_(f)}[case]()
    c, t = _both(fn)
    assert c == t


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge"])
def test_complex_order_comparisons(op):
    c, t = _both(lambda d: getattr(torch, op)(torch.ones(2, dtype=torch.complex64, device=d), 1))
    assert "not implemented for 'ComplexFloat'" in t


@pytest.mark.parametrize("op", ["floor", "ceil", "trunc"])
def test_complex_rounding(op):
    c, t = _both(lambda d: getattr(torch, op)(torch.ones(2, dtype=torch.complex64, device=d)))
    assert c == t


def test_complex_neg_into_a_real_out():
    c, t = _both(lambda d: torch.neg(torch.ones(2, dtype=torch.complex64, device=d), out=torch.empty(2, device=d)))
    assert c == t


@pytest.mark.parametrize("op", ["max", "sort", "topk", "kthvalue", "mode", "cummax", "cummin"])
@pytest.mark.parametrize("wrong", ["values", "indices"])
def test_values_indices_out_of_the_wrong_dtype(op, wrong):
    """(values, indices) out= tensors of the wrong dtype raise torch's own message, op by op."""
    def fn(d):
        x = torch.arange(4.0, device=d)  # distinct values: no tie for kthvalue to refuse
        v = torch.empty(0, dtype=torch.bfloat16 if wrong == "values" else torch.float32, device=d)
        i = torch.empty(0, dtype=torch.int32 if wrong == "indices" else torch.int64, device=d)
        {"max": lambda: torch.max(x, 0, out=(v, i)), "sort": lambda: torch.sort(x, out=(v, i)),
         "topk": lambda: torch.topk(x, 2, out=(v, i)), "kthvalue": lambda: torch.kthvalue(x, 1, out=(v, i)),
         "mode": lambda: torch.mode(x, out=(v, i)), "cummax": lambda: torch.cummax(x, 0, out=(v, i)),
         "cummin": lambda: torch.cummin(x, 0, out=(v, i))}[op]()
    c, t = _both(fn)
    assert c == t
