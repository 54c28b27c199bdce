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
#: They start first on every xdist worker (see :func:`pytest_collection_modifyitems`), so the short tests fill in
#: around them and no worker is left with a long test alone at the end. Order only; nothing is skipped.
RUN_FIRST = (
    "tests/codegen/test_isa.py::test_matmul_tests_pass_on_every_path[avx2-random]",  # a narrower path's differential
    "tests/codegen/test_isa.py::test_matmul_tests_pass_on_every_path[generic-random]",
    "tests/tutorials/test_tutorials.py::test_tutorial_runs[10_distributed]",
    "tests/tutorials/test_tutorials.py::test_tutorial_runs[08_huggingface_model]",
    "tests/codegen/test_isa.py::test_matmul_tests_pass_on_every_path[avx2-cases]",
    "tests/codegen/test_isa.py::test_matmul_tests_pass_on_every_path[generic-cases]",
    "tests/tutorials/test_tutorials.py::test_tutorial_runs[09_torch_compile]",
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


def spread_first(ranks: list[int], workers: int) -> list[int]:
    """An order (indices into ``ranks``) in which the long tests (rank below ``len(RUN_FIRST)``) open every worker's
    share: xdist's schedulers hand out contiguous runs of the collection (``--dist worksteal``: one ``1/workers`` slice
    each, then steals from the back of a queue; the default ``load``: shorter chunks from the front), so the long tests
    are dealt round-robin, longest first, to the starts of the ``workers`` equal slices, each followed by short tests
    in collection order.

    Example:
        >>> spread_first([99, 0, 99, 99, 1, 99, 99, 2], 2)  # ranks 0 and 2 open the first half, 1 the second
        [1, 7, 0, 2, 4, 3, 5, 6]
    """
    n, k = len(ranks), max(1, workers)
    long = sorted((i for i in range(n) if ranks[i] < len(RUN_FIRST)), key=lambda i: ranks[i])
    short = [i for i in range(n) if ranks[i] >= len(RUN_FIRST)]
    heads = [long[w::k] for w in range(k)]
    out: list[int] = []
    for w in range(k):
        size = (n - len(out)) // (k - w)  # what worksteal sends each worker first
        take = max(0, size - len(heads[w]))
        out += heads[w] + short[:take]
        short = short[take:]
    return out + short


#: modules whose tests torch's ``instantiate_device_type_tests`` generates: their per-dtype variants come from a set
#: of dtypes (hash order, per process), so xdist workers would collect them in different orders
_GENERATED = ("tests/device/test_torch_generic.py", "tests/device/test_upstream.py")


def _sort_generated(items: list[pytest.Item]) -> None:
    """Put the generated tests of each :data:`_GENERATED` module in node-id order, in place of their slots."""
    slots = [i for i, it in enumerate(items) if it.nodeid.startswith(_GENERATED)]
    for i, it in zip(slots, sorted((items[i] for i in slots), key=lambda it: it.nodeid)):
        items[i] = it


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long tests first in every xdist worker's share (:func:`spread_first`); every worker orders the same way
    (generated tests sorted first: :func:`_sort_generated`)."""
    _sort_generated(items)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    order = spread_first([run_first_rank(item.nodeid) for item in items], workers)
    items[:] = [items[i] for i in order]
