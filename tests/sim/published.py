"""Kernels with the structure of published NKI examples, for the DMA-model and calibration tests.

Each follows the loop structure, tile shapes and transfer sizes that the cited
NKI document describes, written in trnlang (``docs/calibration.md`` names the
sources and the published figures they are compared with).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl

_ROOT = Path(__file__).resolve().parents[2]


def _tutorial03() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tutorial03_matmul", _ROOT / "tutorials" / "03_matmul.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@trn.kernel
def copy_rows(x, y):
    """A plain copy over 128-row tiles: every transfer is 128 partitions x a whole contiguous row."""
    n = x.shape[0]
    for i in tl.affine_range(n // 128):
        rows = slice(i * 128, (i + 1) * 128)
        tl.store(y[rows, :], tl.load(x[rows, :]))


@trn.kernel
def copy_columns(x, y):
    """The same bytes as :func:`copy_rows`, moved as column gathers: a tile's partitions walk the columns, so
    every element is its own 4-byte contiguous run."""
    n, d = x.shape
    for i in tl.affine_range(n // 128):
        for j in tl.affine_range(d // 128):
            r = i * 128 + tl.arange(128)[None, :]
            c = j * 128 + tl.arange(128)[:, None]
            tl.store(y[r, c], tl.load(x[r, c]))


@trn.kernel
def one_transfer(x, y):
    """One load of the whole of ``x`` into SBUF and one store back (NKI DMA overview, examples 1 and 2)."""
    p, f = x.shape
    t = tl.load(x[0:p, 0:f])
    tl.store(y[0:p, 0:f], t)


#: NKI matmul tutorial / kernel-optimization guide, first tiled version: for each 128 x 512 output tile, a
#: [128, 128] ``lhsT`` tile and a [128, 512] ``rhs`` tile loaded per k step. That is tutorial 03's first step,
#: used from its file rather than copied.
matmul_tiled = _tutorial03().matmul_naive


@trn.kernel
def matmul_hoisted(lhsT, rhs, out):
    """Kernel-optimization guide, second version: per m, all K ``lhsT`` tiles [128, 128] are loaded once; per
    (m, n), all K ``rhs`` tiles [128, 512]; then the K matmuls of the output tile."""
    k_dim, m_dim = lhsT.shape
    n_dim = rhs.shape[1]
    kt = k_dim // 128
    for m in tl.affine_range(m_dim // 128):
        a = tl.ndarray((128, kt, 128), lhsT.dtype, buffer=tl.sbuf)
        for k in tl.affine_range(kt):
            isa.dma_copy(a[:, k, :], lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
        for n in tl.affine_range(n_dim // 512):
            b = tl.ndarray((128, kt, 512), rhs.dtype, buffer=tl.sbuf)
            for k in tl.affine_range(kt):
                isa.dma_copy(b[:, k, :], rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
            acc = tl.zeros((128, 512), tl.float32, buffer=tl.psum)
            for k in tl.affine_range(kt):
                acc += tl.matmul(a[:, k, :], b[:, k, :], transpose_x=True)
            tl.store(out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], tl.copy(acc, out.dtype))


@trn.kernel
def matmul_blocked_free(lhsT, rhs, out, TM, TN):
    """Kernel-optimization guide, third version: blocks of TM x 128 rows and TN x 512 columns; per m block its
    ``lhsT`` tiles, per (m, n) block its ``rhs`` tiles ([128, 128] and [128, 512] transfers), all K per block."""
    k_dim, m_dim = lhsT.shape
    n_dim = rhs.shape[1]
    kt = k_dim // 128
    for m in tl.affine_range(m_dim // (128 * TM)):
        a = tl.ndarray((128, TM * kt, 128), lhsT.dtype, buffer=tl.sbuf)
        for i in tl.affine_range(TM):
            for k in tl.affine_range(kt):
                c0 = (m * TM + i) * 128
                isa.dma_copy(a[:, i * kt + k, :], lhsT[k * 128:(k + 1) * 128, c0:c0 + 128])
        for n in tl.affine_range(n_dim // (512 * TN)):
            b = tl.ndarray((128, TN * kt, 512), rhs.dtype, buffer=tl.sbuf)
            for j in tl.affine_range(TN):
                for k in tl.affine_range(kt):
                    c0 = (n * TN + j) * 512
                    isa.dma_copy(b[:, j * kt + k, :], rhs[k * 128:(k + 1) * 128, c0:c0 + 512])
            for i in tl.affine_range(TM):
                for j in tl.affine_range(TN):
                    acc = tl.zeros((128, 512), tl.float32, buffer=tl.psum)
                    for k in tl.affine_range(kt):
                        acc += tl.matmul(a[:, i * kt + k, :], b[:, j * kt + k, :], transpose_x=True)
                    r0, c0 = (m * TM + i) * 128, (n * TN + j) * 512
                    tl.store(out[r0:r0 + 128, c0:c0 + 512], tl.copy(acc, out.dtype))


@trn.kernel
def matmul_resident_b(lhsT, rhs, out):
    """The issue's "ordinary" matmul: one ``rhs`` column block resident per n, ``lhsT`` tiles streamed."""
    k_dim, m_dim = lhsT.shape
    n_dim = rhs.shape[1]
    kt = k_dim // 128
    for n in tl.affine_range(n_dim // 512):
        b = tl.ndarray((128, kt, 512), rhs.dtype, buffer=tl.sbuf)
        for k in tl.affine_range(kt):
            isa.dma_copy(b[:, k, :], rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
        for m in tl.affine_range(m_dim // 128):
            acc = tl.zeros((128, 512), tl.float32, buffer=tl.psum)
            for k in tl.affine_range(kt):
                a = tl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                acc += tl.matmul(a, b[:, k, :], transpose_x=True)
            tl.store(out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], tl.copy(acc, out.dtype))


@trn.kernel
def matmul_blocked_mnk(lhsT, rhs, out, TM, TN, TK):
    """NKI matmul tutorial, "fully optimized" structure: blocks of TM x 128 rows, TN x 512 columns and TK x 128
    of K; per (n block, k block) the ``rhs`` block is loaded as TK [128, TN*512] transfers, per m block the
    ``lhsT`` block as TK [128, TM*128] transfers; each output tile accumulates its k block in PSUM and is added
    into an SBUF accumulator; the K-block loop is sequential."""
    k_dim, m_dim = lhsT.shape
    n_dim = rhs.shape[1]
    bm, bn, bk = TM * 128, TN * 512, TK * 128
    nbm = m_dim // bm
    for n in tl.affine_range(n_dim // bn):
        res = tl.zeros((128, nbm * TM, bn), tl.float32)
        for kb in tl.sequential_range(k_dim // bk):
            b = tl.ndarray((128, TK, bn), rhs.dtype, buffer=tl.sbuf)
            for k in tl.affine_range(TK):
                r0 = (kb * TK + k) * 128
                isa.dma_copy(b[:, k, :], rhs[r0:r0 + 128, n * bn:(n + 1) * bn])
            for m in tl.affine_range(nbm):
                a = tl.ndarray((128, TK, bm), lhsT.dtype, buffer=tl.sbuf)
                for k in tl.affine_range(TK):
                    r0 = (kb * TK + k) * 128
                    isa.dma_copy(a[:, k, :], lhsT[r0:r0 + 128, m * bm:(m + 1) * bm])
                for j in tl.affine_range(TN):
                    for i in tl.affine_range(TM):
                        acc = tl.zeros((128, 512), tl.float32, buffer=tl.psum)
                        for k in tl.affine_range(TK):
                            acc += tl.matmul(a[:, k, i * 128:(i + 1) * 128], b[:, k, j * 512:(j + 1) * 512],
                                             transpose_x=True)
                        res[:, m * TM + i, j * 512:(j + 1) * 512] = res[:, m * TM + i, j * 512:(j + 1) * 512] + acc
        for r in tl.affine_range(nbm * TM):
            tl.store(out[r * 128:(r + 1) * 128, n * bn:(n + 1) * bn], tl.copy(res[:, r, :], out.dtype))


def matmul_inputs(k: int, m: int, n: int, dtype: torch.dtype = torch.bfloat16, seed: int = 0
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``lhsT [K, M]``, ``rhs [K, N]`` and an empty ``out [M, N]``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(k, m, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype),
            torch.empty(m, n, dtype=dtype))
