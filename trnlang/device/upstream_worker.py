"""One worker of ``trn upstream``: runs a PyTorch device-generic test file on the CPU and on ``trn``.

The worker registers the ``trn`` device *before* torch's testing internals are imported (their
device lists are computed at import), installs the shims for helper names older test files
import under other names (:data:`SHIMS`; test bodies are never edited), imports the test file,
and runs the classes ``instantiate_device_type_tests`` made for the CPU and for ``trn`` with
unittest. Each test becomes one JSON line of the output file, written as it finishes, so a crash
loses nothing: the parent restarts the worker, which skips the tests already recorded.

On ``trn``, every CPU fallback a test attempts is counted (``TRN_FALLBACK`` is ``silent``, or
``f64only`` with ``--strict``: any fallback fails the test except the documented one of calls on
float64/complex128, which the hardware has no arithmetic for; those are counted apart, as
``wide_fallbacks``): a test passes *natively* when it passes with no other fallback.

Example:
    .. code-block:: sh

        python -m trnlang.device.upstream_worker /tmp/pt/test test_shape_ops /tmp/out.jsonl -k flip
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import signal
import sys
import time
import traceback
import unittest
from collections import Counter
from typing import Any, TextIO

__all__ = ["SHIMS", "MADE_SHIMS", "install_shims", "run_file", "main"]

#: Helper names older PyTorch test files import that torch 2.13 spells differently:
#: (module, old name) -> (module, new name). Installed as aliases when the old name is missing.
SHIMS: dict[tuple[str, str], tuple[str, str]] = {
    ("torch.testing._internal.common_methods_invocations", "binary_ufuncs_and_refs"):
        ("torch.testing._internal.common_methods_invocations", "binary_ufuncs"),
    ("torch.testing._internal.common_methods_invocations", "unary_ufuncs_and_refs"):
        ("torch.testing._internal.common_methods_invocations", "unary_ufuncs"),
    ("torch.testing._internal.common_utils", "skipIfMps"): ("torch.testing._internal.common_utils", "skipIfMPS"),
}


def _tf32_is_not_fp32() -> bool:
    """The 2023 helper asked whether a CUDA device computes float32 matmuls in TF32: never, with no CUDA."""
    return False


def _new_module_tests() -> Any:
    """The 2023 ``common_nn.new_module_tests`` list; torch 2.13 builds it on call."""
    from torch.testing._internal import common_nn
    return common_nn.get_new_module_tests()


#: Helper names that became something else than an alias: (module, old name) -> a maker of the old value.
MADE_SHIMS: dict[tuple[str, str], Any] = {
    ("torch.testing._internal.common_cuda", "tf32_is_not_fp32"): lambda: _tf32_is_not_fp32,
    ("torch.testing._internal.common_nn", "new_module_tests"): _new_module_tests,
}

DTYPE_NAMES = ("float8_e4m3fn", "float8_e5m2", "bfloat16", "float16", "float32", "float64", "complex32",
               "complex64", "complex128", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
               "bool", "bfloat16")
_DEV = re.compile(r"_(cpu|trn|privateuse1)(?=_|$)")


def install_shims() -> list[str]:
    """Alias every :data:`SHIMS` name torch lacks, make every :data:`MADE_SHIMS` one.

    Returns the ``module.name`` strings installed.
    """
    done = []
    for (mod, old), (new_mod, new) in SHIMS.items():
        m = importlib.import_module(mod)
        if hasattr(m, old):
            continue
        src = importlib.import_module(new_mod)
        if hasattr(src, new):
            setattr(m, old, getattr(src, new))
            done.append(f"{mod}.{old}")
    for (mod, old), make in MADE_SHIMS.items():
        m = importlib.import_module(mod)
        if not hasattr(m, old):
            setattr(m, old, make())
            done.append(f"{mod}.{old}")
    return done


def rename_clashing_tests(renamed: list[str]) -> None:
    """Let ``instantiate_device_type_tests`` take generic tests whose names already end in a device suffix.

    A 2023 file may define both ``test_x`` (made ``test_x_cpu`` for the CPU) and ``test_x_cpu`` (an ``@onlyCPU``
    test): torch 2.13 refuses that as a redefinition, and the whole file fails to import. The clashing generic
    method is renamed ``test_x_cpu_`` (instantiated as ``test_x_cpu__cpu``) before instantiation; its body is not
    touched. Each rename is appended to ``renamed`` as ``Class.old -> new``.
    """
    from torch.testing._internal import common_device_type as cdt

    real = cdt.instantiate_device_type_tests
    if getattr(real, "_trn_renames", False):
        return

    def instantiate(generic_test_class: type, scope: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        tests = {n for n in vars(generic_test_class) if n.startswith("test")}
        suffixes = {b.device_type for b in cdt.get_device_type_test_bases()} | {"cpu", "cuda", "trn"}
        for name in sorted(tests):
            if any(name.endswith("_" + d) and name[:-len(d) - 1] in tests for d in suffixes):
                setattr(generic_test_class, name + "_", vars(generic_test_class)[name])
                delattr(generic_test_class, name)
                renamed.append(f"{generic_test_class.__name__}.{name} -> {name}_")
        return real(generic_test_class, scope, *args, **kwargs)

    instantiate._trn_renames = True  # type: ignore[attr-defined]
    cdt.instantiate_device_type_tests = instantiate


_SELF_CLASS_SUPER = "super(self.__class__, self)"


def fix_self_class_super(mod: Any) -> list[str]:
    """Rebind the ``setUp``/``tearDown`` that older test files write with ``super(self.__class__, self)``.

    torch 2.13's ``instantiate_device_type_tests`` makes ``TestFooCPU`` a subclass of both the device base and the
    generic ``TestFoo`` and copies ``TestFoo.setUp`` into it, so the idiom resolves from the device class, reaches
    ``TestFoo.setUp`` again through the MRO and recurses without end (every test of 2023's test_linalg failed with
    RecursionError, on the CPU too). The generic class's method is recompiled from its own source with its class
    named (what the idiom meant) and the device classes' copies are dropped, so the body runs once per test, after
    the device base's. Test bodies are not touched. Returns the ``Class.method`` names rebound.
    """
    import inspect
    import textwrap

    fixed = []
    done: set[Any] = set()  # original functions already rebound on their generic class
    for cls in [c for c in vars(mod).values() if isinstance(c, type) and issubclass(c, unittest.TestCase)]:
        for meth in ("setUp", "tearDown"):
            fn = cls.__dict__.get(meth)
            if fn is not None and fn in done:
                delattr(cls, meth)  # another device class's copy of a method fixed already
                continue
            owner = next((k for k in cls.__mro__[1:] if k.__dict__.get(meth) is fn), None) if fn else None
            if fn is None or owner is None:
                continue
            try:
                src = textwrap.dedent(inspect.getsource(fn))
            except (OSError, TypeError):
                continue
            if _SELF_CLASS_SUPER not in src:
                continue
            scope: dict[str, Any] = {"__owner__": owner}
            code = compile(src.replace(_SELF_CLASS_SUPER, "super(__owner__, self)"),
                           inspect.getsourcefile(fn) or _name_of(mod), "exec")
            exec(code, {**vars(mod), **scope}, scope)  # noqa: S102 - the file's own method, one idiom renamed
            setattr(owner, meth, scope[meth])
            done.add(fn)
            delattr(cls, meth)  # the device class's copy: the fixed generic method is reached through the MRO
            fixed.append(f"{owner.__name__}.{meth}")
    return sorted(set(fixed))


def _name_of(mod: Any) -> str:
    return getattr(mod, "__file__", None) or mod.__name__


def test_key(cls_name: str, method: str) -> str:
    """The device-free name of a test: ``TestFooTRN.test_x_trn_int64`` -> ``TestFoo.test_x_DEV_int64``."""
    base = re.sub(r"(CPU|TRN|PRIVATEUSE1)$", "", cls_name)
    return f"{base}.{_DEV.sub('_DEV', method)}"


def dtypes_of(method: str) -> list[str]:
    """The dtypes named in an instantiated test's name, in order (``[]`` for dtype-free tests)."""
    parts = _DEV.split(method, maxsplit=1)
    tail = parts[-1] if len(parts) > 1 else method
    return [p for p in tail.split("_") if p in DTYPE_NAMES]


