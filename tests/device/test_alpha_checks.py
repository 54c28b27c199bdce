"""``add``/``sub`` with an ``alpha`` that does not suit the operands raise torch's own errors natively (issue 22,
test_type_promotion's ``test_alpha_mismatch``: trn declined such calls to the CPU to get the message)."""

from __future__ import annotations

import pytest
import torch

CASES = [(torch.int32, 1.1), (torch.bool, 1.1), (torch.uint8, 2.5), (torch.int64, 1j), (torch.float32, 1j),
         (torch.bfloat16, 2j), (torch.int32, True), (torch.float32, True), (torch.int16, False)]


@pytest.fixture(autouse=True)
def _native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")


@pytest.mark.parametrize(("dtype", "alpha"), CASES)
@pytest.mark.parametrize("op", [torch.add, torch.sub])
def test_bad_alpha_raises_torchs_error(op: object, dtype: torch.dtype, alpha: object) -> None:
    x = torch.ones(4, dtype=dtype)
    with pytest.raises(RuntimeError) as cpu:
        op(x, x, alpha=alpha)  # type: ignore[operator]
    with pytest.raises(RuntimeError) as trn:
        op(x.to("trn"), x.to("trn"), alpha=alpha)  # type: ignore[operator]
    assert str(trn.value) == str(cpu.value)


@pytest.mark.parametrize(("dtype", "alpha"), [(torch.bool, True), (torch.int32, 3), (torch.float32, 0.5),
                                              (torch.bfloat16, 2)])
def test_fitting_alpha_matches_cpu(dtype: torch.dtype, alpha: object) -> None:
    x = torch.tensor([0, 1, 1, 0], dtype=dtype)
    y = torch.tensor([1, 1, 0, 0], dtype=dtype)
    assert torch.equal(torch.add(x.to("trn"), y.to("trn"), alpha=alpha).cpu(), torch.add(x, y, alpha=alpha))
