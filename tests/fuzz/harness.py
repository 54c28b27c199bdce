"""Run one generated kernel through the JIT and the interpreter on sentinel-framed strided arguments.

Every argument is a view (strided, row-padded, column-stepped, transposed, mirrored, or for inputs
row-broadcast with stride 0) inside a bigger byte buffer filled with a sentinel pattern; the
interpreter, the JIT (and, when needed, the JIT on its libm path) each get fresh copies of the same
bytes. With ``TRN_GUARD=1`` the buffers come from guard-page mmaps (``trnlang.device.guard``), so a
write past a buffer's end faults instead of landing in the sentinel.

Result classes (``Result.cls``), in the order they are decided:

- ``rejected``: both executors raised (the generator built an invalid kernel; a generator bug).
- ``jit_error`` / ``interp_error``: only one executor raised.
- ``sentinel``: a byte outside an argument's view changed, or an input changed (JIT);
  ``interp_sentinel``: the same for the interpreter.
- ``ok``: every output matches. Int/bool outputs and float outputs computed exactly (``Arg.exact``, no
  matmul) must be bit-identical (NaN == NaN, -0 == 0); other float outputs within ``RTOL`` (``RTOL_BF16``
  when bf16 rounding is on the path) relative to the element, plus that times the output's largest
  finite magnitude (a norm-wise absolute floor).
- ``overflow`` (explained): outside tolerance only where the JIT gives inf/NaN and the interpreter a finite
  value (its float64 stays finite where fp32 overflows), and the mismatch is explained as below.
- ``vecmath`` (explained): outside tolerance, but the JIT on its float64 libm path (``TRN_JIT_LIBM=1``)
  reproduces the interpreter bit for bit: the difference is the vecmath functions' documented few-ulp
  error (docs/vecmath_accuracy.md), amplified by the ops after them.
- ``order`` (explained): outside tolerance, but the interpreter with its float ``add`` / ``multiply``
  reductions taken over the reduced elements in reverse order reproduces the JIT (within the tolerance,
  NaN == NaN): the result depends on the reduction order, which the two executors do not share
  (docs/language_reference.md, "Reduction order"). The usual case is ``tl.prod`` over a row with masked zero
  lanes whose float64 partial products overflow: ``inf * 0`` gives NaN in one order and 0 in the other.
- ``mismatch``: anything else (an exact output differs, or the libm path also differs): a real bug.
"""

from __future__ import annotations

import linecache
import os
import time
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

import trnlang as trn
import trnlang.language as tl
from tests.fuzz.gen import Arg, Case, generate
from trnlang.device import guard as _guard

SENTINEL = bytes([0xA5, 0xA5, 0xC1, 0x7F])  # f32: a quiet NaN; bf16 halves: -2.9e-16 and NaN; i32: 2143397285
RTOL = 1e-4
RTOL_BF16 = 2.0 ** -6
RTOL_MM = 1e-3
NP_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16),
             "int32": np.dtype(np.int32)}
FAILURES = ("rejected", "jit_error", "interp_error", "sentinel", "interp_sentinel", "mismatch", "crash")
EXPLAINED = ("overflow", "vecmath", "order")


@dataclass
class Frame:
    """Where one argument's view lives in its framed buffer, and the buffer's initial bytes."""

    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...]  # in elements
    offset: int  # byte offset of element 0
    init: np.ndarray  # uint8, the whole buffer (sentinel outside the view)
    cov: np.ndarray  # bool per byte: covered by the view
    layout: str

    def instantiate(self, guard: bool) -> tuple[np.ndarray, np.ndarray]:
        """A fresh buffer with the initial bytes and the view into it."""
        if guard:
            buf = _guard.GuardedRegion(self.init.size).np_bytes()
            buf[:] = self.init
        else:
            buf = self.init.copy()
        item = self.dtype.itemsize
        view = np.ndarray(self.shape, self.dtype, buffer=buf, offset=self.offset,
                          strides=tuple(s * item for s in self.strides))
        return buf, view


@dataclass
class Result:
    seed: int
    template: str
    cls: str
    detail: str = ""
    secs: float = 0.0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "template": self.template, "cls": self.cls, "detail": self.detail,
                "secs": round(self.secs, 3)}


def _layout(rng: np.random.Generator, shape: tuple[int, int], out: bool) -> tuple[str, tuple[int, int]]:
    n, d = shape
    g = int(rng.integers(1, 9))
    choices = ["contig", "contig", "rowpad", "colstep", "transposed", "neg_rows", "neg_cols"]
    if not out and n > 1:
        choices.append("bcast_rows")
    lay = choices[int(rng.integers(0, len(choices)))]
    c = int(rng.integers(2, 4))
    strides = {"contig": (d, 1), "rowpad": (d + g, 1), "colstep": (d * c + g, c), "transposed": (1, n + g),
               "neg_rows": (-(d + g), 1), "neg_cols": (d + g, -1), "bcast_rows": (0, 1)}[lay]
    return lay, strides


