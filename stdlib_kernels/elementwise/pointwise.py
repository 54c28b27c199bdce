"""Elementwise binary ops from one table: arithmetic, ``div`` rounding modes, ``pow``, ``maximum``/``minimum``,
``fmax``/``fmin``, ``fmod``/``remainder``, ``copysign``, ``hypot``, ``xlogy``, ``clamp_min``/``clamp_max``.

One kernel (:func:`elementwise`) serves them all: the op is a compile-time string naming an entry of
:data:`BINARY_OPS`, a function of two tiles written with the ``tl`` ALU functions (ops the ALU
lacks, like ``remainder`` or ``hypot``, are composed there with torch's own rounding and sign rules).
The comparison / logical / bitwise ops of ``stdlib_kernels.elementwise.compare`` use the same kernel and table.

Broadcasting is done with strides (stride-0 views, never copies); dims that are contiguous in every
operand are merged first (:func:`launch`), so most calls run a 1- to 3-D kernel; higher ranks loop
over the leading dims on the host. Scalars (Python numbers, CPU 0-dim tensors, one-element device
tensors) are ``[1, 1]`` device operands broadcast on chip, so new values never recompile. Type
promotion follows torch (``torch.result_type``): arithmetic runs in fp32 (int32 for integer
results) and the store rounds to the output dtype, which is what torch's CPU kernels do for
bf16/fp16 too. Operands may be fp32/bf16/fp16, int32/int16/int8/uint8, bool, and int64 (an
HBM-only type: loads narrow it to int32, so int64 operands are first checked on the device to hold
values in a range where the int32 result is exact; otherwise the call is declined).

Integer division-like ops (``div`` with a rounding mode, ``fmod``, ``remainder``) are native only
for a non-zero Python-number divisor: a zero integer divisor must raise, which needs the CPU.

Example:
    >>> import torch
    >>> a = torch.randn(4, 3, device="trn")                         # doctest: +SKIP
    >>> torch.remainder(a, 0.7), torch.maximum(a, a[:1]), a.pow(2)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise import int64_words, unsigned
from stdlib_kernels.elementwise.flat import (  # noqa: F401 - the flat launch machinery, re-exported for the family
    FLAT_EXACT_MIN_BYTES,
    FLAT_TAIL,
    FLAT_W,
    ROWS_MIN_W,
    contiguous_calls,
    flat_kernel,
    flat_ok,
    flat_pieces,
    flat_tiles,
    flat_twin,
    launch_contiguous,
    row_tiles,
    rows_twin,
    spaces,
    tiles,
)
from stdlib_kernels.elementwise.int_tiles import gcd, ipow, ipow_t, lshift, pow2
from stdlib_kernels.elementwise.lanes import check_alpha
from stdlib_kernels.elementwise.lanes import fast as _fast
from trnlang.device import decline, fastlane, lowering
from trnlang.device.registry import scalar_type_name

#: Tensor dtypes an elementwise operand may have (int64 values are range-checked, see :func:`int64_ok`).
OPERAND_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int16, torch.int8, torch.uint8,
                  torch.bool, torch.int64)
#: Dtypes an elementwise result may be stored as.
RESULT_DTYPES = OPERAND_DTYPES
_INT_RANGE = 2**31
_CT = {"f32": tl.float32, "i32": tl.int32}


# ---------------------------------------------------------------------------------------------- tile math
def _signbit(y: Any) -> Any:
    """``y`` is negative, -0.0 included (1 / -0.0 = -inf)."""
    return (y < 0) | ((1.0 / y) < 0)


def _trunc(q: Any) -> Any:
    return tl.where(q < 0, tl.ceil(q), tl.floor(q))


def _exact(x: Any) -> Any:
    return x


def _round_to(dt: Any) -> Callable[[Any], Any]:
    """Round an fp32 tile to ``dt`` and back: torch's bf16/fp16 kernels round every intermediate."""
    return lambda x: x.astype(dt).astype(tl.float32)


def _div_floor_f(a: Any, b: Any, r: Callable[[Any], Any] = _exact) -> Any:
    """torch's ``div_floor_floating``: floor of the exact quotient (via fmod), IEEE a / b for b == 0.

    ``r`` rounds each intermediate (to bf16/fp16 for those dtypes, as torch's CPU kernels do).
    """
    q = r(a / b)
    mod = r(tl.fmod(a, b))
    div = r(r(a - mod) / b)
    fix = (mod != 0) & ((b < 0) != (mod < 0))
    div = r(div - tl.where(fix, 1.0, 0.0))
    fl = tl.floor(div)
    fl = r(fl + tl.where(r(div - fl) > 0.5, 1.0, 0.0))
    fl = tl.where(div == 0, tl.where(_signbit(q), -0.0, 0.0), fl)
    return tl.where(b == 0, q, fl)


def _div_trunc_i(a: Any, b: Any) -> Any:
    """Exact int32 truncating division (b != 0): an fp32 estimate of the exact multiple, corrected twice."""
    r = tl.fmod(a, b)
    n = a - r  # an exact multiple of b
    q0 = tl.floor(n / b + 0.5).astype(tl.int32)
    k = tl.floor((n - q0 * b) / b + 0.5).astype(tl.int32)  # |residual / b| <~ 400: exact in fp32
    return q0 + k


