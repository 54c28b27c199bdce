"""Shared pytest setup: make the repository root importable (``import trnlang``) from any cwd."""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _trn_config_follows_monkeypatch(monkeypatch: pytest.MonkeyPatch):
    """The runtime reads ``TRN_*`` once into ``trnlang.config.current``; a test that changes them with
    ``monkeypatch.setenv`` / ``delenv`` sees the change at once (the snapshot is re-read after each), and
    the settings are read again after the test has put the environment back."""
    import trnlang.config as config

    setenv, delenv = monkeypatch.setenv, monkeypatch.delenv

    def _setenv(name: str, value: str, prepend: str | None = None) -> None:
        setenv(name, value, prepend)
        config.refresh()

    def _delenv(name: str, raising: bool = True) -> None:
        delenv(name, raising)
        config.refresh()

    monkeypatch.setenv = _setenv  # type: ignore[method-assign]
    monkeypatch.delenv = _delenv  # type: ignore[method-assign]
    yield
    monkeypatch.undo()
    config.refresh()


#: Tests that take a minute or more each (child processes, whole models, the coverage sample), longest first.
#: ``pytest -n 2`` hands tests to its workers in collection order, so these run first: the short tests fill in
#: around them and neither worker is left with a long test alone at the end. Order only; nothing is skipped.
RUN_FIRST = (
    "tests/codegen/test_isa.py::test_matmul_tests_pass_on_every_path[avx2-random]",  # the differential suite, half
    "tests/codegen/test_isa.py::test_matmul_tests_pass_on_every_path[avx2-cases]",
    "tests/codegen/test_isa.py::test_matmul_tests_pass_on_every_path[generic-random]",
    "tests/codegen/test_isa.py::test_matmul_tests_pass_on_every_path[generic-cases]",
    "tests/tutorials/test_tutorials.py::test_tutorial_runs[10_distributed]",
    "tests/tutorials/test_tutorials.py::test_tutorial_runs[09_torch_compile]",
    "tests/tutorials/test_tutorials.py::test_tutorial_runs[08_huggingface_model]",
    "tests/sim/test_schedule.py::test_generated_kernel_schedules_are_valid",
    "tests/device/test_coverage.py::test_subset_pass_rate_and_natives",
    "tests/fuzz/test_fuzz.py::test_fuzz_slice",
    "tests/compile/test_hf_models.py",
    "tests/codegen/test_isa.py::test_matmul_tests_pass_on_every_path",
    "tests/tutorials/test_tutorials.py",
)


def run_first_rank(nodeid: str) -> int:
    """The index in :data:`RUN_FIRST` of the first prefix of ``nodeid`` (``len(RUN_FIRST)`` for the rest).

    Example:
        >>> run_first_rank("tests/fuzz/test_fuzz.py::test_fuzz_slice[0]") < run_first_rank("tests/test_cli.py::x")
        True
    """
    return next((i for i, p in enumerate(RUN_FIRST) if nodeid.startswith(p)), len(RUN_FIRST))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long tests first (stable sort: the rest keep their order); every xdist worker sorts the same way."""
    items.sort(key=lambda item: run_first_rank(item.nodeid))
