"""Shape-polymorphic kernels, compiled vs the reference interpreter, across every specialization boundary.

- the standard library's bucketed kernels (layer norm, the indirect-DMA row gather: a runtime size and
  a host-picked tile bucket) on hypothesis sizes including 1, ragged tiles and each bucket edge;
- ``EXACT_MIN_BYTES``: below it sizes are runtime values (one variant), from it up every size is exact (a variant
  per size), with the same results either side;
- a tile bucket whose tail is not masked reads past a runtime size: ``BoundsError`` at the user's line, and
  nothing outside the tensors is written.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import tiling as T
from stdlib_kernels.nn import norm as N
from trnlang.frontend.errors import BoundsError
from trnlang.runtime import specialize

#: every bucket edge of the free axis up to 2048 (powers of two, then multiples of 512), either side
EDGES = sorted({e + k for e in (2, 4, 8, 16, 64, 128, 256, 512, 1024, 1536, 2048) for k in (-1, 0, 1)})
#: row counts (0 rows never reach these kernels: the lowerings return early; user kernels over 0 rows are in
#: test_shape_polymorphism, and the device tests of each family run their ops on empty tensors)
ROWS = [1, 2, 3, 127, 128, 129, 255, 257]


def _both(k):
    """The compiled kernel and its interpreted twin (shape-polymorphic both)."""
    return k, trn.kernel(interpret=True, dynamic=True)(k.fn)


def _run_pair(k, make_args, n_out: int = 1):
    """Run ``k`` compiled and interpreted on fresh copies of the same arguments; returns both outputs."""
    outs = []
    for kern in _both(k):
        args = make_args()
        kern(*args)
        outs.append([a for a in args if isinstance(a, np.ndarray)][-n_out:])
    return outs


def _assert_pair(outs) -> None:
    for got, want in zip(*outs):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, equal_nan=True)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(r=st.sampled_from(ROWS) | st.integers(1, 300), n=st.sampled_from([1, 5, 64, 130]))
def test_layer_norm_kernel_compiled_vs_interpreter(r: int, n: int) -> None:
    rng = np.random.default_rng(r * 17 + n)
    x = rng.standard_normal((r, n)).astype(np.float32)
    w, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))

    def args():
        return [x.copy(), w, b, np.full_like(x, np.nan), np.full((r, 1), np.nan, np.float32),
                np.full((r, 1), np.nan, np.float32), N.LnFwd(1e-5, True, True, False, 128, T.row_bucket(r))]

    _assert_pair(_run_pair(N.ln_fwd, args, n_out=3))


def _double_rows():
    @trn.kernel
    def double_rows(x, out):
        n = x.shape[0]
        for i in tl.affine_range(tl.cdiv(n, 128)):
            r = i * 128 + tl.arange(128)[:, None]
            c = tl.arange(8)[None, :]
            tl.store(out[r, c], tl.load(x[r, c], mask=r < n) * 2.0, mask=r < n)

    return double_rows


def test_exact_min_bytes_boundary_switches_to_exact_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(specialize, "EXACT_MIN_BYTES", 128 * 8 * 4 * 4)  # 16 KiB: 512 rows of 8 fp32
    k = _double_rows()
    ki = trn.kernel(interpret=True)(k.fn)
    limit_rows = specialize.EXACT_MIN_BYTES // (8 * 4)
    below = [2, 129, limit_rows - 129, limit_rows - 1]
    above = [limit_rows, limit_rows + 1, limit_rows + 130]
    for n in below + above:
        x = np.arange(n * 8, dtype=np.float32).reshape(n, 8)
        got, want = np.full_like(x, np.nan), np.full_like(x, np.nan)
        k(x, got)
        ki(x, want)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, x * 2)
        if n == below[-1]:
            assert k.compile_stats()["variants"] == 1  # every size under the limit: one runtime-size variant
    assert k.compile_stats()["variants"] == 1 + len(above)  # from the limit up: one exact variant per size


def test_an_unmasked_bucket_tail_past_a_runtime_size_raises_at_the_users_line() -> None:
    @trn.kernel
    def copy_cols(x, out, bucket):
        n, d = x.shape
        for i in tl.affine_range(tl.cdiv(n, 128)):
            r = i * 128 + tl.arange(128)[:, None]
            c = tl.arange(bucket)[None, :]
            t = tl.load(x[r, c], mask=r < n)  # no mask on c: the bucket's tail reads past d
            tl.store(out[r, c], t, mask=(r < n) & (c < d))

    ok = np.ones((130, 64), np.float32)
    out = np.zeros_like(ok)
    copy_cols(ok, out, 64)
    np.testing.assert_array_equal(out, ok)
    buf = np.full((130, 80), -7.0, np.float32)
    x = np.ascontiguousarray(buf[:, :50])
    out = buf[:, 10:60]  # a window of a bigger buffer: a write past d would land in buf
    with pytest.raises(BoundsError) as e:
        copy_cols(x, out, 64)
    err = e.value
    assert "tensor x of shape (130, 50)" in str(err)
    assert err.loc is not None and err.loc.func == "copy_cols" and err.loc.filename == __file__  # the user's kernel
    assert (buf[:, :10] == -7).all() and (buf[:, 60:] == -7).all()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.sampled_from([2, 3, 127, 128, 129, 257]) | st.integers(2, 300), c=st.sampled_from([1, 7, 512, 513]),
       wide=st.booleans())
def test_row_gather_kernel_compiled_vs_interpreter(k: int, c: int, wide: bool) -> None:
    """The indirect-DMA gather with a runtime row count ``K`` and its row bucket (sizes 0 and 1 are exact
    launches of ``gather_scatter``: tests/device/test_dynamic_indexing.py)."""
    from stdlib_kernels.indexing import engine as I

    rng = np.random.default_rng(k * 31 + c)
    v = 300
    x = rng.standard_normal((1, v, c)).astype(np.float32)
    ids = rng.integers(-v, v, k).astype(np.int64 if wide else np.int32)  # negatives: wrapped
    words = ids.view(np.int32).reshape(k, 2 if wide else 1)
    interp = trn.kernel(interpret=True, dynamic=True)(I.gather_scatter_rt.fn)
    interp._static_dims.update(I._KEYED)
    outs = []
    for kern in (I.gather_scatter_rt, interp):
        y = np.full((1, k, c), np.nan, np.float32)
        lo = np.lib.stride_tricks.as_strided(words[:, 0], (1, k, c), (0, words.strides[0], 0))
        hi = np.lib.stride_tricks.as_strided(words[:, 1], (1, k, c), (0, words.strides[0], 0)) if wide else None
        kern(x, y, None, lo, hi, None, None, None, None, I.Spec((1, None, c), (v,), (1,), wrap=True, move=I.Move.GATHER,
                                                               layout=I.Layout.PK, idx_c=True, kb=T.row_bucket(k)))
        outs.append(y)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0][0], x[0][ids % v])