def _div_floor_i(a: Any, b: Any) -> Any:
    r = tl.fmod(a, b)
    fix = (r != 0) & ((r < 0) != (b < 0))
    return _div_trunc_i(a, b) - tl.where(fix, 1, 0)


def _remainder(a: Any, b: Any) -> Any:
    """Python-style modulus (sign of the divisor), as torch: ``fmod`` plus ``b`` when the signs differ."""
    mod = tl.fmod(a, b)
    fix = (mod != 0) & ((b < 0) != (mod < 0))
    return tl.where(fix, mod + b, mod)


def _fmax(a: Any, b: Any) -> Any:
    return tl.where(b != b, a, tl.where(a != a, b, tl.maximum(a, b)))


def _fmin(a: Any, b: Any) -> Any:
    return tl.where(b != b, a, tl.where(a != a, b, tl.minimum(a, b)))


def _copysign(a: Any, b: Any) -> Any:
    m = tl.abs(a)
    return tl.where(_signbit(b), -m, m)


def _copysign_bits(a: Any, b: Any) -> Any:
    """copysign with ``b`` given as its float's bits read as a signed integer: negative exactly when the sign bit is
    set, NaN's included (a float compare cannot see a NaN's sign)."""
    m = tl.abs(a)
    return tl.where(b < 0, -m, m)


def _heaviside(a: Any, b: Any) -> Any:
    """``b`` where ``a == 0``, else 1 where ``a > 0`` and 0 elsewhere (NaN included), as torch's CPU kernel."""
    return tl.where(a == 0, b, tl.where(a > 0, 1, 0))


def _hypot(a: Any, b: Any) -> Any:
    """sqrt(a^2 + b^2) without overflow/underflow: big * sqrt(1 + (small / big)^2); inf wins over NaN."""
    x, y = tl.abs(a), tl.abs(b)
    big, small = tl.maximum(x, y), tl.minimum(x, y)
    r = small / big
    h = big * tl.sqrt(1.0 + r * r)
    h = tl.where(big == 0, 0.0, h)
    return tl.where((x == math.inf) | (y == math.inf), math.inf, h)


def _logaddexp(a: Any, b: Any) -> Any:
    """``log(exp(a) + exp(b))`` as torch's CPU kernel: ``max + log1p(exp(-|a - b|))`` (no overflow), ``a`` where both
    are the same infinity (their difference would be NaN); NaN propagates."""
    r = tl.maximum(a, b) + tl.log1p(tl.exp(-tl.abs(a - b)))
    return tl.where((a == b) & (tl.abs(a) == math.inf), a, r)


def _xlogy(a: Any, b: Any) -> Any:
    """``a * log(b)``, 0 where a == 0 (unless b is NaN)."""
    return tl.where(b != b, math.nan, tl.where(a == 0, 0.0, a * tl.log(b)))


def op_fn(op: str) -> Callable[[Any, Any], Any]:
    """The tile function of a binary op name (``"ipow:K"``: integer power by the constant K)."""
    if op.startswith("ipow:"):
        k = int(op[5:])
        return lambda x, y: ipow(x, k)
    return BINARY_OPS[op]


def _rshift(x: Any, s: Any) -> Any:
    """torch's arithmetic ``x >> s`` on int32: floor division by ``2 ** s``; the sign fill for ``s`` outside [0, 31)."""
    big = (s < 0) | (s >= 31)
    return tl.where(big, tl.where(x < 0, -1, 0), _div_floor_i(x, tl.where(big, 1, pow2(s))))


BINARY_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y,
    "rsub": lambda x, y: y - x,
    "div_trunc": lambda x, y: _trunc(x / y), "div_floor": _div_floor_f,
    "div_trunc_bf16": lambda x, y: _trunc(_round_to(tl.bfloat16)(x / y)),
    "div_trunc_f16": lambda x, y: _trunc(_round_to(tl.float16)(x / y)),
    "div_floor_bf16": lambda x, y: _div_floor_f(x, y, _round_to(tl.bfloat16)),
    "div_floor_f16": lambda x, y: _div_floor_f(x, y, _round_to(tl.float16)),
    "div_trunc_i": _div_trunc_i, "div_floor_i": _div_floor_i,
    "pow": tl.power, "rpow": lambda x, y: tl.power(y, x),
    "ipow_t": ipow_t, "ripow_t": lambda x, y: ipow_t(y, x),
    "cube_bf16": lambda x, y: _round_to(tl.bfloat16)(x * x) * x,  # torch's bf16 x ** 3: x * x rounded first
    "maximum": tl.maximum, "minimum": tl.minimum, "fmax": _fmax, "fmin": _fmin,
    "fmod": tl.fmod, "remainder": _remainder, "rremainder": lambda x, y: _remainder(y, x), "gcd": gcd,
    "lshift": lshift, "rshift": _rshift, "copysign": _copysign, "hypot": _hypot, "xlogy": _xlogy,
    "copysign_bits": _copysign_bits, "logaddexp": _logaddexp, "heaviside": _heaviside,
    "eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y,
    "logical_and": tl.logical_and, "logical_or": tl.logical_or, "logical_xor": tl.logical_xor,
    "bitwise_and": tl.bitwise_and, "bitwise_or": tl.bitwise_or, "bitwise_xor": tl.bitwise_xor,
    # int64 range check: x is the low word, y the high word of an int64; 1 where the value is not within
    # [-bound, bound) (the bound is the [1, 1] alpha operand).
    "i64_bad": lambda x, y: y != tl.where(x < 0, -1, 0),
    "i32_bad": lambda x, y: x,  # (the kernel compares x with the bound)
}


