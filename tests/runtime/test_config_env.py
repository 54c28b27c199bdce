"""The ``TRN_*`` variables the device layer, codegen and the compile backend use are read through the
``trnlang.config`` snapshot (docs/config.md): a change of ``os.environ`` is seen after ``refresh()``, not before;
``config.override`` sets and puts back. tests/runtime/test_layering.py checks that no module reads them directly."""

from __future__ import annotations

import os

import pytest
import torch  # noqa: F401 - before the device layer (importing trnlang.device.fallback first cannot register trn)

import trnlang.config as config
from codegen import isa
from codegen.lowering import vecmath
from trnlang.device import fallback, guard


def test_read_parses_every_variable() -> None:
    c = config.read({})
    assert (c.fallback, c.guard, c.cache_limit_mb, c.jit_libm, c.stream_min_mb, c.isa, c.dist_check,
            c.compile_fuse) == ("warn", False, 1024, False, 0.0, None, "1", True)
    c = config.read({"TRN_FALLBACK": " Error ", "TRN_GUARD": "yes", "TRN_CACHE_LIMIT_MB": "0", "TRN_JIT_LIBM": "1",
                     "TRN_STREAM_MIN_MB": "0.5", "TRN_ISA": "AVX2", "TRN_DIST_CHECK": "0", "TRN_COMPILE_FUSE": "0"})
    assert (c.fallback, c.guard, c.cache_limit_mb, c.jit_libm, c.stream_min_mb, c.isa, c.dist_check,
            c.compile_fuse) == ("error", True, 0, True, 0.5, "avx2", "0", False)
    c = config.read({"TRN_GUARD": "off", "TRN_CACHE_LIMIT_MB": "lots", "TRN_STREAM_MIN_MB": "x", "TRN_FALLBACK": ""})
    assert (c.guard, c.cache_limit_mb, c.stream_min_mb, c.fallback) == (False, 1024, 0.0, "warn")


def test_readers_follow_the_snapshot_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "current", config.current)  # put the snapshot back after the test
    for name in ("TRN_FALLBACK", "TRN_GUARD", "TRN_JIT_LIBM", "TRN_ISA"):
        monkeypatch.delenv(name, raising=False)
    assert fallback.policy() == "warn" and not guard.env_enabled() and not vecmath.libm_forced()
    # setitem writes os.environ without the test suite's refresh: the readers do not see it yet
    for name, value in (("TRN_FALLBACK", "silent"), ("TRN_GUARD", "1"), ("TRN_JIT_LIBM", "1"), ("TRN_ISA", "avx2")):
        monkeypatch.setitem(os.environ, name, value)
    assert fallback.policy() == "warn" and not guard.env_enabled() and not vecmath.libm_forced()
    assert isa.forced_name() is None
    config.refresh()
    assert fallback.policy() == "silent" and guard.env_enabled() and vecmath.libm_forced()
    assert isa.forced_name() == "avx2"
    monkeypatch.setitem(os.environ, "TRN_FALLBACK", "sometimes")
    monkeypatch.setitem(os.environ, "TRN_ISA", "vax")
    config.refresh()
    with pytest.raises(ValueError, match="TRN_FALLBACK must be one of"):
        fallback.policy()
    with pytest.raises(ValueError, match="TRN_ISA='vax'"):
        isa.forced_name()


def test_override_sets_and_puts_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")
    monkeypatch.delenv("TRN_JIT_LIBM", raising=False)
    before = config.current
    with config.override(TRN_FALLBACK="silent", TRN_JIT_LIBM="1") as c:
        assert c is config.current and fallback.policy() == "silent" and vecmath.libm_forced()
        assert os.environ["TRN_FALLBACK"] == "silent"
    assert os.environ["TRN_FALLBACK"] == "error" and "TRN_JIT_LIBM" not in os.environ
    assert fallback.policy() == "error" and not vecmath.libm_forced()
    assert config.current.generation > before.generation
    with pytest.raises(RuntimeError), config.override(TRN_FALLBACK=None):
        assert "TRN_FALLBACK" not in os.environ and fallback.policy() == "warn"
        raise RuntimeError
    assert os.environ["TRN_FALLBACK"] == "error" and fallback.policy() == "error"
