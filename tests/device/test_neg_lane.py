"""``neg`` on trn takes ``mul``'s fast lane (``x * -1``) on repeated same-layout calls: values equal the CPU's
(signed zeros, infinities, int32 wrap-around), the lane is made once and reused; dtypes without a lane run the
lowering each time."""

import pytest
import torch

from trnlang.device import fastlane

_VALUES = {
    torch.float32: [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), 3e38, 1e-45],
    torch.bfloat16: [0.0, -0.0, 1.5, -2.25, float("inf")],
    torch.float16: [0.0, -0.0, 1.5, -2.25, 65504.0],
    torch.int32: [0, 1, -7, 2**31 - 1, -(2**31)],
    torch.int16: [0, 1, -7, 2**15 - 1],
    torch.int64: [0, 5, -(2**20), 2**20],  # values past the int32 arithmetic's checked range decline (not native yet)
}


@pytest.mark.parametrize("dtype", list(_VALUES))
def test_neg_repeated_calls_match_cpu(monkeypatch, dtype):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    x = torch.tensor(_VALUES[dtype], dtype=dtype).reshape(1, 1, 1, -1)  # a shape no other test makes lanes for
    xd = x.to("trn")
    before = fastlane.stats()["lanes"]
    for _ in range(3):  # the first call runs the lowering, the next ones the lane (where there is one)
        got = torch.neg(xd).cpu()
        assert got.dtype == dtype
        assert torch.equal(got, torch.neg(x)) and torch.equal(torch.signbit(got), torch.signbit(torch.neg(x)))
    made = fastlane.stats()["lanes"] - before
    # lanes: float and int32 tensors (an int16/int64 tensor times an int is not given one: lanes.scalar_key)
    assert made == (1 if dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32) else 0)
    y = torch.tensor(_VALUES[dtype][::-1], dtype=dtype).reshape(x.shape)  # same layout, new values: the same lane
    assert torch.equal(torch.neg(y.to("trn")).cpu(), torch.neg(y))
