"""Shape-polymorphic kernels: a new size of the same class is not a new compilation (runtime/specialize.py).

Results are checked against numpy and the reference interpreter on sizes that cross every boundary of the
policy (0, 1, 2, 127, 128, 129, ragged last tiles, multiples of the tile), and an access that a runtime size
puts out of bounds raises ``BoundsError`` with the user's line instead of touching memory.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.language as tl
from trnlang.frontend.errors import BoundsError

ROOT = Path(__file__).resolve().parents[2]


def _softmax_src():
    """Tutorial 02's softmax, its source unchanged, as a fresh kernel (no variants from other tests)."""
    spec = importlib.util.spec_from_file_location("tutorial02", ROOT / "tutorials" / "02_fused_softmax.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return trn.kernel(mod.softmax.fn)


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_tutorial_softmax_compiles_once_per_column_count_and_row_class():
    k = _softmax_src()
    rng = np.random.default_rng(0)
    for n in (1, 7, 128, 300, 1000, 1024, 2048, 2049):
        for d in (64, 781, 1024):
            x = rng.standard_normal((n, d)).astype(np.float32)
            out = np.empty_like(x)
            k(x, out)
            np.testing.assert_allclose(out, _np_softmax(x), rtol=1e-5, atol=1e-6)
    stats = k.compile_stats()
    assert stats["variants"] <= 6 and stats["dynamic"]
    assert stats["static_dims"] == {("x", 1), ("out", 1)}  # the tile's free size, learned from tl.arange(d)
    assert "tl.arange" in stats["static_reasons"][0]


def _rows_kernel(dynamic: bool | None = None):
    @trn.kernel(dynamic=dynamic)
    def add_rows(x, y, out):
        n = x.shape[0]
        for i in tl.affine_range(tl.cdiv(n, 128)):
            r = i * 128 + tl.arange(128)[:, None]
            c = tl.arange(16)[None, :]
            a = tl.load(x[r, c], mask=r < n)
            b = tl.load(y[r, c], mask=r < n)
            tl.store(out[r, c], a * 2.0 + b, mask=r < n)

    return add_rows


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.one_of(st.sampled_from([0, 1, 2, 127, 128, 129, 255, 256, 257, 1000]), st.integers(0, 700)),
       interpret=st.booleans())
def test_compiled_and_interpreted_agree_over_runtime_sizes(n, interpret):
    k = _KERNELS[interpret]
    x = np.arange(n * 16, dtype=np.float32).reshape(n, 16) / 7
    y = np.full((n, 16), 0.5, np.float32)
    out = np.full((n, 16), np.nan, np.float32)
    k(x, y, out)
    np.testing.assert_array_equal(out, x * 2.0 + y)


_KERNELS = {False: _rows_kernel(), True: trn.kernel(interpret=True)(_rows_kernel().fn)}


def test_sizes_of_a_class_share_one_variant_and_zero_and_one_are_their_own():
    k = _rows_kernel()
    for n in (300, 129, 4096, 2, 77):
        x = np.ones((n, 16), np.float32)
        k(x, x, np.empty_like(x))
    assert k.compile_stats()["variants"] == 1
    for n in (1, 0):
        x = np.ones((n, 16), np.float32)
        k(x, x, np.empty_like(x))
    assert k.compile_stats()["variants"] == 3


def test_dynamic_false_keys_on_exact_shapes():
    k = _rows_kernel(dynamic=False)
    for n in (300, 129):
        x = np.ones((n, 16), np.float32)
        k(x, x, np.empty_like(x))
    assert k.compile_stats()["variants"] == 2 and not k.compile_stats()["dynamic"]


def test_different_sizes_get_different_symbols_and_equal_ones_share():
    k = _rows_kernel()
    x = np.ones((300, 16), np.float32)
    text = k.ir(x, x, np.empty_like(x))
    assert text.count("f32[x_size0, x_size1]") == 3 and "y_size" not in text  # equal sizes: one symbol
    small = np.ones((200, 16), np.float32)
    with pytest.raises(BoundsError) as e:  # out shorter than x: the runtime size puts the store out of bounds
        k(x, x, small)
    assert "tensor out of shape (200, 16)" in str(e.value) and "tl.store(out[r, c]" in e.value.loc.text


