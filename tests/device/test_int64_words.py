"""int64 add/sub/rsub/neg/abs beyond int32, exact on the two int32 words (issue 22: upstream test_abs_big_number,
test_div_rounding_modes build such values). Wrapping at 2^64 as torch's; values, broadcasting, numbers, CPU 0-dim
tensors, narrower integer operands, out=, in place, and a float out= (computed, then cast) against the CPU.
"""

from __future__ import annotations

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
