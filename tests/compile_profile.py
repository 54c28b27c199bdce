"""Where the suite's time goes: a pytest plugin that records, per test, its CPU time, its child processes' CPU time,
the LLVM time and the kernel compilations it caused (``trnlang.compile_stats()`` events, counted as they happen, so a
test that resets the counters does not hide its own).

Off unless loaded; nothing in a normal run changes. Usage (one JSON line per test, one file per xdist worker; with an
empty ``TRN_CACHE_DIR`` the counts are those of a cold cache, as on CI)::

    TRN_CACHE_DIR=$(mktemp -d) python -m pytest -p tests.compile_profile --compile-profile=/tmp/prof tests/device
    python -m tests.compile_profile /tmp/prof            # per-file totals, most CPU first

Fields: ``id``, ``wall``, ``cpu`` (this process, setup and teardown included), ``child`` (CPU of child processes
waited for), ``llvm`` (CPU in ``codegen.llvm.compile_ir``), ``compiles``, ``disk_hits``, ``traces``, ``memory_hits``
and ``kern`` (the most compiled kernels).
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

_EVENTS: collections.Counter[str] = collections.Counter()
_KERNELS: collections.Counter[str] = collections.Counter()
_LLVM = [0.0]
_OUT: list[Any] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--compile-profile", metavar="DIR", default=None,
                     help="write each test's CPU time and kernel compilations to DIR/<worker>.jsonl")


def pytest_configure(config: pytest.Config) -> None:
    out = config.getoption("--compile-profile")
    if not out:
        return
    import codegen.llvm as llvm
    import trnlang.runtime.stats as stats

    count, compile_ir = stats.count, llvm.compile_ir

    def counting(kernel: str, event: str) -> None:
        _EVENTS[event] += 1
        if event == "compiles":
            _KERNELS[kernel] += 1
        count(kernel, event)

    def timed(*args: Any, **kwargs: Any) -> bytes:
        t = time.process_time()
        try:
            return compile_ir(*args, **kwargs)
        finally:
            _LLVM[0] += time.process_time() - t

    stats.count = counting  # the runtime calls stats.count / llvm.compile_ir through the module
    llvm.compile_ir = timed
    Path(out).mkdir(parents=True, exist_ok=True)
    _OUT.append(Path(out))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _OUT:
        yield
        return
    events, llvm = collections.Counter(_EVENTS), _LLVM[0]
    _KERNELS.clear()
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu, wall = time.process_time(), time.perf_counter()
    yield
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rec: dict[str, Any] = {"id": item.nodeid, "wall": round(wall, 3), "cpu": round(cpu, 3),
                           "child": round(ch1.ru_utime + ch1.ru_stime - ch.ru_utime - ch.ru_stime, 3),
                           "llvm": round(_LLVM[0] - llvm, 3), "kern": dict(_KERNELS.most_common(8))}
    rec.update({e: _EVENTS[e] - events[e] for e in ("compiles", "disk_hits", "traces", "memory_hits")})
    path = _OUT[0] / (os.environ.get("PYTEST_XDIST_WORKER", "main") + ".jsonl")
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def per_file(records: list[dict[str, Any]]) -> list[tuple[str, dict[str, float]]]:
    """Per test file: tests, wall, cpu, child, llvm, compiles, disk_hits; most CPU (own + children) first.

    Example:
        >>> r = {"wall": 1, "cpu": 1, "child": 0, "llvm": 0.5, "compiles": 2, "disk_hits": 0}
        >>> per_file([{"id": "t/a.py::x", **r}, {"id": "t/b.py::y", **r, "child": 3, "cpu": 0, "wall": 3}])[0]
        ('t/b.py', {'tests': 1, 'wall': 3, 'cpu': 0, 'child': 3, 'llvm': 0.5, 'compiles': 2, 'disk_hits': 0})
    """
    keys = ("wall", "cpu", "child", "llvm", "compiles", "disk_hits")
    files: dict[str, dict[str, float]] = {}
    for r in records:
        f = files.setdefault(r["id"].split("::")[0], {"tests": 0, **dict.fromkeys(keys, 0)})
        f["tests"] += 1
        for k in keys:
            f[k] += r[k]
    return sorted(files.items(), key=lambda kv: -(kv[1]["cpu"] + kv[1]["child"]))


def main(argv: list[str]) -> None:
    """Print :func:`per_file` of every ``*.jsonl`` in the directory ``argv[0]``."""
    recs = [json.loads(line) for p in sorted(Path(argv[0]).glob("*.jsonl")) for line in p.read_text().splitlines()]
    rows = per_file(recs)
    print(f"{'file':56s} {'tests':>5s} {'cpu s':>7s} {'child s':>7s} {'llvm s':>7s} {'compiles':>8s} {'disk':>5s}")
    for name, f in rows:
        print(f"{name:56s} {f['tests']:5.0f} {f['cpu']:7.1f} {f['child']:7.1f} {f['llvm']:7.1f} "
              f"{f['compiles']:8.0f} {f['disk_hits']:5.0f}")
    tot = {k: sum(f[k] for _, f in rows) for k in ("tests", "cpu", "child", "llvm", "compiles")}
    print(f"{'total':56s} {tot['tests']:5.0f} {tot['cpu']:7.1f} {tot['child']:7.1f} {tot['llvm']:7.1f} "
          f"{tot['compiles']:8.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
