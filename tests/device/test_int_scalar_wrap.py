"""A Python int operand of an integer tensor op is first converted to the tensor's dtype, as torch does: wrapped
modulo ``2**bits`` (``uint8_tensor >= -1`` compares with 255, ``int8_tensor + 200`` adds -56); and bool
subtraction raises torch's own error."""

from __future__ import annotations

import operator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang  # noqa: F401  (registers the trn device)

_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "eq": operator.eq, "ne": operator.ne,
        "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32]


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(_DTYPES), op=st.sampled_from(sorted(_OPS)),
       value=st.one_of(st.sampled_from([-1, 255, 256, -128, 128, 200, -200, 2**15, 2**31, -(2**31) - 1, 2**40]),
                       st.integers(-(2**63), 2**63 - 1)),
       n=st.sampled_from([1, 7, 300]))
def test_int_tensor_with_an_out_of_range_number_matches_cpu(dtype: torch.dtype, op: str, value: int, n: int) -> None:
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max, (n,), dtype=dtype, generator=torch.Generator().manual_seed(n))
    want = _OPS[op](x, value)
    got = _OPS[op](x.to("trn"), value)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_a_number_beyond_int64_raises_as_on_cpu() -> None:
    x = torch.ones(3, dtype=torch.int8)
    with pytest.raises(OverflowError, match="too big"):
        _ = x + 2**70
    with pytest.raises(OverflowError, match="too big"):
        _ = x.to("trn") + 2**70


@pytest.mark.parametrize("case", ["float - False", "bool - 1.5", "bool - bool", "float - bool"])
def test_bool_subtraction_raises_torchs_error(case: str) -> None:
    """Upstream tests match torch's messages: trn raises the same text as the CPU."""
    make = {"float - False": lambda d: (torch.ones(2, device=d), False),
            "bool - 1.5": lambda d: (torch.ones(2, dtype=torch.bool, device=d), 1.5),
            "bool - bool": lambda d: (torch.ones(2, dtype=torch.bool, device=d),) * 2,
            "float - bool": lambda d: (torch.ones(2, device=d), torch.ones(2, dtype=torch.bool, device=d))}[case]
    msgs = []
    for dev in ("cpu", "trn"):
        a, b = make(dev)
        with pytest.raises(RuntimeError) as e:
            _ = a - b
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