# ---------------------------------------------------------------------------------------------- kernel
_shape3 = U.shape3
at = U.at3


def load_operand(t: Any, b: Any, rows: Any, cols: Any, m: Any, compute: str) -> Any:
    """Load one operand tile, converted to its compute type by the DMA (``"bool"``: as stored)."""
    return load_tile(at(t, b, rows, cols), m, compute)


def load_tile(ap: Any, m: Any, compute: str) -> Any:
    """Load the access pattern ``ap`` (mask ``m``), converted to the compute type by the DMA (``"bool"``: as
    stored)."""
    return tl.load(ap, mask=m, dtype=None if compute == "bool" else _CT[compute])


@trn.kernel
def elementwise(x, y, alpha, out, op, scal, compute, flat=False):
    """``out = BINARY_OPS[op](x, y * alpha)`` over 1- to 3-D tensors (rows tiled by 128, the free dim by chunks).

    ``scal``: per operand, True if it is a ``[1, 1]`` scalar broadcast on chip. ``alpha``: None or a
    ``[1, 1]`` tensor. ``compute``: ``"f32"`` or ``"i32"`` arithmetic. ``flat``: every tensor is a contiguous
    1-D piece (:func:`flat_tiles`; launched through :data:`elementwise_flat`).
    """
    ct = _CT[compute]
    fn = op_fn(op)
    x0 = tl.load(x[0:1, 0:1]).astype(ct) if scal[0] else None
    y0 = tl.load(y[0:1, 0:1]).astype(ct) if scal[1] else None
    scaled = alpha is not None and op not in ("i64_bad", "i32_bad")
    if alpha is not None:
        a0 = tl.load(alpha[0:1, 0:1]).astype(ct)
        y0 = y0 * a0 if scaled and scal[1] else y0
    for acc, m in spaces(out, flat):
        xt = x0 if scal[0] else load_tile(acc(x), m, compute)
        if scal[1]:
            yt = y0
        else:
            yt = load_tile(acc(y), m, compute)
            if scaled:
                yt = yt * a0
        if op == "i64_bad":  # y: high words, x: low words, alpha: the bound
            r = fn(xt, yt) | (xt >= a0) | (xt < -a0)
        elif op == "i32_bad":  # alpha: the bound
            r = (xt >= a0) | (xt < -a0)
        else:
            r = fn(xt, yt)
        tl.store(acc(out), r, mask=m)


#: :func:`elementwise` for flat launches: one variant for every element count (docs/specialization.md).
elementwise_flat = flat_kernel(elementwise, rows=("x", "y", "out"))


# ---------------------------------------------------------------------------------------------- host side
_BIG_1D = U.BIG_1D


def launch(kern: Any, op: str, full: Sequence[torch.Tensor | None], scal: Sequence[torch.Tensor | None],
           extra: torch.Tensor | None, out: torch.Tensor, compute: Any) -> None:
    """Broadcast ``full`` operands to ``out``'s shape with strides, coalesce dims, launch ``kern``.

    ``kern(*operands, extra, out, op, scal_flags, compute)`` is called once per 1- to 3-D piece
    (a loop over leading dims beyond 3); operand ``k`` is ``full[k]`` (a view) or ``scal[k]`` (a
    ``[1, 1]`` scalar).
    """
    nops = len(full)
    flags = tuple(full[k] is None for k in range(nops))
    shape = tuple(out.shape)
    ops = [t for t in full if t is not None]
    if flat_twin(kern) is not None and flat_ok([*ops, out], shape):
        launch_contiguous(kern, full, scal, (extra, op, flags, compute), ops, out)
        return
    big = out.numel() >= U.PARALLEL_MIN_WORK and U.num_threads() > 1
    twin2 = rows_twin(kern)
    direct = len(shape) in ((3,) if twin2 is not None else (1, 2, 3)) and all(tuple(t.shape) == shape for t in ops)
    if direct and not big and not (len(shape) == 1 and shape[0] >= _BIG_1D):
        args = [full[k] if full[k] is not None else scal[k] for k in range(nops)]
        fastlane.record_launch(kern, (*args, extra, out, op, flags, compute))
        kern(*args, extra, out, op, flags, compute)
        return
    strides = [U.broadcast_strides(t, shape) for t in ops] + [list(out.stride())]
    sh, sts = U.coalesce(*U.order_dims(shape, strides))
    if not sh:
        sh, sts = [1], [[1] for _ in sts]
    views_of = ops + [out]
    parts = U.launch_parts(sh, sts, 4)


    def call(pshape: Any, pstrides: Any, poffs: Any) -> tuple[Any, tuple[Any, ...]]:
        vs = [U.piece(t, pshape, pstrides[k], t.storage_offset() + poffs[k]) for k, t in enumerate(views_of)]
        it = iter(vs[:-1])
        args = [next(it) if full[k] is not None else scal[k] for k in range(nops)]
        if twin2 is not None and len(pshape) == 2:  # runtime row count, the width keyed
            return twin2, (*args, extra, vs[-1], op, flags, compute, "rows")
        if twin2 is not None and len(pshape) == 1:  # a strided run: rows of one element
            cols = [U.piece(p.base, (pshape[0], 1), (p.strides[0], 1), p.offset) for p in vs]
            it = iter(cols[:-1])
            args = [next(it) if full[k] is not None else scal[k] for k in range(nops)]
            return twin2, (*args, extra, cols[-1], op, flags, compute, "rows")
        return kern, (*args, extra, vs[-1], op, flags, compute)

    # big outputs: one launch per thread on disjoint blocks (the kernels release the GIL)
    calls = [call(*p) for p in U.split_parts(parts, out.numel())]
    if len(calls) == 1:  # one launch (a broadcast bias, say): the fast lane can replay it
        fastlane.record_launch(*calls[0])
    U.run_parallel([U.launch(k, *a) for k, a in calls])


