"""Every user error names the user's file and line, shows the line, and ends the traceback in user code."""

from __future__ import annotations

import traceback

import numpy as np
import pytest
import torch

import trnlang as trn
import trnlang.language as tl

HERE = __file__


def _line_of(fn, marker: str) -> int:
    import inspect

    src, start = inspect.getsourcelines(fn)
    for i, line in enumerate(src):
        if marker in line:
            return start + i
    raise AssertionError(marker)


def _check(excinfo, fn, marker: str, *texts: str) -> None:
    msg = str(excinfo.value)
    for t in texts:
        assert t in msg, f"{t!r} not in message:\n{msg}"
    line = _line_of(fn, marker)
    assert f'File "{HERE}", line {line}' in msg, msg
    assert marker in msg  # the line's text is shown
    last = traceback.extract_tb(excinfo.value.__traceback__)[-1]
    assert "/trnlang/" not in last.filename and "/codegen/" not in last.filename, last


def test_partition_over_128():
    @trn.kernel
    def k(x, out):
        t = tl.load(x[0:256, 0:4])  # MARK
        tl.store(out[0:256, 0:4], t)

    x = np.zeros((256, 4), np.float32)
    with pytest.raises(trn.ShapeError) as e:
        k(x, x.copy())
    _check(e, k.fn, "# MARK", "partition dimension 256 exceeds 128")


def test_sbuf_overflow():
    @trn.kernel
    def k(x, out):
        a = tl.zeros((128, 40000), tl.float32)  # MARK
        b = tl.zeros((128, 40000), tl.float32)
        tl.store(out[0:128, 0:4], a[:, 0:4] + b[:, 0:4])

    x = np.zeros((128, 4), np.float32)
    with pytest.raises(trn.SbufOverflowError) as e:
        k(x, x.copy())
    msg = str(e.value)
    assert "SBUF" in msg and "160000" in msg.replace(",", "").replace("_", ""), msg
    assert f"{HERE}:{_line_of(k.fn, '# MARK')}" in msg or f'line {_line_of(k.fn, "# MARK")}' in msg


def test_reduce_axis0():
    @trn.kernel
    def k(x, out):
        t = tl.load(x[0:128, 0:4])
        s = tl.sum(t, axis=0)  # MARK
        tl.store(out[0:4, 0:1], s)

    x = np.zeros((128, 4), np.float32)
    with pytest.raises(trn.ShapeError) as e:
        k(x, x.copy())
    _check(e, k.fn, "# MARK", "axis 0", "partition")


def test_python_if_on_traced_value():
    @trn.kernel
    def k(x, out):
        for i in tl.affine_range(4):
            if i < 2:  # MARK
                tl.store(out[i:i + 1, :], tl.load(x[i:i + 1, :]))

    x = np.zeros((4, 4), np.float32)
    with pytest.raises(trn.TraceError) as e:
        k(x, x.copy())
    _check(e, k.fn, "# MARK", "control flow")


def test_provable_oob():
    @trn.kernel
    def k(x, out):
        for i in tl.affine_range(3):
            t = tl.load(x[i * 128:(i + 1) * 128, :])  # MARK
            tl.store(out[0:128, :], t)

    x = np.zeros((300, 4), np.float32)
    with pytest.raises(trn.BoundsError) as e:
        k(x, np.zeros((128, 4), np.float32))
    _check(e, k.fn, "# MARK", "300")


def test_matmul_n_over_512():
    @trn.kernel
    def k(a, b, out):
        at = tl.load(a[0:128, 0:128])
        bt = tl.load(b[0:128, 0:1024])
        c = tl.matmul(at, bt, transpose_x=True)  # MARK
        tl.store(out[0:128, 0:1024], c)

    a = np.zeros((128, 128), np.float32)
    b = np.zeros((128, 1024), np.float32)
    with pytest.raises(trn.ShapeError) as e:
        k(a, b, b.copy())
    _check(e, k.fn, "# MARK", "N=1024", "512")


def test_broadcast_mismatch():
    @trn.kernel
    def k(x, y, out):
        a = tl.load(x[0:128, 0:64])
        b = tl.load(y[0:128, 0:32])
        tl.store(out[0:128, 0:64], a + b)  # MARK

    with pytest.raises(trn.ShapeError) as e:
        k(np.zeros((128, 64), np.float32), np.zeros((128, 32), np.float32), np.zeros((128, 64), np.float32))
    _check(e, k.fn, "# MARK", "(128, 64)", "(128, 32)")


def test_unsupported_dtype_in_kernel():
    @trn.kernel
    def k(x, out):
        t = tl.zeros((128, 4), "float64")  # MARK
        tl.store(out[0:128, 0:4], t)

    x = np.zeros((128, 4), np.float32)
    with pytest.raises(trn.DTypeError) as e:
        k(x, x.copy())
    _check(e, k.fn, "# MARK", "float64")


