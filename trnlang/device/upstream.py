"""``trn upstream``: run PyTorch's own device-generic test files on ``trn`` and on the CPU.

PyTorch's device-generic tests (``instantiate_device_type_tests``) are written once and
instantiated per device type; with ``trn`` registered they are instantiated for it too. This
runner starts one worker process per test file (:mod:`trnlang.device.upstream_worker`), which
runs the file's CPU and ``trn`` tests with unittest and records each test as one JSON line
(outcome, exception, seconds, CPU fallbacks attempted). Then it pairs every ``trn`` test with
its CPU twin and writes ``docs/upstream_compatibility.md``: per file the passed / failed /
skipped counts on both devices, the tests that fail only on ``trn`` grouped by kind, and the
native rate per dtype (tests passing on the CPU that pass on ``trn`` with no CPU fallback).

Results are kept per file in ``--results`` (default ``~/.cache/trnlang/upstream``), so runs of
different files (or ``-k`` subsets) add up to one report. Nothing of PyTorch is copied into the
project: point the runner at a checkout's ``test/`` directory.

Example:
    .. code-block:: sh

        trn upstream /tmp/pt/test --files test_shape_ops,test_indexing -k flip -k index_put
        trn upstream /tmp/pt/test --files test_view_ops --strict      # TRN_FALLBACK=f64only on trn
        trn upstream /tmp/pt/test --files test_reductions --strict --update -k prod  # rerun a subset in place

``--strict`` runs the trn tests with ``TRN_FALLBACK=f64only``: any CPU fallback fails the test except
the documented one of calls on float64/complex128 data (many tests of other dtypes build float64
inputs with ``make_tensor`` or ``torch.randn(dtype=torch.double)``); those fallbacks are recorded
apart and the report counts how many native tests used them.

    >>> classify("AssertionError", "RuntimeError not raised")
    'error check missing'
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from typing import Any

from trnlang.device.upstream_differences import documented

__all__ = ["classify", "load_results", "pair_up", "markdown_report", "run", "add_parser", "main",
           "EXCLUDED_FROM_NATIVE"]

#: dtypes the NeuronCore has no arithmetic for: their tests are not counted in the native rate.
EXCLUDED_FROM_NATIVE = frozenset({"float64", "complex128"})

#: (kind, exception names or "", message substrings): the first match names a failure's kind.
_KINDS: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("timeout", ("Timeout",), ()),
    ("no native lowering (strict)", ("FallbackError",), ()),  # TRN_FALLBACK=f64only (or =error) refused it
    ("warning not emitted", (), ("not triggered", "warning", "Warning")),
    ("error check missing", (), ("not raised",)),
    ("error message differs", (), ("does not match",)),
    ("device rules", (), ("same device", "Expected all tensors to be on", "device type")),
    ("foreign storage", (), ("no device memory attached", "dlpack", "DLPack", "from_blob")),
    ("sparse / nested / quantized layout", (), ("sparse", "Sparse", "nested", "Nested", "quantized", "Quantized",
                                                "only strided tensors")),
    ("wrong values", ("AssertionError",), ("not close", "not equal", "mismatch", "Mismatched")),
    ("dtype differs", (), ("dtype", "Dtype")),
    ("kernel error", ("LaunchError", "TrnError", "CompileError", "TraceError"), ()),
]


def classify(exc: str, msg: str) -> str:
    """The kind of a ``trn`` failure, from its exception name and message.

    Example:
        >>> classify("Timeout", "test ran past 120 s")
        'timeout'
    """
    msg = msg.split("To execute this test")[0]  # torch's rerun hint names the test, not the failure
    for kind, excs, subs in _KINDS:
        if excs and exc not in excs:
            continue
        if subs and not any(s in msg for s in subs):
            continue
        return kind
    return f"other ({exc})" if exc else "other"


def load_results(path: str) -> dict[str, Any]:
    """Read one worker's JSON lines: ``{"tests": {id: record}, "import": ..., "import_error": ..., "crashes": n}``."""
    tests: dict[str, dict[str, Any]] = {}
    info: dict[str, Any] = {"tests": tests, "import": None, "import_error": None, "crashed": []}
    started: list[str] = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            ev = rec.get("event")
            if ev == "test":
                tests[rec["id"]] = rec
            elif ev == "start":
                started.append(rec["id"])
            elif ev == "import":
                info["import"] = rec
            elif ev == "import_error":
                info["import_error"] = rec
            elif ev == "meta":
                info["meta"] = rec
            elif ev == "update":  # a later -k rerun whose records (appended after it) replace the earlier ones
                info.setdefault("updates", []).append(rec)
    # a test that started and never finished (the worker was killed), or that killed its worker
    info["crashed"] = [t for t in started if t not in tests or tests[t]["exc"] == "WorkerCrash"]
    return info


