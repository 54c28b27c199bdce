"""torch.compile tests: the trn device is registered; every op must run natively (TRN_FALLBACK=error)."""

import pytest

import trnlang.device

trnlang.device.register()


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch: pytest.MonkeyPatch):
    """A compiled graph may not fall back to the CPU op by op."""
    import torch._dynamo

    monkeypatch.setenv("TRN_FALLBACK", "error")
    yield
    torch._dynamo.reset()
