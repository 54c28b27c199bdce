"""The `trn` command line: `trn info` in a subprocess and through main(), placeholders, --help."""

from __future__ import annotations

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


@pytest.mark.parametrize("command", ["cache", "bench", "profile"])
def test_placeholders_say_not_implemented(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([command]) == 2
    assert "not implemented yet" in capsys.readouterr().err


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


def test_demo_placeholder_prints_device_table(capsys: pytest.CaptureFixture[str]) -> None:
    from trnlang import demo

    demo.main()
    assert "target trn" in capsys.readouterr().out