def pair_up(tests: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Device-free test name -> {"cpu": record, "trn": record} (either may be missing)."""
    pairs: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for rec in tests.values():
        pairs[rec["key"]][rec["dev"]] = rec
    return dict(pairs)


def _passed(rec: dict[str, Any] | None) -> bool:
    return rec is not None and rec["outcome"] in ("pass", "xfail")


def file_summary(info: dict[str, Any]) -> dict[str, Any]:
    """Counts for one file: per device pass/fail/skip, trn-only failures, native rate per dtype."""
    pairs = pair_up(info["tests"])
    strict = bool(info.get("meta", {}).get("strict"))
    count: dict[str, Counter[str]] = {"cpu": Counter(), "trn": Counter()}
    for rec in info["tests"].values():
        o = rec["outcome"]
        count[rec["dev"]]["pass" if o == "xfail" else o] += 1
    only_trn: list[dict[str, Any]] = []
    native: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # dtype -> [native passes, CPU passes]
    via_wide = 0  # native passes that used the documented float64/complex128 fallback
    blockers: Counter[str] = Counter()  # op name -> tests it kept from passing natively
    for key, pr in sorted(pairs.items()):
        cpu, trn = pr.get("cpu"), pr.get("trn")
        if cpu is None or trn is None or not _passed(cpu):
            continue
        if trn["outcome"] == "fail":
            kind = classify(trn["exc"], trn["msg"])
            if strict and trn["fallbacks"] and kind != "timeout":  # a refused fallback, maybe re-raised by the test
                kind = "no native lowering (strict)"
            only_trn.append({"key": key, "kind": kind, "exc": trn["exc"], "msg": trn["msg"],
                             "documented": documented(key)})
        dts = trn["dtypes"] or ["(none)"]
        if trn["outcome"] == "skip" or any(d in EXCLUDED_FROM_NATIVE for d in dts):
            continue  # skipped on trn (e.g. @onlyCPU), or a dtype the hardware lacks
        slot = native[dts[0]]
        slot[1] += 1
        if _passed(trn) and not trn["fallbacks"]:
            slot[0] += 1
            via_wide += bool(trn.get("wide_fallbacks"))
        else:
            for op in trn["fallbacks"]:
                blockers[op] += 1
    nat = sum(v[0] for v in native.values())
    den = sum(v[1] for v in native.values())
    return {"cpu": dict(count["cpu"]), "trn": dict(count["trn"]), "only_trn": only_trn, "native": dict(native),
            "native_total": (nat, den), "native_via_wide": via_wide, "blockers": dict(blockers),
            "crashed": info["crashed"], "import_error": info["import_error"], "meta": info.get("meta", {}),
            "updates": info.get("updates", [])}


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "-"


def _failure_lines(summaries: dict[str, dict[str, Any]]) -> list[str]:
    """The report's trn-only failures: by kind, every one, and the documented differences with their reasons."""
    lines: list[str] = []
    kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for name, s in summaries.items():
        for f in s["only_trn"]:
            kinds[f["kind"]].append({**f, "file": name})
    lines += ["", "## trn-only failures by kind", ""]
    if not kinds:
        lines.append("None.")
    else:
        lines += ["| kind | count | example |", "|---|---|---|"]
        for kind, fs in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            ex = fs[0]
            msg = ex["msg"].splitlines()[0][:100].replace("|", "\\|") if ex["msg"] else ex["exc"]
            lines.append(f"| {kind} | {len(fs)} | `{ex['key']}`: {msg} |")
        lines += ["", "<details><summary>every trn-only failure</summary>", ""]
        for name, s in sorted(summaries.items()):
            for f in s["only_trn"]:
                msg = f["msg"].splitlines()[0][:140] if f["msg"] else ""
                doc = " **documented**" if f.get("documented") else ""
                lines.append(f"- {name} `{f['key']}` ({f['kind']}){doc}: {f['exc']}: {msg}")
        lines += ["", "</details>"]
    docs = [(name, f) for name, s in sorted(summaries.items()) for f in s["only_trn"] if f.get("documented")]
    if docs:
        lines += ["", "## Documented differences", "",
                  "trn-only failures understood and kept, each with its reason "
                  "(`trnlang/device/upstream_differences.py`; they still count above).", ""]
        lines += [f"- {name} `{f['key']}`: {f['documented']}." for name, f in docs]
    return lines


def _keys_text(keys: list[str]) -> str:
    """A selection of ``-k`` substrings for the report: up to three named, more counted (a rerun of a file's
    earlier failures names hundreds)."""
    if len(keys) <= 3:
        return " ".join(f"`-k {k}`" for k in keys)
    return f"{len(keys)} selected tests (`-k {keys[0]}`, ...)"


def markdown_report(summaries: dict[str, dict[str, Any]], *, source: str, torch_version: str) -> str:
    """The text of ``docs/upstream_compatibility.md`` for per-file summaries (:func:`file_summary`)."""
    lines = ["# PyTorch's device-generic tests on `trn`", "",
             "Generated by `trn upstream` (`trnlang/device/upstream.py`); do not edit by hand. Each file's "
             "`instantiate_device_type_tests` classes run on the CPU and on `trn` in one worker process; a `trn` "
             "test is paired with its CPU twin. **trn-only** = fails on `trn`, passes on the CPU. **native** = "
             "of the tests that pass on the CPU, those that pass on `trn` with no CPU fallback attempted other "
             "than the documented one of float64/complex128 calls "
             f"({', '.join(sorted(EXCLUDED_FROM_NATIVE))}-named tests excluded: the hardware has no such "
             "arithmetic; tests of other dtypes often build float64 inputs, and those calls may fall back: "
             "**via f64** counts the native tests that did). **strict** rows ran the trn tests with "
             "`TRN_FALLBACK=f64only` (any other fallback fails the test). Expected failures count as passed.", "",
             f"- tests: {source}", f"- torch {torch_version}",
             "- run: `trn upstream PATH_TO_PYTORCH_TEST_DIR [--files test_a,test_b] [-k SUBSTRING ...] [--strict]` "
             "(`--strict`: the trn tests run with `TRN_FALLBACK=f64only`; `trn upstream --help`)", ""]
    lines += ["## Per file", "",
              "| file | selection | trnlang commit | CPU pass / fail / skip | trn pass / fail / skip | "
              "trn-only failures | native | via f64 | mode |", "|---|---|---|---|---|---|---|---|---|"]
    for name, s in sorted(summaries.items()):
        meta = s["meta"]
        sel = _keys_text(meta.get("keys") or []) or "all"
        commit = meta.get("commit") or "?"
        for u in s.get("updates", []):
            sel += f"; rerun {_keys_text(u.get('keys') or []) or 'all'}"
            commit += f"; {u.get('commit') or '?'}"
        c, t = s["cpu"], s["trn"]
        nat, den = s["native_total"]
        if s["import_error"]:
            lines.append(f"| {name} | {sel} | {commit} | import failed: {s['import_error']['msg'][:80]} | | | | | |")
            continue
        n_doc = sum(1 for f in s["only_trn"] if f.get("documented"))
        only = f"{len(s['only_trn'])}" + (f" ({n_doc} documented)" if n_doc else "")
        lines.append(f"| {name} | {sel} | {commit} | {c.get('pass', 0)} / {c.get('fail', 0)} / {c.get('skip', 0)} | "
                     f"{t.get('pass', 0)} / {t.get('fail', 0)} / {t.get('skip', 0)} | {only} | "
                     f"{nat} / {den} ({_pct(nat, den)}) | {s.get('native_via_wide', 0)} | "
                     f"{'strict' if meta.get('strict') else 'fallback allowed'} |")
    lines += ["", "## Native rate per dtype", "", "Tests passing on the CPU, and of those, passing on `trn` natively.",
              ""]
    dts = sorted({d for s in summaries.values() for d in s["native"]})
    lines += ["| file | " + " | ".join(dts) + " |", "|---|" + "---|" * len(dts)]
    total: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, s in sorted(summaries.items()):
        cells = []
        for d in dts:
            a, b = s["native"].get(d, (0, 0))
            total[d][0] += a
            total[d][1] += b
            cells.append(f"{a}/{b}" if b else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **all** | " + " | ".join(f"**{_pct(*total[d])}**" for d in dts) + " |")
    lines += _failure_lines(summaries)
    block: Counter[str] = Counter()
    for s in summaries.values():
        block.update(s["blockers"])
    if block:
        lines += ["", "## Ops that keep the most tests from running natively", "",
                  "CPU fallbacks attempted by tests that pass on the CPU (a test counts once per op).", "",
                  "| op | tests |", "|---|---|"]
        lines += [f"| `{op}` | {n} |" for op, n in block.most_common(25)]
    crashed = [(n, c) for n, s in summaries.items() for c in s["crashed"]]
    if crashed:
        lines += ["", "## Worker crashes", ""] + [f"- {n}: `{c}`" for n, c in crashed]
    return "\n".join(lines) + "\n"


def _source_of(test_dir: str, given: str | None) -> str:
    if given:
        return given
    try:
        head = subprocess.run(["git", "-C", test_dir, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = ""
    return f"`{os.path.abspath(test_dir)}`" + (f" at commit {head}" if head else "")


def _trnlang_commit() -> str:
    """The trnlang checkout's short commit (``+dirty`` when tracked files differ), or ``""``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+dirty" if head and dirty else "")


def run_one(test_dir: str, name: str, results: str, *, keys: list[str] | None, strict: bool, timeout: float,
            fresh: bool = True, restarts: int = 3, update: bool = False) -> dict[str, Any]:
    """Run one file in worker processes (restarted after a crash) and return :func:`load_results` of it.

    ``update``: run the selection into a scratch file, then append its records to the file's results after an
    ``update`` line (they replace the earlier records of the same tests; the report names the rerun).
    """
    final = os.path.join(results, f"{name}.jsonl")
    out = os.path.join(results, f"{name}.update.tmp") if update else final
    if (fresh or update) and os.path.exists(out):
        os.remove(out)
    meta = {"keys": keys, "strict": strict, "timeout": timeout, "commit": _trnlang_commit()}
    with open(out, "a") as f:
        f.write(json.dumps({"event": "meta", **meta}) + "\n")
    cmd = [sys.executable, "-m", "trnlang.device.upstream_worker", test_dir, name, out, "--timeout", str(timeout)]
    for k in keys or []:
        cmd += ["-k", k]
    if strict:
        cmd.append("--strict")
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    log = os.path.join(results, f"{name}.log")
    for _ in range(restarts + 1):
        with open(log, "a") as lf:
            rc = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env).returncode
        if rc in (0, 3):
            break
        _mark_crash(out, rc)  # the test that was running when the worker died fails as a crash
    if update:
        with open(out) as src, open(final, "a") as dst:
            dst.write(json.dumps({"event": "update", **meta}) + "\n")
            for line in src:
                if '"event": "meta"' not in line:
                    dst.write(line)
        os.remove(out)
    return load_results(final)


def _mark_crash(out: str, rc: int) -> None:
    """Record the test a dead worker was running as a failure, so the restarted worker moves on."""
    last = None
    done = set()
    with open(out) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("event") == "start":
                last = rec["id"]
            elif rec.get("event") == "test":
                done.add(rec["id"])
    if last is None or last in done:
        return
    dev = "cpu" if last.split(".")[0].endswith("CPU") else "trn"
    from trnlang.device.upstream_worker import dtypes_of, test_key

    cls, _, method = last.partition(".")
    rec = {"event": "test", "id": last, "dev": dev, "key": test_key(cls, method), "dtypes": dtypes_of(method),
           "outcome": "fail", "exc": "WorkerCrash", "msg": f"the worker process died (exit {rc})", "secs": 0.0,
           "fallbacks": {}}
    with open(out, "a") as f:
        f.write(json.dumps(rec) + "\n")


def run(test_dir: str, files: list[str], *, results: str, md: str | None, keys: list[str] | None = None,
        strict: bool = False, timeout: float = 120.0, source: str | None = None, progress: bool = True,
        update: bool = False) -> int:
    """Run ``files`` (module names) from ``test_dir``; write the report over every file in ``results``.

    ``files`` may be empty: the report is then regenerated from the results already in ``results``.
    ``update``: the runs replace only the selected tests' records (see :func:`run_one`).
    Returns the number of trn-only failures in the files just run.
    """
    os.makedirs(results, exist_ok=True)
    fails = 0
    for name in files:
        t0 = time.time()
        info = run_one(test_dir, name, results, keys=keys, strict=strict, timeout=timeout, update=update)
        s = file_summary(info)
        fails += len(s["only_trn"])
        if progress:
            c, t = s["cpu"], s["trn"]
            nat, den = s["native_total"]
            err = f" IMPORT FAILED: {s['import_error']['msg'][:100]}" if s["import_error"] else ""
            print(f"{name}: CPU {c.get('pass', 0)}/{sum(c.values())} passed, trn {t.get('pass', 0)}/"
                  f"{sum(t.values())}, trn-only failures {len(s['only_trn'])}, native {nat}/{den} "
                  f"({time.time() - t0:.0f} s){err}", flush=True)
    summaries = {}
    torch_version = "?"
    for fn in sorted(os.listdir(results)):
        if fn.endswith(".jsonl"):
            info = load_results(os.path.join(results, fn))
            if info["import"]:
                torch_version = info["import"].get("torch", torch_version)
            summaries[fn[:-6]] = file_summary(info)
    if md:
        with open(md, "w") as f:
            f.write(markdown_report(summaries, source=_source_of(test_dir, source), torch_version=torch_version))
        if progress:
            print(f"wrote {md}")
    return fails


DEFAULT_FILES = ("test_shape_ops", "test_indexing", "test_view_ops", "test_sort_and_select", "test_reductions",
                 "test_type_promotion")


def _cmd(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.test_dir):
        print(f"trn upstream: error: no such directory: {args.test_dir}", file=sys.stderr)
        return 2
    files = [f.strip().removesuffix(".py") for f in args.files.split(",") if f.strip()] if args.files \
        else [] if args.report_only else list(DEFAULT_FILES)
    missing = [f for f in files if not os.path.exists(os.path.join(args.test_dir, f + ".py"))]
    if missing:
        print(f"trn upstream: error: not in {args.test_dir}: {', '.join(missing)}", file=sys.stderr)
        return 2
    md = None if args.no_md else (args.md or _default_md())
    fails = run(args.test_dir, files, results=args.results, md=md, keys=args.k, strict=args.strict,
                timeout=args.timeout, source=args.source, update=args.update)
    return 1 if (fails and args.fail_on_trn_only) else 0


def _default_md() -> str | None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    docs = os.path.join(root, "docs")
    return os.path.join(docs, "upstream_compatibility.md") if os.path.isdir(docs) else None


def add_parser(sub: Any) -> None:
    """Add the ``upstream`` subcommand to the ``trn`` command's subparsers."""
    p = sub.add_parser(
        "upstream",
        help="run PyTorch's device-generic test files on trn and on the CPU; write docs/upstream_compatibility.md",
        description="Run the instantiate_device_type_tests classes of PyTorch test files (from a checkout's test/ "
        "directory) on the trn device and on the CPU, one worker process per file, and report per file "
        "passed/failed/skipped on both, trn-only failures by kind and the native rate per dtype.",
    )
    p.add_argument("test_dir", metavar="PATH_TO_PYTORCH_TEST_DIR")
    p.add_argument("--files", metavar="A,B", default=None,
                   help=f"test files (module names) to run (default: {','.join(DEFAULT_FILES)})")
    p.add_argument("-k", action="append", default=None, metavar="SUBSTRING",
                   help="only tests whose name contains SUBSTRING (repeatable: any of them)")
    p.add_argument("--strict", action="store_true",
                   help="run the trn tests with TRN_FALLBACK=f64only: every CPU fallback fails the test except the "
                   "documented one of float64/complex128 calls (counted apart)")
    p.add_argument("--update", action="store_true",
                   help="replace only the selected tests' records in the file's existing results (a -k rerun)")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing (unless --files is given): regenerate the report from the results in --results")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S", help="seconds per test (default 120)")
    p.add_argument("--results", metavar="DIR",
                   default=os.path.join(os.path.expanduser("~"), ".cache", "trnlang", "upstream"),
                   help="per-file results; the report covers every file in it (default ~/.cache/trnlang/upstream)")
    p.add_argument("--source", metavar="TEXT", default=None,
                   help="where the tests came from, for the report (default: the directory and its git commit)")
    p.add_argument("--md", metavar="PATH", default=None, help="report path (default docs/upstream_compatibility.md)")
    p.add_argument("--no-md", action="store_true", help="do not write the report")
    p.add_argument("--fail-on-trn-only", action="store_true", help="exit 1 when a test fails only on trn")
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    """``python -m trnlang.device.upstream ...``: the same as ``trn upstream ...``."""
    parser = argparse.ArgumentParser(prog="trn")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["upstream", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
