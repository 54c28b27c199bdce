"""trnlang.compile_stats(): process-wide counters of traces, compiles, disk and memory hits, per kernel name."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import trnlang as trn
import trnlang.language as tl

ROOT = Path(__file__).resolve().parents[2]


@trn.kernel
def stats_add_one(x, out):
    n = x.shape[0]
    for i in tl.affine_range(tl.cdiv(n, 128)):
        r = i * 128 + tl.arange(128)
        tl.store(out[r], tl.load(x[r], mask=r < n) + 1.0, mask=r < n)


def test_new_sizes_of_a_polymorphic_kernel_are_memory_hits_not_compiles() -> None:
    trn.reset_compile_stats()
    for n in (130, 257, 999, 4000):
        x = np.arange(n, dtype=np.float32)
        o = np.empty_like(x)
        stats_add_one(x, o)
        np.testing.assert_array_equal(o, x + 1)
    s = trn.compile_stats()
    k = s["kernels"]["stats_add_one"]
    assert k["traces"] == 1 and k["compiles"] + k["disk_hits"] == 1 and k["variants"] == 1, k
    assert k["memory_hits"] == 3, k  # the three new sizes found the compiled class
    assert s["traces"] >= 1 and s["compiles"] + s["disk_hits"] >= 1
    trn.reset_compile_stats()
    assert trn.compile_stats() == {"traces": 0, "compiles": 0, "disk_hits": 0, "memory_hits": 0, "evictions": 0,
                                   "variants": 0, "kernels": {}}


def test_stdlib_kernels_behind_the_device_are_counted() -> None:
    torch = pytest.importorskip("torch")
    trn.reset_compile_stats()
    assert float((torch.arange(300, dtype=torch.float32).to("trn") * 2.0).sum()) == 2.0 * sum(range(300))
    kernels = trn.compile_stats()["kernels"]
    assert kernels, "the device's kernels were not counted"
    assert all(set(v) >= {"traces", "compiles", "disk_hits", "memory_hits", "variants"} for v in kernels.values())


def test_a_second_process_loads_from_disk_and_trn_cache_info_names_the_kernel(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import json, numpy as np, trnlang as trn
        from tests.runtime.test_compile_stats import stats_add_one
        x = np.ones(700, np.float32); o = np.empty_like(x); stats_add_one(x, o)
        assert (o == 2).all()
        print(json.dumps(trn.compile_stats()["kernels"]["stats_add_one"]))
    """)
    env = dict(os.environ, TRN_CACHE_DIR=str(tmp_path / "cache"), TRN_CONFIG_DIR=str(tmp_path / "cfg"))
    env.pop("TRN_JIT_NO_DISK_CACHE", None)
    env.pop("TRN_INTERPRET", None)
    runs = [subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    import json

    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first["compiles"] == 1 and first["disk_hits"] == 0, first
    assert second["compiles"] == 0 and second["disk_hits"] == 1, second
    info = subprocess.run([sys.executable, "-m", "trnlang.cli", "cache", "info"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    assert "variants per kernel" in info.stdout and "stats_add_one" in info.stdout, info.stdout


if os.environ.get("TRN_INTERPRET"):  # pragma: no cover - the counters are the JIT's
    pytestmark = pytest.mark.skip("JIT only")
