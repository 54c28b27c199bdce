"""Small kernels whose lowering plans the pass tests pin."""

from __future__ import annotations

import trnlang as trn
import trnlang.language as tl


@trn.kernel
def exp_chain(x, out):
    """out = exp(x) * 2 + x: a load read twice (remat), an elementwise chain inlined into the store."""
    n, d = x.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        t = tl.load(x[rows, cols])
        tl.store(out[rows, cols], tl.exp(t) * 2.0 + t)


@trn.kernel
def gather_rows(idx, table, out):
    """out[r] = table[idx[r]] + 1: the gathered access cannot be proven in bounds (a run-time check)."""
    d = table.shape[1]
    rows = tl.arange(128)[:, None]
    cols = tl.arange(d)[None, :]
    i = tl.load(idx[rows, tl.arange(1)[None, :]])
    t = tl.load(table[i, cols])
    tl.store(out[rows, cols], t + 1.0)


@trn.kernel
def store_between(x, y, out):
    """A load of x, a store to y, then the load's consumer: fusing the load past the store is only legal when
    y cannot alias x."""
    rows = tl.arange(128)[:, None]
    cols = tl.arange(64)[None, :]
    t = tl.load(x[rows, cols])
    tl.store(y[rows, cols], tl.full((128, 64), 3.0, tl.float32))
    tl.store(out[rows, cols], tl.exp(t))


@trn.kernel
def mm_tn(a_t, b, out):
    """out = a_t.T @ b with unmasked [K, M] and [K, N] tiles: both operands read in place."""
    acc = tl.zeros((128, 256), tl.float32, buffer=tl.psum)
    for k in tl.affine_range(2):
        ik = k * 128 + tl.arange(128)[:, None]
        acc += tl.matmul(tl.load(a_t[ik, tl.arange(128)[None, :]]), tl.load(b[ik, tl.arange(256)[None, :]]),
                         transpose_x=True)
    tl.store(out[tl.arange(128)[:, None], tl.arange(256)[None, :]], acc)


@trn.kernel
def two_phases(x, out):
    """Two reductions whose tiles are never live together: they can share arena bytes."""
    rows = tl.arange(128)[:, None]
    cols = tl.arange(64)[None, :]
    a = tl.load(x[rows, cols])
    s = tl.sum(a * a, axis=1, keepdims=True)
    tl.store(out[rows, tl.arange(1)[None, :]], s)
    b = tl.load(x[rows, cols])
    m = tl.max(b * 2.0, axis=1, keepdims=True)
    tl.store(out[rows, 1 + tl.arange(1)[None, :]], m)


@trn.kernel
def pid_rows(x, out):
    """One 128-row tile per program instance, unmasked: in bounds for a grid of n / 128 instances only."""
    rows = tl.program_id(0) * 128 + tl.arange(128)[:, None]
    cols = tl.arange(64)[None, :]
    tl.store(out[rows, cols], tl.load(x[rows, cols]) + 1.0)


@trn.kernel
def cast_twice(x, out):
    """out = exp(f32(x)) - f32(x) for a bf16 x: the load is cast once and the cast read twice (remat of both)."""
    rows = tl.arange(128)[:, None]
    cols = tl.arange(64)[None, :]
    t = tl.load(x[rows, cols]).astype(tl.float32)
    tl.store(out[rows, cols], tl.exp(t) - t)


@trn.kernel
def five_readers(x, out):
    """A load read by five consumers (more than rematerialize re-reads): staged once."""
    rows = tl.arange(128)[:, None]
    cols = tl.arange(64)[None, :]
    t = tl.load(x[rows, cols])
    tl.store(out[rows, cols], tl.exp(t) + t * 2.0 + tl.abs(t) + t * t + (t - 1.0))


@trn.kernel
def overwritten_between(x, out):
    """A load of x read twice, with a store to x between its readers: staged (the second reader sees old x)."""
    rows = tl.arange(128)[:, None]
    cols = tl.arange(64)[None, :]
    t = tl.load(x[rows, cols])
    s = tl.sum(t, axis=1, keepdims=True)
    tl.store(x[rows, cols], t * 0.0 + 5.0)
    tl.store(out[rows, cols], t - s)


@trn.kernel
def mm_nest(a, b, out, adds=False):
    """out = a @ b in 128 x 128 x 256 tiles (whole tiles): two nest loops around a K loop, one gemm. ``adds``:
    out += a @ b (an adding store, as addmm's bias path)."""
    m, k = a.shape
    n = b.shape[1]
    for i in tl.affine_range(m // 128):
        for j in tl.affine_range(n // 256):
            acc = tl.zeros((128, 256), tl.float32, buffer=tl.psum)
            im = i * 128 + tl.arange(128)[:, None]
            jn = j * 256 + tl.arange(256)[None, :]
            for kk in tl.affine_range(k // 128):
                at = tl.load(a[im, kk * 128 + tl.arange(128)[None, :]])
                bt = tl.load(b[kk * 128 + tl.arange(128)[:, None], jn])
                acc += tl.matmul(at, bt)
            tl.store(out[im, jn], acc, accumulate="add" if adds else None)

