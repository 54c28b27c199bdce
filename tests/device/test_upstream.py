"""``trn upstream``: the runner of PyTorch's device-generic test files, on a tiny file written here.

The file below uses torch's real ``instantiate_device_type_tests`` machinery and imports a helper
under the name a 2023 snapshot used (``binary_ufuncs_and_refs``), which the runner shims.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it

from trnlang.device import upstream  # noqa: E402
from trnlang.device.upstream_worker import dtypes_of  # noqa: E402
from trnlang.device.upstream_worker import test_key as key_of  # noqa: E402

TINY = '''
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, onlyCPU
from torch.testing._internal.common_methods_invocations import binary_ufuncs_and_refs  # a 2023 name
from torch.testing._internal.common_utils import TestCase, run_tests, skipIfMps  # 2023: skipIfMps
from torch.testing._internal.common_cuda import tf32_is_not_fp32  # gone by torch 2.13
from torch.testing._internal.common_nn import new_module_tests  # a function's result by torch 2.13


class TestTiny(TestCase):
    def setUp(self):  # 2023's test_linalg idiom: recursed under torch 2.13 until the worker rebinds it
        super(self.__class__, self).setUp()
        self.set_up_runs = getattr(self, "set_up_runs", 0) + 1

    @dtypes(torch.float32, torch.float64)
    def test_same(self, device, dtype):
        self.assertEqual(self.set_up_runs, 1)
        self.assertEqual(torch.empty(2, 3, device=device, dtype=dtype).shape, (2, 3))

    def test_device_is_cpu(self, device):
        self.assertEqual(torch.device(device).type, "cpu")

    @onlyCPU
    def test_only_cpu(self, device):
        pass

    def test_fallback(self, device):
        a = torch.tensor([[2.0, 0.0], [0.0, 3.0]]).to(device)
        self.assertEqual(torch.linalg.eigvals(a).real.cpu().sort().values, torch.tensor([2.0, 3.0]))
        self.assertGreater(len(binary_ufuncs_and_refs), 0)

    def test_clash(self, device):  # instantiated test_clash_cpu: clashes with the next one's name
        self.assertFalse(tf32_is_not_fp32())

    @onlyCPU
    @skipIfMps
    def test_clash_cpu(self, device):
        self.assertGreater(len(new_module_tests), 0)

    def test_wide_input(self, device):  # no dtype in the name, float64 data (as make_tensor often builds)
        a = torch.tensor([[2.0, 0.0], [0.0, 3.0]], dtype=torch.float64).to(device)
        self.assertEqual(torch.linalg.eigvals(a).real.cpu().sort().values, torch.tensor([2.0, 3.0]).double())


instantiate_device_type_tests(TestTiny, globals())

if __name__ == "__main__":
    run_tests()
'''


def test_names_pair_across_devices():
    assert key_of("TestFooTRN", "test_x_trn_int64") == key_of("TestFooCPU", "test_x_cpu_int64")
    assert key_of("TestFooPRIVATEUSE1", "test_compare_cpu_trn_float32") == "TestFoo.test_compare_DEV_DEV_float32"
    assert dtypes_of("test_cat_out_different_dtypes_trn_float32_int64") == ["float32", "int64"]
    assert dtypes_of("test_views_trn") == []


def test_failure_kinds():
    assert upstream.classify("AssertionError", "RuntimeError not raised") == "error check missing"
    assert upstream.classify("AssertionError", "UserWarning not triggered") == "warning not emitted"
    assert upstream.classify("AssertionError", "Tensor-likes are not close!") == "wrong values"
    assert upstream.classify("Timeout", "test ran past 90 s") == "timeout"
    strict = "aten::eq.Scalar was declined by its trn lowering (dtype complex64 not among the lowering's dtypes) and " \
             "TRN_FALLBACK=f64only forbids the CPU fallback"
    assert upstream.classify("FallbackError", strict) == "no native lowering (strict)"
    assert upstream.classify("ValueError", "boom") == "other (ValueError)"
    hint = "Scalars are not close!\n\nTo execute this test, run: python test_x.py -k test_out_dtype_trn"
    assert upstream.classify("AssertionError", hint) == "wrong values"


def _rec(dev, key, outcome, dtypes=(), fallbacks=None, exc="", msg=""):
    return {"id": f"{dev}.{key}", "dev": dev, "key": key, "dtypes": list(dtypes), "outcome": outcome, "exc": exc,
            "msg": msg, "secs": 0.0, "fallbacks": fallbacks or {}}


def test_summary_counts_trn_only_failures_and_native_rate():
    recs = [_rec("cpu", "a", "pass", ["int64"]), _rec("trn", "a", "pass", ["int64"], {"aten::flip": 2}),
            _rec("cpu", "b", "pass", ["int64"]), _rec("trn", "b", "pass", ["int64"]),
            _rec("cpu", "c", "pass"), _rec("trn", "c", "fail", exc="AssertionError", msg="RuntimeError not raised"),
            _rec("cpu", "d", "fail"), _rec("trn", "d", "fail", exc="AssertionError", msg="x"),
            _rec("cpu", "e", "pass", ["float64"]), _rec("trn", "e", "pass", ["float64"]),
            _rec("cpu", "f", "pass"), _rec("trn", "f", "skip")]
    info = {"tests": {r["id"]: r for r in recs}, "crashed": [], "import_error": None}
    s = upstream.file_summary(info)
    assert s["cpu"] == {"pass": 5, "fail": 1}
    assert s["trn"] == {"pass": 3, "fail": 2, "skip": 1}
    assert [f["key"] for f in s["only_trn"]] == ["c"]  # d fails on both: not trn-only
    assert s["native"] == {"int64": [1, 2], "(none)": [0, 1]}  # float64 and trn-skipped tests not counted
    assert s["blockers"] == {"aten::flip": 1}
    assert s["native_via_wide"] == 0
    md = upstream.markdown_report({"test_x": s}, source="here", torch_version="2.13")
    assert "| error check missing | 1 |" in md and "`aten::flip`" in md


def test_documented_differences_are_named_and_still_counted(monkeypatch):
    from trnlang.device import upstream_differences as D

    monkeypatch.setitem(D.DOCUMENTED, "TestX.test_known_*", "a reason given here")
    recs = [_rec("cpu", "TestX.test_known_DEV", "pass"), _rec("trn", "TestX.test_known_DEV", "fail", exc="E", msg="m"),
            _rec("cpu", "TestX.test_new_DEV", "pass"), _rec("trn", "TestX.test_new_DEV", "fail", exc="E", msg="m")]
    s = upstream.file_summary({"tests": {r["id"]: r for r in recs}, "crashed": [], "import_error": None})
    assert [(f["key"], f["documented"]) for f in s["only_trn"]] == [("TestX.test_known_DEV", "a reason given here"),
                                                                    ("TestX.test_new_DEV", None)]
    md = upstream.markdown_report({"test_x": s}, source="here", torch_version="2.13")
    assert "| 2 (1 documented) |" in md and "## Documented differences" in md
    assert "- test_x `TestX.test_known_DEV`: a reason given here." in md and "`TestX.test_new_DEV`: " not in md
    assert D.documented("TestShapeOps.test_flip_DEV_float32") and D.documented("TestX.test_other_DEV") is None


def test_runner_on_a_device_generic_file(tmp_path):
    (tmp_path / "test_tiny_generic.py").write_text(TINY)
    res, md = tmp_path / "res", tmp_path / "report.md"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-m", "trnlang.cli", "upstream", str(tmp_path), "--files",
                        "test_tiny_generic", "--results", str(res), "--md", str(md), "--source", "a tiny file"],
                       capture_output=True, text=True, cwd=root, timeout=900,
                       env={**os.environ, "PYTHONPATH": root})
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [json.loads(x) for x in (res / "test_tiny_generic.jsonl").read_text().splitlines()]
    imp = next(x for x in lines if x["event"] == "import")
    assert "torch.testing._internal.common_methods_invocations.binary_ufuncs_and_refs" in imp["shims"]
    assert "TestTiny.setUp" in imp["shims"]  # the super(self.__class__, self) idiom, rebound once
    assert "TestTiny.test_clash_cpu -> test_clash_cpu_" in imp["shims"]
    got = {(x["dev"], x["key"]): x for x in lines if x["event"] == "test"}
    for key in ("TestTiny.test_same_DEV_float32", "TestTiny.test_same_DEV_float64", "TestTiny.test_fallback_DEV",
                "TestTiny.test_device_is_DEV_DEV", "TestTiny.test_only_DEV_DEV", "TestTiny.test_clash_DEV",
                "TestTiny.test_clash_DEV__DEV"):
        assert got[("cpu", key)]["outcome"] == "pass", got[("cpu", key)]
    assert got[("trn", "TestTiny.test_same_DEV_float32")]["outcome"] == "pass"
    assert got[("trn", "TestTiny.test_device_is_DEV_DEV")]["outcome"] == "fail"
    assert got[("trn", "TestTiny.test_only_DEV_DEV")]["outcome"] == "skip"
    fb = got[("trn", "TestTiny.test_fallback_DEV")]
    assert fb["outcome"] == "pass" and fb["fallbacks"].get("aten::_linalg_eigvals") == 1
    text = md.read_text()
    wide = got[("trn", "TestTiny.test_wide_input_DEV")]
    assert wide["outcome"] == "pass" and wide["fallbacks"] == {} and wide["wide_fallbacks"]["aten::_linalg_eigvals"]
    assert "| 8 / 0 / 0 | 5 / 1 / 2 | 1 | 3 / 5 (60.0%) | 1 | fallback allowed |" in text
    assert "`TestTiny.test_device_is_DEV_DEV`" in text and "a tiny file" in text


def test_wide_fallbacks_count_native_and_are_reported():
    recs = [_rec("cpu", "a", "pass"), {**_rec("trn", "a", "pass"), "wide_fallbacks": {"aten::normal_": 1}},
            _rec("cpu", "b", "pass", ["int32"]), _rec("trn", "b", "pass", ["int32"], {"aten::prod": 1})]
    s = upstream.file_summary({"tests": {r["id"]: r for r in recs}, "crashed": [], "import_error": None})
    assert s["native"] == {"(none)": [1, 1], "int32": [0, 1]} and s["native_via_wide"] == 1
    assert s["blockers"] == {"aten::prod": 1}  # the documented float64 fallback blocks nothing
    # strict: a failure with a refused fallback is that, even when the test re-raised it as something else
    recs = [_rec("cpu", "c", "pass"), _rec("trn", "c", "fail", [], {"aten::eq.Tensor": 1}, "RuntimeError",
                                           "Comparing ... dtype=torch.uint64")]
    info = {"tests": {r["id"]: r for r in recs}, "crashed": [], "import_error": None}
    assert upstream.file_summary(info)["only_trn"][0]["kind"] == "dtype differs"
    info["meta"] = {"strict": True}
    assert upstream.file_summary(info)["only_trn"][0]["kind"] == "no native lowering (strict)"


def test_strict_run_then_update_of_a_subset(tmp_path):
    """--strict (TRN_FALLBACK=f64only): a float32 fallback fails, a float64 one passes; --update -k reruns a subset
    and its records replace the earlier ones; --report-only rebuilds the report from the results."""
    (tmp_path / "test_tiny_generic.py").write_text(TINY)
    res, md = tmp_path / "res", tmp_path / "report.md"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def trn_upstream(*extra):
        p = subprocess.run([sys.executable, "-m", "trnlang.cli", "upstream", str(tmp_path), "--results", str(res),
                            "--md", str(md), "--source", "a tiny file", *extra], capture_output=True, text=True,
                           cwd=root, timeout=900, env={**os.environ, "PYTHONPATH": root})
        assert p.returncode == 0, p.stdout + p.stderr

    trn_upstream("--files", "test_tiny_generic", "--strict", "-k", "fallback", "-k", "wide")
    info = upstream.load_results(str(res / "test_tiny_generic.jsonl"))
    got = {r["key"]: r for r in info["tests"].values() if r["dev"] == "trn"}
    assert got["TestTiny.test_fallback_DEV"]["exc"] == "FallbackError"  # float32 eigvals: not allowed
    assert got["TestTiny.test_wide_input_DEV"]["outcome"] == "pass"  # float64 eigvals: the documented fallback
    assert info["meta"]["strict"] and info["meta"]["commit"]
    trn_upstream("--files", "test_tiny_generic", "--update", "-k", "test_fallback")  # fallback allowed this time
    info = upstream.load_results(str(res / "test_tiny_generic.jsonl"))
    got = {r["key"]: r for r in info["tests"].values() if r["dev"] == "trn"}
    assert got["TestTiny.test_fallback_DEV"]["outcome"] == "pass" and len(info["tests"]) == 4
    assert [u["keys"] for u in info["updates"]] == [["test_fallback"]]
    md.unlink()
    trn_upstream("--report-only")
    assert "| test_tiny_generic | `-k fallback` `-k wide`; rerun `-k test_fallback` |" in md.read_text()


def test_long_selections_are_counted_not_listed():
    """A rerun of a file's earlier failures passes hundreds of -k: the report counts them."""
    keys = [f"test_{i}" for i in range(120)]
    s = upstream.file_summary({"tests": {r["id"]: r for r in (_rec("cpu", "a", "pass"), _rec("trn", "a", "pass"))},
                               "crashed": [], "import_error": None,
                               "meta": {"keys": keys[:2]}, "updates": [{"keys": keys, "commit": "abc"}]})
    md = upstream.markdown_report({"test_x": s}, source="here", torch_version="2.13")
    assert "| test_x | `-k test_0` `-k test_1`; rerun 120 selected tests (`-k test_0`, ...) |" in md
    assert "test_119" not in md