class _Timeout(BaseException):
    """A test ran past ``--timeout`` (a BaseException, so a test's ``except Exception`` cannot eat it)."""


class _Recorder(unittest.TestResult):
    """Collects one outcome per test (subtests fold into their test)."""

    def __init__(self) -> None:
        super().__init__()
        self.outcome = "pass"
        self.exc = ""
        self.msg = ""
        self.trace = ""

    def _fail(self, err: Any) -> None:
        if self.outcome == "fail":
            return
        etype, value, tb = err
        self.outcome = "fail"
        self.exc = etype.__name__
        text = str(value).strip()
        self.msg = text[:600]
        self.trace = "".join(traceback.format_exception(etype, value, tb))[-1500:]  # the innermost frames

    def addError(self, test: Any, err: Any) -> None:  # noqa: N802 - unittest's API
        self._fail(err)

    def addFailure(self, test: Any, err: Any) -> None:  # noqa: N802
        self._fail(err)

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:  # noqa: N802
        if err is not None:
            self._fail(err)

    def addSkip(self, test: Any, reason: str) -> None:  # noqa: N802
        if self.outcome != "fail":
            self.outcome = "skip"
            self.msg = str(reason)[:200]

    def addExpectedFailure(self, test: Any, err: Any) -> None:  # noqa: N802
        self.outcome = "xfail"

    def addUnexpectedSuccess(self, test: Any) -> None:  # noqa: N802
        self.outcome = "fail"
        self.exc = "UnexpectedSuccess"
        self.msg = "the test is marked expected-failure but passed"


def _classes(mod: Any) -> list[tuple[str, type]]:
    """(device, class) for the CPU and trn classes instantiated in a test module, CPU first."""
    found = []
    for name, obj in vars(mod).items():
        if not (isinstance(obj, type) and issubclass(obj, unittest.TestCase) and hasattr(obj, "device_type")):
            continue
        if name.endswith("CPU"):
            found.append(("cpu", name, obj))
        elif name.endswith(("TRN", "PRIVATEUSE1")):
            found.append(("trn", name, obj))
    found.sort(key=lambda t: (t[0] != "cpu", t[1]))
    return [(dev, obj) for dev, _, obj in found]


