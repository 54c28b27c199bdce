"""The deprecated ``torch._aminmax`` runs natively with torch's deprecation warning (issue 22, test_reductions
strict: test_aminmax had no lowering for ``aten::_aminmax``). Compared with CPU torch under ``TRN_FALLBACK=error``."""

import warnings

import pytest
import torch


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_legacy_aminmax_vs_cpu(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(4, 5, 3, generator=g) * 50).to(dtype)
    if dtype.is_floating_point:
        x[1, 2, 0] = float("nan")
    t = x.to("trn")
    for args in ((), (1,), (-1, True), (0, False)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, want = torch._aminmax(t, *args), torch._aminmax(x, *args)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            torch.testing.assert_close(a.cpu(), b, equal_nan=True)


def test_legacy_aminmax_warns_like_torch():
    t = torch.arange(6.0).reshape(2, 3).to("trn")
    prev = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        with pytest.warns(UserWarning, match="_aminmax is deprecated"):
            torch._aminmax(t)
        with pytest.warns(UserWarning, match="_aminmax is deprecated"):
            lo, hi = torch._aminmax(t, 1)
    finally:
        torch.set_warn_always(prev)
    assert lo.cpu().tolist() == [0.0, 3.0] and hi.cpu().tolist() == [2.0, 5.0]