def int64_ok(t: torch.Tensor, bound: int) -> bool:
    """All values of a ``trn`` int64 tensor lie in ``[-bound, bound)`` (bound <= 2**31), checked on the device.

    The tensor's 8-byte words are read as (low, high) int32 pairs; a kernel flags the elements whose
    high word is not the sign extension of the low one or whose low word is out of range.
    """
    if t.numel() == 0:
        return True
    w = U.view(t, (1,), (1,), t.storage_offset()) if t.dim() == 0 else t
    span = 1 + sum((n - 1) * st for n, st in zip(w.shape, w.stride()))
    words = U.view(w, (span,), (1,), w.storage_offset()).view(torch.int32)  # the same bytes as int32 pairs
    st2 = [2 * st for st in w.stride()]
    lo = U.view(words, tuple(w.shape), st2, words.storage_offset())
    hi = U.view(words, tuple(w.shape), st2, words.storage_offset() + 1)
    bad = torch.empty(tuple(w.shape), dtype=torch.float32, device="trn")
    bound_t = U.scalar_tensor(int(min(bound, _INT_RANGE - 1)), torch.int32)
    launch(elementwise, "i64_bad", [lo, hi], [None, None], bound_t, bad, "i32")
    return float(bad.sum().item()) == 0.0


def int_within(t: torch.Tensor, bound: int) -> bool:
    """Every value of the integer ``trn`` tensor ``t`` lies in ``[-bound, bound)`` (device reductions, one sync each;
    none when the dtype's range is inside): an fp32 kernel then computes exactly what torch's integer kernel does,
    for ops exact below ``bound``."""
    info = torch.iinfo(t.dtype)
    if t.numel() == 0 or (info.min >= -bound and info.max < bound):
        return True
    if t.dtype == torch.int64:
        return int64_ok(t, bound)
    return int(t.max()) < bound and int(t.min()) >= -bound


def int_maxabs(t: torch.Tensor) -> int:
    """The largest magnitude of an integer ``trn`` tensor (0 when empty; two reductions, one host sync each)."""
    return 0 if t.numel() == 0 else max(int(t.max()), -int(t.min()))


class Operands:
    """Operands of an elementwise call classified: device tensors (``full``) and Python values (``values``)."""

    def __init__(self, full: list[torch.Tensor | None], values: list[Any]) -> None:
        self.full = full
        self.values = values


def classify(operands: Sequence[Any], dtypes: Sequence[torch.dtype] = OPERAND_DTYPES) -> Operands | None:
    """Split operands into device tensors and scalars; None if one is neither (or has another dtype)."""
    full: list[torch.Tensor | None] = [None] * len(operands)
    values: list[Any] = [None] * len(operands)
    for k, v in enumerate(operands):
        if U.is_trn(v):
            if v.dtype not in dtypes:
                return None
            full[k] = v
        else:
            sv = U.scalar_value(v)
            if sv is None or isinstance(sv, complex):
                return None
            values[k] = sv
    if all(t is None for t in full):
        return None
    return Operands(full, values)


def broadcast_shape(ops: Sequence[torch.Tensor]) -> tuple[int, ...] | None:
    """The broadcast shape of device operands; None if they do not broadcast."""
    if len(ops) == 1 or all(t.shape == ops[0].shape for t in ops):
        return tuple(ops[0].shape)
    return U.broadcast_shape(*[t.shape for t in ops])


