"""The ``trn`` command: ``info``, ``cache``, ``coverage``, ``bench``, ``profile``.

Each subcommand is one ``_cmd_<name>(args) -> int`` function registered in
:func:`build_parser`; ``main`` returns the exit code instead of exiting, so tests
can call it directly.

Example:
    >>> from trnlang.cli import main
    >>> main(["info", "--target", "trn1"])  # doctest: +SKIP
    trnlang 0.1.0
    ...
    0
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import textwrap
from collections.abc import Callable
from importlib import metadata
from typing import Any

from trnlang._version import __version__
from trnlang.sim.targets import device_table, get_target

__all__ = ["build_parser", "main"]


def _dist_version(name: str) -> str:
    # Read installed metadata instead of importing: `import torch` costs seconds and runs torch's
    # backend autoload (which would import our own device layer just to print a version).
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _host_cpu() -> tuple[str, list[str]]:
    """Host CPU name and enabled features, as LLVM sees them (what codegen targets)."""
    from codegen import llvm  # the one door to LLVM

    features = [f[1:] for f in llvm.host_cpu_features().split(",") if f.startswith("+")]
    return llvm.host_cpu_name(), sorted(features)


def _cmd_info(args: argparse.Namespace) -> int:
    try:
        target = get_target(args.target)
    except ValueError as exc:  # unknown name, from --target or $TRN_TARGET
        print(f"trn info: error: {exc}", file=sys.stderr)
        return 2
    cpu, features = _host_cpu()
    rows = [
        ("python", f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})"),
        ("torch", _dist_version("torch")),
        ("llvmlite", _dist_version("llvmlite")),
        ("numpy", _dist_version("numpy")),
        ("host CPU", cpu),
    ]
    width = max(len(k) for k, _ in rows + [("features", "")])
    print(f"trnlang {__version__}")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    wrapped = textwrap.wrap(" ".join(features), width=100 - width - 2) or ["(none reported)"]
    for i, line in enumerate(wrapped):
        print(f"{'features' if i == 0 else '':<{width}}  {line}")
    print()
    print(device_table(target))
    return 0


def _default_md_path() -> str | None:
    """docs/op_compatibility.md of the source tree (editable installs), if that folder exists."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    docs = os.path.join(root, "docs")
    return os.path.join(docs, "op_compatibility.md") if os.path.isdir(docs) else None


