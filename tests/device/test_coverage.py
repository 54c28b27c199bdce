"""Coverage: OpInfo samples on ``trn`` vs the CPU (a subset here; ``trn coverage`` runs them all)."""

import json

import pytest
import torch

pytest.importorskip("expecttest")  # torch.testing._internal needs it (see the test extra)

from trnlang.device import coverage  # noqa: E402

#: The natively lowered families, plus every 8th OpInfo of op_db (a fixed, spread-out sample).
NATIVE = ["add", "sub", "mul", "div.no_rounding_mode", "neg", "mm", "addmm", "bmm", "matmul", "mv", "dot", "sum",
          "mean", "softmax", "nn.functional.linear", "nn.functional.softmin"]


def _subset() -> list[str]:
    names = [coverage.op_names(o) for o in coverage._op_db()]
    return sorted(set(NATIVE) | set(names[::8]))


def test_subset_pass_rate_and_natives():
    report = coverage.run_coverage(ops=_subset(), dtypes=[__import__("torch").float32], max_samples=3,
                                   progress=False)
    assert report["compared"] >= 90
    passing = report["native_pass"] + report["fallback_pass"]
    failing = {k: v["float32"]["error"] for k, v in report["ops"].items() if v["float32"]["status"] == "fail"}
    assert passing / report["compared"] >= 0.99, failing
    for name in ("add", "mul", "mm", "addmm", "sum", "mean", "softmax"):
        assert report["ops"][name]["float32"]["status"] == "native_pass", (name, report["ops"][name])
    assert report["registry"]["aten::add.Tensor"]["kind"] == "kernel"
    text = coverage.summary_table(report)
    assert "passing natively" in text and "pass rate (any path)" in text
    md = coverage.markdown_report(report)
    assert "| `aten::mm` | kernel |" in md and "## OpInfo results" in md


def test_cli_json_keys(tmp_path):
    from trnlang.cli import main

    out = tmp_path / "cov.json"
    md = tmp_path / "cov.md"
    # linalg.eig: general eigendecomposition, which nothing lowers (special.erfcx, the earlier example, is native)
    assert main(["coverage", "--ops", "add,linalg.eig", "--json", str(out), "--md", str(md), "--no-progress",
                 "--max-samples", "2"]) == 0
    data = json.loads(out.read_text())
    for key in ("compared", "native_pass", "fallback_pass", "fail", "skipped"):
        assert isinstance(data[key], int)
    assert data["compared"] == 2 and data["fail"] == 0
    assert data["ops"]["add"]["float32"]["status"] == "native_pass"
    assert data["ops"]["linalg.eig"]["float32"]["status"] == "fallback_pass"
    assert "aten::linalg_eig" in data["ops"]["linalg.eig"]["float32"]["fallback_ops"]
    assert md.read_text().startswith("# trn op compatibility")
    assert main(["coverage", "--ops", "no_such_op", "--no-progress"]) == 2


def test_shards_merge_to_the_full_report():
    import torch

    from trnlang.device.coverage import merge_reports, run_coverage

    names = ["add", "mul", "neg", "abs"]
    kw = dict(ops=names, dtypes=[torch.float32], backward=False, max_samples=2, progress=False)
    full = run_coverage(**kw)
    parts = [run_coverage(shard=(i, 2), **kw) for i in range(2)]
    assert sorted(parts[0]["ops"]) != sorted(full["ops"]) and parts[0]["ops"].keys().isdisjoint(parts[1]["ops"])
    merged = merge_reports(parts)
    assert sorted(merged["ops"]) == sorted(full["ops"])
    for k in ("compared", "native_pass", "fallback_pass", "fail", "skipped"):
        assert merged[k] == full[k]


def test_bf16_samples_more_accurate_than_the_cpu_pass():
    """A bf16 result off the CPU's by more than the tolerance passes only if it is no less accurate
    than the CPU's against a float64 reference (coverage._compare_reference)."""
    from trnlang.device.coverage import _compare_reference

    def op(t):
        return t * 1.01

    x = torch.linspace(1, 8, 64).to(torch.bfloat16)
    ref = x.double() * 1.01
    cpu = (ref + 0.25).to(torch.bfloat16)  # a CPU result with a large error
    good = ref.to(torch.bfloat16).to("trn")  # closer to the reference than the CPU
    bad = (ref - 0.6).to(torch.bfloat16).to("trn")  # further from it
    _compare_reference(op, (x, (), {}), lambda v: v, good, cpu, torch.bfloat16)
    with pytest.raises(AssertionError, match="less accurate"):
        _compare_reference(op, (x, (), {}), lambda v: v, bad, cpu, torch.bfloat16)


def test_half_gradients_more_accurate_than_the_cpu_pass():
    """The backward twin: fp16 gradients off the CPU's pass only if no less accurate than the CPU's against float64
    gradients of the same sample (coverage._compare_grad_reference)."""
    from trnlang.device.coverage import _compare_grad_reference

    def op(t):
        return t * t

    x = torch.linspace(1, 8, 64).half().requires_grad_()
    g = [torch.ones(64, dtype=torch.float16)]
    exact = 2 * x.detach().double()  # d(x*x)/dx with unit output gradients
    cpu = [(exact + 0.05).half()]
    good = [exact.half().to("trn")]
    bad = [(exact - 0.1).half().to("trn")]
    _compare_grad_reference(op, (x, (), {}), lambda v: v, good, cpu, g, torch.float16)
    with pytest.raises(AssertionError, match="less accurate"):
        _compare_grad_reference(op, (x, (), {}), lambda v: v, bad, cpu, g, torch.float16)


def test_opinfo_declared_inductor_tolerances_widen_the_comparison():
    """An OpInfo's toleranceOverride for TestInductorOpInfo (another backend against eager CPU) widens the harness's
    tolerance in that dtype only; other tests' overrides (MPS, JIT) do not."""
    from torch.testing._internal.common_methods_invocations import op_db

    from trnlang.device.coverage import TOLERANCES, _tolerance

    lce = next(o for o in op_db if o.name == "nn.functional.linear_cross_entropy")
    assert _tolerance(lce, torch.float16) == (1e-2, 3e-2)  # its TestInductorOpInfo override
    assert _tolerance(lce, torch.bfloat16) == TOLERANCES[torch.bfloat16]  # an MPS-only override: ignored
    assert _tolerance(lce, torch.float32) == TOLERANCES[torch.float32]  # a JIT-only override: ignored
    add = next(o for o in op_db if o.name == "add")
    assert _tolerance(add, torch.float16) == TOLERANCES[torch.float16]
