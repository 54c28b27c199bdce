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
        out = torch.empty(0, dtype=torch.bool, device="trn")  # an empty out= takes the result's shape
        f(x.to("trn"), y.to("trn"), out=out)
        assert torch.equal(out.cpu(), f(x, y))


@pytest.mark.parametrize("dt", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.bool])
def test_int64_against_narrower_integers(dt):
    """A narrower integer tensor promotes to int64 (torch's type promotion) and compares on words too."""
    x = torch.tensor([2**35, -(2**35), 3, 0])
    y = torch.tensor([1, 0, 5, 1], dtype=dt)
    for op in ("lt", "le", "gt", "ge", "eq", "ne"):
        f = getattr(torch, op)
        assert torch.equal(f(x.to("trn"), y.to("trn")).cpu(), f(x, y))
        assert torch.equal(f(y.to("trn"), x.to("trn")).cpu(), f(y, x))


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.float16])
def test_int64_against_floats_compares_in_the_float_dtype(dt):
    """torch converts the int64 operand to the float dtype (2^35 is inf in float16) and compares the floats."""
    x = torch.tensor([2**35, -(2**35), 2**24 + 1, 3])
    y = torch.tensor([1024.0, 0.0, 16777216.0, 3.0], dtype=dt)
    for op in ("lt", "le", "gt", "ge", "eq", "ne"):
        f = getattr(torch, op)
        assert torch.equal(f(x.to("trn"), y.to("trn")).cpu(), f(x, y)), (op, dt)
        assert torch.equal(f(y.to("trn"), x.to("trn")).cpu(), f(y, x)), (op, dt)
        out = torch.empty(0, dtype=torch.bool, device="trn")
        f(x.to("trn"), y.to("trn"), out=out)
        assert torch.equal(out.cpu(), f(x, y))


def test_every_dtype_pair_with_empty_out_matches_cpu():
    """torch's own test_comparison_ops_with_type_promotion pattern: every pair of the dtypes trn computes, values
    that need the dtype's range (2^35 in int64), out= an empty bool tensor and the plain form."""
    value = {torch.uint8: 1 << 5, torch.int8: 1 << 5, torch.int16: 1 << 10, torch.int32: 1 << 20,
             torch.int64: 1 << 35, torch.float16: 1 << 10, torch.float32: 1 << 20, torch.bfloat16: 1 << 10,
             torch.complex64: 1 << 20}
    for op in ("lt", "le", "gt", "ge", "eq", "ne"):
        f = getattr(torch, op)
        for d1 in value:
            for d2 in value:
                if (d1.is_complex or d2.is_complex) and op not in ("eq", "ne"):
                    continue
                t1, t2 = torch.tensor([value[d1]], dtype=d1), torch.tensor([value[d2]], dtype=d2)
                out = torch.empty(0, dtype=torch.bool, device="trn")
                f(t1.to("trn"), t2.to("trn"), out=out)
                assert torch.equal(out.cpu(), f(t1, t2)), (op, d1, d2)
                assert torch.equal(f(t1.to("trn"), t2.to("trn")).cpu(), f(t1, t2)), (op, d1, d2)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(vals=st.lists(_VALUE, min_size=1, max_size=24), shape=st.sampled_from([None, (2, -1), (-1, 2), (2, 2, -1)]),
       dim=st.sampled_from([None, 0, -1, (0, -1)]), keepdim=st.booleans())
def test_amax_amin_beyond_int32_on_words(vals, shape, dim, keepdim):
    """amax/amin/max/min of int64 values of any magnitude (masked reductions' +-2^63 identities among them):
    the high words, then the low words of the elements holding the extreme high word."""
    x = torch.tensor(vals, dtype=torch.int64)
    if shape is not None and x.numel() % 2 == 0 and (len(shape) < 3 or x.numel() % 4 == 0):
        x = x.reshape(shape if len(shape) < 3 else (2, 2, -1))
    if dim is not None and x.dim() < 2 and dim == (0, -1):
        dim = 0
    t = x.to("trn")
    for f in (torch.amax, torch.amin):
        got = f(t, dim if dim is not None else (), keepdim=keepdim).cpu()
        want = f(x, dim if dim is not None else (), keepdim=keepdim)
        assert got.shape == want.shape and torch.equal(got, want)
    assert torch.equal(t.max().cpu(), x.max()) and torch.equal(t.min().cpu(), x.min())
