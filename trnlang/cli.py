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

    placeholders = {
        "cache": "inspect or clear the compiled-kernel cache ($TRN_CACHE_DIR)",
        "coverage": "report which ATen ops the trn device lowers natively",
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
