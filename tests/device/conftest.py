"""Device tests: the ``trn`` device is registered before anything imports torch's testing internals."""

import warnings

import pytest
import torch

import trnlang.device

trnlang.device.register()

#: An op with a CPU kernel and no trn lowering (the standard library lowers every ATen op the fallback tests could
#: use): ``log(exp(a) + exp(b))``, reaching the trn device's CPU fallback under this name.
UNLOWERED = "trnfbtest::lae"
_UNLOWERED_LIB = torch.library.Library("trnfbtest", "DEF")
_UNLOWERED_LIB.define("lae(Tensor self, Tensor other) -> Tensor")
_UNLOWERED_LIB.impl("lae", lambda a, b: torch.logaddexp(a, b), "CPU")


def unlowered(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``logaddexp(a, b)`` through :data:`UNLOWERED` (always the CPU fallback on trn)."""
    return torch.ops.trnfbtest.lae(a, b)


@pytest.fixture(autouse=True)
def _room_in_lane_tables(request):
    """Fast-lane tests start with room in every op's lane tables: a worker's earlier tests can fill an op's 64
    lanes, and a full table makes no new lane (lanes are caches: clearing them changes no result)."""
    if "lane" in request.node.module.__name__:
        from trnlang.device import fastlane
        from trnlang.device.registry import REGISTRY

        for ent in list(REGISTRY.values()):
            for table in (getattr(ent.fast, "lanes", None), getattr(ent.fast, "scalar_lanes", None)):
                if isinstance(table, dict) and len(table) >= fastlane.MAX_LANES // 2:
                    table.clear()
    yield


@pytest.fixture(autouse=True)
def _quiet_fallback_warnings():
    """Fallback warnings are tested explicitly; elsewhere they are noise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", trnlang.device.FallbackWarning)
        yield


def run_py(code: str, env: dict | None = None) -> "subprocess.CompletedProcess[str]":  # noqa: F821
    """Run a fresh interpreter (registration is once per process)."""
    import os
    import subprocess
    import sys

    e = dict(os.environ)
    e.update(env or {})
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, cwd=root, timeout=300)


def assert_same(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Compare a trn result with the CPU reference (dtype, shape and values)."""
    assert actual.device.type == "trn", actual.device
    torch.testing.assert_close(actual.cpu(), expected, rtol=rtol, atol=atol, equal_nan=True)
