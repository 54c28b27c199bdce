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
    import llvmlite.binding as llvm

    # llvmlite >= 0.45 initialises LLVM itself; calling llvm.initialize() is an error there.
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features()
    return llvm.get_host_cpu_name(), sorted(name for name, on in features.items() if on)


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
    report = run_coverage(ops=ops, limit=args.limit, dtypes=dtypes, backward=not args.no_backward,
                          max_samples=args.max_samples, progress=not args.no_progress)
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


def _not_implemented(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        print(f"trn {name}: not implemented yet", file=sys.stderr)
        return 2

    return run


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
    placeholders = {
        "cache": "inspect or clear the compiled-kernel cache ($TRN_CACHE_DIR)",
        "bench": "run the benchmarks against torch CPU",
        "profile": "profile a kernel on the simulated device",
    }
    for name, help_text in placeholders.items():
        p = sub.add_parser(name, help=f"{help_text} (not implemented yet)", description=help_text)
        p.set_defaults(func=_not_implemented(name))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``trn`` command line and return its exit code.

    Args:
        argv: arguments without the program name; ``None`` for ``sys.argv[1:]``.

    Returns:
        0 on success, 2 on usage errors (and for subcommands not implemented yet).

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
