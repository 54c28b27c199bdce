"""``trn profile`` on a script with a compiled model: every generated kernel is simulated and listed under a
name made of the ops it fused (issue 16). Generated kernels are shape-polymorphic (their row count is a
runtime value), so the profiler traces them again on the shapes of their first launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trnlang import cli

_SCRIPT = """
import copy
import torch
import trnlang  # noqa: F401

ln_cpu = torch.nn.LayerNorm(64)
ln = copy.deepcopy(ln_cpu).to("trn")


def f(x):
    return torch.nn.functional.gelu(ln(x)) + torch.softmax(x * 2.0, -1)


x = torch.randn(200, 64)
out = torch.compile(f, backend="trn")(x.to("trn"))
ref = torch.nn.functional.gelu(ln_cpu(x)) + torch.softmax(x * 2.0, -1)
torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)
print("compiled ok")
"""


def test_trn_profile_lists_generated_kernels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch._dynamo

    from trnlang.compile import generated_kernels

    torch._dynamo.reset()
    script = tmp_path / "compiled.py"
    script.write_text(_SCRIPT)
    trace = tmp_path / "trace.json"
    assert cli.main(["profile", "--trace", str(trace), str(script)]) == 0
    captured = capsys.readouterr()
    assert "compiled ok" in captured.out and "cannot simulate" not in captured.err, captured.err
    rows = [ln.split() for ln in captured.out.splitlines() if ln.startswith("trn_fused_")]
    assert rows, captured.out
    names = {name for name, _, _ in generated_kernels()}
    for sig, launches, us, *_ in rows:  # each row is one specialization: the kernel's name and signature
        assert sig.split("(")[0] in names and int(launches) >= 1 and float(us) > 0
    # the names say what was fused: layer norm's mean/rsqrt, the GELU, softmax's max/exp/sum
    fused = " ".join(r[0] for r in rows)
    for op in ("mean", "rsqrt", "gelu", "amax", "exp"):
        assert op in fused, fused
    procs = [e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
             if e.get("name") == "process_name"]
    assert any(p.startswith("trn_fused_") for p in procs), procs