def prepare_out(shape: Sequence[int], rdt: torch.dtype, ops: Sequence[torch.Tensor], out: torch.Tensor | None,
                exact_dtype: bool = False) -> torch.Tensor | None:
    """The output tensor (allocated, or a checked ``out=``); None to decline."""
    if out is None:
        return U.new_output(shape, rdt, ops)
    if U.is_trn(out) and tuple(out.shape) != tuple(shape) and (out.numel() == 0 or not any(U.overlaps(out, t)
                                                                                      for t in ops)):
        U.resize_out(out, shape)  # as torch: an empty out= silently, another with its warning (never an input)
    if (not U.is_trn(out) or tuple(out.shape) != tuple(shape) or out.dtype not in RESULT_DTYPES
            or not torch.can_cast(rdt, out.dtype) or U.has_internal_overlap(out)
            or (exact_dtype and out.dtype != rdt)):
        return None
    if any(U.overlaps(out, t) and not U.same_view(out, t) for t in ops):
        return None
    return out


def scalar_operand(v: Any, compute: str) -> torch.Tensor | None:
    """A Python scalar as a ``[1, 1]`` device tensor of the compute type; None if it does not fit."""
    if compute == "f32":  # rounded to float32 (beyond its range: +-inf, as torch's float opmath gives)
        with np.errstate(over="ignore"):
            return U.scalar_tensor(float(np.float32(float(v))), torch.float32)
    if isinstance(v, float) and not v.is_integer():
        return None
    if not -_INT_RANGE <= int(v) < _INT_RANGE:
        return None
    return U.scalar_tensor(int(v), torch.int32)


def to_scalars(o: Operands, shape: Sequence[int], computes: Sequence[str]) -> list[torch.Tensor | None] | None:
    """``[1, 1]`` device operands for the scalars and for one-element tensors broadcast to a bigger shape."""
    scal: list[torch.Tensor | None] = [None] * len(o.full)
    for k in range(len(o.full)):
        t = o.full[k]
        if t is None:
            s = scalar_operand(o.values[k], computes[k] if computes[k] != "bool" else "i32")
            if s is None:
                return None
            scal[k] = s
        elif t.numel() == 1 and len(shape) > 0 and tuple(shape) != tuple(t.shape):
            scal[k] = U.as_1x1(t)
            o.full[k] = None
    if all(t is None for t in o.full):  # all scalars: treat the first as a full one-element operand
        if U.prod(shape) != 1:
            return None
        s = scal[0]
        o.full[0] = U.view(s, (1,), (1,), s.storage_offset())
        scal[0] = None
    return scal


#: integer ops whose int64 operands must be small enough for the int32 result to be exact.
_I64_BOUND = {"add": 2**30, "sub": 2**30, "mul": 2**15, "rsub": 2**30}
#: integer ops whose result stays within the range of their operands.
_I64_SAFE = ("maximum", "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
             "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "div_trunc_i", "div_floor_i", "fmod",
             "remainder", "rremainder", "where", "clamp", "gcd", "heaviside")


def i64_bound(op: str, compute: str, alpha: Any = None) -> int | None:
    """The range ``[-bound, bound)`` the integer operands of ``op`` must lie in when int64 is involved (an int64
    operand or result: computed in int32 on chip); None: declined."""
    if compute == "f32":
        return _INT_RANGE  # torch converts to fp32 as well: only the int32 narrowing must be exact
    if op in _I64_SAFE:
        return _INT_RANGE
    if op in _I64_BOUND:
        if alpha is None:
            return _I64_BOUND[op]
        if op in ("add", "sub") and isinstance(alpha, int):
            return _INT_RANGE // (1 + abs(alpha))  # |x + alpha * y| < 2**31
    return None


def ints_in_range(o: Operands, bound: int) -> bool:
    """Every integer operand (device tensor or number) lies in ``[-bound, bound)``, checked on the device."""
    for t, v in zip(o.full, o.values):
        if t is None:
            if isinstance(v, int) and not -bound <= v < bound:
                return False
        elif t.dtype == torch.int64:
            if not int64_ok(t, bound):
                return False
        elif t.dtype == torch.int32 and bound < _INT_RANGE:
            if not int32_ok(t, bound):
                return False
        elif t.dtype in (torch.int16, torch.int8, torch.uint8, torch.bool) and bound < 2**15:
            return False
    return True


def int32_ok(t: torch.Tensor, bound: int) -> bool:
    """All values of a ``trn`` int32 tensor lie in ``[-bound, bound)``, checked on the device."""
    if t.numel() == 0:
        return True
    bad = torch.empty(tuple(t.shape), dtype=torch.float32, device="trn")
    launch(elementwise, "i32_bad", [t, t], [None, None], U.scalar_tensor(int(bound), torch.int32), bad, "i32")
    return float(bad.sum().item()) == 0.0


#: ops whose number operand torch keeps in fp32 for bf16/fp16 tensors (others round it to the tensor dtype).
_OPMATH_SCALAR = ("mul", "div")


def round_to(v: Any, dtype: torch.dtype) -> Any:
    """A Python number rounded to a (bf16/fp16) dtype, as a Python float."""
    return torch.tensor(float(v), dtype=torch.float32).to(dtype).item()


