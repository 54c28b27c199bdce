"""The TrnError hierarchy and user source locations.

Every user-facing error names the user's file and line and shows the line.
``user_loc()`` finds the innermost frame outside trnlang (the kernel line being
traced); ``clean_traceback`` drops trnlang frames so the last frame a user sees
is their own.
"""

from __future__ import annotations

import os
import sys
import types

from trnlang.ir.nodes import SourceLoc

_TRN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../trnlang
_CODEGEN_DIR = os.path.join(os.path.dirname(_TRN_DIR), "codegen")
_STDLIB_DIR = os.path.join(os.path.dirname(_TRN_DIR), "stdlib_kernels")


def is_internal_file(filename: str) -> bool:
    """True for trnlang's own files (the library, codegen); user code and stdlib kernels are not."""
    f = os.path.abspath(filename)
    return f.startswith(_TRN_DIR + os.sep) or f.startswith(_CODEGEN_DIR + os.sep)


def user_loc(depth: int = 1) -> SourceLoc | None:
    """Location of the innermost frame outside trnlang (the user's line)."""
    f: types.FrameType | None = sys._getframe(depth)
    while f is not None:
        fn = f.f_code.co_filename
        if not is_internal_file(fn) and not fn.startswith("<frozen"):
            return SourceLoc(fn, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None


class TrnError(Exception):
    """Base of every trnlang user error. ``loc`` is the user's source line."""

    def __init__(self, msg: str, loc: SourceLoc | None = None, notes: list[str] | None = None) -> None:
        self.msg = msg
        self.loc = loc if loc is not None else user_loc(2)
        self.notes = notes or []
        super().__init__(self._format())

    def _format(self) -> str:
        out = self.msg
        if self.loc is not None:
            out += f'\n  File "{self.loc.filename}", line {self.loc.lineno}'
            if self.loc.func:
                out += f", in {self.loc.func}"
            text = self.loc.text.strip()
            if text:
                out += f"\n    {text}"
        for n in self.notes:
            out += f"\n  {n}"
        return out


class TraceError(TrnError):
    """The kernel cannot be traced (Python control flow on traced values, misuse of the API)."""


class NeedStatic(TraceError):
    """A runtime size (a shape dimension of a shape-polymorphic kernel) was used where only a compile-time
    value works: as a tile shape, in Python control flow, or compared with a number in Python. The launch
    catches it, makes those dimensions compile-time constants of the kernel, and traces again; a user never
    sees it. ``syms`` are the size symbols concerned."""

    def __init__(self, syms: tuple[object, ...], msg: str = "") -> None:
        self.syms = tuple(syms)
        super().__init__(msg or f"runtime size(s) {', '.join(map(str, self.syms))} used as a compile-time value")


class ShapeError(TrnError):
    """Shapes do not fit: broadcasting, partition size, matmul sizes, device size limits."""


class DTypeError(TrnError):
    """Unsupported dtype or dtype combination."""


class BoundsError(TrnError):
    """An access falls outside its tensor (at compile time when provable, else at run time)."""


class SbufOverflowError(TrnError):
    """On-chip memory (SBUF or PSUM) is exhausted; lists the allocations holding it."""


class VerifyError(TrnError):
    """The IR breaks a device rule (DEVICE.md) that is not a shape/dtype/bounds problem."""


class LaunchError(TrnError):
    """Bad launch: wrong argument count or kinds, bad grid."""


class LoweringError(TrnError):
    """No lowering for an op/dtype (codegen table or ATen registry)."""


class CompileError(TrnError):
    """Internal failure of the compiler on valid input (a bug: please report it)."""


def clean_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Drop trnlang-internal frames from a traceback (user frames kept, order kept)."""
    frames = []
    while tb is not None:
        if not is_internal_file(tb.tb_frame.f_code.co_filename):
            frames.append(tb)
        tb = tb.tb_next
    new = None
    for t in reversed(frames):
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return new


def user_traceback(e: TrnError) -> types.TracebackType | None:
    """A traceback of user frames only, whose last frame is the error's user source line.

    Errors found after tracing (verifier, planner, run time) have no live user frame at their
    line; a one-line code object compiled with the user's file name and line number (and the
    kernel's function name) provides one, so debuggers and tracebacks land on the kernel line.
    """
    tb = clean_traceback(e.__traceback__)
    loc = e.loc
    if loc is None or loc.lineno < 1:
        return tb
    last = tb
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    if last is not None and last.tb_frame.f_code.co_filename == loc.filename and last.tb_lineno == loc.lineno:
        return tb
    code = _at_line(compile("\n" * (loc.lineno - 1) + "raise __trn_error__", loc.filename, "exec"), loc.lineno)
    if loc.func:
        code = code.replace(co_name=loc.func)
    try:
        exec(code, {"__trn_error__": e})  # noqa: S102 - a constant raise statement
    except TrnError as raised:
        synth = raised.__traceback__
        while synth is not None and synth.tb_frame.f_code is not code:
            synth = synth.tb_next
    else:  # pragma: no cover - the code always raises
        synth = None
    if synth is None:
        return tb
    frames = []
    t = tb
    while t is not None:
        frames.append(t)
        t = t.tb_next
    new = types.TracebackType(None, synth.tb_frame, synth.tb_lasti, synth.tb_lineno)
    for f in reversed(frames):
        new = types.TracebackType(new, f.tb_frame, f.tb_lasti, f.tb_lineno)
    return new


def _svarint(v: int) -> bytes:
    v = ((-v) << 1) | 1 if v < 0 else v << 1
    out = bytearray()
    while v >= 64:
        out.append(0x40 | (v & 63))
        v >>= 6
    out.append(v)
    return bytes(out)


def _at_line(code: types.CodeType, lineno: int) -> types.CodeType:
    """Every instruction at ``lineno`` with no column info (so tracebacks underline nothing)."""
    if sys.version_info[:2] != (3, 11):  # the location-table format below is CPython 3.11's
        return code
    n = len(code.co_code) // 2
    table = bytearray()
    first = True
    while n > 0:
        k = min(8, n)
        n -= k
        table.append(0x80 | (13 << 3) | (k - 1))  # PY_CODE_LOCATION_INFO_NO_COLUMNS
        table += _svarint(lineno - code.co_firstlineno if first else 0)
        first = False
    return code.replace(co_linetable=bytes(table))


for _cls in (TrnError, TraceError, ShapeError, DTypeError, BoundsError, SbufOverflowError, VerifyError, LaunchError,
             LoweringError, CompileError):
    _cls.__module__ = "trnlang"  # tracebacks say trnlang.BoundsError, the public name


class MissingBuiltinError(TraceError, AttributeError):
    """``module.name`` is not a builtin: an ``AttributeError`` (``hasattr`` stays False) that is also a
    ``TraceError``, so it names the user's line and a kernel launch shows it at that line."""


def missing_name(module: str, name: str, known: list[str], doc: str) -> AttributeError:
    """``AttributeError`` for ``module.name`` that is not a builtin: the closest names and the reference."""
    import difflib

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return MissingBuiltinError(f"{module} has no builtin {name!r}{hint} (the builtins are listed in {doc})")
