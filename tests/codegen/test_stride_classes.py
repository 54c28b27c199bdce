"""Strides of non-contiguous kernel arguments known to be 0 (broadcast) or 1 (unit step) are compiled as
constants (``trnlang.runtime.jit.layout_of``, ``codegen/lowering/kernel.py``): each pattern is its own variant, and
results match numpy for every pattern."""

from __future__ import annotations

import numpy as np

import trnlang as trn
import trnlang.language as tl


@trn.kernel
def scale_rows(x, s, out):
    """out = x * s over [R, C] (``s`` any [R, C] view: a broadcast column, a transposed tensor...)."""
    r, c = x.shape
    for i in tl.affine_range(tl.cdiv(r, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(c)[None, :]
        m = rows < r
        tl.store(out[rows, cols], tl.load(x[rows, cols], mask=m) * tl.load(s[rows, cols], mask=m), mask=m)


def test_stride_classes_compile_separately_and_match_numpy():
    """Zero / unit strides of non-contiguous arguments are compile-time constants (jit.layout_of): each
    stride pattern is its own variant, and a launch never runs code compiled for another pattern."""
    from trnlang.runtime.jit import layout_of

    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 64), dtype=np.float32)
    col = rng.standard_normal((300, 1), dtype=np.float32)
    full = rng.standard_normal((64, 300), dtype=np.float32)
    views = {
        "broadcast column": np.broadcast_to(col, (300, 64)),
        "transposed": full.T,
        "every other column": rng.standard_normal((300, 128), dtype=np.float32)[:, ::2],
        "contiguous": rng.standard_normal((300, 64), dtype=np.float32),
    }
    assert layout_of(views["broadcast column"]) == (1, 0)
    assert layout_of(views["transposed"]) == (1, None)
    assert layout_of(views["every other column"]) == (None, None)
    assert layout_of(views["contiguous"]) is True
    for _ in range(2):  # the second round hits the compiled variants
        for name, s in views.items():
            out = np.zeros((300, 64), np.float32)
            scale_rows(x, s, out)
            np.testing.assert_allclose(out, x * s, rtol=1e-6, err_msg=name)
