"""The test kernels of the foundation: each with a torch reference and an input maker.

Every test (interpreter, IR round trip, verifier after every pass, JIT
differential tests) iterates over ``CASES``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl


@trn.kernel
def vector_add(x, y, out):
    """out = x + y for 2-D tensors of any shape (rows tiled by 128, ragged last tile masked)."""
    n, d = x.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        a = tl.load(x[rows, cols], mask=rows < n)
        b = tl.load(y[rows, cols], mask=rows < n)
        tl.store(out[rows, cols], a + b, mask=rows < n)


@trn.kernel
def vector_add_grid(x, y, out):
    """The same with one program instance per 128-row tile: launch as vector_add_grid[cdiv(n, 128)]."""
    n, d = x.shape
    rows = tl.program_id(0) * 128 + tl.arange(128)[:, None]
    cols = tl.arange(d)[None, :]
    a = tl.load(x[rows, cols], mask=rows < n)
    b = tl.load(y[rows, cols], mask=rows < n)
    tl.store(out[rows, cols], a + b, mask=rows < n)


@trn.kernel
def softmax(x, out):
    """Row softmax, one 128-row tile per iteration."""
    n, d = x.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        t = tl.load(x[rows, cols], mask=rows < n)
        e = tl.exp(t - tl.max(t, axis=1, keepdims=True))
        tl.store(out[rows, cols], e / tl.sum(e, axis=1, keepdims=True), mask=rows < n)


@trn.kernel
def layernorm(x, w, b, out, eps):
    """LayerNorm over the last dim with affine weight and bias."""
    n, d = x.shape
    wt = tl.load(w[tl.arange(1)[:, None] * 0, tl.arange(d)[None, :]])
    bt = tl.load(b[tl.arange(1)[:, None] * 0, tl.arange(d)[None, :]])
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        t = tl.load(x[rows, cols], mask=rows < n)
        mu = tl.mean(t, axis=1, keepdims=True)
        xc = t - mu
        var = tl.mean(xc * xc, axis=1, keepdims=True)
        y = xc * tl.rsqrt(var + eps)
        tl.store(out[rows, cols], y * wt + bt, mask=rows < n)


@trn.kernel
def rmsnorm(x, w, out, eps):
    """RMSNorm over the last dim."""
    n, d = x.shape
    wt = tl.load(w[tl.arange(1)[:, None] * 0, tl.arange(d)[None, :]])
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        t = tl.load(x[rows, cols], mask=rows < n)
        ms = tl.mean(tl.square(t), axis=1, keepdims=True)
        tl.store(out[rows, cols], t * tl.rsqrt(ms + eps) * wt, mask=rows < n)


@trn.kernel
def matmul_kn(a_t, b, out):
    """out[M, N] = a_t[K, M].T @ b[K, N]: K tiles of 128 accumulate into PSUM (the stationary layout)."""
    k_dim, m_dim = a_t.shape
    _, n_dim = b.shape
    for m in tl.affine_range(tl.cdiv(m_dim, 128)):
        for n in tl.affine_range(tl.cdiv(n_dim, 512)):
            acc = tl.zeros((128, 512), tl.float32, buffer=tl.psum)
            im = m * 128 + tl.arange(128)[None, :]
            jn = n * 512 + tl.arange(512)[None, :]
            for k in tl.affine_range(tl.cdiv(k_dim, 128)):
                ik = k * 128 + tl.arange(128)[:, None]
                at = tl.load(a_t[ik, im], mask=(ik < k_dim) & (im < m_dim))
                bt = tl.load(b[ik, jn], mask=(ik < k_dim) & (jn < n_dim))
                acc += tl.matmul(at, bt, transpose_x=True)
            om = m * 128 + tl.arange(128)[:, None]
            tl.store(out[om, jn], acc, mask=(om < m_dim) & (jn < n_dim))


@trn.kernel
def matmul_mk(a, b, out):
    """out = a[M, K] @ b[K, N] with x given as [M, K] (the tracer inserts the transpose)."""
    m_dim, k_dim = a.shape
    _, n_dim = b.shape
    for m in tl.affine_range(tl.cdiv(m_dim, 128)):
        for n in tl.affine_range(tl.cdiv(n_dim, 512)):
            acc = tl.zeros((128, 512), tl.float32, buffer=tl.psum)
            im = m * 128 + tl.arange(128)[:, None]
            jn = n * 512 + tl.arange(512)[None, :]
            for k in tl.affine_range(tl.cdiv(k_dim, 128)):
                kk = k * 128 + tl.arange(128)[None, :]
                ik = k * 128 + tl.arange(128)[:, None]
                at = tl.load(a[im, kk], mask=(im < m_dim) & (kk < k_dim))
                bt = tl.load(b[ik, jn], mask=(ik < k_dim) & (jn < n_dim))
                acc += tl.matmul(at, bt)
            tl.store(out[im, jn], acc, mask=(im < m_dim) & (jn < n_dim))


@trn.kernel
def flash_attention(q, k, v, out, scale):
    """Single-head attention forward, online softmax over 128-key blocks (loop-carried state in SBUF)."""
    s_q, d = q.shape
    s_k, _ = k.shape
    for qi in tl.affine_range(tl.cdiv(s_q, 128)):
        rq = qi * 128 + tl.arange(128)[:, None]
        cd = tl.arange(d)[None, :]
        q_t = tl.load_transpose2d(q[qi * 128:(qi + 1) * 128, :]) if s_q % 128 == 0 else None
        if q_t is None:
            qd = qi * 128 + tl.arange(128)[None, :]
            rd = tl.arange(d)[:, None]
            q_t = tl.load(q[qd, rd], mask=qd < s_q)           # [d, 128]: q transposed
        m_i = tl.full((128, 1), -math.inf, tl.float32)
        l_i = tl.zeros((128, 1), tl.float32)
        acc = tl.zeros((128, d), tl.float32)
        for kj in tl.sequential_range(tl.cdiv(s_k, 128)):
            kc = kj * 128 + tl.arange(128)[None, :]
            rk = kj * 128 + tl.arange(128)[:, None]
            k_t = tl.load(k[kc, tl.arange(d)[:, None]], mask=kc < s_k)      # [d, 128]
            v_t = tl.load(v[rk, cd], mask=rk < s_k)                          # [128, d]
            s = tl.copy(tl.matmul(q_t, k_t, transpose_x=True)) * scale       # [128q, 128k]
            s = tl.where(kc < s_k, s, -math.inf)
            m_new = tl.maximum(m_i, tl.max(s, axis=1, keepdims=True))
            p = tl.exp(s - m_new)
            alpha = tl.exp(m_i - m_new)
            l_i[...] = l_i * alpha + tl.sum(p, axis=1, keepdims=True)
            pv = tl.matmul(tl.transpose(p), v_t, transpose_x=True)          # [128q, d]
            acc[...] = acc * alpha + pv
            m_i[...] = m_new
        tl.store(out[rq, cd], acc / l_i, mask=rq < s_q)


@trn.kernel
def embedding(idx, table, out):
    """out[i, :] = table[idx[i], :] (indirect DMA gather by an int tile)."""
    n = idx.shape[0]
    _, d = table.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        ids = tl.load(idx[rows], mask=rows < n)                              # [128, 1] int32
        vals = tl.load(table[ids, tl.arange(d)[None, :]], mask=rows < n)
        tl.store(out[rows, tl.arange(d)[None, :]], vals, mask=rows < n)


@trn.kernel
def cumsum_rows(x, out):
    """Inclusive prefix sum along the last dim."""
    n, d = x.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        t = tl.load(x[rows, cols], mask=rows < n)
        tl.store(out[rows, cols], tl.cumsum(t, axis=1), mask=rows < n)


@trn.kernel
def linear_scan(a, b, out, block):
    """h[t] = a[t] * h[t-1] + b[t] along the columns, processed in column blocks carried across a
    sequential_range (the state lives in an SBUF buffer)."""
    n, t_len = a.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        h = tl.zeros((128, 1), tl.float32)
        for j in tl.sequential_range(tl.cdiv(t_len, block)):
            cols = j * block + tl.arange(block)[None, :]
            m = (rows < n) & (cols < t_len)
            at = tl.load(a[rows, cols], mask=m, other=1.0)
            bt = tl.load(b[rows, cols], mask=m)
            ht = isa.tensor_tensor_scan(at, bt, h, tl.multiply, tl.add)      # h[t] = a[t] * h[t-1] + b[t]
            tl.store(out[rows, cols], ht, mask=m)
            h[...] = ht[:, block - 1:block]


@trn.kernel
def new_output(x):
    """A kernel that allocates and returns its output (NKI style)."""
    n, d = x.shape
    out = tl.ndarray((n, d), x.dtype, buffer=tl.shared_hbm)
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        t = tl.load(x[rows, cols], mask=rows < n)
        tl.store(out[rows, cols], tl.gelu(t) * 2.0, mask=rows < n)
    return out


# --------------------------------------------------------------------------------------------
def _ln_ref(x, w, b, out, eps):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[1],), w.float()[0], b.float()[0], eps)


def _rms_ref(x, w, out, eps):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _attn_ref(q, k, v, out, scale):
    return torch.softmax((q @ k.T) * scale, dim=-1) @ v


def _scan_ref(a, b, out, block):
    h = torch.zeros(a.shape[0])
    res = torch.empty_like(a)
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        res[:, t] = h
    return res


@dataclass
class Case:
    """A kernel, an input maker ``make(n, d, gen)`` and a torch reference over the same arguments."""

    name: str
    kernel: Any
    make: Callable[[int, int, torch.Generator], tuple[Any, ...]]
    ref: Callable[..., torch.Tensor]
    out_index: int | None  # which argument is the output (None: the kernel returns it)
    grid: Callable[[tuple[Any, ...]], tuple[int, ...]] | None = None
    atol: float = 1e-5
    rtol: float = 1e-5


def _rand(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen)


CASES = [
    Case("vector_add", vector_add, lambda n, d, g: (_rand(g, n, d), _rand(g, n, d), torch.empty(n, d)),
         lambda x, y, o: x + y, 2),
    Case("vector_add_grid", vector_add_grid, lambda n, d, g: (_rand(g, n, d), _rand(g, n, d), torch.empty(n, d)),
         lambda x, y, o: x + y, 2, grid=lambda a: (max(1, -(-a[0].shape[0] // 128)),)),
    Case("softmax", softmax, lambda n, d, g: (_rand(g, n, d), torch.empty(n, d)),
         lambda x, o: torch.softmax(x, -1), 1, atol=1e-6),
    Case("layernorm", layernorm, lambda n, d, g: (_rand(g, n, d), _rand(g, 1, d), _rand(g, 1, d), torch.empty(n, d),
                                                  1e-5), _ln_ref, 3, atol=1e-4, rtol=1e-4),
    Case("rmsnorm", rmsnorm, lambda n, d, g: (_rand(g, n, d), _rand(g, 1, d), torch.empty(n, d), 1e-6), _rms_ref, 2,
         atol=1e-4, rtol=1e-4),
    Case("matmul_kn", matmul_kn, lambda n, d, g: (_rand(g, d, n), _rand(g, d, 96), torch.empty(n, 96)),
         lambda a, b, o: a.T @ b, 2, atol=1e-3, rtol=1e-4),
    Case("matmul_mk", matmul_mk, lambda n, d, g: (_rand(g, n, d), _rand(g, d, 80), torch.empty(n, 80)),
         lambda a, b, o: a @ b, 2, atol=1e-3, rtol=1e-4),
    Case("flash_attention", flash_attention,
         lambda n, d, g: (_rand(g, n, min(d, 128)), _rand(g, n + 37, min(d, 128)), _rand(g, n + 37, min(d, 128)),
                          torch.empty(n, min(d, 128)), 1.0 / math.sqrt(min(d, 128))),
         _attn_ref, 3, atol=1e-4, rtol=1e-4),
    Case("embedding", embedding,
         lambda n, d, g: (torch.randint(0, 50, (n, 1), generator=g).int(), _rand(g, 50, d), torch.empty(n, d)),
         lambda i, t, o: t[i[:, 0].long()], 2),
    Case("cumsum", cumsum_rows, lambda n, d, g: (_rand(g, n, d), torch.empty(n, d)), lambda x, o: torch.cumsum(x, 1),
         1, atol=1e-4, rtol=1e-4),
    Case("linear_scan", linear_scan,
         lambda n, d, g: (torch.rand(n, d, generator=g), _rand(g, n, d), torch.empty(n, d), 16), _scan_ref, 2,
         atol=1e-4, rtol=1e-4),
    Case("new_output", new_output, lambda n, d, g: (_rand(g, n, d),),
         lambda x: torch.nn.functional.gelu(x) * 2.0, None, atol=1e-5, rtol=1e-5),
]


def run_case(case: Case, n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a case; returns (result, reference)."""
    g = torch.Generator().manual_seed(seed)
    args = case.make(n, d, g)
    launch = case.kernel[case.grid(args)] if case.grid else case.kernel
    ret = launch(*args)
    got = ret if case.out_index is None else args[case.out_index]
    return got, case.ref(*args).to(got.dtype)