def _cmd_coverage(args: argparse.Namespace) -> int:
    """Run OpInfo samples on trn vs CPU; print the table; write --json and the markdown report."""
    import json

    import torch

    from trnlang.device.coverage import markdown_report, run_coverage, summary_table

    ops = [o.strip() for o in args.ops.split(",") if o.strip()] if args.ops else None
    try:
        dtypes = [getattr(torch, d.strip()) for d in args.dtypes.split(",") if d.strip()]
    except AttributeError as exc:
        print(f"trn coverage: error: unknown dtype in --dtypes: {exc}", file=sys.stderr)
        return 2
    shard = None
    if args.shard:
        i, _, n = args.shard.partition("/")
        shard = (int(i), int(n))
    if args.jobs > 1 and shard is None:
        report = _coverage_in_parallel(args)
    else:
        report = run_coverage(ops=ops, limit=args.limit, dtypes=dtypes, backward=not args.no_backward,
                              max_samples=args.max_samples, progress=not args.no_progress, shard=shard)
    if ops and report["compared"] + report["skipped"] == 0:
        print(f"trn coverage: error: no OpInfo named {', '.join(ops)}", file=sys.stderr)
        return 2
    print(f"trn coverage: {len(report['ops'])} OpInfos, torch {torch.__version__}, "
          f"{'forward+backward' if not args.no_backward else 'forward'} ({report['dtype']}), forward (others)")
    print(summary_table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        print(f"wrote {args.json}")
    md = args.md if args.md else (None if (ops or args.limit) else _default_md_path())
    if md and not args.no_md:
        with open(md, "w") as f:
            f.write(markdown_report(report))
        print(f"wrote {md}")
    return 0


def _coverage_in_parallel(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``args.jobs`` coverage worker processes on disjoint shards of the OpInfos and merge their reports."""
    import json
    import subprocess
    import tempfile
    import time

    from trnlang.device.coverage import merge_reports

    base = [sys.executable, "-m", "trnlang.cli", "coverage", "--no-md", "--no-progress", "--dtypes", args.dtypes]
    for flag, val in (("--ops", args.ops), ("--limit", args.limit), ("--max-samples", args.max_samples)):
        if val is not None:
            base += [flag, str(val)]
    if args.no_backward:
        base.append("--no-backward")
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for i in range(args.jobs):
            out = os.path.join(tmp, f"shard{i}.json")
            log = open(os.path.join(tmp, f"shard{i}.log"), "w")
            procs.append((subprocess.Popen([*base, "--shard", f"{i}/{args.jobs}", "--json", out], stdout=log,
                                           stderr=subprocess.STDOUT), out, log))
        t0 = time.time()
        while any(p.poll() is None for p, _, _ in procs):
            if not args.no_progress:
                done = sum(p.poll() is not None for p, _, _ in procs)
                print(f"\rtrn coverage: {args.jobs} workers, {done} done, {time.time() - t0:.0f} s", end="",
                      file=sys.stderr, flush=True)
            time.sleep(2)
        if not args.no_progress:
            print(file=sys.stderr)
        reports = []
        for i, (p, out, log) in enumerate(procs):
            log.close()
            if p.returncode != 0 or not os.path.exists(out):
                with open(log.name) as f:
                    tail = f.read()[-2000:]
                raise SystemExit(f"trn coverage: worker {i} failed (exit {p.returncode}):\n{tail}")
            with open(out) as f:
                reports.append(json.load(f))
    return merge_reports(reports)


def _add_coverage_parser(sub: Any) -> None:
    p = sub.add_parser(
        "coverage",
        help="run PyTorch's OpInfo samples on the trn device vs the CPU and report op coverage",
        description="Run every OpInfo of torch's op_db (or a selection) on the trn device and on the CPU, forward "
        "and backward, and compare. Prints a table (compared / passing natively / passing through the CPU "
        "fallback / failing / skipped); a full run also writes docs/op_compatibility.md.",
    )
    p.add_argument("--ops", metavar="A,B", default=None, help="comma-separated OpInfo names (e.g. add,softmax)")
    p.add_argument("--limit", metavar="N", type=int, default=None, help="only the first N selected OpInfos")
    p.add_argument("--max-samples", metavar="N", type=int, default=None, help="at most N samples per op and dtype")
    p.add_argument("--jobs", "-j", metavar="N", type=int, default=1,
                   help="run N worker processes on disjoint shards of the OpInfos (default 1)")
    p.add_argument("--shard", metavar="I/N", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dtypes", metavar="D,E", default="float32,bfloat16",
                   help="dtypes to run (the first decides the summary; default float32,bfloat16)")
    p.add_argument("--no-backward", action="store_true", help="compare forward results only")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write the report (compared, native_pass, fallback_pass, fail, skipped, ops) as JSON")
    p.add_argument("--md", metavar="PATH", default=None,
                   help="markdown report path (default: docs/op_compatibility.md, for full runs only)")
    p.add_argument("--no-md", action="store_true", help="do not write the markdown report")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_coverage)


# ------------------------------------------------------------------------------------------ trn cache

_HEX = set("0123456789abcdef")


def _cache_paths() -> tuple[str, str, str]:
    """(base, JIT object directory, autotune directory), computed like ``runtime.jit`` / ``runtime.autotune``.

    Nothing is created: ``trn cache info`` on a fresh machine must not make directories.
    """
    from trnlang import config

    base = config.read().cache_dir  # the environment as it is now (the snapshot is not replaced)
    return base, os.path.join(base, f"jit-{os.getuid()}"), os.path.join(base, "autotune")


def _is_jit_entry(name: str) -> bool:
    stem = name[:-4] if name.endswith(".bin") else ""
    return (len(stem) == 64 and set(stem) <= _HEX) or name.startswith(".tmp-")


def _is_autotune_entry(name: str) -> bool:
    return name.endswith(".json")


def _cache_files(d: str, match: Callable[[str], bool]) -> tuple[list[tuple[str, int]], str | None]:
    """Regular files (not symlinks) directly in ``d`` whose names ``match``, with sizes; or a reason to skip ``d``."""
    if os.path.islink(d):
        return [], f"{d} is a symlink; not followed"
    if not os.path.isdir(d):
        return [], None
    files = []
    try:
        with os.scandir(d) as it:
            for e in it:
                if match(e.name) and e.is_file(follow_symlinks=False):
                    try:
                        files.append((e.path, e.stat(follow_symlinks=False).st_size))
                    except OSError:
                        pass
    except OSError as exc:
        return [], f"{d}: {exc}"
    return sorted(files), None


def _fmt_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _cmd_cache(args: argparse.Namespace) -> int:
    base, jit_dir, tune_dir = _cache_paths()
    jit, jit_note = _cache_files(jit_dir, _is_jit_entry)
    tune, tune_note = _cache_files(tune_dir, _is_autotune_entry)
    for note in (jit_note, tune_note):
        if note:
            print(f"trn cache: warning: {note}", file=sys.stderr)
    if args.action == "info":
        jit_bytes, tune_bytes = sum(s for _, s in jit), sum(s for _, s in tune)
        rows = [("directory", base + ("" if os.path.isdir(base) else "  (does not exist)")),
                ("JIT objects", f"{jit_dir}"),
                ("entries", f"{len(jit)}"),
                ("total bytes", f"{jit_bytes + tune_bytes} ({_fmt_size(jit_bytes + tune_bytes)})"),
                ("autotune", f"{tune_dir}"),
                ("autotune entries", f"{len(tune)} ({_fmt_size(tune_bytes)})")]
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            print(f"{key:<{width}}  {value}")
        if jit:
            from trnlang.runtime.jit import cached_kernel_names

            stems = [os.path.basename(p)[:-4] for p, _ in jit if p.endswith(".bin")]
            names = cached_kernel_names(stems)
            if names:
                print("variants per kernel (authenticated entries):")
                for name, n in sorted(names.items(), key=lambda kv: (-kv[1], kv[0])):
                    print(f"  {n:6d}  {name}")
        return 0
    freed, failed = 0, 0
    for what, d, files in (("JIT object(s)", jit_dir, jit), ("autotune file(s)", tune_dir, tune)):
        removed = 0
        for path, size in files:
            try:
                os.unlink(path)
            except FileNotFoundError:  # a concurrent clear got there first
                continue
            except OSError as exc:
                print(f"trn cache: could not remove {path}: {exc}", file=sys.stderr)
                failed += 1
                continue
            removed += 1
            freed += size
        print(f"removed {removed} {what} from {d}")
    print(f"freed {freed} bytes ({_fmt_size(freed)})")
    return 1 if failed else 0


def _add_cache_parser(sub: Any) -> None:
    p = sub.add_parser(
        "cache",
        help="inspect or clear the compiled-kernel cache ($TRN_CACHE_DIR)",
        description="Show or clear trnlang's on-disk caches under $TRN_CACHE_DIR (default ~/.cache/trnlang): the "
        "JIT's compiled objects (jit-<uid>/*.bin) and autotune results (autotune/*.json). `clear` removes only "
        "those files; it leaves other files alone and never follows symlinks.",
    )
    p.add_argument("action", choices=["info", "clear"], help="info: directory, entries, bytes; clear: remove them")
    p.set_defaults(func=_cmd_cache)


# ------------------------------------------------------------------------------------------ trn bench

_BENCHMARKS = {  # name -> (script, extra arguments for --quick)
    "jit": ("bench_jit.py", ["--quick"]),
    "gemm": ("bench_gemm.py", ["--sizes", "512", "--repeat", "2"]),
    "device": ("bench_device.py", ["--repeat", "3", "--iters", "100"]),
}


def _benchmarks_dir() -> str | None:
    """benchmarks/ of the source tree (next to the package, for editable installs), if it exists."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = os.path.join(root, "benchmarks")
    return d if os.path.isdir(d) else None


def _cmd_bench(args: argparse.Namespace) -> int:
    import subprocess

    d = _benchmarks_dir()
    if d is None:
        print("trn bench: error: benchmarks/ not found next to the trnlang package (it ships with the source "
              "tree; use an editable install)", file=sys.stderr)
        return 2
    names = [args.only] if args.only else list(_BENCHMARKS)
    status = 0
    for name in names:
        script, quick = _BENCHMARKS[name]
        path = os.path.join(d, script)
        if not os.path.isfile(path):
            print(f"trn bench: error: {path} not found", file=sys.stderr)
            status = status or 2
            continue
        cmd = [sys.executable, path, *(quick if args.quick else [])]
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        rc = subprocess.run(cmd, cwd=os.path.dirname(d)).returncode  # output streams straight to our terminal
        if rc != 0:
            print(f"trn bench: {script} exited with {rc}", file=sys.stderr)
            status = status or 1
        print(flush=True)
    return status


def _add_bench_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="run the benchmarks against torch CPU",
        description="Run the benchmark scripts of benchmarks/ (" + ", ".join(s for s, _ in _BENCHMARKS.values())
        + ") one after another as subprocesses with this Python, streaming their output.",
    )
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    p.add_argument("--only", metavar="NAME", choices=list(_BENCHMARKS),
                   help=f"run one benchmark: {', '.join(_BENCHMARKS)}")
    p.set_defaults(func=_cmd_bench)


# ------------------------------------------------------------------------------------------ trn profile


class _LaunchRecorder:
    """Counts launches per specialization (one ``Compiled`` and grid) while a script runs, through the public
    launch observer (:func:`trnlang.runtime.launch.observe_launches`)."""

    def __init__(self) -> None:
        # (id(comp), grid) -> [comp, grid, n, kernel, first launch's args]
        self.launches: dict[tuple[int, tuple[int, ...]], list[Any]] = {}

    def _note(self, kfn: Any, comp: Any, args: Any, grid: tuple[int, ...]) -> None:
        rec = self.launches.get((id(comp), grid))
        if rec is None:
            # holds comp (its id stays unique) and the args: a variant with runtime sizes is simulated on these
            self.launches[(id(comp), grid)] = [comp, grid, 1, kfn, args]
        else:
            rec[2] += 1

    def __enter__(self) -> _LaunchRecorder:
        from trnlang.runtime.launch import observe_launches

        self._obs = observe_launches(self._note)
        self._obs.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._obs.__exit__(*exc)

    def labels(self) -> list[str]:
        """One name per recorded specialization: the kernel's signature (dtypes, shapes), then ``#2``, ``#3``
        for specializations whose signatures coincide (e.g. different constants)."""
        out: list[str] = []
        seen: dict[str, int] = {}
        for comp, *_ in self.launches.values():
            sig = comp.ir.signature()
            seen[sig] = seen.get(sig, 0) + 1
            out.append(sig if seen[sig] == 1 else f"{sig}#{seen[sig]}")
        return out


def _run_script(path: str, argv: list[str]) -> int:
    import runpy
    import traceback

    old_argv, old_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        sys.argv = old_argv
        if sys.path and sys.path[0] != old_path0:
            del sys.path[0]


def _simulate(comp: Any, grid: tuple[int, ...], kfn: Any, args: Any) -> Any:
    """The simulated profile of a recorded variant; one whose sizes are runtime symbols (shape-polymorphic
    kernels, e.g. torch.compile's generated ones) is traced again on the exact shapes of its first launch."""
    from trnlang.sim.profile import Profile

    try:
        return Profile.simulate(comp.ir, grid)
    except Exception:
        if kfn is None or args is None:
            raise
        return Profile.simulate(kfn.trace(*args, grid=grid), grid)


def _cmd_profile(args: argparse.Namespace) -> int:
    import json

    from trnlang.sim.profile import Profile

    if not os.path.isfile(args.script):
        print(f"trn profile: error: no such script: {args.script}", file=sys.stderr)
        return 2
    from trnlang.distributed import cost

    with _LaunchRecorder() as rec, cost.record() as collectives:
        rc = _run_script(args.script, list(args.script_args))
    if not rec.launches and not collectives.records:
        print(f"trn profile: {args.script} launched no trn kernel", file=sys.stderr)
        return rc or 1
    trace = cost.trace_path(args.trace)  # one file per rank when the script ran under torchrun
    events: list[dict[str, Any]] = []
    per_kernel: dict[str, list[float]] = {}  # name -> [launches, time us, peak-time us, dma-peak-time us]
    pages: list[tuple[str, Profile]] = []  # for --html
    for pid, ((comp, grid, n, kfn, kargs), label) in enumerate(zip(rec.launches.values(), rec.labels()), start=1):
        try:
            p = _simulate(comp, grid, kfn, kargs)
        except Exception as exc:  # a kernel the simulator cannot schedule must not lose the others
            print(f"trn profile: warning: cannot simulate {label} grid {grid}: {exc}", file=sys.stderr)
            continue
        # one row and one trace name per specialization and grid
        name = label if grid == (1,) else f"{label}/grid={'x'.join(map(str, grid))}"
        if args.html:
            pages.append((f"{name} ({n} launch{'es' * (n != 1)})", p))
        for ev in p.trace_events(args.max_events):
            ev["pid"] = pid
            if ev["name"] == "process_name":
                ev["args"] = {"name": f"{name} on {p.target.name} ({n} launch{'es' * (n != 1)})"}
            events.append(ev)
        agg = per_kernel.setdefault(name, [0, 0.0, 0.0, 0.0])
        agg[0] += n
        agg[1] += n * p.time_us
        agg[2] += n * p.time_us * p.mfu
        agg[3] += n * p.time_us * p.mbu
        if args.summary:
            print(p.summary())
            print()
    if collectives.records:  # collectives on trn tensors: simulated on the target's interconnect
        events.extend(collectives.trace_events(pid=len(rec.launches) + 1))
    with open(trace, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, f)
    width = max(len("kernel"), *(len(k) for k in per_kernel)) if per_kernel else len("kernel")
    print(f"{'kernel':<{width}}  {'launches':>8}  {'sim us/launch':>13}  {'MFU':>6}  {'MBU':>6}")
    for name, (n, t, mf, mb) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:<{width}}  {int(n):>8}  {t / n:>13,.2f}  {mf / t if t else 0:>6.3f}  {mb / t if t else 0:>6.3f}")
    if collectives.records:
        kernels_s = sum(t for _, t, _, _ in per_kernel.values()) * 1e-6
        print(collectives.summary())
        print(f"compute (kernels) {kernels_s * 1e6:,.2f} us vs communication (collectives) "
              f"{collectives.total_s * 1e6:,.2f} us, simulated, not overlapped")
    print(f"wrote {trace} ({len(rec.launches)} specialization(s); open in https://ui.perfetto.dev)")
    if args.html and pages:
        from trnlang.sim.html import render_html

        pages.sort(key=lambda lp: -lp[1].time_us)  # the longest kernel first
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(render_html(pages, f"trn profile {os.path.basename(args.script)}", args.max_events))
        print(f"wrote {args.html} (one page, {len(pages)} kernel(s); open it in a browser)")
    return rc