def test_unsupported_dtype_argument():
    @trn.kernel
    def k(x, out):
        tl.store(out[0:4, 0:4], tl.load(x[0:4, 0:4]))

    with pytest.raises(trn.DTypeError) as e:
        k(torch.zeros(4, 4, dtype=torch.float64), torch.zeros(4, 4))  # MARK
    msg = str(e.value)
    assert "float64" in msg and f'File "{HERE}"' in msg


def test_wrong_argument_count():
    @trn.kernel
    def k(x, out):
        tl.store(out[0:4, 0:4], tl.load(x[0:4, 0:4]))

    def call():
        x = np.zeros((4, 4), np.float32)
        k(x, x, x)  # MARK

    with pytest.raises(trn.LaunchError) as e:
        call()
    _check(e, call, "# MARK", "k(x, out)", "3 argument")


def test_break_in_traced_loop():
    @trn.kernel
    def k(x, out):
        for i in tl.affine_range(4):  # MARK
            tl.store(out[0:4, 0:4], tl.load(x[0:4, 0:4]))
            break

    x = np.zeros((4, 4), np.float32)
    with pytest.raises(trn.TraceError) as e:
        k(x, x.copy())
    assert "break" in str(e.value)


def test_range_on_loop_var():
    @trn.kernel
    def k(x, out):
        for i in tl.affine_range(4):
            for j in range(i):  # MARK
                pass

    x = np.zeros((4, 4), np.float32)
    with pytest.raises(trn.TraceError) as e:
        k(x, x.copy())
    _check(e, k.fn, "# MARK", "Python int")


def test_constant_slice_past_the_end_is_an_error():
    @trn.kernel
    def k(x, out):
        t = tl.load(x[0:128, :])  # MARK
        tl.store(out[0:100, :], t)

    x = np.zeros((100, 4), np.float32)
    with pytest.raises(trn.BoundsError) as e:
        k(x, x.copy())
    _check(e, k.fn, "# MARK", "outside a dimension of size 100")


@pytest.mark.parametrize("free", [128, 64])
@pytest.mark.parametrize("reduce_name", ["sum", "max", "mean", "var"])
def test_partition_vector_never_broadcasts_along_the_free_axis(free, reduce_name):
    """A [P] reduction result against [P, F] is refused (numpy would apply it per column when F == P)."""
    red = getattr(tl, reduce_name)

    @trn.kernel
    def k(x, out):
        t = tl.load(x[0:128, 0:free])
        s = tl.exp(red(t, axis=1) * 0.5)  # still one value per partition after elementwise ops
        tl.store(out[0:128, 0:free], t - s)  # MARK

    x = np.zeros((128, free), np.float32)
    with pytest.raises(trn.ShapeError) as e:
        k(x, np.zeros_like(x))
    _check(e, k.fn, "# MARK", "keepdims=True", f"(128, {free})", "per partition")


def test_partition_vector_in_where_is_refused():
    @trn.kernel
    def k(x, out):
        t = tl.load(x[0:128, 0:128])
        tl.store(out[0:128, 0:128], tl.where(t > 0.0, tl.max(t, axis=1), t))  # MARK

    x = np.zeros((128, 128), np.float32)
    with pytest.raises(trn.ShapeError) as e:
        k(x, np.zeros_like(x))
    _check(e, k.fn, "# MARK", "keepdims=True")


def test_partition_vector_both_fixes_compute_what_they_say():
    """keepdims=True is per partition (rows); an explicit broadcast_to is numpy's per-column meaning."""
    @trn.kernel
    def rows(x, out):
        t = tl.load(x[0:128, 0:128])
        tl.store(out[0:128, 0:128], t - tl.mean(t, axis=1, keepdims=True))

    @trn.kernel
    def cols(x, out):
        t = tl.load(x[0:128, 0:128])
        tl.store(out[0:128, 0:128], t - tl.broadcast_to(tl.max(t, axis=1), (128, 128)))

    @trn.kernel
    def vec(x, out):  # [P] with [P] stays legal, and so does storing it
        t = tl.load(x[0:128, 0:128])
        tl.store(out[0:128], tl.sum(t, axis=1) - tl.max(t, axis=1) * 2.0)

    x = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    o = np.zeros_like(x)
    rows(x, o)
    np.testing.assert_allclose(o, x - x.mean(1, keepdims=True), rtol=1e-5, atol=1e-5)
    cols(x, o)
    np.testing.assert_allclose(o, x - x.max(1)[None, :], rtol=1e-6, atol=1e-6)
    v = np.zeros(128, np.float32)
    vec(x, v)
    np.testing.assert_allclose(v, x.sum(1) - 2 * x.max(1), rtol=1e-4, atol=1e-4)
