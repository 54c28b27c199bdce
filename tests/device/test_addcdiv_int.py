"""Integer ``addcdiv`` raises torch's own error on ``trn``, natively (issue 22, test_type_promotion's
``test_integer_addcdiv_deprecated``: trn declined integer dtypes to the CPU to get the message); float calls still
match the CPU."""

from __future__ import annotations

import pytest
import torch

INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool]


@pytest.fixture(autouse=True)
def _native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _cpu_error(*args: torch.Tensor, **kw: torch.Tensor) -> str:
    with pytest.raises(RuntimeError) as e:
        torch.addcdiv(*args, **kw)
    return str(e.value)


@pytest.mark.parametrize("dtype", INTS)
def test_integer_addcdiv_raises_torchs_error(dtype: torch.dtype) -> None:
    t = torch.tensor(1, dtype=dtype)
    tt = t.to("trn")
    for self_dt in (dtype, torch.float32):  # tensor1/tensor2 integral decide, whatever self is
        s = t.to(self_dt)
        expect = _cpu_error(s, t, t)
        with pytest.raises(RuntimeError) as got:
            torch.addcdiv(s.to("trn"), tt, tt)
        assert str(got.value) == expect
    with pytest.raises(RuntimeError) as got:
        torch.addcdiv(tt, tt, tt, out=tt)
    assert str(got.value) == _cpu_error(t, t, t, out=t.clone())


def test_float_addcdiv_matches_cpu() -> None:
    a, b, c = torch.randn(3, 5), torch.randn(3, 5), torch.rand(3, 5) + 0.5
    got = torch.addcdiv(a.to("trn"), b.to("trn"), c.to("trn"), value=0.5).cpu()
    torch.testing.assert_close(got, torch.addcdiv(a, b, c, value=0.5))
