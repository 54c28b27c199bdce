"""A child process (os.fork, multiprocessing fork / spawn / forkserver) of a process that used trn works.

The parent first runs big ops that split across host threads (every thread pool and worker of trnlang
has started), then a child runs the same ops. A hang would be a bug (a pool or lock inherited from the
parent whose threads do not exist in the child): every child runs under a deadline and is killed when
it passes it, so the test fails with a message instead of hanging pytest.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time

import pytest

from tests.runtime import _fork_ops

DEADLINE_S = 90.0
TOL = 1e-4


def _check(errs: dict[str, float], who: str) -> None:
    assert set(errs) == {"mul_sum", "softmax", "kernel_grid"}, errs
    bad = {k: v for k, v in errs.items() if not v <= TOL}
    assert not bad, f"{who}: wrong results {bad}"


@pytest.fixture(scope="module")
def warm_parent() -> None:
    """The parent has used trn: pools, native workers and grid threads are running."""
    _check(_fork_ops.run_ops(0), "parent")


def test_os_fork_child_runs_trn_ops(warm_parent: None) -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            os.close(r)
            data = pickle.dumps(_fork_ops.run_ops(1))
            os.write(w, data)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + DEADLINE_S
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        pytest.fail(f"the os.fork child hung (killed after {DEADLINE_S:.0f} s)")
    with os.fdopen(r, "rb") as f:
        data = f.read()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the os.fork child failed (status {status})"
    _check(pickle.loads(data), "os.fork child")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_child_runs_trn_ops(warm_parent: None, method: str) -> None:
    ctx = multiprocessing.get_context(method)
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_fork_ops.child_main, args=(child_conn,), daemon=True)
    p.start()
    child_conn.close()
    p.join(DEADLINE_S)
    if p.is_alive():
        p.kill()
        p.join(10)
        pytest.fail(f"the multiprocessing {method!r} child hung (killed after {DEADLINE_S:.0f} s)")
    assert parent_conn.poll(1), f"the {method!r} child sent nothing (exit code {p.exitcode})"
    status, payload = parent_conn.recv()
    assert status == "ok", f"the {method!r} child raised:\n{payload}"
    assert p.exitcode == 0, p.exitcode
    _check(payload, f"multiprocessing {method!r} child")


def test_every_module_level_pool_and_lock_is_renewed_after_fork() -> None:
    """The audit stays complete: a module-level lock or pool added anywhere must be listed in forksafe."""
    import re
    from pathlib import Path

    from trnlang.runtime import forksafe

    root = Path(__file__).resolve().parents[2]
    pat = re.compile(r"^(\w+)\s*(?::[^=\n]*)?=\s*(?:threading\.(?:R?Lock|Condition|Event|Semaphore)\(|"
                     r"concurrent\.futures\.ThreadPoolExecutor\()", re.M)
    lazy_pool = re.compile(r"^\s+(\w+)\s*=\s*concurrent\.futures\.ThreadPoolExecutor\(", re.M)
    listed = {(m, a) for m, a, _ in forksafe.MODULE_STATE}
    own_reset = {("trnlang.runtime.hostpool", "_LOCK")}  # hostpool renews its lock and workers itself
    found = set()
    for pkg in ("trnlang", "stdlib_kernels", "codegen"):
        for f in (root / pkg).rglob("*.py"):
            mod = ".".join(f.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            text = f.read_text()
            found |= {(mod, name) for name in pat.findall(text)}
            found |= {(mod, name) for name in lazy_pool.findall(text)}
    assert ("trnlang.runtime.launch", "_host_pool") in found and ("trnlang.runtime.jit", "_pool_lock") in found
    missing = found - listed - own_reset
    assert not missing, f"not renewed in a forked child (add them to forksafe.MODULE_STATE): {sorted(missing)}"


def test_after_fork_renews_pools_and_held_locks() -> None:
    """What the child runs: held locks come back free, pools are dropped (made again on first use)."""
    from trnlang.runtime import forksafe, jit
    from trnlang.runtime import launch as util

    old_pool, old_lock = util._host_pool, jit._pool_lock
    jit._pool_lock.acquire()
    try:
        forksafe.after_fork_in_child()
        assert util._host_pool is None and jit._pool is None
        assert not jit._pool_lock.locked()
    finally:
        old_lock.release()
    del old_pool
