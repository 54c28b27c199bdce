"""The `trn` command line: `trn info` in a subprocess and through main(); cache, bench, profile; --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from trnlang import cli
from trnlang._version import __version__

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_stated_once() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == __version__
    assert metadata.version("trnlang") == __version__  # the installed metadata is not stale


def test_trn_info_console_script() -> None:
    script = Path(sys.executable).with_name("trn")
    assert script.exists(), "the `trn` console script is not installed (run `make .venv`)"
    proc = subprocess.run([str(script), "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"trnlang {__version__}" in proc.stdout
    assert "trn2" in proc.stdout
    assert "torch" in proc.stdout and "llvmlite" in proc.stdout and "host CPU" in proc.stdout


def test_module_entry_point_with_target() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "trnlang.cli", "info", "--target", "trn3"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "target trn3 (NeuronCore-v4)" in proc.stdout
    assert "315 TF mxfp8" in proc.stdout


def test_info_via_main(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRN_TARGET", raising=False)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"trnlang {__version__}\n")
    assert "target trn2 (NeuronCore-v3)" in out
    assert "28 MiB = 128 partitions x 224 KiB" in out
    assert f"llvmlite  {metadata.version('llvmlite')}" in out


def test_info_target_from_option_and_env(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_TARGET", "trn3")
    assert cli.main(["info"]) == 0
    assert "target trn3" in capsys.readouterr().out
    assert cli.main(["info", "--target", "trn1"]) == 0  # the option beats the environment
    out = capsys.readouterr().out
    assert "target trn1 (NeuronCore-v2)" in out and "192 KiB" in out


def test_info_unknown_target(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["info", "--target", "trn9"]) == 2
    err = capsys.readouterr().err
    assert "unknown target 'trn9'" in err and "trn1, trn2, trn3" in err
    monkeypatch.setenv("TRN_TARGET", "inf2")
    assert cli.main(["info"]) == 2
    assert "TRN_TARGET" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["info", "cache", "coverage", "bench", "profile"])
def test_every_subcommand_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([command, "--help"]) == 0
    assert f"usage: trn {command}" in capsys.readouterr().out


def test_top_level_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"trnlang {__version__}"
    assert cli.main([]) == 2  # no command: usage on stderr
    assert "usage: trn" in capsys.readouterr().err
    assert cli.main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_demo_prints_device_table_and_writes_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trnlang import demo

    assert demo.main(["--trace", str(tmp_path / "demo.json")]) == 0  # not pytest's own sys.argv
    assert "target trn" in capsys.readouterr().out
    assert (tmp_path / "demo.json").exists()


_TINY_SCRIPT = """
import sys
import numpy as np
import trnlang as trn
import trnlang.language as tl

@trn.kernel
def cli_tiny_double(x, out):
    tl.store(out[0:128, 0:64], tl.load(x[0:128, 0:64]) * 2.0)

x = np.ones((128, 64), np.float32)
o = np.empty_like(x)
for _ in range(3):
    cli_tiny_double(x, o)
import torch  # torch tensors take the warm launch plans: those launches are recorded too
xt, ot = torch.ones(128, 64), torch.empty(128, 64)
for _ in range(2):
    cli_tiny_double(xt, ot)
