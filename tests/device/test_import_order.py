"""The trn device registers whatever the user imports first (each order in a fresh interpreter).

A submodule of ``trnlang.device`` imported before torch used to start torch's import from inside itself
half-executed, so torch's autoload found it empty and the device was never registered.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_CHECK = """
import sys, warnings
warnings.simplefilter("error", RuntimeWarning)  # 'the trn device could not be registered' fails the run
{first}
import torch
import trnlang.device.fallback as fb
assert sys.modules["trnlang.device.fallback"] is fb and hasattr(fb, "boxed_fallback")
x = torch.arange(4.0, device="trn")
assert (x + 1).cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
print("ok")
"""

CASES = [("import torch", "1"), ("import trnlang.device.fallback", "1"),
         ("from trnlang.device.registry import lowering", "1"), ("import trnlang.device.memory", "0")]


@pytest.mark.parametrize("first,autoload", CASES)
def test_every_import_order_registers_the_device(first: str, autoload: str) -> None:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _CHECK.format(first=first)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", f"{first!r} first (autoload={autoload}):\n{r.stderr[-2000:]}"


def test_import_trnlang_stays_light() -> None:
    r = subprocess.run([sys.executable, "-c", "import sys, trnlang; print('torch' in sys.modules)"], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
