"""Processes that share a kernel cache compile a kernel they all miss once (diskcache.Store.building).

The ranks of a distributed job (tutorial 10 runs four) and the suite's xdist workers start the same kernels at
the same moment; without the cross-process build lock each compiled every kernel itself. These tests spawn real
processes on one cache directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trnlang.runtime import diskcache

ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from tests.runtime.test_disk_cache import SQUARE, _kernel
    from trnlang.runtime import stats
    from trnlang.runtime.jit import JitExecutor

    ready, go = sys.argv[1], sys.argv[2]
    k = _kernel(SQUARE[0], name="shared")
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.zeros_like(x)
    ex = JitExecutor(k)
    open(ready, "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.0005)
    ex.run([x, out], (1,))
    assert (out == x * x).all()
    totals = stats.compile_stats()
    print(json.dumps({"compiles": totals["compiles"], "disk_hits": totals["disk_hits"]}))
""")

_HOLDER = textwrap.dedent("""
    import sys
    from trnlang.runtime import diskcache
    s = diskcache.Store(sys.argv[1], "jit-test", authenticate=False)
    with s.building("entry.bin") as held:
        print("held" if held else "not held", flush=True)
        sys.stdin.read()  # until the test closes stdin (or kills this process)
""")


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TRN_CACHE_DIR=str(tmp_path / "cache"), TRN_CONFIG_DIR=str(tmp_path / "config"),
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    env.pop("TRN_JIT_NO_DISK_CACHE", None)
    return env


def test_processes_that_miss_the_same_kernel_at_once_compile_it_once(tmp_path: Path) -> None:
    env = _env(tmp_path)
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(3)]
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(r), str(go)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in ready]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # every child is past its imports: they miss the kernel within a millisecond of each other
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["compiles"] for r in results) == 1, results
    assert sum(r["disk_hits"] for r in results) == 2, results


def test_a_held_build_lock_times_out_and_dies_with_its_process(tmp_path: Path) -> None:
    env = _env(tmp_path)
    base = str(tmp_path / "locks")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, base], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        s = diskcache.Store(base, "jit-test", authenticate=False)
        t0 = time.monotonic()
        with s.building("entry.bin", timeout=0.3) as held:
            assert not held  # another process builds it: after the timeout the caller builds anyway
        assert 0.25 < time.monotonic() - t0 < 30
        with s.building("other.bin", timeout=0.3) as held:
            assert held  # another entry's lock is free
        holder.kill()
        holder.wait(timeout=30)
        with s.building("entry.bin", timeout=10) as held:
            assert held  # the kernel released the dead process's lock
        s.close()
    finally:
        if holder.poll() is None:
            holder.kill()


@pytest.mark.skipif(os.getuid() != 0, reason="a lock file owned by another user needs root to plant")
def test_a_foreign_lock_file_is_not_used(tmp_path: Path) -> None:
    s = diskcache.Store(str(tmp_path), "jit-test", authenticate=False)
    lock = tmp_path / "jit-test" / "build.lock"
    lock.touch()
    os.chown(lock, 65534, 65534)
    with s.building("entry.bin") as held:
        assert not held
    s.close()


_SECRET_CHILD = textwrap.dedent("""
    import os, sys, time
    go = sys.argv[1]
    while not os.path.exists(go):
        time.sleep(0.0002)
    from trnlang.runtime import diskcache
    k = diskcache.user_secret()
    print(k.hex() if k else "NONE")
""")


def test_processes_creating_the_cache_secret_at_once_share_one(tmp_path: Path) -> None:
    """The secret is published in one step (a linked temporary file): no process reads it half written and loses
    its disk cache (and the build lock) for the run; nothing temporary is left behind."""
    env = _env(tmp_path)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _SECRET_CHILD, str(go)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    time.sleep(1.0)  # past their imports
    go.touch()
    keys = set()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        keys.add(out.strip())
    assert len(keys) == 1 and "NONE" not in keys, keys
    assert sorted(os.listdir(tmp_path / "config")) == ["cache-key"]