def test_out_of_bounds_through_a_runtime_size_raises_and_writes_nothing_outside():
    @trn.kernel
    def shifted(x, out):
        n = x.shape[0]
        for i in tl.affine_range(tl.cdiv(n, 128)):
            r = i * 128 + tl.arange(128)[:, None]
            c = tl.arange(8)[None, :]
            tl.store(out[r + 1, c], tl.load(x[r, c], mask=r < n), mask=r < n)  # one row past the end

    buf = np.full((302, 8), -7.0, np.float32)
    x = np.ones((300, 8), np.float32)
    out = buf[1:301]
    with pytest.raises(BoundsError) as e:
        shifted(x, out)
    assert e.value.loc is not None and "out[r + 1, c]" in e.value.loc.text
    assert (buf[0] == -7).all() and (buf[301] == -7).all()


def test_python_comparison_of_a_size_makes_it_static():
    @trn.kernel
    def branchy(x, out):
        n = x.shape[0]
        scale = 2.0 if n == 256 else 3.0  # Python branch on a size: that size becomes a constant
        for i in tl.affine_range(tl.cdiv(n, 128)):
            r = i * 128 + tl.arange(128)[:, None]
            c = tl.arange(4)[None, :]
            tl.store(out[r, c], tl.load(x[r, c], mask=r < n) * scale, mask=r < n)

    for n, scale in ((256, 2.0), (300, 3.0), (256, 2.0), (129, 3.0)):
        x = np.ones((n, 4), np.float32)
        out = np.empty_like(x)
        branchy(x, out)
        np.testing.assert_array_equal(out, x * scale)
    stats = branchy.compile_stats()
    assert ("x", 0) in stats["static_dims"] and stats["variants"] == 3


def test_range_over_a_size_makes_it_static():
    @trn.kernel
    def unrolled(x, out):
        n = x.shape[0]
        for j in range(n):  # a trace-time loop needs a Python int
            tl.store(out[j:j + 1, 0:4], tl.load(x[j:j + 1, 0:4]) + 1.0)

    for n in (3, 5):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
        out = np.empty_like(x)
        unrolled(x, out)
        np.testing.assert_array_equal(out, x + 1)
    assert ("x", 0) in unrolled.compile_stats()["static_dims"]


def test_a_size_one_spec_needs_as_a_constant_stays_runtime_for_the_others():
    """What a launch class (the values of its non-tensor arguments) learns is kept for that class only: a spec whose
    code branches on a size makes it a constant for launches with that spec, not for every launch of the kernel."""

    @trn.kernel
    def scaled(x, out, fixed):
        n = x.shape[0]
        scale = (2.0 if n == 256 else 3.0) if fixed else 1.0  # only the fixed spec branches on the size
        for i in tl.affine_range(tl.cdiv(n, 128)):
            r = i * 128 + tl.arange(128)[:, None]
            c = tl.arange(4)[None, :]
            tl.store(out[r, c], tl.load(x[r, c], mask=r < n) * scale, mask=r < n)

    for n, fixed, scale in ((256, True, 2.0), (300, True, 3.0), (130, False, 1.0), (300, False, 1.0),
                            (511, False, 1.0)):
        x = np.ones((n, 4), np.float32)
        out = np.empty_like(x)
        scaled(x, out, fixed)
        np.testing.assert_array_equal(out, x * scale)
    stats = scaled.compile_stats()
    assert ("x", 0) in stats["static_dims"]
    assert stats["variants"] == 3, stats  # 256 and 300 exactly for the fixed spec, one for all the others


def test_a_user_error_does_not_make_the_kernel_exact():
    """A launch that fails with the user's error (here: a row too wide for on-chip memory) raises it; later
    launches of the same kernel still share one variant across row counts."""

    @trn.kernel
    def inc_rows(x, out):
        n, d = x.shape
        for i in tl.affine_range(tl.cdiv(n, 128)):
            r = i * 128 + tl.arange(128)[:, None]
            c = tl.arange(d)[None, :]
            tl.store(out[r, c], tl.load(x[r, c], mask=r < n) + 1.0, mask=r < n)

    wide = np.ones((3, 70_000), np.float32)  # under the size that keeps exact shapes
    with pytest.raises(trn.TrnError):
        inc_rows(wide, np.empty_like(wide))
    for n in (130, 300, 700):
        x = np.ones((n, 16), np.float32)
        out = np.empty_like(x)
        inc_rows(x, out)
        np.testing.assert_array_equal(out, x + 1)
    stats = inc_rows.compile_stats()
    assert stats["dynamic"] and stats["fallback"] is None, stats
    assert stats["variants"] == 1, stats


def test_profile_uses_exact_shapes():
    k = _rows_kernel()
    x = np.ones((300, 16), np.float32)
    out = np.empty_like(x)
    p = k.profile(x, x, out)
    np.testing.assert_array_equal(out, x * 3.0)
    assert p.time_us > 0
