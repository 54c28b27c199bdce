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
    f = sys._getframe(depth)
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