def has_zero(t: torch.Tensor) -> bool | None:
    """A ``trn`` tensor holds a zero (checked on the device: an ``== 0`` kernel, then a sum); None when the kernel
    cannot tell (int64 values beyond int32)."""
    if t.numel() == 0:
        return False
    if t.dtype == torch.int64:  # exact for every value: both int32 words zero
        w = U.int32_words(t)
        return bool(torch.logical_and(torch.eq(w[..., 0], 0), torch.eq(w[..., 1], 0)).any().item())
    flags = run_binary("eq", t, 0, None, rdt=torch.float32, compute="i32")
    return None if flags is NotImplemented else float(flags.sum().item()) > 0


def _kernel_op(op: str, o: Operands, rdt: torch.dtype, compute: str, int_scalar_divisor: bool, float_only: bool
               ) -> tuple[str | None, str]:
    """``(the BINARY_OPS entry running op in compute, "")`` (the integer / half-precision variant of a division),
    or ``(None, why)``: :func:`run_binary` declines (integer arithmetic for ``float_only``, an integer division by
    zero)."""
    if compute == "i32":
        if float_only:
            return None, "integer operands of an op computed in floating point only"
        empty = any(t is not None and t.numel() == 0 for t in o.full)  # no element divides: torch does not raise
        zero = (o.values[1] == 0 if o.full[1] is None else has_zero(o.full[1])) if int_scalar_divisor else False
        if zero is None and not empty:
            return None, "int64 divisors beyond int32's range"
        if zero and not empty:
            return None, "an integer division by zero: torch raises"
        if op.startswith("div_"):
            op += "_i"
    elif op.startswith("div_") and rdt in (torch.bfloat16, torch.float16):
        op += "_bf16" if rdt == torch.bfloat16 else "_f16"
    return op, ""


def run_binary(op: str, self: Any, other: Any, out: torch.Tensor | None, *, alpha: Any = None,
               rdt: torch.dtype | None = None, compute: str | None = None, int_scalar_divisor: bool = False,
               float_only: bool = False) -> Any:
    """Launch ``BINARY_OPS[op]`` on two operands (tensors or scalars) with torch's promotion; NotImplemented
    declines.

    ``rdt`` overrides the result dtype (bool for comparisons); ``compute`` the arithmetic type (default:
    fp32 for a float result, else int32). ``int_scalar_divisor``: integer arithmetic needs a non-zero
    Python-number second operand. ``float_only``: integer results are declined.
    """
    if unsigned.has_wide_unsigned(self, other, out):
        return unsigned.run_unsigned(run_binary, op, self, other, out, rdt, alpha=alpha, compute=compute,
                                     int_scalar_divisor=int_scalar_divisor, float_only=float_only)
    if U.is_trn(out) and out.dtype != (want := rdt or _result_type(self, other)) and want is not None:
        # torch computes in the result dtype, then casts into out= (uint8 wraps before an int64 out, a bf16 sum
        # rounds before a float32 out): the result first, then a native copy
        if not torch.can_cast(want, out.dtype):
            raise RuntimeError(f"result type {scalar_type_name(want)} can't be cast to the desired output type "
                               f"{scalar_type_name(out.dtype)}")
        return U.into_out(_run_binary(op, self, other, None, alpha, rdt, compute, int_scalar_divisor, float_only),
                          out, (self, other))
    return _run_binary(op, self, other, out, alpha, rdt, compute, int_scalar_divisor, float_only)


def _result_type(a: Any, b: Any) -> torch.dtype | None:
    try:
        return torch.result_type(a, b)
    except (RuntimeError, TypeError):
        return None


def _run_binary(op: str, self: Any, other: Any, out: torch.Tensor | None, alpha: Any, rdt: torch.dtype | None,
                compute: str | None, int_scalar_divisor: bool, float_only: bool) -> Any:
    o = classify((self, other))
    if o is None:
        return decline("an operand neither a trn tensor of a supported dtype nor a real number")
    common = torch.result_type(self, other)
    rdt = rdt or common
    if rdt not in RESULT_DTYPES or common not in RESULT_DTYPES:
        return decline("a result dtype the kernels do not store (float64, complex)")
    if compute is None:
        compute = "f32" if common.is_floating_point else "i32"
    kop, why = _kernel_op(op, o, rdt, compute, int_scalar_divisor, float_only)
    if kop is None:
        return decline(why)
    op = kop
    if alpha is None or (check_alpha(common, alpha) is None and alpha == 1):  # check_alpha raises torch's errors
        alpha = None
    elif isinstance(alpha, complex) or (compute == "i32" and not isinstance(alpha, int)):
        return decline("a complex alpha, or a non-integer alpha with integer operands")
    alpha = _numbers_as(common, o, op, alpha)
    ops = [t for t in o.full if t is not None]
    bound = None
    if any(t.dtype == torch.int64 for t in ops) or rdt == torch.int64:
        bound = i64_bound(op, compute, alpha)
        if bound is None:
            return decline("int64 operands of an op whose int32 result may not be exact")
    shape = broadcast_shape(ops)
    if shape is None:
        return decline("operands do not broadcast: torch raises")
    if U.is_trn(out) and not torch.can_cast(rdt, out.dtype):  # torch's check (in place too), word for word
        raise RuntimeError(f"result type {scalar_type_name(rdt)} can't be cast to the desired output type "
                           f"{scalar_type_name(out.dtype)}")
    res = prepare_out(shape, rdt, ops, out)
    if res is None:
        return decline("out= not a trn tensor of the result's shape and a castable dtype, expanded, or overlapping "
                       "an input")
    if res.numel() == 0:
        return res
    if bound is not None and not ints_in_range(o, bound):
        return _beyond_int32(op, self, other, alpha, rdt, compute, shape, res)
    if res.dtype != rdt and rdt in (torch.bfloat16, torch.float16):  # torch rounds to rdt, then casts into out
        tmp = _launch_binary(op, o, shape, compute, alpha, U.new_output(shape, rdt, ops))
        return tmp if tmp is NotImplemented else res.copy_(tmp)
    return _launch_binary(op, o, shape, compute, alpha, res)


