"""Tensor factories on ``trn``: ``arange``, ``linspace``, ``logspace``, ``eye``, each one trnlang kernel.

The factories reach the backend as their ``out=`` variants (``torch.arange(10, device="trn")`` is
``arange.start_out`` on an empty int64 tensor), so the lowerings compute the result size as torch does,
resize ``out`` and fill it. Values come from the element index, an ``iota``-like index expression turned into an
int32 tile: ``start + i * step`` in fp32 (floats) or int32 (integers; int64 outputs are stored from int32
tiles, which the DMA widens, so position ids are made on the device). ``linspace`` uses torch's two-sided
formula (``start + i * step`` below the halfway point, ``end - (steps - 1 - i) * step`` above; bf16/fp16 round
every step as torch's ``scalar_t`` math does), ``logspace`` raises ``base`` to it, ``eye`` is an index predicate
``row == col``. Start/step are runtime ``[1, 1]``
operands (a new range of the same length does not recompile). ``full``/``zeros``/``ones`` are the device's
``fill_`` plumbing.

Example:
    >>> import torch
    >>> torch.arange(10, device="trn")                 # doctest: +SKIP
    >>> torch.linspace(0, 1, 5, device="trn")          # doctest: +SKIP
    >>> torch.eye(3, device="trn")                     # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np
import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.pointwise import flat_kernel, flat_tiles
from trnlang.device import decline, lowering
from trnlang.device.registry import warn_like_torch

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
_BIG = 4096


class Ramp(U.Mode):
    """What :func:`ramp` computes from the element index ``i``."""

    ARANGE = "arange"      # a + i * b in fp32
    IARANGE = "iarange"    # a + i * b in int32
    LINSPACE = "linspace"  # torch's two-sided linspace formula


#: arange's kinds as module globals (an attribute read on an Enum class is slow on Python 3.11: ``U.Mode``)
_ARANGE, _IARANGE = Ramp.ARANGE, Ramp.IARANGE


class EyeTile(U.Mode):
    """The tile :func:`eye_kernel` stores (the value: its dtype): fp32, int32 or bool."""

    FLOAT = tl.float32
    INT = tl.int32
    BOOL = tl.bool_


def _ramp_value(idx: Any, at: Any, bt: Any, ct: Any, kind: Ramp, steps: int, rnd: Any) -> Any:
    """The ramp's value at the int32 element indices ``idx`` (see :func:`ramp`)."""
    if kind is Ramp.IARANGE:
        return at + idx * bt
    if kind is Ramp.ARANGE:
        return at + idx.astype(tl.float32) * bt
    fi = idx.astype(tl.float32)
    if rnd is None:
        lo = at + fi * bt
        hi = ct - ((steps - 1) - fi) * bt
    else:
        r = _rounder(rnd)
        lo = r(at + r(bt * r(fi)))
        hi = r(ct - r(bt * r((steps - 1) - fi)))
    return tl.where(idx < steps // 2, lo, hi)


def tiles_2d(n: int, d: int, cap: int = U.FREE_CHUNK) -> Iterator[tuple[Any, Any, Any]]:
    """Yield ``(rows, cols, mask)`` for every tile of an ``[n, d]`` view, inside two affine loops (rows outer).

    Tiles are ``[min(128, n), min(d, cap)]``: ``rows`` (``[p, 1]``) and ``cols`` (``[1, f]``) index one, ``mask``
    bounds both and is None when the tiles cover the view exactly. The creation and random kernels' loop.
    """
    p = min(128, n)
    f = min(d, cap)
    ragged = n % p != 0 or d % f != 0
    for i in tl.affine_range(tl.cdiv(n, p)):
        rows = i * p + tl.arange(p)[:, None]
        for j in tl.affine_range(tl.cdiv(d, f)):
            cols = j * f + tl.arange(f)[None, :]
            yield rows, cols, ((rows < n) & (cols < d)) if ragged else None


@trn.kernel
def ramp(out, a, b, c, kind, base, steps, rnd=None, flat=False):
    """Fill the 2-D view ``out [n, d]`` (element index ``i = base + r * d + col``); ``flat``: ``out`` is a
    contiguous 1-D piece and ``i`` its element index (``elementwise.flat.flat_tiles``, through :data:`ramp_flat`).

    ``kind`` (a :class:`Ramp`): ``ARANGE`` ``a + i * b`` in fp32, ``IARANGE`` the same in int32, ``LINSPACE``
    ``a + i * b`` below ``steps // 2`` and ``c - (steps - 1 - i) * b`` from there on. ``a``, ``b``, ``c``:
    ``[1, 1]`` operands.
    ``rnd`` (bf16/fp16 linspace): every product and sum, and the index itself, rounded to that dtype, as torch's
    ``scalar_t`` arithmetic does.
    """
    at = tl.load(a[0:1, 0:1])
    bt = tl.load(b[0:1, 0:1])
    ct = tl.load(c[0:1, 0:1]) if c is not None else None
    if flat:
        for fidx, m in flat_tiles(out.shape[0]):
            tl.store(out[fidx], _ramp_value(tl.copy(fidx, dtype=tl.int32), at, bt, ct, kind, steps, rnd), mask=m)
        return
    n, d = out.shape
    for rows, cols, m in tiles_2d(n, d):
        idx = tl.copy(base + rows * d + cols, dtype=tl.int32)
        tl.store(out[rows, cols], _ramp_value(idx, at, bt, ct, kind, steps, rnd), mask=m)


#: :func:`ramp` for flat launches (``arange``): one variant for every length.
ramp_flat = flat_kernel(ramp)


def _rounder(dt: Any) -> Any:
    """Round an fp32 tile to ``dt`` and back."""
    return lambda v: v.astype(dt).astype(tl.float32)


@trn.kernel
def pow_base(x, base_t, out):
    """``out = base ** x`` over 2-D views (fp32 math; ``base_t``: a ``[1, 1]`` fp32 tensor)."""
    bt = tl.load(base_t[0:1, 0:1])
    for rows, cols, m in tiles_2d(*out.shape):
        tl.store(out[rows, cols], tl.power(bt, tl.load(x[rows, cols], mask=m).astype(tl.float32)), mask=m)


@trn.kernel
def eye_kernel(out, kind):
    """``out[r, c] = (r == c)``, stored from a ``kind`` tile (an :class:`EyeTile`: fp32, int32 or bool)."""
    for rows, cols, m in tiles_2d(*out.shape):
        if kind is EyeTile.BOOL:
            val = tl.copy(rows == cols, dtype=tl.bool_)
        else:
            shape = (rows.shape[0], cols.shape[1])
            val = tl.where(rows == cols, tl.ones(shape, kind.value), tl.zeros(shape, kind.value))
        tl.store(out[rows, cols], val, mask=m)


def flat_views(t: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
    """2-D views of a contiguous tensor, each with the flat index of its first element: ``[128, n // 128]`` and a
    ``[1, rest]`` tail from 4096 elements up, else one ``[1, n]`` row (the creation and random kernels' launches).

    Example:
        >>> [(tuple(v.shape), base) for v, base in flat_views(torch.zeros(4100))]
        [((128, 32), 0), ((1, 4), 4096)]
    """
    n = t.numel()
    o = t.storage_offset()
    if n >= _BIG:
        cols = n // 128
        vs = [(U.view(t, (128, cols), (cols, 1), o), 0)]
        if n - 128 * cols:
            vs.append((U.view(t, (1, n - 128 * cols), (0, 1), o + 128 * cols), 128 * cols))
        return vs
    return [(U.view(t, (1, n), (0, 1), o), 0)]


def _prepare_out(out: torch.Tensor, shape: tuple[int, ...]) -> bool:
    if not U.is_trn(out):
        return False
    if tuple(out.shape) != shape:
        out.resize_(shape)
    return out.is_contiguous()


def _warn_arange_resize(out: torch.Tensor, n: int) -> None:
    """torch's warning when arange resizes a non-empty ``out=`` of another element count."""
    if U.is_trn(out) and out.numel() and out.numel() != n:
        warn_like_torch(f"The number of elements in the out tensor of shape {list(out.shape)} is {out.numel()} which "
                        f"does not match the computed number of elements {n}. Note that this may occur as a result "
                        f"of rounding error. The out tensor will be resized to a tensor of shape ({n},).")


def _flat_out(out: torch.Tensor, n: int) -> torch.Tensor | None:
    """Where arange/linspace/logspace write their ``n`` values for ``out=``: as torch, ``out`` is resized to
    ``(n,)`` only if it holds another number of elements (else it keeps its shape, and the values fill it in
    row-major order); a contiguous ``out`` is written directly (a flat view), a strided one through a
    contiguous buffer that :func:`_flat_done` copies in. None: not a trn tensor."""
    if not U.is_trn(out):
        return None
    if out.numel() != n:
        out.resize_((n,))
    if out.is_contiguous():
        return out.view(-1)
    return torch.empty((n,), dtype=out.dtype, device="trn")


def _flat_done(out: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """``out`` after its values were written to ``flat`` (copied through ``out``'s strides if it is a buffer)."""
    if flat.numel() and not out.is_contiguous():
        out.copy_(flat.view(out.shape))
    return out


def _int64_ramp(flat: torch.Tensor, start: int, step: int) -> torch.Tensor:
    """``flat[i] = start + i * step`` for an int64 ramp beyond int32, on the int32 words: the first value set,
    then each round copies the ``k`` values so far ``k`` places on, adding ``k * step`` word by word with the carry
    of the low words (their unsigned order: sign bits flipped) computed on the device; ``log2 n`` rounds."""
    n = flat.numel()
    words = flat.view(torch.int32).view(n, 2)
    flat[0:1].copy_(torch.tensor([start], dtype=torch.int64))
    k = 1
    while k < n:
        m = min(k, n - k)
        nlo, nhi = U.add64_words(words[:m, 0], words[:m, 1], k * step)
        words[k:k + m, 1].copy_(nhi)
        words[k:k + m, 0].copy_(nlo)
        k += m
    return flat


def _num(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.item()
    return v


def _arange_size(start: Any, end: Any, step: Any, integral: bool, dtype: torch.dtype) -> tuple[int, Any, Any] | str:
    """arange's ``(size, start, step)`` as torch computes them for the out dtype, or why the call is declined."""
    if integral and all(isinstance(v, int) for v in (start, end, step)):
        sgn = (step > 0) - (step < 0)
        size = (end - start + step - sgn) // step
    elif integral and dtype == torch.int64:  # torch: start/end/step cast toward zero, then the integer formula
        start, end, step = math.trunc(start), math.trunc(end), math.trunc(step)
        if step == 0:
            return "a step that truncates to 0 for an int64 out=: torch raises"
        sgn = (step > 0) - (step < 0)
        num = end - start + step - sgn
        size = abs(num) // abs(step) * (1 if (num >= 0) == (step > 0) else -1)  # C's truncating division
    else:
        size = math.ceil((float(end) - float(start)) / float(step))
        if integral:  # torch: the size from the doubles, the values from start and step cast toward zero
            start, step = math.trunc(start), math.trunc(step)
    return max(int(size), 0), start, step


@lowering("aten::arange.start_out", dtypes=FLOATS + INTS)
def arange_out(start: Any, end: Any, step: Any = 1, *, out: torch.Tensor) -> Any:
    """``torch.arange(start, end, step, out=out)``: size as torch computes it, then ``start + i * step``.

    Integer outputs (int64 included) are computed in int32 when the whole range fits; float outputs in fp32.
    """
    start, end, step = (int(v) if isinstance(v, bool) else v for v in (_num(start), _num(end), _num(step)))
    if any(isinstance(v, complex) for v in (start, end, step)):
        return decline("a complex start, end or step")
    if not all(math.isfinite(float(v)) for v in (start, end, step)) or step == 0:
        return decline("a non-finite start/end/step or a zero step: torch raises")
    if (step > 0 and end < start) or (step < 0 and end > start):
        return decline("a step whose sign does not lead from start to end: torch raises")
    integral = not out.dtype.is_floating_point
    sized = _arange_size(start, end, step, integral, out.dtype)
    if isinstance(sized, str):
        return decline(sized)
    size, start, step = sized
    if integral:
        last = start + (size - 1) * step if size else start
        lo, hi = -2**31, 2**31 - 1
        if not (lo <= start <= hi and lo <= last <= hi and lo <= step <= hi):
            if out.dtype != torch.int64 or not (-2**63 <= min(start, last) and max(start, last) < 2**63):
                return decline("an integer range beyond the out dtype")
            _warn_arange_resize(out, size)
            flat = _flat_out(out, size)
            if flat is None:
                return decline("out= not a trn tensor")
            return _flat_done(out, _int64_ramp(flat, int(start), int(step))) if size else out
    elif size > 1 << 24:
        return decline("more than 2^24 float elements")
    _warn_arange_resize(out, size)
    flat = _flat_out(out, size)
    if flat is None:
        return decline("out= not a trn tensor")
    if size == 0:
        return out
    if integral:
        a, b, kind = U.scalar_tensor(int(start), torch.int32), U.scalar_tensor(int(step), torch.int32), _IARANGE
    else:
        a, b, kind = U.scalar_tensor(float(start), torch.float32), U.scalar_tensor(float(step), torch.float32), \
            _ARANGE
    ramp_flat(U.piece(flat, (size,), (1,), flat.storage_offset()), a, b, None, kind, 0, 0, None, True)
    return _flat_done(out, flat)


@lowering("aten::range.out", dtypes=FLOATS + INTS)
def range_out(start: Any, end: Any, step: Any = 1, *, out: torch.Tensor) -> Any:
    """The deprecated ``torch.range(start, end, step, out=out)``: ``end`` included (``floor((end - start) / step)
    + 1`` values), as :func:`arange_out` over a bound half a step past the last value."""
    start, end, step = (int(v) if isinstance(v, bool) else v for v in (_num(start), _num(end), _num(step)))
    if any(isinstance(v, complex) for v in (start, end, step)) or step == 0 \
            or not all(math.isfinite(float(v)) for v in (start, end, step)) \
            or (step > 0 and end < start) or (step < 0 and end > start):
        return decline("a complex, non-finite or zero step, or one whose sign does not lead to end: torch raises")
    size = int(math.floor((float(end) - float(start)) / float(step))) + 1
    if all(isinstance(v, int) for v in (start, end, step)):
        return arange_out(start, start + size * step, step, out=out)
    return arange_out(start, float(start) + (size - 0.5) * float(step), step, out=out)


@lowering("aten::arange.out", dtypes=FLOATS + INTS)
def arange_end_out(end: Any, *, out: torch.Tensor) -> Any:
    """``torch.arange(end, out=out)``."""
    return arange_out(0, end, 1, out=out)


def _round(v: float, dt: torch.dtype) -> float:
    """``v`` rounded to ``dt`` as torch's ``Scalar.to<scalar_t>()`` (double -> float -> dt)."""
    return float(torch.tensor(float(np.float32(v)), dtype=torch.float32).to(dt).float()) if dt != torch.float32 \
        else float(np.float32(v))


def _linspace_into(out: torch.Tensor, start: float, end: float, steps: int, *, step: float | None = None,
                   rnd: torch.dtype | None = None) -> None:
    """torch's CPU formula. fp32: the step computed in fp32 as the fp32 kernel does (or ``step`` if given);
    ``rnd`` (bf16/fp16): start, end, step and every intermediate rounded to that dtype, as torch computes them."""
    if rnd is not None:
        s_, e_ = _round(start, rnd), _round(end, rnd)
        step = _round(np.float32(_round(e_ - s_, rnd)) / np.float32(_round(steps - 1, rnd)), rnd)
    else:
        s_, e_ = float(np.float32(start)), float(np.float32(end))
        if step is None:
            step = float((np.float32(e_) - np.float32(s_)) / np.float32(steps - 1)) if steps > 1 else 0.0
    a = U.scalar_tensor(s_, torch.float32)
    b = U.scalar_tensor(float(step), torch.float32)
    c = U.scalar_tensor(e_, torch.float32)
    for v, base in flat_views(out):
        ramp(v, a, b, c, Ramp.LINSPACE, base, steps, rnd)


def _lin_args(start: Any, end: Any, steps: int, out: torch.Tensor) -> tuple[float, float] | None:
    start, end = _num(start), _num(end)
    if isinstance(start, complex) or isinstance(end, complex) or steps < 0 or out.dtype not in FLOATS:
        return None
    if steps > 1 << 24:
        return None
    return float(start), float(end)


def _complex_number(v: Any) -> complex | None:
    """A Python number or a one-element tensor as a complex (None otherwise)."""
    if isinstance(v, torch.Tensor):
        return complex(v.item()) if v.numel() == 1 else None
    return complex(v) if isinstance(v, (bool, int, float, complex)) else None


def _complex_linspace(start: Any, end: Any, steps: int, out: torch.Tensor) -> Any:
    """A complex64 linspace: torch's complex step arithmetic is the real one on each plane."""
    s, e = _complex_number(start), _complex_number(end)
    if s is None or e is None or steps < 0 or out.is_conj() or out.is_neg():
        return decline("start/end not numbers, steps < 0 (torch raises), or a conj/neg out=")
    re = torch.linspace(s.real, e.real, steps, device="trn")
    im = torch.linspace(s.imag, e.imag, steps, device="trn")
    if out.numel() != steps:  # torch resizes only then; else the values fill out's shape in row-major order
        out.resize_((steps,))
    return out.copy_(torch.complex(re, im).view(out.shape))


@lowering("aten::linspace.out", dtypes=(*FLOATS, torch.complex64))
def linspace_out(start: Any, end: Any, steps: int, *, out: torch.Tensor) -> Any:
    """``torch.linspace(start, end, steps, out=out)`` (float outputs).

    bf16/fp16 follow torch's ``scalar_t`` arithmetic exactly: ``step = (end - start) / (steps - 1)`` and
    ``start + step * i`` (``end - step * (steps - 1 - i)`` past the middle) with every operand and result rounded
    to the dtype (the index too), so the values equal the CPU's.
    """
    if U.is_trn(out) and out.dtype == torch.complex64:
        return _complex_linspace(start, end, steps, out)
    args = _lin_args(start, end, steps, out)
    flat = _flat_out(out, steps) if args is not None else None
    if args is None or flat is None:
        return decline("complex start/end, steps < 0 or > 2^24, or out= not a float trn tensor")
    if steps == 1:
        flat.fill_(args[0])
    elif steps:
        _linspace_into(flat, *args, steps, rnd=None if out.dtype == torch.float32 else out.dtype)
    return _flat_done(out, flat)


@lowering("aten::logspace.out", dtypes=(*FLOATS, torch.complex64))
def logspace_out(start: Any, end: Any, steps: int, base: float = 10.0, *, out: torch.Tensor) -> Any:
    """``torch.logspace(start, end, steps, base, out=out)``: ``base ** linspace`` (float outputs, base > 0).

    For bf16/fp16 torch rounds start, end and ``end - start`` to the dtype, then steps in double; here the
    exponents are fp32 from those rounded values (a last-bit difference from the CPU in rare elements). complex64:
    ``base ** z`` of the complex linspace (the complex ``pow``).
    """
    if U.is_trn(out) and out.dtype == torch.complex64:
        z = torch.empty((0,), dtype=torch.complex64, device="trn")
        r = _complex_linspace(start, end, steps, z)
        if r is NotImplemented:
            return r
        if out.numel() != steps:
            out.resize_((steps,))
        return out.copy_(torch.pow(float(base), z).view(out.shape))
    args = _lin_args(start, end, steps, out)
    flat = _flat_out(out, steps) if args is not None and base > 0 else None
    if args is None or flat is None:
        return decline("complex start/end, steps < 0 or > 2^24, base <= 0, or out= not a float trn tensor")
    if steps:
        exps = torch.empty((steps,), dtype=torch.float32, device="trn")
        if steps == 1:
            exps.fill_(args[0])
        elif out.dtype == torch.float32:
            _linspace_into(exps, *args, steps)
        else:
            s_, e_ = _round(args[0], out.dtype), _round(args[1], out.dtype)
            step = float(np.float32(_round(e_ - s_, out.dtype)) / np.float32(steps - 1))
            _linspace_into(exps, s_, e_, steps, step=step)
        bt = U.scalar_tensor(float(base), torch.float32)
        for (xv, _), (ov, _) in zip(flat_views(exps), flat_views(flat)):
            pow_base(xv, bt, ov)
    return _flat_done(out, flat)


_EYE_DTYPES = FLOATS + INTS + (torch.bool, torch.complex64)


@lowering("aten::eye.m_out", dtypes=_EYE_DTYPES)
def eye_m_out(n: int, m: int, *, out: torch.Tensor) -> Any:
    """``torch.eye(n, m, out=out)`` (complex64: a float32 identity as the real plane)."""
    if U.is_trn(out) and out.dtype == torch.complex64 and n >= 0 and m >= 0:
        re = torch.eye(n, m, device="trn")
        if tuple(out.shape) != (n, m):
            out.resize_((n, m))
        return out.copy_(torch.complex(re, torch.zeros_like(re)))
    if n < 0 or m < 0 or not _prepare_out(out, (n, m)):
        return decline("a negative size (torch raises), or out= not a contiguous trn tensor")
    if n * m:
        eye_kernel(out, EyeTile.BOOL if out.dtype == torch.bool else
                   EyeTile.FLOAT if out.dtype.is_floating_point else EyeTile.INT)
    return out


@lowering("aten::eye.out", dtypes=_EYE_DTYPES)
def eye_out(n: int, *, out: torch.Tensor) -> Any:
    """``torch.eye(n, out=out)``."""
    return eye_m_out(n, n, out=out)


def _tri_indices(row: int, col: int, offset: int, lower: bool, dtype: Any, out: torch.Tensor | None) -> Any:
    dt = out.dtype if out is not None else (dtype if dtype is not None else torch.int64)
    if dt not in (torch.int64, torch.int32) or row < 0 or col < 0 or (out is not None and not U.is_trn(out)):
        return decline("a negative size or a dtype other than int32/int64 (torch raises), or out= not on trn")
    keep = torch.ones((row, col), dtype=torch.bool, device="trn")
    keep = keep.tril(offset) if lower else keep.triu(offset)
    res = keep.nonzero().t().to(dt)  # nonzero lists kept positions row-major: torch's order
    if out is None:
        return res.contiguous()
    out.resize_(res.shape)
    return out.copy_(res)


@lowering("aten::tril_indices", dtypes=None)
def tril_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None, layout: Any = None, device: Any = None,
                 pin_memory: Any = None, out: torch.Tensor | None = None) -> Any:
    """``torch.tril_indices``: the positions kept by ``tril(offset)`` of a ``row x col`` mask, as a ``[2, N]``
    int64/int32 tensor (a device ``tril`` and ``nonzero``; torch's decomposition computes in float64).

    >>> torch.tril_indices(3, 3, device="trn").cpu()
    tensor([[0, 1, 1, 2, 2, 2],
            [0, 0, 1, 0, 1, 2]])
    """
    return _tri_indices(row, col, offset, True, dtype, out)


@lowering("aten::triu_indices", dtypes=None)
def triu_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None, layout: Any = None, device: Any = None,
                 pin_memory: Any = None, out: torch.Tensor | None = None) -> Any:
    """``torch.triu_indices``: as :func:`tril_indices`, for ``triu(offset)``.

    >>> torch.triu_indices(2, 3, 1, device="trn").cpu()
    tensor([[0, 0, 1],
            [1, 2, 2]])
    """
    return _tri_indices(row, col, offset, False, dtype, out)
