"""The public launch API (trnlang/runtime/launch.py): bind, rebind, run, pointer calls, the thread split.

Results are compared with numpy; a wrong argument list raises ``LaunchError`` at bind time; settings come
from ``trnlang.config`` (a refreshed ``TRN_INTERPRET`` takes the launch off its resolved plan).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import trnlang as trn
import trnlang.config as config
import trnlang.language as tl
from trnlang.runtime import hostpool
from trnlang.runtime import launch as L


@trn.kernel
def axpy(x, y, out, a):
    """out = a * x + y over [R, C] rows, tiled by 128."""
    r, c = x.shape
    for i in tl.affine_range(tl.cdiv(r, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(c)[None, :]
        m = rows < r
        tl.store(out[rows, cols], tl.load(x[rows, cols], mask=m) * a + tl.load(y[rows, cols], mask=m), mask=m)


@trn.kernel
def take_rows(idx, table, out):
    """out[i, :] = table[idx[i], :] (an out-of-range index is a BoundsError)."""
    n = idx.shape[0]
    c = table.shape[1]
    rows = tl.arange(n)[:, None]
    ix = tl.load(idx[rows, 0:1])
    tl.store(out[rows, tl.arange(c)[None, :]], tl.load(table[ix, tl.arange(c)[None, :]]))


def _xyo(r: int = 300, c: int = 40) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(r * 1000 + c)
    return torch.randn(r, c, generator=g), torch.randn(r, c, generator=g), torch.empty(r, c)


def _ref(x: torch.Tensor, y: torch.Tensor, a: float) -> np.ndarray:
    return a * x.numpy() + y.numpy()


def test_cold_bind_is_deferred_and_runs_the_general_path():
    x, y, o = _xyo(130, 24)
    go = axpy.bind(x, y, o, 2.0)
    assert isinstance(go, L.Launch) and not go.resolved and not go.native
    go.run()
    np.testing.assert_allclose(o.numpy(), _ref(x, y, 2.0), rtol=1e-6)
    with pytest.raises(trn.LaunchError, match="only a resolved launch can be rebound"):
        go.rebind([x.data_ptr(), y.data_ptr(), o.data_ptr()])
    with pytest.raises(trn.LaunchError):
        go.pointer_call()


def test_warm_bind_is_resolved_and_matches_numpy():
    x, y, o = _xyo()
    axpy(x, y, o, -1.5)  # makes the launch plan
    o.zero_()
    go = axpy.bind(x, y, o, -1.5)
    assert go.resolved and go.native
    assert go.pointers == (x.data_ptr(), y.data_ptr(), o.data_ptr())
    assert go.entry and len(go.words) == 9
    go()
    np.testing.assert_allclose(o.numpy(), _ref(x, y, -1.5), rtol=1e-6)
    assert axpy.bind(x, y, o, -1.5) is go  # the same addresses: the same launch, nothing rebuilt


def test_alternating_outputs_reuse_their_launches():
    """An op whose output alternates between a few blocks binds each address set once (``RECENT_LAUNCHES``), and
    every replay writes the output it was bound to."""
    x, y, _ = _xyo()
    outs = [torch.empty(300, 40) for _ in range(L.RECENT_LAUNCHES)]
    axpy(x, y, outs[0], 2.0)
    first = [axpy.bind(x, y, o, 2.0) for o in outs]
    for o in outs:
        o.zero_()
    for k, o in enumerate(outs):
        go = axpy.bind(x, y, o, 2.0)
        assert go is first[k]
        go.run()
        np.testing.assert_allclose(o.numpy(), _ref(x, y, 2.0), rtol=1e-6)
    extra = [torch.empty(300, 40) for _ in range(L.RECENT_LAUNCHES)]
    for o in extra:
        axpy.bind(x, y, o, 2.0)
    assert axpy.bind(x, y, outs[0], 2.0) is not first[0]  # pushed out by newer addresses


def test_rebind_runs_on_other_tensors_of_the_same_layout():
    x, y, o = _xyo()
    axpy(x, y, o, 0.5)
    go = axpy.bind(x, y, o, 0.5)
    x2, y2, o2 = _xyo(300, 40)
    x2.mul_(3.0)
    again = go.rebind([x2.data_ptr(), y2.data_ptr(), o2.data_ptr()])
    assert again.resolved and again.pointers == (x2.data_ptr(), y2.data_ptr(), o2.data_ptr())
    again.run()
    np.testing.assert_allclose(o2.numpy(), _ref(x2, y2, 0.5), rtol=1e-6)
    with pytest.raises(trn.LaunchError, match="takes 3 tensor addresses, got 2"):
        go.rebind([x2.data_ptr(), o2.data_ptr()])


def test_rebind_onto_an_overlapping_output_picks_the_aliasing_variant():
    x, y, o = _xyo(256, 64)
    axpy(x, y, o, 3.0)
    go = axpy.bind(x, y, o, 3.0)
    ref = _ref(x, y, 3.0)
    go.rebind([x.data_ptr(), y.data_ptr(), x.data_ptr()]).run()  # out is x
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-6)
    assert any(may_alias for may_alias in go.plan.variants)


def test_wrong_arguments_raise_at_bind():
    x, y, o = _xyo(128, 8)
    with pytest.raises(trn.LaunchError, match="called with 3 argument"):
        axpy.bind(x, y, o)
    with pytest.raises(trn.LaunchError):
        axpy.bind(x, y, o, 1.0, 2.0)


def test_a_kernel_error_is_raised_by_run():
    table = torch.randn(10, 4)
    out = torch.zeros(3, 4)
    good = torch.tensor([[1], [2], [9]], dtype=torch.int32)
    bad = torch.tensor([[1], [12], [0]], dtype=torch.int32)
    take_rows(good, table, out)
    go = take_rows.bind(bad, table, out)
    assert go.resolved
    with pytest.raises(trn.BoundsError, match="out of bounds"):
        go.run()
    take_rows.bind(good, table, out).run()
    np.testing.assert_array_equal(out.numpy(), table.numpy()[[1, 2, 9]])


def test_pointer_call_runs_on_addresses_passed_per_call():
    x, y, o = _xyo(200, 16)
    axpy(x, y, o, 2.0)
    pc = axpy.bind(x, y, o, 2.0).pointer_call()
    for _ in range(3):
        x2, y2, o2 = _xyo(200, 16)
        x2.add_(1.0)
        assert pc.fn(pc.ctx, x2.data_ptr(), y2.data_ptr(), o2.data_ptr()) == 0
        np.testing.assert_allclose(o2.numpy(), _ref(x2, y2, 2.0), rtol=1e-6)
    assert pc(x.data_ptr(), y.data_ptr(), o.data_ptr()) == 0
    np.testing.assert_allclose(o.numpy(), _ref(x, y, 2.0), rtol=1e-6)


def test_plans_switched_off_bind_deferred_launches():
    x, y, o = _xyo(128, 8)
    axpy(x, y, o, 1.0)
    L.PLANS.enabled = False
    try:
        go = axpy.bind(x, y, o, 1.0)
        assert not go.resolved
        o.zero_()
        go()
    finally:
        L.PLANS.enabled = True
    np.testing.assert_allclose(o.numpy(), _ref(x, y, 1.0), rtol=1e-6)
    assert axpy.bind(x, y, o, 1.0).resolved


def test_refreshed_settings_take_a_launch_off_its_plan(monkeypatch):
    x, y, o = _xyo(128, 8)
    axpy(x, y, o, 1.0)
    assert axpy.bind(x, y, o, 1.0).resolved
    monkeypatch.setenv("TRN_INTERPRET", "1")  # tests/conftest.py refreshes trnlang.config
    assert config.current.interpret and config.current.launch_key[1]
    go = axpy.bind(x, y, o, 1.0)
    assert not go.resolved, "a plan made under TRN_INTERPRET unset must not serve TRN_INTERPRET=1"
    o.zero_()
    go()  # the interpreter
    np.testing.assert_allclose(o.numpy(), _ref(x, y, 1.0), rtol=1e-6)
    monkeypatch.delenv("TRN_INTERPRET")
    assert axpy.bind(x, y, o, 1.0).resolved


def test_config_snapshot_is_read_once_and_refreshed(monkeypatch):
    before = config.current
    monkeypatch.setattr(config, "current", before)  # put back whatever the test changes
    import os

    os.environ["TRN_NUM_THREADS"] = "5"
    try:
        assert config.current is before and L.num_threads() == before.num_threads  # not re-read by itself
        assert config.refresh().num_threads == 5 and L.num_threads() == 5
        assert config.current.generation == before.generation + 1
    finally:
        del os.environ["TRN_NUM_THREADS"]
    assert config.read({"TRN_NUM_THREADS": "x", "TRN_NATIVE_POOL": "off", "TRN_MAX_LOADED_KERNELS": "7"}) \
        .native_pool is False
    assert config.read({"TRN_MAX_LOADED_KERNELS": "7"}).max_loaded_kernels == 7


# ------------------------------------------------------------------------------------------- thread split
def test_chunks_and_row_blocks(monkeypatch):
    assert L.chunks(1000, 2) == [(0, 512), (512, 1000)]
    assert L.chunks(0, 4) == []
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    assert L.row_blocks(4096, L.PARALLEL_MIN_WORK) == [slice(0, 2048), slice(2048, 4096)]
    assert L.row_blocks(4096, L.PARALLEL_MIN_WORK - 1) == [slice(None)]
    monkeypatch.setenv("TRN_NUM_THREADS", "1")
    assert L.row_blocks(4096, 1 << 30) == [slice(None)]


def test_split_rows_matches_numpy(monkeypatch):
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    x, y, o = _xyo(1000, 24)
    blocks = L.row_blocks(1000, L.PARALLEL_MIN_WORK)
    assert len(blocks) == 2
    for _ in range(2):  # cold (deferred pieces), then warm (resolved pieces)
        o.zero_()
        L.split_rows(axpy, [x, y, o], 2.5, work=L.PARALLEL_MIN_WORK)
        np.testing.assert_allclose(o.numpy(), _ref(x, y, 2.5), rtol=1e-6)


@pytest.mark.skipif(not hostpool.available(), reason="native workers need Linux x86-64")
def test_run_parallel_on_native_workers_and_errors_reach_the_caller():
    x, y, o = _xyo(1024, 32)
    halves = [slice(0, 512), slice(512, 1024)]
    for s in halves:
        axpy(x[s], y[s], o[s], -2.0)
    o.zero_()
    launches = [axpy.bind(x[s], y[s], o[s], -2.0) for s in halves]
    assert all(go.native for go in launches)
    assert hostpool.run(launches)
    np.testing.assert_allclose(o.numpy(), _ref(x, y, -2.0), rtol=1e-6)
    errors: list[BaseException] = []

    def rounds() -> None:
        try:
            for _ in range(20):
                L.run_parallel(launches)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=rounds)
    t.start()
    rounds()
    t.join()
    assert not errors
    table = torch.randn(10, 4)
    outs = [torch.zeros(3, 4) for _ in range(2)]
    good = torch.tensor([[1], [2], [9]], dtype=torch.int32)
    bad = torch.tensor([[1], [12], [0]], dtype=torch.int32)
    for out in outs:
        take_rows(good, table, out)
    pair = [take_rows.bind(good, table, outs[0]), take_rows.bind(bad, table, outs[1])]
    with pytest.raises(trn.BoundsError):
        L.run_parallel(pair)  # the bad launch on a worker
    with pytest.raises(trn.BoundsError):
        L.run_parallel(pair[::-1])  # and on this thread


def test_run_parallel_runs_deferred_launches_on_the_python_pool():
    x, y, o = _xyo(256, 8)
    halves = [slice(0, 128), slice(128, 256)]
    o2 = torch.empty_like(o)
    launches = [axpy.bind(x[s], y[s], o2[s], 4.0) for s in halves]  # views of a new output: maybe cold
    L.run_parallel([*launches, lambda: None])
    np.testing.assert_allclose(o2.numpy(), _ref(x, y, 4.0), rtol=1e-6)
