"""``trn.autotune``: picks the faster config per key, remembers it on disk, skips configs that do not compile."""

from __future__ import annotations

import json

import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from trnlang.runtime.autotune import Autotuner


def _body(x, out, REPEAT, COLS):
    n, d = x.shape
    for i in tl.affine_range(n // 128):
        for j in tl.affine_range(d // COLS):
            rows = i * 128 + tl.arange(128)[:, None]
            cols = j * COLS + tl.arange(COLS)[None, :]
            t = tl.load(x[rows, cols])
            for _ in tl.static_range(REPEAT):  # useless extra work: more REPEAT is slower
                t = t * 1.0
            tl.store(out[rows, cols], t + 1.0)


CONFIGS = [trn.Config(REPEAT=8, COLS=128), trn.Config(REPEAT=1, COLS=128), trn.Config(REPEAT=4, COLS=128)]


def _tuned(**kw):
    return trn.autotune(configs=CONFIGS, key=["x"], **kw)(trn.kernel(_body))


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRN_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_picks_the_faster_config_by_simulated_time_and_runs_it(_cache):
    k = _tuned()
    x = torch.randn(256, 256)
    out = torch.empty_like(x)
    k(x, out)
    torch.testing.assert_close(out, x + 1.0)
    assert k.best_config(x, out) == trn.Config(REPEAT=1, COLS=128)
    (key, timings), = k.timings.items()
    times = {c["REPEAT"]: t for c, t in timings}
    assert times[1] < times[4] < times[8]
    files = list((_cache / "autotune").glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["entries"][key]["config"] == {"REPEAT": 1, "COLS": 128}
    assert not list((_cache / "autotune").glob(".tmp-*"))  # atomic write left nothing behind


def test_results_are_remembered_on_disk(_cache, monkeypatch):
    x = torch.randn(256, 256)
    _tuned()(x, torch.empty_like(x))
    fresh = _tuned()

    def boom(*a, **k):
        raise AssertionError("tuned again instead of reading the cache")

    monkeypatch.setattr(Autotuner, "_measure", boom)
    out = torch.empty_like(x)
    fresh(x, out)
    assert fresh.best_config(x, out) == trn.Config(REPEAT=1, COLS=128)
    torch.testing.assert_close(out, x + 1.0)


def test_a_changed_cost_model_tunes_again(_cache, monkeypatch):
    from trnlang.runtime import autotune as at

    x = torch.randn(256, 256)
    _tuned()(x, torch.empty_like(x))
    calls = []
    real = Autotuner._measure
    monkeypatch.setattr(Autotuner, "_measure", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    _tuned()(x, torch.empty_like(x))
    assert not calls  # same model: read from disk
    monkeypatch.setattr(at, "_sim_fingerprint", lambda: "another-cost-model")
    _tuned()(x, torch.empty_like(x))
    assert calls  # results simulated by another model are not reused


def test_each_key_is_tuned_once(_cache, monkeypatch):
    k = _tuned()
    calls = []
    real = Autotuner._measure

    def counting(self, args, grid, cfg):
        calls.append(cfg)
        return real(self, args, grid, cfg)

    monkeypatch.setattr(Autotuner, "_measure", counting)
    for shape in ((256, 256), (256, 256), (128, 384)):
        x = torch.randn(*shape)
        k(x, torch.empty_like(x))
    assert len(calls) == 2 * len(CONFIGS)
    assert len(k.best) == 2


def test_configs_that_do_not_compile_are_skipped(_cache):
    configs = [trn.Config(REPEAT=0, COLS=60000), trn.Config(REPEAT=2, COLS=128)]  # 60000 fp32 > 224 KiB SBUF
    k = trn.autotune(configs=configs, key=["x"])(trn.kernel(_body))
    x = torch.randn(128, 60000 * 2)
    assert k.best_config(x, torch.empty_like(x)) == configs[1]


def test_wall_metric_and_config_dependent_grid(_cache):
    @trn.kernel
    def rows(x, out, BLOCK):
        r = tl.program_id(0) * BLOCK + tl.arange(BLOCK)[:, None]
        tl.store(out[r, tl.arange(64)[None, :]], tl.load(x[r, tl.arange(64)[None, :]]) * 3.0)

    k = trn.autotune(configs=[trn.Config(BLOCK=64), trn.Config(BLOCK=128)], key=["x"], metric="wall", rep=1)(rows)
    x = torch.randn(256, 64)
    out = torch.zeros_like(x)
    k[lambda cfg: (256 // cfg["BLOCK"],)](x, out)
    torch.testing.assert_close(out, x * 3.0)
    (timings,) = k.timings.values()
    best = min(timings, key=lambda ct: ct[1])[0]
    assert k.best_config(x, out, grid=lambda cfg: (256 // cfg["BLOCK"],)) == best
    p = k.profile(x, out, grid=lambda cfg: (256 // cfg["BLOCK"],))
    assert p.grid == (256 // best["BLOCK"],)


def test_bad_uses():
    kern = trn.kernel(_body)
    with pytest.raises(ValueError, match="metric"):
        trn.autotune(configs=CONFIGS, metric="fast")
    with pytest.raises(ValueError, match="not a parameter"):
        trn.autotune(configs=[trn.Config(BLOCKS=1)])(kern)
    with pytest.raises(ValueError, match="key"):
        trn.autotune(configs=CONFIGS, key=["REPEAT"])(kern)
    with pytest.raises(TypeError, match="@trn.kernel"):
        trn.autotune(configs=CONFIGS)(_body)
    with pytest.raises(trn.LaunchError, match="takes 2 argument"):
        trn.autotune(configs=CONFIGS)(kern)(torch.randn(128, 128))
