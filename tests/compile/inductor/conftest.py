"""Inductor-route tests: TRN_COMPILE=inductor, every op native (TRN_FALLBACK=error)."""

import pytest

import trnlang.device

trnlang.device.register()


@pytest.fixture(autouse=True)
def _inductor_route(monkeypatch: pytest.MonkeyPatch):
    """The default backend compiles trn graphs with Inductor; no op falls back to the CPU."""
    import torch._dynamo

    import trnlang.config

    monkeypatch.setenv("TRN_COMPILE", "inductor")
    monkeypatch.setenv("TRN_FALLBACK", "error")
    trnlang.config.refresh()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    monkeypatch.delenv("TRN_COMPILE")
    trnlang.config.refresh()