def _beyond_int32(op: str, self: Any, other: Any, alpha: Any, rdt: torch.dtype, compute: str,
                  shape: tuple[int, ...], res: torch.Tensor) -> Any:
    """int64 values the int32 arithmetic would not compute exactly: add/sub/mul and the division family exactly on
    int32 words, else declined."""
    if rdt == torch.int64 and compute == "i32" and int64_words.supports(op, alpha):
        return res.copy_(int64_words.add64(self, other, alpha, op, shape))
    if rdt == torch.int64 and compute == "i32" and op == "mul" and alpha is None:
        return res.copy_(int64_words.mul64(self, other, shape))
    if rdt == torch.int64 and compute == "i32" and op in int64_words.DIVISIONS and alpha is None:
        return res.copy_(int64_words.divmod64(self, other, op, shape))  # divisors checked non-zero already
    if compute == "f32" and rdt.is_floating_point and alpha is None:  # torch casts int64 operands to the float
        a, b = (v.to(torch.float32) if isinstance(v, torch.Tensor) and v.dtype == torch.int64 else v
                for v in (self, other))
        return _run_binary(op, a, b, res, None, rdt, compute, False, False)
    return decline("integer values beyond the range the int32 arithmetic computes exactly")


def _numbers_as(common: torch.dtype, o: Operands, op: str, alpha: Any) -> Any:
    """Convert the number operands (in ``o``) and ``alpha`` as torch does before the op: rounded to a bf16/fp16
    common dtype (mul/div keep fp32), wrapped into a narrower integer one; returns ``alpha``."""
    if common in (torch.bfloat16, torch.float16) and op not in _OPMATH_SCALAR:
        o.values = [v if v is None else round_to(v, common) for v in o.values]
        return round_to(alpha, common) if alpha is not None else None
    if common in (torch.uint8, torch.int8, torch.int16, torch.int32):
        o.values = [U.wrap_int(v, common) for v in o.values]
    return alpha


def _launch_binary(op: str, o: Operands, shape: tuple[int, ...], compute: str, alpha: Any, res: torch.Tensor) -> Any:
    """Launch ``BINARY_OPS[op]`` into ``res`` (NotImplemented: a scalar or ``alpha`` does not fit ``compute``)."""
    scal = to_scalars(o, shape, (compute, compute))
    if scal is None:
        return decline("a scalar operand not representable in the compute type")
    alpha_t = scalar_operand(alpha, compute) if alpha is not None else None
    if alpha is not None and alpha_t is None:
        return decline("alpha not representable in the compute type")
    launch(elementwise, op, o.full, scal, alpha_t, res, compute)
    return res


def _binary(op: str, self: Any, other: Any, alpha: Any, out: torch.Tensor | None) -> Any:
    if op == "div":
        rdt = torch.result_type(self, other)
        if not rdt.is_floating_point:
            rdt = torch.get_default_dtype()
        return run_binary(op, self, other, out, rdt=rdt, compute="f32")
    return run_binary(op, self, other, out, alpha=alpha)


#: operand dtypes of the arithmetic lowerings: complex64 on its planes, complex32 through complex64
_COMPLEX_OPERANDS = (*OPERAND_DTYPES, torch.complex64, torch.complex32)


@lowering("aten::add.Tensor", dtypes=_COMPLEX_OPERANDS, fast=_fast(lambda a, b: add(a, b), "add",
                                                                         inplace=lambda a, b: add(a, b, out=a)))
def add(self: Any, other: Any, *, alpha: Any = 1, out: torch.Tensor | None = None) -> Any:
    """``self + alpha * other`` (two complex64 tensors: on their real/imaginary planes)."""
    if _is_complex(self) or _is_complex(other) or _is_complex(out):
        return _complex_arith().complex_add(self, other, alpha, out, 1)
    return _binary("add", self, other, alpha, out)


@lowering("aten::sub.Tensor", dtypes=_COMPLEX_OPERANDS, fast=_fast(lambda a, b: sub(a, b), "sub",
                                                                         inplace=lambda a, b: sub(a, b, out=a)))
