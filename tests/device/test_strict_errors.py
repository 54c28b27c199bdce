"""Inputs torch rejects raise torch's own error on trn, also under TRN_FALLBACK=error (a decline would turn them into
a FallbackError there); bool mode runs on its bytes."""

import pytest
import torch

import trnlang
from tests.device.conftest import run_py

_CASES = [
    ("torch.bincount(torch.tensor([-1, 2], device='trn'))", "bincount only supports 1-d non-negative integral"),
    ("torch.bincount(torch.tensor([[1, 2]], device='trn'))", "bincount only supports 1-d non-negative integral"),
    ("torch.bincount(torch.tensor([1, 2], device='trn'), minlength=-1)", "minlength should be >= 0"),
    ("torch.bincount(torch.tensor([1, 2], device='trn'), torch.ones(3, device='trn'))", "have the same length"),
    ("torch.ops.aten.hash_tensor(torch.empty(0, device='trn'))", "Expected reduction dim to be specified"),
    ("torch.ops.aten.hash_tensor(torch.empty(3, 0, device='trn'), [1])", "Expected reduction dim 1 to have non-zero"),
]


@pytest.mark.parametrize("code,message", _CASES)
def test_torchs_error_in_process(code, message):
    with pytest.raises((RuntimeError, IndexError), match=message):  # the CPU raises IndexError for an empty dim
        eval(code)


def test_torchs_errors_under_strict_fallback():
    body = "".join(f"try:\n    {c}\nexcept (RuntimeError, IndexError) as e:\n"
                   f"    assert {m!r} in str(e), str(e)\nelse:\n    raise SystemExit('no error')\n" for c, m in _CASES)
    r = run_py("import torch, trnlang\n" + body + "print('ok')\n", env={"TRN_FALLBACK": "error"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_bool_mode_is_native_without_ties():
    x = torch.tensor([[True, True, False], [False, False, True], [True, False, True]])
    trnlang.reset_fallback_stats()
    v, i = x.to("trn").mode(-1)
    assert trnlang.fallback_stats() == {}
    vc, ic = x.mode(-1)
    assert v.dtype == torch.bool and torch.equal(v.cpu(), vc) and torch.equal(i.cpu(), ic)


_DECLINED_ERRORS = [  # a lowering declines these (torch rejects them); under a strict policy torch's error is raised
    ("torch.searchsorted(torch.zeros(2, 3, device='trn'), torch.zeros(3, 2, device='trn'))",
     "first N-1 dimensions of boundaries tensor and input value tensor must match"),
    ("torch.zeros(4, device='trn').sum(dim=(0, 0))", "appears multiple times in the list of dims"),
    ("torch.zeros(3, device='trn').index_select(0, torch.tensor([5], device='trn'))", "out of range"),
]


def test_declined_error_calls_raise_torchs_error_under_strict_policies():
    """The call runs on CPU copies of device memory only to produce the error (the in-place one leaves the device
    tensor as it was); a declined call that does not raise still gets the policy's FallbackError."""
    body = "".join(f"try:\n    {c}\nexcept (RuntimeError, IndexError) as e:\n"
                   f"    assert {m!r} in str(e) and 'FallbackError' not in type(e).__name__, repr(e)\n"
                   f"else:\n    raise SystemExit('no error')\n" for c, m in _DECLINED_ERRORS)
    body += ("x = torch.arange(4.0, device='trn')\n"
             "try:\n    x.index_fill_(0, torch.tensor([9], device='trn'), -1.0)\nexcept IndexError as e:\n"
             "    assert 'out of bounds' in str(e), e\n"
             "assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]\n")
    for policy in ("error", "f64only"):
        r = run_py("import torch, trnlang\n" + body + "print('ok')\n", env={"TRN_FALLBACK": policy})
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
