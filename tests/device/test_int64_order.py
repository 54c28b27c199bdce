"""Order comparisons (lt/le/gt/ge) of int64 trn tensors beyond the int32 range, natively: on the two int32 words
(stdlib_kernels/elementwise/compare.py), against the CPU, with tensors, numbers, broadcasting and out=."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang.device  # noqa: F401  (registers the trn device)

_I64 = st.integers(-(2**63), 2**63 - 1)
_NEAR = st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32, 2**32 - 1, -(2**32),
                         2**63 - 1, -(2**63)])
_VALUE = st.one_of(_I64, _NEAR)


@pytest.fixture(autouse=True)
def _native(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


@settings(max_examples=40, deadline=None)
@given(a=st.lists(_VALUE, min_size=0, max_size=9), b=st.lists(_VALUE, min_size=1, max_size=1),
       op=st.sampled_from(["lt", "le", "gt", "ge"]), number=st.booleans(), as_out=st.booleans())
def test_order_matches_cpu(a, b, op, number, as_out):
    x = torch.tensor(a, dtype=torch.int64)
    f = getattr(torch, op)
    if number:
        other_cpu = other_dev = b[0]
    else:
        other_cpu = torch.tensor(b * max(1, len(a)), dtype=torch.int64)[: max(len(a), 1)]
        other_cpu = other_cpu if len(a) else other_cpu[:0]
        other_dev = other_cpu.to("trn")
    want = f(x, other_cpu)
    if as_out:
        out = torch.empty(want.shape, dtype=torch.bool, device="trn")
        f(x.to("trn"), other_dev, out=out)
        got = out.cpu()
    else:
        got = f(x.to("trn"), other_dev).cpu()
    assert torch.equal(got, want), (a, b, op)


def test_broadcast_and_0dim():
    x = torch.tensor([[2**40], [-(2**40)], [7]])
    y = torch.tensor([2**40 + 1, -(2**62), 7])
    for op in ("lt", "le", "gt", "ge"):
        f = getattr(torch, op)
        assert torch.equal(f(x.to("trn"), y.to("trn")).cpu(), f(x, y))
        s = torch.tensor(2**35)
        assert torch.equal(f(s.to("trn"), y.to("trn")).cpu(), f(s, y))