def sub(self: Any, other: Any, *, alpha: Any = 1, out: torch.Tensor | None = None) -> Any:
    """``self - alpha * other``."""
    if _is_complex(self) or _is_complex(other) or _is_complex(out):
        return _complex_arith().complex_add(self, other, alpha, out, -1)
    bools = [isinstance(v, bool) or (isinstance(v, torch.Tensor) and v.dtype == torch.bool) for v in (self, other)]
    if all(bools) and all(isinstance(v, torch.Tensor) for v in (self, other)):  # torch's messages, word for word
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                           "`logical_xor()` operator instead.")
    if any(bools):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                           "to invert a mask, use the `~` or `logical_not()` operator instead.")
    return _binary("sub", self, other, alpha, out)


def _as_f32(v: Any) -> Any:
    """An integer or bool ``trn`` tensor as float32 (exactly rounded); anything else unchanged."""
    if U.is_trn(v) and not v.is_floating_point() and not v.is_complex():
        return v.to(torch.float32)
    return v


def _complex_arith() -> Any:
    from stdlib_kernels.elementwise import complex_arith

    return complex_arith


def _is_complex(v: Any) -> bool:
    return isinstance(v, complex) or (isinstance(v, torch.Tensor) and v.is_complex())


_MUL_FAST = _fast(lambda a, b: mul(a, b), "mul", inplace=lambda a, b: mul(a, b, out=a))


@lowering("aten::mul.Tensor", dtypes=(*_COMPLEX_OPERANDS, *unsigned.WIDE_UNSIGNED), fast=_MUL_FAST)
def mul(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self * other`` (complex64 operands: ``stdlib_kernels.fft.complex_ops``, on real/imaginary planes)."""
    if _is_complex(out) and not (_is_complex(self) or _is_complex(other)):
        return U.into_out(mul(self, other), out, (self, other))  # a real product into a complex out=: cast
    if _is_complex(self) or _is_complex(other) or _is_complex(out):
        from stdlib_kernels.fft.complex_ops import complex_mul

        if _complex_arith().half_result(self, other):
            return _complex_arith().via_complex64(mul, self, other, out)
        if torch.result_type(self, other) != torch.complex64:  # complex128 (a float64 default dtype, say)
            return decline("a complex result other than complex64 (complex128: the documented float64 fallback)")
        self, other = _complex_arith().up_complex32(self), _complex_arith().up_complex32(other)
        # an integer/bool tensor becomes complex64 through its float32 values, as torch promotes it
        self, other = (_as_f32(v) for v in (self, other))
        return complex_mul(self, other, out=out)
    if torch.result_type(self, other) == torch.bool:
        return run_binary("logical_and", self, other, out, rdt=torch.bool)
    return _binary("mul", self, other, None, out)


@lowering("aten::div.Tensor", dtypes=(*OPERAND_DTYPES, torch.complex64, *unsigned.WIDE_UNSIGNED),
          fast=_fast(lambda a, b: div(a, b), "div", inplace=lambda a, b: div(a, b, out=a)))
def div(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self / other`` (true division; integers divide in fp32; complex64 operands:
    ``stdlib_kernels.elementwise.complex_arith``)."""
    if _is_complex(self) or _is_complex(other) or _is_complex(out):
        return _complex_arith().complex_div(self, other, out)  # complex32 declines: the CPU has no such division
    return _binary("div", self, other, None, out)


@lowering("aten::div.Tensor_mode", dtypes=OPERAND_DTYPES)
def div_mode(self: Any, other: Any, *, rounding_mode: str | None = None, out: torch.Tensor | None = None) -> Any:
    """``self / other`` rounded: ``rounding_mode`` None (true division), ``"trunc"`` or ``"floor"``.

    Example:
        >>> torch.div(a, b, rounding_mode="floor")  # doctest: +SKIP
    """
    if rounding_mode is None:
        return _binary("div", self, other, None, out)
    if rounding_mode not in ("trunc", "floor"):
        return decline("a rounding_mode other than None, 'trunc' or 'floor': torch raises")
    return run_binary("div_" + rounding_mode, self, other, out, int_scalar_divisor=True)


@lowering("aten::floor_divide", dtypes=OPERAND_DTYPES)
def floor_divide(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self // other`` (``div(..., rounding_mode="floor")``)."""
    return run_binary("div_floor", self, other, out, int_scalar_divisor=True)



@lowering("aten::neg", dtypes=(*(d for d in OPERAND_DTYPES if d != torch.bool), torch.complex64, torch.complex32),
          fast=lambda a: _MUL_FAST(a, -1))
def neg(self: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``-self`` (a multiply by -1: exact, and -0.0 for 0.0 as torch gives; integers wrap as torch's do;
    int64 as ``0 - self``, whose int32 range check is wider than a multiply's; complex64 on its real/imaginary
    planes). A repeated call on a same-layout tensor takes ``mul``'s fast lane for ``x * -1`` (int64 tensors have
    none: their values are checked per call)."""
    if isinstance(self, torch.Tensor) and self.dtype == torch.complex32:
        return _complex_arith().unary_via_complex64(neg, self, out)
    if _is_complex(self) or _is_complex(out):
        return _complex_arith().complex_neg(self, out)
    if isinstance(self, torch.Tensor) and self.dtype == torch.int64:
        return run_binary("rsub", self, 0, out)
    return _binary("mul", self, -1, None, out)
