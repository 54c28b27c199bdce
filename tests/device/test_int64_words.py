"""int64 add/sub/rsub/neg/abs beyond int32, exact on the two int32 words (issue 22: upstream test_abs_big_number,
test_div_rounding_modes build such values). Wrapping at 2^64 as torch's; values, broadcasting, numbers, CPU 0-dim
tensors, narrower integer operands, out=, in place, and a float out= (computed, then cast) against the CPU.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

I64 = st.integers(-(2**63), 2**63 - 1)
EDGES = [0, 1, -1, 2**31 - 1, -(2**31), 2**31, 2**32 - 1, 2**32, 2**62, -(2**62), 2**63 - 1, -(2**63)]


@pytest.fixture(autouse=True)
def _native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")


@settings(max_examples=25, deadline=None)
@given(a=st.lists(st.one_of(I64, st.sampled_from(EDGES)), min_size=1, max_size=40),
       b=st.lists(st.one_of(I64, st.sampled_from(EDGES)), min_size=1, max_size=40),
       n=st.one_of(I64, st.sampled_from(EDGES)))
def test_add_sub_match_the_cpu(a: list[int], b: list[int], n: int) -> None:
    x, y = torch.tensor(a), torch.tensor(b)[:1] if len(b) != len(a) else torch.tensor(b)
    for fn, kw in ((torch.add, {}), (torch.sub, {}), (torch.add, {"alpha": -1}), (torch.sub, {"alpha": -1}),
                   (torch.rsub, {})):
        assert torch.equal(fn(x.to("trn"), y.to("trn"), **kw).cpu(), fn(x, y, **kw))
        assert torch.equal(fn(x.to("trn"), n, **kw).cpu(), fn(x, n, **kw))
        assert torch.equal(fn(x.to("trn"), torch.tensor(n), **kw).cpu(), fn(x, torch.tensor(n), **kw))
    assert torch.equal(torch.neg(x.to("trn")).cpu(), torch.neg(x))
    assert torch.equal(torch.abs(x.to("trn")).cpu(), torch.abs(x))


@pytest.mark.parametrize("other_dtype", [torch.int32, torch.int16, torch.uint8, torch.bool])
def test_with_narrower_operands_and_broadcasting(other_dtype: torch.dtype) -> None:
    x = torch.tensor(EDGES).reshape(-1, 1)
    y = torch.tensor([0, 1, 7, 200, -5, 2**15 - 1]).to(other_dtype)
    for fn in (torch.add, torch.sub) if other_dtype != torch.bool else (torch.add,):  # torch refuses bool sub
        assert torch.equal(fn(x.to("trn"), y.to("trn")).cpu(), fn(x, y))
        if other_dtype != torch.bool:
            assert torch.equal(fn(y.to("trn"), x.to("trn")).cpu(), fn(y, x))


def test_out_and_in_place() -> None:
    x, y = torch.tensor(EDGES), torch.tensor(EDGES[::-1])
    out = torch.empty(len(EDGES), dtype=torch.int64, device="trn")
    torch.sub(x.to("trn"), y.to("trn"), out=out)
    assert torch.equal(out.cpu(), x - y)
    fout = torch.empty(len(EDGES), dtype=torch.float32, device="trn")
    torch.add(x.to("trn"), y.to("trn"), out=fout)
    assert torch.equal(fout.cpu(), (x + y).float())
    z = x.to("trn")
    z.add_(y.to("trn"))
    assert torch.equal(z.cpu(), x + y)
    z.sub_(2**40)
    assert torch.equal(z.cpu(), x + y - 2**40)


def _div_fns() -> list[Any]:
    return [lambda x, y: torch.div(x, y, rounding_mode="trunc"), lambda x, y: torch.div(x, y, rounding_mode="floor"),
            torch.fmod, torch.remainder, torch.floor_divide]


@settings(max_examples=20, deadline=None)
@given(a=st.lists(st.one_of(I64, st.sampled_from(EDGES)), min_size=1, max_size=300),
       b=st.lists(st.one_of(I64, st.sampled_from(EDGES)).filter(lambda v: v != 0), min_size=1, max_size=300),
       n=st.one_of(I64, st.sampled_from(EDGES)).filter(lambda v: v != 0))
def test_division_family_matches_the_cpu(a: list[int], b: list[int], n: int) -> None:
    """Quotients (trunc, floor), fmod and remainder beyond int32: a 64-step long division kernel on the words."""
    x = torch.tensor(a)
    y = torch.tensor((b * len(a))[: len(a)])
    keep = ~((x == -(2**63)) & (y == -1))  # INT64_MIN / -1 overflows (undefined in C; not compared)
    x, y = x[keep], y[keep]
    for fn in _div_fns():
        assert torch.equal(fn(x.to("trn"), y.to("trn")).cpu(), fn(x, y))
        if n != -1:
            assert torch.equal(fn(x.to("trn"), n).cpu(), fn(x, n))
    assert torch.equal(torch.remainder(n, y.to("trn")).cpu(), torch.remainder(n, y))


def test_upstream_remainder_overflow() -> None:
    """PyTorch's test_remainder_overflow: a divisor far past int32."""
    x, q = torch.tensor(23500, dtype=torch.int64, device="trn"), 392486996410368
    assert (x % q).item() == 23500 and (-x % q).item() == q - 23500
    assert (x % -q).item() == 23500 - q and (-x % -q).item() == -23500


def test_int64_division_by_zero_raises_like_the_cpu() -> None:
    x = torch.tensor([2**40, 3], device="trn")
    for fn in _div_fns():
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(x, torch.tensor([5, 0], device="trn"))


def test_true_division_of_int64_beyond_int32() -> None:
    """True division of int64 values past int32 (upstream test_div_rounding_modes int64): torch casts the operands
    to float32 first, which trn does natively (exactly rounded) instead of declining."""
    a = torch.tensor([2**40, -7, 5, 2**62 + 12345, -(2**63)])
    b = torch.tensor([3, 2, -2, 7, 2**35 + 1])
    assert torch.equal(torch.div(a.to("trn"), b.to("trn")).cpu(), torch.div(a, b))
    assert torch.equal(torch.true_divide(a.to("trn"), 3).cpu(), torch.true_divide(a, 3))
    assert torch.equal((a.to("trn") / b.to("trn").float()).cpu(), a / b.float())


def test_int64_mul_and_scaled_add_beyond_int32_exactly(monkeypatch):
    """int64 products of any values wrap modulo 2^64 as torch's (they were declined past 2^15: upstream
    test_div_rounding_modes int64 multiplies its quotients back), and add/sub with any int alpha use them."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(16)
    i = torch.iinfo(torch.int64)
    edge = torch.tensor([i.min, i.max, -1, 0, 1, 2**32, 2**32 - 1, -2**32, 2**31, -2**31, 2**62, 3037000499])
    a = torch.cat([torch.randint(i.min, i.max, (3000,), generator=g), edge])
    b = a[torch.randperm(a.numel(), generator=g)]
    for x, y in [(a, b), (a, a), (a, 7), (a, -(2**40)), (edge, edge[:, None])]:
        yt = y.to("trn") if isinstance(y, torch.Tensor) else y
        assert torch.equal((x.to("trn") * yt).cpu(), x * y)
    for alpha in (3, -5, 2**35):
        assert torch.equal(torch.add(a.to("trn"), b.to("trn"), alpha=alpha).cpu(), torch.add(a, b, alpha=alpha))
        assert torch.equal(torch.sub(a.to("trn"), b.to("trn"), alpha=alpha).cpu(), torch.sub(a, b, alpha=alpha))
