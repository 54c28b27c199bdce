"""Kernels link the gemm libraries compiled once (codegen.gemmlib, runtime.linklib) instead of carrying a copy.

Checked: a matmul kernel's LLVM module only declares the gemm entry points (under names carrying the library's
identity); the library is compiled once per process and cache and read back from the disk cache by the next
process; a planted or forged library entry never runs (docs/cache_security.md); a kernel's cache key changes with
the library's identity; threads and forked children link it too. Results are compared with numpy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from codegen import gemmlib
from trnlang.runtime import jit, linklib

ROOT = Path(__file__).resolve().parents[2]


@trn.kernel
def _mm(a_t, b, out):
    """out[M, N] = a_t[K, M].T @ b[K, N] for M, K <= 128, N <= 512 (one tile each)."""
    k_dim, m_dim = a_t.shape
    _, n_dim = b.shape
    acc = tl.zeros((m_dim, n_dim), tl.float32, buffer=tl.psum)
    acc += tl.matmul(tl.load(a_t[0:k_dim, 0:m_dim]), tl.load(b[0:k_dim, 0:n_dim]), transpose_x=True)
    tl.store(out[0:m_dim, 0:n_dim], acc)


def _check(m: int, k: int, n: int, seed: int = 0) -> None:
    """Run ``_mm`` on numpy operands (a forked child may not use torch's OpenMP pool) and compare with numpy."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((k, m), np.float32), rng.standard_normal((k, n), np.float32)
    out = np.empty((m, n), np.float32)
    _mm(a, b, out)
    np.testing.assert_allclose(out, a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_a_matmul_kernel_declares_the_library_and_defines_no_copy() -> None:
    a, b, out = torch.randn(64, 32), torch.randn(64, 128), torch.empty(32, 128)
    text = _mm.llvm_ir(a, b, out)
    name = gemmlib.symbol("fp32", "gemm_tn")
    assert f'declare void @"{name}"' in text
    assert not any(line.startswith("define") and name in line for line in text.splitlines())
    assert "gemm_core" not in text and "pack" not in text  # no micro-kernel or packing routine of its own
    _check(32, 64, 128)
    assert linklib.loaded()["fp32"] == gemmlib.identity("fp32")


def test_two_kernels_share_the_one_loaded_library() -> None:
    _check(32, 64, 128, seed=1)
    before = linklib.stats()
    _check(48, 96, 256, seed=2)  # another shape: another kernel object, same library
    _check(96, 128, 64, seed=3)
    assert linklib.stats()["compiles"] == before["compiles"]
    assert linklib.stats()["disk_hits"] == before["disk_hits"]


def test_the_kernel_cache_key_names_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    args = ("ir", ["f32"], [True], False, (1,), False, "trn1")
    k1 = jit.cache_key(*args)
    monkeypatch.setattr(gemmlib, "key", lambda: "fp32:0000000000000000")
    assert jit.cache_key(*args) != k1
    assert gemmlib.identity("fp32") in gemmlib.symbol("fp32", "gemm_nn")


def test_unknown_library_or_entry_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown gemm library"):
        gemmlib.identity("fp64")
    with pytest.raises(ValueError, match="not an entry point"):
        gemmlib.symbol("fp32", "sgemm")


_CHILD = textwrap.dedent("""
    import json, os, sys, threading, warnings
    from tests.runtime.test_gemm_link import _check
    from trnlang.runtime import linklib
    from trnlang.runtime.diskcache import CacheWarning

    mode = sys.argv[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "threads":  # four kernels missing the library at once
            errs = []
            def one(i):
                try:
                    _check(16 + 8 * i, 64, 128, seed=i)
                except BaseException as e:
                    errs.append(repr(e))
            ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
            [t.start() for t in ts]
            [t.join() for t in ts]
            assert not errs, errs
        else:
            _check(32, 64, 128)
        if mode == "fork":  # a forked child compiles a new matmul kernel and links the inherited library
            before = linklib.stats()
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    _check(40, 72, 200, seed=5)
                    code = 0 if linklib.stats() == before else 3  # neither compiled nor read again
                except BaseException:
                    code = 2
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
    warned = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    print(json.dumps({**linklib.stats(), "warned": warned}))
""")


def _child(tmp_path: Path, mode: str = "plain") -> dict:
    env = dict(os.environ)
    env.update(TRN_CACHE_DIR=str(tmp_path / "cache"), TRN_CONFIG_DIR=str(tmp_path / "config"),
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    env.pop("TRN_JIT_NO_DISK_CACHE", None)
    r = subprocess.run([sys.executable, "-c", _CHILD, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _lib_entry(tmp_path: Path) -> Path:
    (path,) = (tmp_path / "cache").glob("jit-*/lib-fp32-*.bin")
    return path


def test_the_library_is_compiled_once_then_read_from_the_disk_cache(tmp_path: Path) -> None:
    first = _child(tmp_path, "threads")  # threads racing for it still compile it once
    assert first["compiles"] == 1 and first["disk_hits"] == 0 and not first["warned"], first
    assert _lib_entry(tmp_path).name == f"lib-fp32-{gemmlib.identity('fp32')}.bin"
    second = _child(tmp_path, "fork")
    assert second["compiles"] == 0 and second["disk_hits"] == 1 and not second["warned"], second


def test_a_planted_library_entry_never_runs(tmp_path: Path) -> None:
    _child(tmp_path)
    lib = _lib_entry(tmp_path)
    kernels = [p for p in lib.parent.glob("*.bin") if p != lib]
    # a genuine entry of this user, but made for another name (a kernel's): its MAC does not cover this name
    lib.write_bytes(kernels[0].read_bytes())
    out = _child(tmp_path)
    assert out["compiles"] == 1 and out["disk_hits"] == 0, out
    assert any(lib.name in w and "failed authentication" in w for w in out["warned"]), out
    # unauthenticated bytes in the right format (the raw object code behind a made-up MAC)
    data = lib.read_bytes()
    lib.write_bytes(data[:8] + bytes(32) + data[40:])
    out = _child(tmp_path)
    assert out["compiles"] == 1 and any("failed authentication" in w for w in out["warned"]), out


@pytest.mark.skipif("bf16" not in gemmlib.available(), reason="the ISA path has no bf16 gemm")
def test_a_bf16_matmul_links_the_bf16_library() -> None:
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(96, 64, generator=g).bfloat16(), torch.randn(96, 128, generator=g).bfloat16()
    out = torch.empty(64, 128)
    assert f'declare void @"{gemmlib.symbol("bf16", "gemm_bf16_tn")}"' in _mm.llvm_ir(a, b, out)
    _mm(a, b, out)
    torch.testing.assert_close(out, a.float().T @ b.float(), rtol=1e-4, atol=1e-4)
    assert linklib.loaded()["bf16"] == gemmlib.identity("bf16")