def _add_profile_parser(sub: Any) -> None:
    p = sub.add_parser(
        "profile",
        help="profile the trn kernels a Python script launches, on the simulated device",
        description="Run a Python script (as __main__, with sys.argv = [SCRIPT, *ARGS]) and simulate the schedule "
        "of every trn kernel specialization it launches. Writes one Chrome trace (one process per kernel "
        "specialization; open it in Perfetto or chrome://tracing), with --html also an HTML page, and prints "
        "per kernel: launches, simulated "
        "time per launch, MFU and MBU. Options of trn profile go before SCRIPT; everything after SCRIPT is "
        "passed to the script.",
    )
    p.add_argument("--trace", metavar="PATH", default="trn_profile_trace.json",
                   help="Chrome trace output (default trn_profile_trace.json)")
    p.add_argument("--html", metavar="PATH", default=None,
                   help="also write one self-contained HTML page: timeline, utilisation bars, roofline per kernel")
    p.add_argument("--summary", action="store_true", help="also print each specialization's full profile summary")
    p.add_argument("--max-events", metavar="N", type=int, default=200_000,
                   help="at most N instruction events per specialization in the trace (default 200000)")
    p.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    p.add_argument("script_args", metavar="ARGS", nargs=argparse.REMAINDER, help="arguments for the script")
    p.set_defaults(func=_cmd_profile)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``trn`` command (one subparser per subcommand)."""
    parser = argparse.ArgumentParser(
        prog="trn",
        description="trnlang: a tile DSL for a simulated Trainium accelerator.",
    )
    parser.add_argument("--version", action="version", version=f"trnlang {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    info = sub.add_parser(
        "info",
        help="versions, host CPU and the device target table",
        description="Print trnlang/python/torch/llvmlite versions, the host CPU (as LLVM sees it) and a target's "
        "device table.",
    )
    info.add_argument(
        "--target",
        metavar="NAME",
        default=None,
        help="target to describe: trn1, trn2 or trn3 (default: $TRN_TARGET, else trn2)",
    )
    info.set_defaults(func=_cmd_info)

    _add_coverage_parser(sub)
    _add_cache_parser(sub)
    _add_bench_parser(sub)
    _add_profile_parser(sub)
    from trnlang.device.upstream import add_parser as _add_upstream_parser  # imports no torch

    _add_upstream_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``trn`` command line and return its exit code.

    Args:
        argv: arguments without the program name; ``None`` for ``sys.argv[1:]``.

    Returns:
        0 on success, 2 on usage errors.

    Example:
        >>> main(["--version"])  # doctest: +SKIP
        trnlang 0.1.0
        0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors: report the code, don't exit
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `trn info | head`: the reader left; silence Python's flush-at-exit error too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
