"""Helpers of the pass tests: the IR dump after one pass, as ``TRN_DUMP`` prints it."""

from __future__ import annotations

from typing import Any

import pytest

from trnlang.ir.nodes import Kernel
from trnlang.passes import plan_lowering


@pytest.fixture
def dump_after(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """``dump_after(stage, kernel, grid, **options)``: the stderr of ``TRN_DUMP=<stage>`` while the lowering
    passes run for that variant (with the plan verified after every pass), and the plan."""

    def run(stage: str, k: Kernel, grid: tuple[int, ...] = (1,), **opts: Any) -> tuple[str, Any]:
        monkeypatch.setenv("TRN_DUMP", stage)  # tests/conftest.py refreshes trnlang.config
        capsys.readouterr()
        plan = plan_lowering(k, grid, verify_each=True, **opts)
        err = capsys.readouterr().err
        monkeypatch.delenv("TRN_DUMP")
        return err, plan

    return run
