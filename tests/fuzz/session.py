"""A budget-bound fuzz session: seeds in batches, each batch in a child process, crashes reported by seed.

Each child (``python -X faulthandler -m tests.fuzz --child --start S --count N``) runs its cases
in-process and prints one JSON line before each case (``{"begin": seed}``) and one after it
(``{"result": {...}}``). A child that dies (SIGSEGV, SIGABRT, ...) leaves a ``begin`` without its
``result``: that seed is recorded as a ``crash`` (with the signal and the tail of the child's stderr,
which holds faulthandler's traceback) and the batch resumes in a new child from the next seed.

Children share a throwaway ``TRN_CACHE_DIR`` (thousands of random kernels must not fill the user's
compile cache) and run with ``TRN_NUM_THREADS=1``.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from tests.fuzz.harness import EXPLAINED, FAILURES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Summary:
    """What a session found: one record per case (``seed``, ``template``, ``cls``, ``detail``, ``secs``)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    wall: float = 0.0

    @property
    def counts(self) -> collections.Counter[str]:
        return collections.Counter(r["cls"] for r in self.records)

    @property
    def failures(self) -> list[dict[str, Any]]:
        return sorted((r for r in self.records if r["cls"] in FAILURES), key=lambda r: (r["seed"] is None, r["seed"]))

    def report(self, examples: int = 3) -> str:
        c = self.counts
        by_t = collections.Counter(r["template"] for r in self.records)
        lines = [f"fuzz: {len(self.records)} cases in {self.wall:.1f} s wall "
                 f"({', '.join(f'{t} {n}' for t, n in sorted(by_t.items()))})",
                 "  classes: " + ", ".join(f"{k} {c[k]}" for k in ("ok", *EXPLAINED, *FAILURES) if c[k])]
        for cls in EXPLAINED:
            recs = [r for r in self.records if r["cls"] == cls]
            for r in recs[:examples]:
                lines.append(f"  explained {cls}: seed {r['seed']} ({r['template']}): {r['detail']}")
        for r in self.failures:
            lines.append(f"  FAIL {r['cls']}: seed {r['seed']} ({r['template']}): {r['detail']}")
        if self.failures:
            lines.append("  repro: .venv/bin/python -m tests.fuzz --repro SEED  (prints the kernel source and runs it)")
        return "\n".join(lines)


def _child_env(cache_dir: str, extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"TRN_CACHE_DIR": cache_dir, "TRN_NUM_THREADS": "1", "PYTHONPATH": ROOT + os.pathsep +
                env.get("PYTHONPATH", "")})
    env.pop("TRN_INTERPRET", None)  # the harness chooses the executor per launch
    env.update(extra or {})
    return env


def _run_batch(start: int, count: int, env: dict[str, str], on_record: Callable[[dict[str, Any]], None]) -> None:
    seed, end = start, start + count
    while seed < end:
        with tempfile.TemporaryFile("w+") as err:
            p = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "tests.fuzz", "--child", "--start",
                                  str(seed), "--count", str(end - seed)], stdout=subprocess.PIPE, stderr=err,
                                 text=True, env=env, cwd=ROOT)
            cur: int | None = None
            assert p.stdout is not None
            for line in p.stdout:
                if not line.startswith("{"):
                    continue
                msg = json.loads(line)
                if "begin" in msg:
                    cur = int(msg["begin"])
                elif "result" in msg:
                    on_record(msg["result"])
                    seed, cur = int(msg["result"]["seed"]) + 1, None
            rc = p.wait()
            err.seek(0)
            tail = err.read()[-3000:]
        if rc == 0 and cur is None:
            continue
        what = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        if cur is None:  # died outside a case (import error, ...): report once and give up on the batch
            on_record({"seed": None, "template": "-", "cls": "crash", "detail": f"child {what}: {tail}", "secs": 0})
            return
        on_record({"seed": cur, "template": "?", "cls": "crash",
                   "detail": f"the process died ({what}) running this case; stderr tail:\n{tail}", "secs": 0})
        seed = cur + 1


def run_session(start: int, count: int, jobs: int = 2, batch: int = 250, env: dict[str, str] | None = None,
                progress: Callable[[Summary], None] | None = None) -> Summary:
    """Run seeds ``start .. start+count-1`` in child processes (``jobs`` at a time, ``batch`` seeds each)."""
    t0 = time.perf_counter()
    summary = Summary()
    lock = threading.Lock()
    cache_dir = tempfile.mkdtemp(prefix="trn-fuzz-cache-")

    def on_record(rec: dict[str, Any]) -> None:
        with lock:
            summary.records.append(rec)
            summary.wall = time.perf_counter() - t0
            if progress is not None:
                progress(summary)

    try:
        cenv = _child_env(cache_dir, env)
        batches = [(s, min(batch, start + count - s)) for s in range(start, start + count, batch)]
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for f in [pool.submit(_run_batch, s, n, cenv, on_record) for s, n in batches]:
                f.result()
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    summary.records.sort(key=lambda r: (r["seed"] is None, r["seed"] or 0))
    summary.wall = time.perf_counter() - t0
    return summary


def child(start: int, count: int) -> None:
    """The child side: run the cases in-process, one JSON line before and after each."""
    from tests.fuzz.harness import run_case

    crash_at = int(os.environ.get("TRN_FUZZ_CRASH_AT", "-1"))  # tests of the crash path only
    out = sys.stdout
    for seed in range(start, start + count):
        out.write(json.dumps({"begin": seed}) + "\n")
        out.flush()
        if seed == crash_at:
            import ctypes

            ctypes.string_at(0)  # SIGSEGV, as a miscompiled kernel would
        res = run_case(seed)
        out.write(json.dumps({"result": res.as_dict()}) + "\n")
        out.flush()
