"""parse(print(k)) == k for every traced test kernel, and the verifier accepts the IR after every pass."""

from __future__ import annotations

import pytest
import torch

from tests.kernels import CASES
from trnlang.ir.equality import kernel_diff
from trnlang.ir.parser import parse_kernel
from trnlang.ir.printer import print_kernel
from trnlang.ir.verifier import verify
from trnlang.passes import PIPELINE


def _trace(case, n=200, d=40):
    g = torch.Generator().manual_seed(0)
    args = case.make(n, d, g)
    grid = case.grid(args) if case.grid else (1,)
    return case.kernel.trace(*args, grid=grid)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_roundtrip(case):
    k = _trace(case)
    text = print_kernel(k)
    k2 = parse_kernel(text)
    assert kernel_diff(k, k2) is None
    assert print_kernel(k2) == text


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verifier_after_every_pass(case):
    k = _trace(case)
    verify(k, k.target)
    for _name, p in PIPELINE:
        p(k)
        verify(k, k.target)
        k2 = parse_kernel(print_kernel(k))
        assert kernel_diff(k, k2) is None


def test_kernel_ir_method_and_dump(capsys, monkeypatch):
    from tests.kernels import softmax

    x = torch.randn(130, 16)
    text = softmax.ir(x, torch.empty_like(x))
    assert "affine_range %i0 = 0 to ceiling(x_size0/128)" in text  # the row count is a runtime size
    assert "activation[scalar]" in text and "func = exp" in text
    monkeypatch.setenv("TRN_DUMP", "trace")
    softmax._cache.clear()
    softmax(x, torch.empty_like(x))
    err = capsys.readouterr().err
    assert "IR after trace" in err and "kernel @softmax" in err
