"""The warm-launch plan for torch tensors (trnlang/runtime/launch.py ``LaunchPlan``): same results as the general path.

A plan is keyed by the tensors' layouts; a hit only reads addresses. These tests make sure a hit never
runs the wrong variant (aliasing), reports runtime errors like the general path, and never launches on
tensors without memory.
"""

import numpy as np
import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from tests import kernels as K


@trn.kernel
def shift_add(x, out):
    """out[:, 1:] = x[:, :-1] + 1 (reads and writes overlapping columns when out is x)."""
    n, d = x.shape
    t = tl.load(x[0:n, 0:d - 1])
    tl.store(out[0:n, 1:d], t + 1.0)


def test_plan_hits_match_general_path_and_respect_aliasing():
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6).to("trn")
    out = torch.zeros(4, 6, device="trn")
    for _ in range(3):  # first call: general path + plan; then plan hits
        shift_add(x, out)
        ref = torch.zeros(4, 6)
        ref[:, 1:] = x.cpu()[:, :-1] + 1
        torch.testing.assert_close(out.cpu(), ref)
    assert len(shift_add._cache.plans) == 1
    # same layouts, but now the output aliases the input: the plan must take the aliasing variant
    y = torch.arange(24, dtype=torch.float32).reshape(4, 6).to("trn")
    expect = y.cpu().clone()
    expect[:, 1:] = expect[:, :-1] + 1
    shift_add(y, y)
    torch.testing.assert_close(y.cpu(), expect)


def test_plan_distinguishes_layouts_and_constants():
    x = torch.randn(8, 8).to("trn")
    out = torch.zeros(8, 8, device="trn")
    shift_add(x, out)
    shift_add(x.t(), out)  # transposed input: another key, another specialization
    ref = torch.zeros(8, 8)
    ref[:, 1:] = x.cpu().t()[:, :-1] + 1
    torch.testing.assert_close(out.cpu(), ref)
    assert len({tuple(k[2:5]) for k in shift_add._cache.plans}) >= 2  # first tensor's (dtype, shape, strides)


def test_plan_hit_reports_runtime_bounds_errors():
    table = torch.randn(10, 4).to("trn")
    out = torch.zeros(3, 4, device="trn")
    good = torch.tensor([[1], [2], [9]], dtype=torch.int32).to("trn")
    K.embedding(good, table, out)
    K.embedding(good, table, out)  # a plan hit
    torch.testing.assert_close(out.cpu(), table.cpu()[[1, 2, 9]])
    bad = torch.tensor([[1], [12], [0]], dtype=torch.int32).to("trn")
    with pytest.raises(trn.BoundsError):
        K.embedding(bad, table, out)  # same layouts: the plan runs and must raise the general path's error


def test_plan_never_launches_on_meta_tensors():
    x = torch.randn(4, 6).to("trn")
    out = torch.zeros(4, 6, device="trn")
    shift_add(x, out)
    shift_add(x, out)
    with pytest.raises(Exception):
        shift_add(torch.empty(4, 6, device="meta"), torch.empty(4, 6, device="meta"))


def test_plans_for_cpu_tensors_and_numpy_unchanged():
    x = torch.randn(4, 6)
    out = torch.zeros(4, 6)
    for _ in range(2):
        shift_add(x, out)
    torch.testing.assert_close(out[:, 1:], x[:, :-1] + 1)
    xn, on = x.numpy().copy(), np.zeros((4, 6), np.float32)
    shift_add(xn, on)
    np.testing.assert_allclose(on[:, 1:], xn[:, :-1] + 1)


def test_plan_made_after_a_numpy_warm_start():
    @trn.kernel
    def twice(x, out):
        tl.store(out[0:4, 0:6], tl.load(x[0:4, 0:6]) * 2.0)

    xn, on = np.ones((4, 6), np.float32), np.zeros((4, 6), np.float32)
    twice(xn, on)
    twice(xn, on)
    xt, ot = torch.ones(4, 6).to("trn"), torch.zeros(4, 6, device="trn")
    twice(xt, ot)  # same specialization as the numpy call: the warm path, which also makes the plan
    assert len(twice._cache.plans) == 1
    ot.zero_()
    twice(xt, ot)
    assert ot.cpu().sum().item() == 48.0