print("script argv", sys.argv[1:], float(o[0, 0]))
"""


def test_cache_info_and_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    import trnlang as trn
    import trnlang.language as tl

    cache = tmp_path / "cache"
    monkeypatch.setenv("TRN_CACHE_DIR", str(cache))
    monkeypatch.delenv("TRN_JIT_NO_DISK_CACHE", raising=False)
    monkeypatch.delenv("TRN_INTERPRET", raising=False)
    assert cli.main(["cache", "info"]) == 0  # nothing there yet: reported, not created
    out = capsys.readouterr().out
    assert "does not exist" in out and not cache.exists()

    @trn.kernel
    def cli_cache_add(x, out):
        tl.store(out[0:4, 0:8], tl.load(x[0:4, 0:8]) + 1.0)

    x = np.zeros((4, 8), np.float32)
    o = np.empty_like(x)
    cli_cache_add(x, o)
    assert o[0, 0] == 1.0
    tune = cache / "autotune"
    tune.mkdir()
    (tune / "mod.k-0123.json").write_text("{}")
    unrelated = cache / "notes.txt"
    unrelated.write_text("keep me")
    outside = tmp_path / "outside.bin"
    outside.write_text("keep me too")
    jit_dir = cache / f"jit-{os.getuid()}"
    (jit_dir / ("a" * 64 + ".bin")).symlink_to(outside)  # an entry-like symlink: never followed nor deleted
    (jit_dir / "README").write_text("not ours")

    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache) in out
    entries = int(next(ln for ln in out.splitlines() if ln.startswith("entries")).split()[1])
    assert entries >= 1
    assert "autotune entries  1" in out

    assert cli.main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert f"removed {entries} JIT object(s)" in out and "removed 1 autotune file(s)" in out
    assert unrelated.read_text() == "keep me" and outside.read_text() == "keep me too"
    assert (jit_dir / "README").exists() and (jit_dir / ("a" * 64 + ".bin")).is_symlink()
    assert not list(tune.iterdir())

    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "entries           0" in out and "autotune entries  0" in out


def test_cache_does_not_follow_symlinked_dirs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.json").write_text("{}")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "autotune").symlink_to(elsewhere)
    monkeypatch.setenv("TRN_CACHE_DIR", str(cache))
    assert cli.main(["cache", "clear"]) == 0
    assert "symlink" in capsys.readouterr().err
    assert (elsewhere / "precious.json").exists()


def test_profile_script(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from trnlang.runtime.launch import OBSERVERS, PLANS

    monkeypatch.setenv("TRN_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "tiny.py"
    script.write_text(_TINY_SCRIPT)
    trace = tmp_path / "trace.json"
    assert cli.main(["profile", "--trace", str(trace), "--summary", str(script), "a", "--b"]) == 0
    assert not OBSERVERS and PLANS.enabled  # the observer is removed again, launch plans back on
    out = capsys.readouterr().out
    assert "script argv ['a', '--b'] 2.0" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("cli_tiny_double(f32[128,64],f32[128,64]) "))
    assert row.split()[1] == "5"  # launches
    assert float(row.split()[2]) > 0  # simulated us per launch
    assert "MFU" in out and "MBU" in out and "profile of cli_tiny_double" in out
    events = json.loads(trace.read_text())["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert xs and all(e["dur"] >= 0 and "ts" in e and "pid" in e and "tid" in e for e in xs)


_TWO_SPECS_SCRIPT = """
import numpy as np
import trnlang as trn
import trnlang.language as tl

@trn.kernel
def cli_rowsum(x, out):
    w = x.shape[1]
    tl.store(out[0:128, 0:1], tl.sum(tl.load(x[0:128, 0:w]), axis=1, keepdims=True))

for w in (64, 512, 64):
    x = np.ones((128, w), np.float32)
    cli_rowsum(x, np.empty((128, 1), np.float32))
"""


def test_profile_names_specializations_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Two specializations of one kernel: two rows and two trace processes, each named by its shapes."""
    monkeypatch.setenv("TRN_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "two.py"
    script.write_text(_TWO_SPECS_SCRIPT)
    trace = tmp_path / "trace.json"
    assert cli.main(["profile", "--trace", str(trace), str(script)]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.startswith("cli_rowsum(")}
    narrow, wide = "cli_rowsum(f32[128,64],f32[128,1])", "cli_rowsum(f32[128,512],f32[128,1])"
    assert set(rows) == {narrow, wide}, out
    assert rows[narrow][1] == "2" and rows[wide][1] == "1"  # launches per specialization
    assert float(rows[wide][2]) > float(rows[narrow][2])  # 8x the data takes longer on the simulated device
    procs = [e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "process_name"]
    assert sum(p.startswith(narrow + " ") for p in procs) == 1 and sum(p.startswith(wide + " ") for p in procs) == 1


def test_profile_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["profile", str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err
    script = tmp_path / "nokernel.py"
    script.write_text("import sys\nsys.exit(3)\n")
    assert cli.main(["profile", "--trace", str(tmp_path / "t.json"), str(script)]) == 3
    assert "launched no trn kernel" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


def test_bench(tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["bench", "--help"]) == 0
    out = capfd.readouterr().out
    assert "--quick" in out and "--only" in out
    monkeypatch.setattr(cli, "_benchmarks_dir", lambda: None)
    assert cli.main(["bench"]) == 2
    assert "benchmarks/ not found" in capfd.readouterr().err
    (tmp_path / "bench_jit.py").write_text("import sys\nprint('fake jit bench', sys.argv[1:])\n")
    monkeypatch.setattr(cli, "_benchmarks_dir", lambda: str(tmp_path))
    assert cli.main(["bench", "--only", "jit", "--quick"]) == 0
    assert "fake jit bench ['--quick']" in capfd.readouterr().out
    assert cli.main(["bench", "--only", "nope"]) == 2
    monkeypatch.undo()
    assert (ROOT / "benchmarks" / "bench_jit.py").exists() and cli._benchmarks_dir() == str(ROOT / "benchmarks")
