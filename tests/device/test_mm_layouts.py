"""``mm`` / ``addmm`` / ``matmul`` on trn with transposed operands (``nn.Linear``'s ``x @ w.T``, a weight
gradient's ``x.T @ dy``) against the CPU, natively (``TRN_FALLBACK=error``): the whole product is one gemm call
that reads the transposed operand in place (``trnlang/passes/collapse_gemm.py``), including ragged sizes and
operands that are views of wider tensors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang.device  # noqa: F401  (registers the trn device)


@pytest.fixture(autouse=True)
def _native(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    from trnlang import config

    config.refresh()
    yield
    monkeypatch.delenv("TRN_FALLBACK")
    config.refresh()


def _operand(rows: int, cols: int, transposed: bool, pad: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if transposed:
        return torch.randn(cols, rows + pad, generator=g)[:, :rows].t()
    return torch.randn(rows, cols + pad, generator=g)[:, :cols]


@settings(max_examples=25, deadline=None)
@given(m=st.sampled_from([1, 6, 7, 128, 200]), k=st.sampled_from([1, 16, 128, 300]),
       n=st.sampled_from([1, 64, 100, 512, 700]), a_t=st.booleans(), b_t=st.booleans(), pad=st.integers(0, 3),
       seed=st.integers(0, 2**16))
def test_mm_any_transposition(m, k, n, a_t, b_t, pad, seed):
    a, b = _operand(m, k, a_t, pad, seed), _operand(k, n, b_t, pad, seed + 1)
    got = torch.mm(_to_trn(a), _to_trn(b))
    want = torch.mm(a.double(), b.double())
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-4, atol=1e-3 * (k ** 0.5))


def _to_trn(t: torch.Tensor) -> torch.Tensor:
    """``t`` on trn with the same strides and storage offset (a transposed view stays a transposed view)."""
    base = t
    while base._base is not None:
        base = base._base
    out = base.to("trn").as_strided(t.shape, t.stride(), t.storage_offset())
    assert out.stride() == t.stride()
    return out


def test_linear_forward_and_backward_match_cpu():
    """nn.Linear (addmm with ``w.T``) forward and every gradient (``dy @ w``, ``dy.T @ x``) at a model's sizes."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(512, 1536)
    x = torch.randn(4, 128, 512, requires_grad=True)
    lin_d = torch.nn.Linear(512, 1536).to("trn")
    lin_d.load_state_dict(lin.state_dict())
    xd = x.detach().to("trn").requires_grad_()
    y, yd = lin(x), lin_d(xd)
    torch.testing.assert_close(yd.cpu(), y, rtol=1e-4, atol=1e-3)
    g = torch.randn_like(y)
    y.backward(g)
    yd.backward(g.to("trn"))
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-4, atol=2e-3)
    torch.testing.assert_close(lin_d.weight.grad.cpu(), lin.weight.grad, rtol=1e-4, atol=5e-3)
    torch.testing.assert_close(lin_d.bias.grad.cpu(), lin.bias.grad, rtol=1e-4, atol=5e-3)


@pytest.mark.parametrize("m,k,n", [(512, 512, 1408), (1408, 512, 512), (130, 300, 700)])
def test_dims_that_are_not_tile_multiples_fold_into_one_gemm(m, k, n):
    """A dim that is not a multiple of the 128 / 512 tile but has a divisor of at least a quarter of it (Llama's
    1408-wide MLP) is cut into whole tiles of that size, so the product is still one gemm call (ragged tiles are
    masked and keep the tile loops); the result equals the CPU's."""
    from codegen.lowering.plan import Plan
    from stdlib_kernels.linalg.matmul import matmul

    a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
    plan = Plan(matmul.trace(a, b, None, out, 1.0, 1.0), (1,))
    assert any(len(g.nest) == 2 for g in plan.gemms.values())
    torch.testing.assert_close(torch.mm(a.to("trn"), b.to("trn")).cpu(), a @ b, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("m,n", [(256, 1536), (1024, 512)])
def test_split_products_match_cpu(monkeypatch, m, n):
    """Big products run as one launch per thread: column blocks when the moving operand is the bigger one
    (nn.Linear with fewer rows than output features), row blocks otherwise; bias and transposed weight included,
    with 2 and 3 threads."""
    from trnlang import config

    torch.manual_seed(m + n)
    x, w, bias = torch.randn(m, 512), torch.randn(n, 512), torch.randn(n)
    for threads in ("2", "3"):
        monkeypatch.setenv("TRN_NUM_THREADS", threads)
        config.refresh()
        got = torch.nn.functional.linear(x.to("trn"), w.to("trn"), bias.to("trn")).cpu()
        torch.testing.assert_close(got, torch.nn.functional.linear(x, w, bias), rtol=1e-4, atol=2e-3)