def _count_fallbacks(sink: Counter[str], wide_sink: Counter[str]) -> None:
    """Count every fallback a test attempts (before the policy may raise) into ``sink``, or into ``wide_sink``
    when the call touches float64/complex128 (the documented fallback ``TRN_FALLBACK=f64only`` allows)."""
    from trnlang.device import fallback

    orig = fallback.note

    def note(name: str, reason: str = fallback.NO_LOWERING, wide: bool = False) -> None:
        (wide_sink if wide else sink)[name] += 1
        orig(name, reason, wide)

    fallback.note = note


def run_file(test_dir: str, name: str, out: TextIO, *, keys: list[str] | None = None, strict: bool = False,
             timeout: float = 120.0, done: set[str] | None = None) -> int:
    """Run one test file's CPU and trn tests; write one JSON line per test to ``out``; return the count run.

    Args:
        test_dir: PyTorch's ``test/`` directory (put first on ``sys.path``).
        name: module name of the file (``test_shape_ops``).
        out: where the JSON lines go (flushed after each test).
        keys: substrings; only tests whose method name contains one of them run (``None``: all).
        strict: run the trn tests with ``TRN_FALLBACK=f64only`` (else ``silent``).
        timeout: seconds per test; a test past it fails with kind ``timeout``.
        done: test ids already recorded (a restarted worker skips them).
    """
    import torch

    import trnlang.config
    import trnlang.device

    trnlang.device.register()
    shims = install_shims()
    rename_clashing_tests(shims)
    sys.path.insert(0, test_dir)
    sys.argv = [name]  # torch's common_utils parses sys.argv at import
    mod = importlib.import_module(name)
    shims += fix_self_class_super(mod)
    out.write(json.dumps({"event": "import", "file": name, "shims": shims, "torch": torch.__version__}) + "\n")
    out.flush()
    fallbacks: Counter[str] = Counter()
    wide: Counter[str] = Counter()
    _count_fallbacks(fallbacks, wide)

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Timeout(f"test ran past {timeout:.0f} s")

    signal.signal(signal.SIGALRM, on_alarm)
    loader = unittest.TestLoader()
    n = 0
    for dev, cls in _classes(mod):
        for method in loader.getTestCaseNames(cls):
            tid = f"{cls.__name__}.{method}"
            if done and tid in done:
                continue
            if keys and not any(k in method for k in keys):
                continue
            out.write(json.dumps({"event": "start", "id": tid}) + "\n")
            out.flush()
            # strict: every fallback but the documented float64/complex128 one fails the test
            os.environ["TRN_FALLBACK"] = "f64only" if (dev == "trn" and strict) else "silent"
            trnlang.config.refresh()  # the fallback policy is read through the config snapshot
            fallbacks.clear()
            wide.clear()
            res = _Recorder()
            t0 = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                cls(method).run(res)
            except _Timeout as e:  # raised outside the test body (set-up, tear-down)
                res._fail((_Timeout, e, None))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            secs = time.perf_counter() - t0
            if res.exc == "_Timeout":
                res.exc = "Timeout"
            rec = {"event": "test", "id": tid, "dev": dev, "key": test_key(cls.__name__, method),
                   "dtypes": dtypes_of(method), "outcome": res.outcome, "exc": res.exc, "msg": res.msg,
                   "trace": res.trace, "secs": round(secs, 3), "fallbacks": dict(fallbacks) if dev == "trn" else {},
                   "wide_fallbacks": dict(wide) if dev == "trn" else {}}
            out.write(json.dumps(rec) + "\n")
            out.flush()
            n += 1
    return n


def _done_ids(path: str) -> set[str]:
    done: set[str] = set()
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if rec.get("event") == "test":
                    done.add(rec["id"])
    return done


def main(argv: list[str] | None = None) -> int:
    """Command line of one worker (the parent, :mod:`trnlang.device.upstream`, starts it)."""
    p = argparse.ArgumentParser(prog="python -m trnlang.device.upstream_worker")
    p.add_argument("test_dir")
    p.add_argument("file", help="module name, e.g. test_shape_ops")
    p.add_argument("out", help="JSON-lines output (appended; tests already in it are skipped)")
    p.add_argument("-k", action="append", default=None, help="substring of the test names to run (repeatable)")
    p.add_argument("--strict", action="store_true")
    p.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args(argv)
    done = _done_ids(a.out)
    with open(a.out, "a") as out:
        try:
            run_file(a.test_dir, a.file, out, keys=a.k, strict=a.strict, timeout=a.timeout, done=done)
        except Exception as e:  # noqa: BLE001 - an import failure is a result the report shows
            out.write(json.dumps({"event": "import_error", "file": a.file, "exc": type(e).__name__,
                                  "msg": str(e)[:600], "trace": traceback.format_exc()[-2000:]}) + "\n")
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