def make_frame(rng: np.random.Generator, arg: Arg) -> Frame:
    """Lay ``arg`` out inside a sentinel-filled buffer and write its initial values."""
    dt = NP_DTYPES[arg.dtype]
    item = dt.itemsize
    shape = tuple(int(s) for s in arg.shape)
    lay, strides = _layout(rng, shape, arg.out)  # type: ignore[arg-type]
    lo = sum(min(0, (s - 1) * st) for s, st in zip(shape, strides))
    hi = sum(max(0, (s - 1) * st) for s, st in zip(shape, strides))
    pads = [0, 0, 1, 3, 16]
    front, back = (int(pads[int(rng.integers(0, len(pads)))]) for _ in range(2))
    total = (front + hi - lo + 1 + back) * item
    offset = (front - lo) * item
    init = np.resize(np.frombuffer(SENTINEL, np.uint8), total).copy()
    idx = np.indices(shape).reshape(len(shape), -1)
    elem = offset + (np.asarray(strides)[:, None] * idx).sum(0) * item
    cov = np.zeros(total, bool)
    for k in range(item):
        cov[elem + k] = True
    frame = Frame(shape, dt, strides, offset, init, cov, lay)
    if not arg.out:  # outputs start as sentinel inside the view too: an unwritten element stays visible
        buf, view = frame.instantiate(False)
        vals = _values(rng, arg, shape)
        view[...] = vals[:1] if lay == "bcast_rows" else vals
        frame.init = buf.copy()
    return frame


def _values(rng: np.random.Generator, arg: Arg, shape: tuple[int, ...]) -> np.ndarray:
    dt = NP_DTYPES[arg.dtype]
    if arg.dtype == "int32":
        r = arg.int_range
        return rng.integers(-r, r, shape, dtype=np.int64).astype(np.int32)
    x = (rng.standard_normal(shape) * arg.scale).astype(np.float32)
    if rng.random() < 0.15 and x.size:
        flat = x.reshape(-1)
        k = max(1, flat.size // 50)
        flat[rng.integers(0, flat.size, k)] = rng.choice(np.float32([np.nan, np.inf, -np.inf, -0.0, 0.0]), k)
    return x.astype(dt)


def _load(case: Case) -> Any:
    filename = f"<fuzz seed {case.seed}>"
    linecache.cache[filename] = (len(case.source), None, case.source.splitlines(True), filename)
    ns: dict[str, Any] = {"tl": tl, "trn": trn, "__name__": f"fuzz_seed_{case.seed}"}  # fn.__module__ is a str
    exec(compile(case.source, filename, "exec"), ns)  # noqa: S102 - our own generated source
    return ns[case.fn_name]


def _launch(fn: Any, case: Case, frames: list[Frame], guard: bool, interpret: bool,
            libm: bool = False) -> tuple[list[np.ndarray], list[np.ndarray], BaseException | None]:
    bufs, views = zip(*(f.instantiate(guard) for f in frames)) if frames else ((), ())
    old = os.environ.get("TRN_JIT_LIBM")
    if libm:
        os.environ["TRN_JIT_LIBM"] = "1"
        trn.config.refresh()  # codegen reads TRN_JIT_LIBM through the config snapshot
    try:
        k = trn.kernel(fn, interpret=interpret)
        (k[case.grid] if case.grid != (1,) else k)(*views)
        err = None
    except Exception as e:  # noqa: BLE001 - classified by the caller
        err = e
    finally:
        if libm:
            if old is None:
                os.environ.pop("TRN_JIT_LIBM", None)
            else:
                os.environ["TRN_JIT_LIBM"] = old
            trn.config.refresh()
    return list(bufs), list(views), err


def _sentinel(case: Case, frames: list[Frame], bufs: list[np.ndarray]) -> str:
    for a, f, b in zip(case.args, frames, bufs):
        if not a.out:
            if not np.array_equal(b, f.init):
                where = np.flatnonzero(b != f.init)
                return f"input {a.name} ({f.layout}) modified at byte(s) {where[:8].tolist()} of {b.size}"
            continue
        bad = np.flatnonzero((b != f.init) & ~f.cov)
        if bad.size:
            return (f"{bad.size} byte(s) outside the view of {a.name} ({f.layout}, shape {f.shape}, strides "
                    f"{f.strides}, element 0 at byte {f.offset}) changed, first at byte {bad[:8].tolist()} of "
                    f"{b.size}")
    return ""


def compare(got: np.ndarray, want: np.ndarray, arg: Arg, strict: bool = False) -> tuple[str, str]:
    """``(kind, detail)``: kind is ok, exact (a bit-level difference where none is allowed), tol (finite values
    beyond the tolerance), overflow (only JIT inf/NaN where the interpreter is finite) or nonfinite."""
    if got.dtype.kind in "iub":
        bad = got != want
        return ("exact", _where(bad, got, want)) if bad.any() else ("ok", "")
    g, w = got.astype(np.float64), want.astype(np.float64)
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    if same.all():
        return "ok", ""
    if strict or (arg.exact and not arg.mm):
        return "exact", _where(~same, got, want)
    rtol = RTOL_MM if arg.mm else RTOL
    rtol = max(rtol, RTOL_BF16) if arg.bf16 else rtol
    fw = np.abs(w[np.isfinite(w)])
    scale = max(1.0, float(fw.max()) if fw.size else 1.0)
    both = np.isfinite(g) & np.isfinite(w)
    with np.errstate(invalid="ignore", over="ignore"):
        close = both & (np.abs(g - w) <= rtol * np.abs(w) + rtol * scale)
    bad = ~same & ~close
    if not bad.any():
        return "ok", ""
    jit_over = bad & ~np.isfinite(g) & np.isfinite(w)
    if (bad & both).any():
        return "tol", _where(bad & both, got, want)
    if (bad & ~jit_over).any():
        return "nonfinite", _where(bad & ~jit_over, got, want)
    return "overflow", _where(bad, got, want)


def _where(bad: np.ndarray, got: np.ndarray, want: np.ndarray) -> str:
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(bad.sum())} element(s) differ, first at {idx}: jit {got[idx]!r} vs interpreter {want[idx]!r}"


