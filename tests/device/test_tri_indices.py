"""tril_indices / triu_indices natively (a device mask, tril/triu and nonzero), a factory op called first in a
process, and integer divisions of empty operands by zero (no element divides: torch does not raise)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.conftest import assert_same, run_py


@settings(max_examples=30, deadline=None, derandomize=True)
@given(row=st.integers(0, 40), col=st.integers(0, 40), offset=st.integers(-45, 45),
       dtype=st.sampled_from([torch.int64, torch.int32]), lower=st.booleans())
def test_tri_indices_match_torch_natively(row, col, offset, dtype, lower):
    fn = torch.tril_indices if lower else torch.triu_indices
    trnlang.reset_fallback_stats()
    out = fn(row, col, offset, dtype=dtype, device="trn")
    assert trnlang.fallback_stats() == {}
    assert_same(out, fn(row, col, offset, dtype=dtype), rtol=0, atol=0)


def test_tri_indices_out_and_errors():
    out = torch.empty(0, dtype=torch.int32, device="trn")
    torch.ops.aten.triu_indices.out(4, 3, -1, out=out)
    assert_same(out, torch.triu_indices(4, 3, -1, dtype=torch.int32), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        torch.tril_indices(-1, 3, device="trn")
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        torch.tril_indices(2, 3, dtype=torch.float32, device="trn")


def test_a_factory_op_first_in_a_process_is_native():
    """The lowerings load at the first allocation; a factory op called before any is dispatched again once they
    are loaded, not decomposed through the fallback."""
    r = run_py("import torch, trnlang\n"
               "x = torch.tril_indices(5, 4, 1, device='trn')\n"
               "assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()\n"
               "assert torch.equal(x.cpu(), torch.tril_indices(5, 4, 1))\n"
               "print('ok')\n", env={"TRN_FALLBACK": "error"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_integer_division_of_empty_operands_by_zero_is_native():
    trnlang.reset_fallback_stats()
    a = torch.empty(0, 3, dtype=torch.int64, device="trn")
    z = torch.tensor([0, 1, 2], device="trn")
    assert_same(a // z, torch.empty(0, 3, dtype=torch.int64) // z.cpu(), rtol=0, atol=0)
    assert_same(a % z, torch.empty(0, 3, dtype=torch.int64) % z.cpu(), rtol=0, atol=0)
    assert_same(torch.unravel_index(torch.tensor([], dtype=torch.int64, device="trn"), (0, 3))[0],
                torch.empty(0, dtype=torch.int64), rtol=0, atol=0)
    assert trnlang.fallback_stats() == {}
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.ones(2, dtype=torch.int64, device="trn") // z[:2]
