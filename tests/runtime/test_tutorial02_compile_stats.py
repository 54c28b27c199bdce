"""Tutorial 02's last section: ``trn.compile_stats()`` stays flat while ``torch.softmax`` on ``trn`` sees new sizes.

The section runs in a fresh process with an empty disk cache, and its printed lines are parsed: the standard
library's softmax kernel is compiled once, for the first size, and no later size compiles anything.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ("import runpy; runpy.run_path('tutorials/02_fused_softmax.py', run_name='tutorial02')"
          "['stdlib_softmax_over_new_sizes']()")


def test_stdlib_softmax_section_prints_flat_compile_counts(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = {**os.environ, "TRN_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = re.findall(r"(\d+) x +(\d+): softmax_fwd variants (\d+), all kernels' compilations (\d+)", r.stdout)
    assert len(rows) == 6, r.stdout
    assert len({(n, d) for n, d, _, _ in rows}) == 6, "the section should show six different sizes"
    assert {int(v) for _, _, v, _ in rows} == {1}, r.stdout      # one softmax variant, compiled for the first size
    assert len({int(c) for _, _, _, c in rows}) == 1, r.stdout   # no later size compiled anything