def run_case(seed: int, guard: bool | None = None) -> Result:
    """Generate, launch both ways, check sentinels and outputs, classify."""
    t0 = time.perf_counter()
    guard = _guard.env_enabled() if guard is None else guard
    case = generate(seed)
    res = Result(seed, case.template, "ok", notes=case.notes)
    rng = np.random.default_rng(seed + 7_777_777)
    frames = [make_frame(rng, a) for a in case.args]
    fn = _load(case)
    ibufs, iviews, ierr = _launch(fn, case, frames, guard, interpret=True)
    jbufs, jviews, jerr = _launch(fn, case, frames, guard, interpret=False)
    if ierr is not None or jerr is not None:
        cls = "rejected" if ierr and jerr else ("jit_error" if jerr else "interp_error")
        e = jerr or ierr
        res.cls, res.detail = cls, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    elif msg := _sentinel(case, frames, jbufs):
        res.cls, res.detail = "sentinel", msg
    elif msg := _sentinel(case, frames, ibufs):
        res.cls, res.detail = "interp_sentinel", msg
    else:
        _classify(res, fn, case, frames, guard, iviews, jviews)
    res.secs = time.perf_counter() - t0
    return res


def _classify(res: Result, fn: Any, case: Case, frames: list[Frame], guard: bool, iviews: list[np.ndarray],
              jviews: list[np.ndarray]) -> None:
    outs = [i for i, a in enumerate(case.args) if a.out]
    first = {i: compare(jviews[i], iviews[i], case.args[i]) for i in outs}
    bad = {i: kd for i, kd in first.items() if kd[0] != "ok"}
    if not bad:
        return
    exact = [i for i, kd in bad.items() if kd[0] == "exact"]
    if exact:
        i = exact[0]
        res.cls, res.detail = "mismatch", f"{case.args[i].name}: {bad[i][1]}"
        return
    # only inexact outputs differ: does the JIT's float64 libm path reproduce the interpreter?
    _, lviews, lerr = _launch(fn, case, frames, guard, interpret=False, libm=True)
    if lerr is not None:
        res.cls, res.detail = "jit_error", f"libm path: {type(lerr).__name__}: {lerr}"
        return
    again = {i: compare(lviews[i], iviews[i], case.args[i], strict=not case.args[i].mm) for i in bad}
    still = {i: kd for i, kd in again.items() if kd[0] != "ok"}
    overflow_only = all(kd[0] == "overflow" for kd in bad.values())
    if not still or all(case.args[i].mm and kd[0] == "overflow" for i, kd in still.items()):
        i = next(iter(bad))
        res.cls = "overflow" if overflow_only else "vecmath"
        res.detail = f"{case.args[i].name}: {bad[i][1]}"
        return
    _, rviews, rerr = _launch_reversed(fn, case, frames, guard)
    if rerr is None and all(compare(jviews[i], rviews[i], case.args[i])[0] == "ok" for i in still):
        i = next(iter(still))
        res.cls, res.detail = "order", f"{case.args[i].name}: {bad[i][1]}"
        return
    i = next(iter(still))
    res.cls, res.detail = "mismatch", f"{case.args[i].name} (libm path too): {still[i][1]}"


def _launch_reversed(fn: Any, case: Case, frames: list[Frame],
                     guard: bool) -> tuple[list[np.ndarray], list[np.ndarray], BaseException | None]:
    """Interpret with float add/multiply reductions over the reduced elements in reverse order."""
    from trnlang.interpret import alu

    orig = alu.reduce

    def reversed_reduce(op: Any, x: np.ndarray, axes: Any, keepdims: bool) -> np.ndarray:
        x = np.asarray(x)
        if op in (alu.Alu.add, alu.Alu.multiply) and alu.is_float(x.dtype):
            x = np.flip(x, axis=tuple(int(a) for a in axes))
        return orig(op, x, axes, keepdims)

    alu.reduce = reversed_reduce  # type: ignore[assignment]
    try:
        return _launch(fn, case, frames, guard, interpret=True)
    finally:
        alu.reduce = orig  # type: ignore[assignment]
