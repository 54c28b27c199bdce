"""Caching across processes: a second process compiling the same model reuses the fusion plans of its graphs
and the generated kernels' machine code from disk (issue 16), through the authenticated disk cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent("""
    import json, torch, trnlang, trnlang.compile
    from tests.compile.test_mlp import MLP
    torch.manual_seed(0)
    m = MLP().to("trn")
    x = torch.randn(70, 48)
    loss = torch.compile(m, backend="trn")(x.to("trn")).square().mean()
    loss.backward()
    torch.manual_seed(0)
    ref = MLP()
    ref_loss = ref(x).square().mean()
    torch.testing.assert_close(loss.detach().cpu(), ref_loss.detach(), atol=1e-5, rtol=1e-5)
    fused = {k: v for k, v in trnlang.compile_stats()["kernels"].items() if k.startswith("trn_fused")}
    stats = trnlang.compile.compile_stats()
    print(json.dumps({"hits": stats["graph_cache_hits"], "misses": stats["graph_cache_misses"],
                      "kernels": stats["kernels"],
                      "compiles": sum(v["compiles"] for v in fused.values()),
                      "disk_hits": sum(v["disk_hits"] for v in fused.values())}))
""")


def _run(env: dict[str, str]) -> dict[str, int]:
    r = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_process_reuses_plans_and_kernels(tmp_path: Path) -> None:
    env = dict(os.environ, TRN_CACHE_DIR=str(tmp_path / "cache"), TRN_CONFIG_DIR=str(tmp_path / "cfg"),
               TRN_FALLBACK="error")
    for name in ("TRN_JIT_NO_DISK_CACHE", "TRN_INTERPRET", "TRN_COMPILE_FUSE"):
        env.pop(name, None)
    first = _run(env)
    second = _run(env)
    assert first["misses"] >= 2 and first["hits"] == 0, first  # forward and backward graphs
    assert first["compiles"] >= 1 and first["kernels"] >= 2, first
    assert second["hits"] == first["misses"] and second["misses"] == 0, second
    assert second["kernels"] == first["kernels"], second  # the same kernels, from the stored plans
    assert second["compiles"] == 0 and second["disk_hits"] >= first["compiles"], second


def test_plan_key_follows_shapes_dtypes_and_code() -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    from trnlang.compile.graph import plan_key

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2.0, -1)

    def g(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 3.0, -1)

    base = plan_key(make_fx(f)(torch.randn(4, 8)))
    assert base == plan_key(make_fx(f)(torch.randn(4, 8)))
    assert base != plan_key(make_fx(f)(torch.randn(4, 9)))
    assert base != plan_key(make_fx(f)(torch.randn(4, 8, dtype=torch.bfloat16)))
    assert base != plan_key(make_fx(g)(torch.randn(4, 8)))


def test_forged_plan_is_refused_and_the_graph_is_fused_again(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan entry not written by trnlang for this user never loads: a CacheWarning, then a fresh search."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from trnlang.compile import graph as fgraph
    from trnlang.runtime.diskcache import CacheWarning

    monkeypatch.setenv("TRN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRN_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.delenv("TRN_JIT_NO_DISK_CACHE", raising=False)
    monkeypatch.setattr(fgraph, "_plan_stores", {})

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x) * 2.0 + 1.0

    x = torch.randn(20, 12)
    gm = make_fx(f)(x)
    stats: dict[str, int] = {}
    out1, report1 = fgraph.fuse_graph(gm, device_type="cpu", cache=True, stats=stats)
    out2, report2 = fgraph.fuse_graph(gm, device_type="cpu", cache=True, stats=stats)
    assert stats == {"graph_cache_misses": 1, "graph_cache_hits": 1} and report1 == report2
    store = fgraph._plan_store()
    assert store is not None
    entry = Path(store.path) / f"{fgraph.plan_key(gm, 'cpu')}.json"
    entry.write_bytes(b'{"groups": [[["x_1"], ["full"]]]}')  # a plain (unauthenticated) plan
    with pytest.warns(CacheWarning, match="not a trnlang cache entry"):
        out3, report3 = fgraph.fuse_graph(gm, device_type="cpu", cache=True, stats=stats)
    assert stats["graph_cache_misses"] == 2 and report3 == report1
    torch.testing.assert_close(out3(x), f(x))
