"""Bound launches (``KernelFn.bind``), native worker threads (``trnlang.runtime.hostpool``) and the
aliasing rule that only an overlap with a *written* argument selects the aliasing variant.

Results are compared with the direct call and with torch; errors raised on a worker must reach the
caller as the same exception type a direct call raises.
"""


import numpy as np
import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from tests import kernels as K
from trnlang.runtime import hostpool
from trnlang.runtime.launch import Launch


@trn.kernel
def axpy(x, y, out, a):
    """out = a * x + y over [R, C] rows, tiled by 128."""
    r, c = x.shape
    for i in tl.affine_range(tl.cdiv(r, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(c)[None, :]
        m = rows < r
        tl.store(out[rows, cols], tl.load(x[rows, cols], mask=m) * a + tl.load(y[rows, cols], mask=m), mask=m)


def _trn(*shape):
    return torch.randn(*shape).to("trn")


def test_bind_is_the_call_later():
    x, y, o = _trn(300, 40), _trn(300, 40), torch.empty(300, 40, device="trn")
    go = axpy.bind(x, y, o, 2.0)  # cold: no plan yet, a deferred general call
    assert not go.resolved
    go()
    torch.testing.assert_close(o.cpu(), 2.0 * x.cpu() + y.cpu())
    o.zero_()
    go = axpy.bind(x, y, o, 2.0)  # warm: resolved to the native call now
    assert isinstance(go, Launch) and go.native
    go()
    torch.testing.assert_close(o.cpu(), 2.0 * x.cpu() + y.cpu())


def test_read_only_overlap_keeps_the_plain_variant_and_writes_still_alias():
    x, o = _trn(256, 64), torch.empty(256, 64, device="trn")
    for _ in range(2):
        axpy(x, x, o, 3.0)  # one tensor in two read-only roles
    torch.testing.assert_close(o.cpu(), 4.0 * x.cpu())
    # plan keys are flat: grid, settings (config.launch_key), then per tensor dtype, shape, strides, is_cpu, is_neg;
    # per constant type, value
    (ex,) = {p.executor for k, p in axpy._cache.plans.items()
             if tuple(k[2:7]) == (torch.float32, (256, 64), (64, 1), False, False)}
    assert ex.written == (False, False, True)
    assert all(not key[1] for key in ex.variants), "x passed twice must not need the aliasing variant"
    # out is x: an overlap with the written tensor takes the aliasing variant and stays correct
    y = _trn(256, 64)
    ref = 3.0 * x.cpu() + y.cpu()
    axpy(x, y, x, 3.0)  # same layouts and constant: the same plan, which must pick the aliasing variant
    torch.testing.assert_close(x.cpu(), ref)
    assert any(key[1] for key in ex.variants)


@pytest.mark.skipif(not hostpool.available(), reason="native workers need Linux x86-64")
def test_native_pool_runs_split_launches():
    x, y, o = _trn(1024, 96), _trn(1024, 96), torch.empty(1024, 96, device="trn")
    blocks = [slice(0, 512), slice(512, 1024)]
    for s in blocks:
        axpy(x[s], y[s], o[s], -1.5)  # warm the plans
    o.zero_()
    calls = [U.launch(axpy, x[s], y[s], o[s], -1.5) for s in blocks]
    assert all(c.native for c in calls)
    assert hostpool.run(calls)
    torch.testing.assert_close(o.cpu(), -1.5 * x.cpu() + y.cpu())
    # rounds back to back from two threads: tests/runtime/test_launch_api.py


@pytest.mark.skipif(not hostpool.available(), reason="native workers need Linux x86-64")
def test_worker_errors_reach_the_caller():
    table = _trn(10, 4)
    outs = [torch.zeros(3, 4, device="trn") for _ in range(2)]
    good = torch.tensor([[1], [2], [9]], dtype=torch.int32).to("trn")
    bad = torch.tensor([[1], [12], [0]], dtype=torch.int32).to("trn")
    for o in outs:
        K.embedding(good, table, o)
        K.embedding(good, table, o)
    calls = [U.launch(K.embedding, good, table, outs[0]), U.launch(K.embedding, bad, table, outs[1])]
    assert all(c.native for c in calls)
    with pytest.raises(trn.BoundsError):  # the bad launch runs on the worker
        U.run_parallel(calls)
    with pytest.raises(trn.BoundsError):  # and on the calling thread
        U.run_parallel(calls[::-1])
    U.run_parallel([calls[0], calls[0]])  # the pool is usable after errors
    torch.testing.assert_close(outs[0].cpu(), table.cpu()[[1, 2, 9]])


def test_pool_can_be_disabled(monkeypatch):
    monkeypatch.setenv("TRN_NATIVE_POOL", "0")
    assert not hostpool.available()
    x, y, o = _trn(512, 8), _trn(512, 8), torch.empty(512, 8, device="trn")
    blocks = [slice(0, 256), slice(256, 512)]
    for s in blocks:
        axpy(x[s], y[s], o[s], 1.0)
    calls = [U.launch(axpy, x[s], y[s], o[s], 1.0) for s in blocks]
    assert not hostpool.run(calls)
    U.run_parallel(calls)  # the Python pool
    np.testing.assert_allclose(o.cpu().numpy(), (x + y).cpu().numpy(), rtol=1e-6)


def test_big_device_ops_split_across_threads_match_cpu():
    x = torch.randn(7 * 175000 + 3)  # a long 1-D run: [rows, 1024] pieces plus a tail
    y = torch.randn(7 * 175000 + 3)
    xt, yt = x.to("trn"), y.to("trn")
    trn.reset_fallback_stats()
    torch.testing.assert_close((xt + yt).cpu(), x + y)
    torch.testing.assert_close(xt.clone().cpu(), x)
    torch.testing.assert_close(xt.sum().cpu(), x.sum(), rtol=1e-5, atol=1e-2)
    torch.testing.assert_close(xt[3:].view(-1, 7).sum(-1).cpu(), x[3:].view(-1, 7).sum(-1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(xt.amax().cpu(), x.amax())
    assert trn.fallback_stats() == {}


@pytest.mark.skipif(not hostpool.available() or not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_forked_child_starts_its_own_workers():
    import os

    x, y, o = _trn(512, 8), _trn(512, 8), torch.empty(512, 8, device="trn")
    blocks = [slice(0, 256), slice(256, 512)]
    for s in blocks:
        axpy(x[s], y[s], o[s], 1.0)
    calls = [U.launch(axpy, x[s], y[s], o[s], 1.0) for s in blocks]
    assert hostpool.run(calls)  # the parent's worker exists now
    pid = os.fork()
    if pid == 0:  # child: the parent's worker thread is gone; a launch must not wait for it forever
        code = 1
        try:
            o.zero_()
            code = 0 if hostpool.run(calls) and torch.allclose(o.cpu(), (x + y).cpu()) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_tensor_pieces_launch_like_views_and_stay_inside_storage():
    from trnlang.runtime.args import TensorPiece

    base = _trn(64, 40)
    out = torch.zeros(64, 40, device="trn")
    x, y, o = (U.rows_piece(t, slice(8, 40)) for t in (base, base, out))
    for _ in range(3):  # cold (views are made), then plan hits on the pieces' addresses
        U.launch(axpy, x, y, o, 2.0)()
    assert U.launch(axpy, x, y, o, 2.0).native, "a warm launch of pieces must hit the view's plan"
    torch.testing.assert_close(out.cpu()[8:40], 3.0 * base.cpu()[8:40])
    assert out.cpu()[:8].abs().sum() == 0 and out.cpu()[40:].abs().sum() == 0
    strided = U.piece(base, (16, 20), (80, 2), 1)  # every other row and column, from element 1
    torch.testing.assert_close(strided.tensor().cpu(), base.cpu().view(-1)[1:].as_strided((16, 20), (80, 2)))
    with pytest.raises(trn.LaunchError):
        TensorPiece(base, (65, 40), (40, 1), 0)  # one row past the storage
    with pytest.raises(trn.LaunchError):
        TensorPiece(base, (2, 40), (-40, 1), 0)  # before the storage
    TensorPiece(base, (0, 40), (40, 1), 64 * 40)  # empty pieces anywhere are fine
