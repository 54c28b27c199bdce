"""``all``/``any`` of int64 tensors run natively (issue 22, test_reductions' all/any tests of int64): an element
is nonzero when either of its int32 words is, so values beyond int32 (2^40, -2^33, 2^32 whose low word is 0) count
right. Compared with CPU torch under ``TRN_FALLBACK=error``."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _data():
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, 3, (4, 5, 6), generator=g) * torch.tensor([0, 2**32, -(2**33), 2**40, -1, 1])
    x[1] = 2**32  # a row whose every low word is 0: nonzero only through the high word
    return x


@pytest.mark.parametrize("op", [torch.all, torch.any])
@pytest.mark.parametrize("kw", [{}, {"dim": 2}, {"dim": 0, "keepdim": True}, {"dim": (0, 2)}, {"dim": ()}])
def test_all_any_int64_vs_cpu(op, kw):
    x = _data()
    got = op(x.to("trn"), **kw).cpu()
    want = op(x, **kw)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_all_any_int64_transposed_and_scalar():
    x = _data().transpose(0, 2)
    assert torch.equal(torch.any(x.to("trn"), dim=1).cpu(), torch.any(x, dim=1))
    for v in (0, 2**32, -1):
        assert torch.all(torch.tensor(v).to("trn")).item() == bool(v)
        one = torch.tensor([v, 0]).to("trn")[::2]  # one element of stride 2: contiguous, yet not stride 1
        assert torch.any(one, dim=0).item() == bool(v)
