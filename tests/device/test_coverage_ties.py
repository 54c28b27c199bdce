"""``trn coverage`` accepts any valid tie order of sort/argsort/topk indices, as torch's own tests do
(test_sort_and_select checks ``input.gather(dim, indices) == values``), and nothing else: wrong values,
indices that point elsewhere, repeated indices and stable sorts still fail (``coverage._tie_order``); mode's index
may be any occurrence of its value (``coverage._mode_occurrence``)."""

import torch
from torch.testing._internal.opinfo.core import SampleInput

from trnlang.device import coverage as C

X = torch.tensor([[3, 1, 3, 2, 5, 5], [0, 0, 1, 1, 1, 0]])


def _topk(vals, idx):
    return torch.return_types.topk((torch.tensor(vals), torch.tensor(idx)))


def test_topk_other_tie_order_accepted():
    s = SampleInput(X, 3)
    cpu = torch.topk(X, 3)
    other = _topk([[5, 5, 3], [1, 1, 1]], [[4, 5, 0], [4, 3, 2]])  # same values, other tied indices
    got = C._tie_order("topk", s, other, cpu)
    assert torch.equal(got[1], cpu[1]) and torch.equal(got[0], cpu[0])


def test_topk_wrong_answers_kept():
    s = SampleInput(X, 3)
    cpu = torch.topk(X, 3)
    for vals, idx in (([[5, 5, 3], [1, 1, 1]], [[4, 3, 0], [4, 3, 2]]),  # index 3 holds 2, not 5
                      ([[5, 5, 3], [1, 1, 1]], [[4, 4, 0], [4, 3, 2]]),  # index 4 twice
                      ([[5, 5, 2], [1, 1, 1]], [[4, 5, 3], [4, 3, 2]])):  # a wrong value, pointed at
        bad = _topk(vals, idx)
        got = C._tie_order("topk", s, bad, cpu)
        assert got is bad


def test_unsorted_topk_any_order_of_the_same_set():
    s = SampleInput(X, 3, 1, True, False)
    cpu = torch.topk(X, 3, 1, True, False)
    other = _topk([[3, 5, 5], [1, 1, 1]], [[2, 5, 4], [3, 4, 2]])
    got = C._tie_order("topk", s, other, cpu)
    assert torch.equal(got[0], cpu[0]) and torch.equal(got[1], cpu[1])


def test_sort_and_argsort_ties_but_not_stable():
    x = torch.tensor([True, False, True, False])
    cpu = torch.sort(x)
    other = torch.return_types.sort((cpu[0].clone(), torch.tensor([3, 1, 2, 0])))
    got = C._tie_order("sort", SampleInput(x), other, cpu)
    assert torch.equal(got[1], cpu[1])
    stable = SampleInput(x, stable=True)
    assert C._tie_order("sort", stable, other, cpu) is other
    a = torch.tensor([3, 1, 2, 0])
    assert torch.equal(C._tie_order("argsort", SampleInput(x), a, torch.argsort(x)), torch.argsort(x))
    wrong = torch.tensor([0, 1, 2, 3])  # not ascending: x[0] is True
    assert C._tie_order("argsort", SampleInput(x), wrong, torch.argsort(x)) is wrong


def test_coverage_topk_int_passes_natively():
    rep = C.run_coverage(ops=["topk", "sort"], dtypes=[torch.int64, torch.bool], backward=False, progress=False)
    for name in ("topk", "sort"):
        for dt in ("int64", "bool"):
            st = rep["ops"][name].get(dt, {}).get("status")
            assert st in ("native_pass", "skipped"), (name, dt, rep["ops"][name])


def test_mode_any_occurrence_of_the_cpus_value():
    """``coverage._mode_occurrence``: another occurrence of the CPU's mode value passes; a wrong value, or an index
    at another value, does not."""
    x = torch.tensor([[3, 1, 3, 2, 3], [0, 0, 1, 1, 0]])
    for keepdim in (False, True):
        s = SampleInput(x, 1, keepdim)
        cpu = torch.mode(x, 1, keepdim)

        def ans(v, i):
            v, i = torch.tensor(v), torch.tensor(i)
            return torch.return_types.mode((v.unsqueeze(1), i.unsqueeze(1)) if keepdim else (v, i))

        other = ans([3, 0], [0, 1])
        got = C._mode_occurrence(s, other, cpu)
        assert torch.equal(got[1], cpu[1]) and torch.equal(got[0], cpu[0])
        for bad in (ans([3, 0], [1, 1]), ans([1, 0], [1, 0])):  # index 1 holds 1; a wrong value
            assert C._mode_occurrence(s, bad, cpu) is bad
