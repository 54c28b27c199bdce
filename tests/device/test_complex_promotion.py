"""Complex64 ``add``/``sub`` with a real tensor or a Python number promote as torch does, natively (issue 22).

PyTorch's ``test_type_promotion.test_result_type`` adds a complex64 tensor (1-D, 0-dim, or its ``item()``) to
every other dtype; trn declined every mixed pair (only two complex64 tensors ran on the planes), so with
``TRN_FALLBACK=error`` 22 of its tests failed. Results are compared with torch's CPU kernels, dtype and value.
"""

from __future__ import annotations

import itertools

import pytest
import torch

DTYPES = [torch.complex64, torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8,
          torch.bool]


@pytest.fixture(autouse=True)
def _native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _operands(dtype: torch.dtype, vals: tuple[int, int]) -> list[object]:
    t = torch.tensor(vals, dtype=dtype)
    one = torch.tensor(vals[1], dtype=dtype)
    return [t, one, one.item()]


def _trn(v: object) -> object:
    return v.to("trn") if isinstance(v, torch.Tensor) else v


@pytest.mark.parametrize("other", DTYPES)
@pytest.mark.parametrize("op", [torch.add, torch.sub])
def test_complex64_with_any_dtype_matches_cpu(op: object, other: torch.dtype) -> None:
    if op is torch.sub and other == torch.bool:
        pytest.skip("torch refuses bool subtraction")
    if other == torch.float16:
        pytest.skip("complex64 with float16 is complex32 on torch (not a trn dtype)")
    checked = 0
    for d0, d1 in ((torch.complex64, other), (other, torch.complex64)):
        for x, y in itertools.product(_operands(d0, (0, 3)), _operands(d1, (5, 2))):
            if not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor):
                continue
            expect = op(x, y, alpha=2)  # type: ignore[operator]
            got = op(_trn(x), _trn(y), alpha=2)  # type: ignore[operator]
            assert got.dtype == expect.dtype, (x, y)
            assert torch.equal(got.cpu(), expect), (x, y, got, expect)
            checked += 1
    assert checked == 16


def test_complex_number_into_a_real_tensor_raises_torchs_error() -> None:
    with pytest.raises(RuntimeError) as cpu:
        torch.ones(2).add_(torch.tensor([1j, 2j]))
    with pytest.raises(RuntimeError) as trn:
        torch.ones(2, device="trn").add_(torch.tensor([1j, 2j]).to("trn"))
    assert str(trn.value) == str(cpu.value)


def test_complex_out_of_a_real_sum_matches_cpu() -> None:
    x, y = torch.tensor([1.5, -2.0]), torch.tensor([0.25j, 1 + 1j], dtype=torch.complex64)
    out = torch.empty(2, dtype=torch.complex64, device="trn")
    torch.add(x.to("trn"), y.to("trn"), out=out)
    assert torch.equal(out.cpu(), torch.add(x, y))


def test_complex_alpha_in_add_and_sub(monkeypatch):
    """``add``/``sub``/``add_`` with a complex ``alpha`` (upstream test_add): the product first, then the sum."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(3)
    m1, m2 = (torch.randn(4, 5, dtype=torch.complex64, generator=g) for _ in range(2))
    for a in (complex(0.1, 0.2), 2j, complex(1, 0)):
        for fn in (torch.add, torch.sub):
            torch.testing.assert_close(fn(m1.to("trn"), m2.to("trn"), alpha=a).cpu(), fn(m1, m2, alpha=a))
            torch.testing.assert_close(fn(m1.to("trn"), m2.real.to("trn"), alpha=a).cpu(), fn(m1, m2.real, alpha=a))
        x = m1.to("trn")
        x.add_(m2.to("trn"), alpha=a)
        torch.testing.assert_close(x.cpu(), m1.clone().add_(m2, alpha=a))
