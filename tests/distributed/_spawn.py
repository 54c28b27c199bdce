"""Run a worker function in N real processes joined by ``torch.distributed`` on loopback, with a timeout.

Parent side: :func:`run` picks a free port, starts ``python -m tests.distributed._spawn <target> ...`` once
per rank (``TRN_FALLBACK=error``), waits at most ``timeout`` seconds (then kills the processes it started
and fails with their output), and returns what each rank's function returned (``torch.save``-able).

Child side: initialises the process group (``backend``, ``tcp://127.0.0.1:<port>``, a group timeout),
calls ``fn(rank, world_size)`` and saves its result.
"""

from __future__ import annotations

import datetime
import importlib
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(target: str, world_size: int = 2, *, backend: str | None = "cpu:gloo,trn:trn", timeout: float = 300,
        pg_timeout_s: float = 60, env: dict[str, str] | None = None, expect_fail: bool = False) -> list[Any]:
    """Run ``target`` (``"module:function"``) on ``world_size`` ranks; return the ranks' results (or outputs).

    With ``expect_fail`` the ranks may exit non-zero; the result is then each rank's
    ``{"rc": ..., "stderr": ..., "result": ...}``.
    """
    for _ in range(3):  # the free port can be taken before rank 0 listens on it (a busy shared machine)
        res = _attempt(target, world_size, backend, timeout, pg_timeout_s, env, expect_fail)
        if res is not None:
            return res
    raise AssertionError(f"{target}: no free port after 3 tries (EADDRINUSE each time)")


def _attempt(target: str, world_size: int, backend: str | None, timeout: float, pg_timeout_s: float,
             env: dict[str, str] | None, expect_fail: bool) -> list[Any] | None:
    """One run of :func:`run` on a fresh port; None if rank 0 could not listen on it (port taken meanwhile)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as out:
        e = dict(os.environ, TRN_FALLBACK="error", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        e.update(env or {})
        procs, logs = [], []
        for rank in range(world_size):
            log = open(os.path.join(out, f"{rank}.log"), "w+")  # noqa: SIM115 - closed below
            logs.append(log)
            args = [sys.executable, "-m", "tests.distributed._spawn", target, str(rank), str(world_size), str(port),
                    out, backend or "", str(pg_timeout_s)]
            procs.append(subprocess.Popen(args, cwd=str(ROOT), env=e, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout
        timed_out = False
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                timed_out = True
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        texts = []
        for log in logs:
            log.seek(0)
            texts.append(log.read())
            log.close()
        results = []
        for rank in range(world_size):
            path = os.path.join(out, f"{rank}.pt")
            results.append(_load(path) if os.path.exists(path) else None)
        if any("EADDRINUSE" in t for t in texts) and any(p.returncode != 0 for p in procs):
            return None
        if timed_out:
            raise AssertionError(f"{target}: ranks still running after {timeout} s (killed)\n" + _tail(texts))
        if expect_fail:
            return [{"rc": p.returncode, "output": t, "result": r} for p, t, r in zip(procs, texts, results)]
        bad = [r for r, p in enumerate(procs) if p.returncode != 0 or results[r] is None]
        assert not bad, f"{target}: ranks {bad} failed\n" + _tail(texts)
        return results


def _load(path: str) -> Any:
    import torch

    return torch.load(path, weights_only=False)


def _tail(texts: list[str]) -> str:
    return "\n".join(f"--- rank {r} ---\n{t[-4000:]}" for r, t in enumerate(texts))


def _child(target: str, rank: int, world_size: int, port: int, out: str, backend: str, pg_timeout_s: float) -> None:
    import torch
    import torch.distributed as dist

    import trnlang.distributed

    assert hasattr(torch, "trn") and trnlang.distributed.is_registered(), "trn / its c10d backend not registered"
    mod_name, _, fn_name = target.partition(":")
    fn = getattr(importlib.import_module(mod_name), fn_name)
    if backend:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=pg_timeout_s))
    try:
        result = fn(rank, world_size)
        torch.save(result, os.path.join(out, f"{rank}.pt"))
    finally:
        if backend and dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6],
           float(sys.argv[7]))
