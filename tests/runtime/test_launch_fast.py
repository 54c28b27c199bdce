"""The warm launch's fast path (issue 18 item 3): the generated plan key and the one-argument native call.

A warm ``k(*tensors)`` computes its plan key with a function generated for the argument types
(``trnlang.runtime.kernel._key_function``) and runs the resolved launch through ``codegen.native``'s
runner. These tests check that every guarantee of the general path still holds on it: a tensor whose
metadata changed in place (resize, transpose, a negative view, another dtype) gets another plan, a
kernel error still names the user's line, other threads and big scratch arenas still run correctly,
and results equal numpy.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from trnlang.runtime import kernel as K
from trnlang.runtime import launch as L
from trnlang.runtime.args import TensorPiece


@trn.kernel
def add16(x, y, out):
    tl.store(out[0:1, 0:16], tl.load(x[0:1, 0:16]) + tl.load(y[0:1, 0:16]))


@trn.kernel
def scale_rows(x, out, a):
    """out = a * x for any [R, C] (R tiled by 128)."""
    r, c = x.shape
    for i in tl.affine_range(tl.cdiv(r, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(c)[None, :]
        m = rows < r
        tl.store(out[rows, cols], tl.load(x[rows, cols], mask=m) * a, mask=m)


@trn.kernel
def gather(idx, table, out):
    n = idx.shape[0]
    c = table.shape[1]
    rows = tl.arange(n)[:, None]
    ix = tl.load(idx[rows, 0:1])
    tl.store(out[rows, tl.arange(c)[None, :]], tl.load(table[ix, tl.arange(c)[None, :]]))


def _warm(k, *args):
    k(*args)
    k(*args)


def test_warm_launch_runs_the_one_argument_call_and_matches_numpy():
    g = torch.Generator().manual_seed(1)
    x, y, o = torch.randn(1, 16, generator=g), torch.randn(1, 16, generator=g), torch.empty(1, 16)
    _warm(add16, x, y, o)
    go = add16.bind(x, y, o)
    assert go.resolved and go._owner == threading.get_ident(), "the warm call adopted its launch"
    for _ in range(3):
        x.add_(1.0)
        add16(x, y, o)
        np.testing.assert_array_equal(o.numpy(), x.numpy() + y.numpy())


def test_generated_key_equals_the_general_key():
    x, o = torch.randn(5, 7), torch.empty(5, 7)
    piece = TensorPiece(o, (2, 7), o.stride(), o.storage_offset() + 7)
    lk = trn.config.current.launch_key
    for args in [(x, o, 2.0), (x, piece, 2.0), (x.t(), o.t(), 3), (torch.nn.Parameter(x), o, 0.5), (x, (1, "a")),
                 ()]:
        f = K._key_function(tuple(map(type, args)))
        assert f is not None
        want = scale_rows._plan_key_general(args, (1,))
        assert want is not None
        assert f(args, (1,), lk) == (want[0], tuple(want[1]))
    assert K._key_function((torch.Tensor, list)) is None  # not plan-able: the general path
    f = K._key_function((torch.Tensor, torch.Tensor, float))
    assert f((x, o, 1), (1,), lk) is None  # an int where the pattern has a float
    assert f((x, o), (1,), lk) is None
    assert f((x, torch.empty(0), 1.0), (1,), lk) is None  # no storage: the general path
    assert K._key_function((torch.Tensor, tuple))((x, (1, [2])), (1,), lk) is None


def test_metadata_changed_in_place_takes_another_plan():
    x = torch.randn(300, 20)
    o = torch.empty(300, 20)
    _warm(scale_rows, x, o, 2.0)
    x.resize_(130, 20)  # same object, new shape
    o.resize_(130, 20)
    scale_rows(x, o, 2.0)
    np.testing.assert_allclose(o.numpy(), 2.0 * x.numpy(), rtol=1e-6)
    sq = torch.randn(64, 64)
    so = torch.empty(64, 64)
    _warm(scale_rows, sq, so, -1.0)
    sq.t_()  # in-place transpose: the strides change
    scale_rows(sq, so, -1.0)
    np.testing.assert_allclose(so.numpy(), -sq.numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="negative bit"):  # a negative view of the same layout: not the warm plan
        scale_rows(sq._neg_view(), so, -1.0)
    h = sq.half()  # same shape and strides, another dtype
    ho = torch.empty(64, 64, dtype=torch.float16).t()
    scale_rows(h, ho, 3.0)
    np.testing.assert_allclose(ho.float().numpy(), 3.0 * h.float().numpy(), rtol=2e-3)


def test_type_pattern_switches_keep_working():
    x, o = torch.randn(40, 8), torch.empty(40, 8)
    p = torch.nn.Parameter(torch.randn(40, 8), requires_grad=False)
    for src in (x, p, x, p):
        _warm(scale_rows, src, o, 1.5)
        np.testing.assert_allclose(o.numpy(), 1.5 * src.detach().numpy(), rtol=1e-6)
    scale_rows(x.numpy(), o.numpy(), 0.5)  # numpy arrays: never plan-able, the general path
    np.testing.assert_allclose(o.numpy(), 0.5 * x.numpy(), rtol=1e-6)


def test_kernel_error_on_the_fast_path_names_the_user_line():
    table = torch.randn(10, 4)
    out = torch.zeros(3, 4)
    good = torch.tensor([[1], [2], [9]], dtype=torch.int32)
    _warm(gather, good, table, out)
    good[1, 0] = 12  # the same tensors: the warm call's own launch
    with pytest.raises(trn.BoundsError, match="out of bounds") as ei:
        gather(good, table, out)
    assert ei.traceback[-1].path.name == "test_launch_fast.py"  # no trnlang frame last
    good[1, 0] = 2
    gather(good, table, out)
    np.testing.assert_array_equal(out.numpy(), table.numpy()[[1, 2, 9]])


def test_other_threads_and_big_arenas_take_the_nine_word_call():
    x, o = torch.randn(256, 1024), torch.empty(256, 1024)
    _warm(scale_rows, x, o, 2.0)
    go = scale_rows.bind(x, o, 2.0)
    assert go.resolved
    if go.arena_size > L.OWN_ARENA_MAX:
        assert go._owner == -1  # its kernels run long: the thread's arena, not a copy per launch
    np.testing.assert_allclose(o.numpy(), 2.0 * x.numpy(), rtol=1e-6)
    xs, os_ = torch.randn(1, 16), torch.empty(1, 16)
    _warm(add16, xs, xs, os_)
    small = add16.bind(xs, xs, os_)
    assert small._owner == threading.get_ident()
    seen: list[np.ndarray] = []

    def other() -> None:
        os_.zero_()
        small.run()  # not the owner: the thread's own arena and error record
        seen.append(os_.numpy().copy())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    np.testing.assert_array_equal(seen[0], 2 * xs.numpy())


def test_observers_and_debug_switch_off_the_fast_path():
    x, o = torch.randn(8, 8), torch.empty(8, 8)
    _warm(scale_rows, x, o, 4.0)
    seen = []
    with L.observe_launches(lambda k, comp, args, grid: seen.append(k)):
        scale_rows(x, o, 4.0)
    assert seen == [scale_rows]
    k = trn.kernel(scale_rows.fn)
    _warm(k, x, o, 4.0)
    assert k._keyfn is not None
    k.debug = True
    assert k._keyfn is None
    k(x, o, 4.0)
    np.testing.assert_allclose(o.numpy(), 4.0 * x.numpy(), rtol=1e-6)
