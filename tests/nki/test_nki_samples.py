"""The public kernels of aws-neuron/nki-samples, run unmodified against numpy.

Nothing of that repository is in this one: point ``NKI_SAMPLES_DIR`` at a checkout (its ``src/`` holds
``nki_samples/tutorials/...``; the layernorm and rmsnorm tutorials are in its history before commit
8370e11). Each case imports the sample's file through ``trnlang.nki.install()`` and compares the kernel's
result with a numpy formula written here. Without the directory every case skips, saying so.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import trnlang.nki

ROOT = os.environ.get("NKI_SAMPLES_DIR")
TUT = Path(ROOT) / "src" / "nki_samples" / "tutorials" if ROOT else None
pytestmark = pytest.mark.skipif(TUT is None, reason="NKI_SAMPLES_DIR is not set (a checkout of aws-neuron/nki-samples)")


def _load(rel: str) -> Any:
    assert TUT is not None
    path = TUT / rel
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    trnlang.nki.install()
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"nki_sample_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod


rng = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return rng.random(shape, dtype=np.float32)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = q.T.astype(np.float64) @ k
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v.T


def _mamba(delta: np.ndarray, u: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    bs, ch, sl = delta.shape
    out = np.zeros((bs, ch, sl))
    for i in range(bs):
        for s in range(a.shape[1]):
            da = np.exp(delta[i] * a[:, s:s + 1])
            dbu = delta[i] * u[i] * b[i, s][None, :]
            h = np.zeros(ch)
            for t in range(sl):
                h = h * da[:, t] + dbu[:, t]
                out[i, :, t] += h * c[i, s, t]
    return out


def _layernorm(x: np.ndarray, eps: float, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    m = x.mean(axis=1, keepdims=True)
    return (x - m) / np.sqrt(x.var(axis=1, keepdims=True) + eps) * g + b


#: attention versions whose scores stay fp32 (v7+ keep bf16 scores: about 1e-2 from numpy)
_FP32_SCORES = ("1", "2", "3", "4", "5", "6")

# (file, kernel, grid or None, make args, numpy reference, atol)
CASES: list[tuple[str, str, Any, Callable[[], tuple[Any, ...]], Callable[..., np.ndarray], float]] = [
    ("tensor_addition/tensor_addition_nki_kernels.py", "nki_tensor_add_kernel_", (2, 2),
     lambda: (_r(256, 1024), _r(256, 1024)), lambda a, b: a + b, 1e-6),
    ("tensor_addition/spmd_tensor_addition_nki_kernels.py", "nki_tensor_add_kernel_", (2, 2),
     lambda: (_r(256, 1024), _r(256, 1024)), lambda a, b: a + b, 1e-6),
    ("tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py", "nki_tensor_add_nc2", None,
     lambda: (_r(512, 1024), _r(512, 1024)), lambda a, b: a + b, 1e-6),  # nl.spmd_dim(g, nl.nc(2)) grid
    ("rmsnorm/rmsnorm_nki_kernels.py", "nki_rmsnorm_kernel", None,
     lambda: (_r(300, 512), _r(512)), lambda a, g: a / np.sqrt((a * a).mean(axis=1, keepdims=True)) * g, 1e-4),
    ("layernorm/layernorm_nki_kernel.py", "nki_layernorm_kernel_v1", None,
     lambda: (_r(300, 700), 1e-5, _r(700), _r(700)), _layernorm, 1e-3),
    ("layernorm/layernorm_nki_kernel.py", "nki_layernorm_kernel_v2", None,
     lambda: (_r(300, 1024), 1e-5, _r(1024), _r(1024)), _layernorm, 1e-3),
    ("layernorm/layernorm_nki_kernel.py", "nki_layernorm_kernel_v2", None,   # ragged last bn_stats chunk
     lambda: (_r(300, 700), 1e-5, _r(700), _r(700)), _layernorm, 1e-3),
    ("matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_basic_", None,
     lambda: (_r(128, 64), _r(128, 512)), lambda a, b: a.T @ b, 1e-3),
    ("matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_tiled_", None,
     lambda: (_r(256, 256), _r(256, 1024)), lambda a, b: a.T @ b, 1e-3),
    ("matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_hoist_load_", None,
     lambda: (_r(256, 256), _r(256, 1024)), lambda a, b: a.T @ b, 1e-3),
    ("matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_block_free_dimension_", None,
     lambda: (_r(256, 256), _r(256, 1024)), lambda a, b: a.T @ b, 1e-3),
    ("matrix_multiplication/matrix_multiplication_nki_kernels.py", "nki_matmul_fully_optimized_", None,
     lambda: (_r(256, 256), _r(256, 1024), 2, 2, 2), lambda a, b, *_: a.T @ b, 1e-3),
    ("fused_mamba/mamba_nki_kernels.py", "mamba_v1", None,
     lambda: (_r(1, 256, 512), _r(1, 256, 512), -_r(256, 4), _r(1, 4, 512), _r(1, 4, 512)), _mamba, 1e-3),
    ("fused_mamba/mamba_nki_kernels.py", "mamba_v2", None,
     lambda: (_r(1, 256, 512), _r(1, 256, 512), -_r(256, 4), _r(1, 4, 512), _r(1, 4, 512)), _mamba, 1e-3),
    ("fused_mamba/mamba_nki_kernels.py", "mamba_v3", None,
     lambda: (_r(1, 128, 1024), _r(1, 128, 1024), -_r(128, 4), _r(1, 4, 1024), _r(1, 4, 1024)), _mamba, 1e-3),
    ("average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel", None,
     lambda: (_r(4, 8, 8), 2), lambda x, p: x.reshape(4, 4, 2, 4, 2).mean(axis=(2, 4)), 1e-5),
    ("transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_", None,
     lambda: (_r(5, 12), (3, 4)), lambda a, s: a.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12), 0.0),
] + [
    ("attention_fwd_performance/attention_kernels.py", f"attn_fwd_v{v}", None,
     (lambda n: lambda: tuple((rng.random((128, n), dtype=np.float32) - 0.5) * 2 for _ in range(3)))(
         128 if v in ("1", "2") else 512), _attention, 2e-3 if v in _FP32_SCORES else 2e-2)
    for v in ("1", "2", "3", "4", "5", "6", "7", "8", "8a", "9", "10", "11")
]


#: Kernels that need what trnlang does not have yet (docs/nki.md, "Not yet"): strict, so support is noticed.
UNSUPPORTED: dict[str, str] = {}


@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}" for c in CASES])
def test_sample_matches_numpy(case: Any) -> None:
    rel, name, grid, make, ref, atol = case
    if name in UNSUPPORTED:
        pytest.xfail(f"not supported yet: {UNSUPPORTED[name]}")
    mod = _load(rel)
    kern = getattr(mod, name, None)
    if kern is None:
        pytest.skip(f"{name} is not in {rel} of this checkout")
    args = make()
    out = kern[grid](*args) if grid else kern(*args)
    want = ref(*args)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, atol=atol, rtol=1e-3)
