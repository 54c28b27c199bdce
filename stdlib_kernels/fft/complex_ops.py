"""Complex elementwise kernels over fp32 planes: ``complex_mul``, ``conj_physical``, and Bluestein's chirp-z DFT.

A complex64 ``trn`` tensor is seen as two strided fp32 planes (:func:`planes`: ``view_as_real`` with the
last index fixed); broadcasting is done with stride-0 views and dims contiguous in every plane merge,
as in :mod:`stdlib_kernels.elementwise.pointwise`. Python / 0-dim CPU scalars (real or complex) become ``[1, 1]``
device operands.

Bluestein: for a size with no useful factorisation (a large prime), ``X[k] = c_k sum_j (x_j c_j)
conj(c_{k-j})`` with the chirp ``c_t = exp(-+ i pi t^2 / n)``: a convolution done by FFTs of a power of two
``L >= 2n - 1`` (those factor), the chirp built on the device from the exact ``t^2 mod 2n``.

Example:
    >>> a = torch.randn(3, 4, dtype=torch.complex64).to("trn")  # doctest: +SKIP
    >>> complex_mul(a, 2j), conj_physical(a)                       # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import decline, memory

_F32 = torch.float32
_C64 = torch.complex64
#: Largest size Bluestein's path takes (``t * t`` of the chirp stays an exact int32).
BLUESTEIN_MAX = 46340


# ---------------------------------------------------------------------------------------------- kernels
def cos_sin(r: Any, n: int) -> tuple[Any, Any]:
    """``cos`` and ``sin`` of ``2 pi r / n`` for an int32 tile ``r`` in ``[0, n)``: a quadrant ``q`` and an angle
    ``2 pi (r - q n / 4) / n`` in ``[-pi/4, pi/4]`` (both from exact integer arithmetic), so the values are
    accurate to an ulp and exact at multiples of ``pi / 2``."""
    q = tl.floor((r.astype(tl.float32) * 4.0 + 0.5 * n) * (1.0 / n)).astype(tl.int32)
    t = r * 4 - q * n
    th = t.astype(tl.float32) * (math.pi / (2.0 * n))
    cb, sb = tl.cos(th), tl.sin(th)
    q = tl.where(q == 4, 0, q)
    c = tl.where(q == 1, -sb, tl.where(q == 2, -cb, tl.where(q == 3, sb, cb)))
    s = tl.where(q == 1, cb, tl.where(q == 2, -sb, tl.where(q == 3, -cb, sb)))
    return c, s


@dataclass(frozen=True)
class CMul:
    """What one :func:`cbin` launch computes (a compile-time spec: equal specs share a variant).

    Attributes:
        a_scalar / b_scalar: operand ``a`` / ``b`` is one ``[1, 1]`` value (a Python or 0-dim number), else a view
            shaped like the output.
        conj_a: ``a`` is conjugated before the product.

    >>> CMul(False, True, conj_a=True).b_scalar
    True
    """

    a_scalar: bool
    b_scalar: bool
    conj_a: bool


#: :class:`CMul` made once per distinct value (a warm launch builds no new instance).
_cmul = functools.lru_cache(maxsize=8)(CMul)


@trn.kernel
def cbin(ar, ai, br, bi, outr, outi, spec):
    """``out = (conj(a) if spec.conj_a else a) * b`` on planes (``ai``/``bi`` None: real; ``outi`` None: real
    result); ``spec``: a :class:`CMul`.

    Operands are 1- to 3-D views shaped like ``outr`` or ``[1, 1]`` scalars (``spec.a_scalar`` / ``b_scalar``).
    """
    a_dim, n, d = U.shape3(outr)
    p, f = min(128, n), min(d, U.FREE_CHUNK)
    ragged = n % p != 0 or d % f != 0
    sa = (tl.load(ar[0:1, 0:1]), tl.load(ai[0:1, 0:1]) if ai is not None else None) if spec.a_scalar else None
    sb = (tl.load(br[0:1, 0:1]), tl.load(bi[0:1, 0:1]) if bi is not None else None) if spec.b_scalar else None
    for b in tl.affine_range(a_dim):
        for i in tl.affine_range(tl.cdiv(n, p)):
            rows = i * p + tl.arange(p)[:, None]
            for j in tl.affine_range(tl.cdiv(d, f)):
                cols = j * f + tl.arange(f)[None, :]
                m = ((rows < n) & (cols < d)) if ragged else None
                if sa is not None:
                    xr, xi = sa
                else:
                    xr = tl.load(U.at3(ar, b, rows, cols), mask=m, dtype=tl.float32)
                    xi = tl.load(U.at3(ai, b, rows, cols), mask=m, dtype=tl.float32) if ai is not None else None
                if sb is not None:
                    yr, yi = sb
                else:
                    yr = tl.load(U.at3(br, b, rows, cols), mask=m, dtype=tl.float32)
                    yi = tl.load(U.at3(bi, b, rows, cols), mask=m, dtype=tl.float32) if bi is not None else None
                if xi is not None and spec.conj_a:
                    xi = -xi
                if xi is None and yi is None:
                    re, im = xr * yr, None
                elif xi is None:
                    re, im = xr * yr, xr * yi
                elif yi is None:
                    re, im = xr * yr, xi * yr
                else:
                    re, im = xr * yr - xi * yi, xr * yi + xi * yr
                if sa is not None and sb is not None:  # both scalars (a one-element output)
                    re = tl.broadcast_to(re, (p, f))
                    im = tl.broadcast_to(im, (p, f)) if im is not None else None
                tl.store(U.at3(outr, b, rows, cols), re, mask=m)
                if outi is not None:
                    tl.store(U.at3(outi, b, rows, cols), im if im is not None else re * 0.0, mask=m)


@trn.kernel
def chirp(cr, ci, n, sign):
    """``c[t] = exp(i sign pi u^2 / n)`` for ``t < L`` (c's length) with ``u = t`` for ``t < n``, ``u = L - t`` for
    ``t > L - n`` (the wrapped negative lags of a circular convolution), 0 between."""
    ln = cr.shape[0]
    f = min(512, ln)
    for j in tl.affine_range(tl.cdiv(ln, f)):
        cols = j * f + tl.arange(f)[None, :]
        t = isa.iota(cols, tl.int32)
        u = tl.where(t < n, t, ln - t)
        cv, sv = cos_sin(tl.fmod(u * u, 2 * n), 2 * n)
        ok = (t < n) | (t > ln - n)
        m = cols < ln
        tl.store(cr[cols], tl.where(ok, cv, 0.0), mask=m)
        tl.store(ci[cols], tl.where(ok, sv * sign, 0.0), mask=m)


@trn.kernel
def chirp_mul(xr, xi, cr, ci, yr, yi, scale):
    """``y[a, r, k] = x[a, r, k] * c[k] * scale`` for ``k < len(y)``; x beyond its length reads as 0.
    ``xi`` None: real x; ``yi`` None: the real part only."""
    a_dim, r_dim, lx = xr.shape
    ly = yr.shape[-1]
    p, f = min(128, r_dim), min(512, ly)
    for a in tl.affine_range(a_dim):
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            for j in tl.affine_range(tl.cdiv(ly, f)):
                cols = j * f + tl.arange(f)[None, :]
                mx = (rows < r_dim) & (cols < lx)
                my = (rows < r_dim) & (cols < ly)
                c_r = tl.load(cr[cols], mask=cols < min(lx, ly))  # c is as long as the shorter of x, y
                c_i = tl.load(ci[cols], mask=cols < min(lx, ly))
                x_r = tl.load(xr[a, rows, cols], mask=mx)
                if xi is not None:
                    x_i = tl.load(xi[a, rows, cols], mask=mx)
                    re, im = x_r * c_r - x_i * c_i, x_r * c_i + x_i * c_r
                else:
                    re, im = x_r * c_r, x_r * c_i
                tl.store(yr[a, rows, cols], re * scale, mask=my)
                if yi is not None:
                    tl.store(yi[a, rows, cols], im * scale, mask=my)


# ---------------------------------------------------------------------------------------------- planes
def planes(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The real and imaginary fp32 planes of a complex64 ``trn`` tensor (views; a conj-bit tensor is first
    conjugated physically by a kernel, since its planes would not hold its values)."""
    if t.is_conj():
        t = conj_physical(torch.conj(t))
    r = torch.view_as_real(t)
    st = [2 * s for s in t.stride()]
    return (U.view(r, tuple(t.shape), st, r.storage_offset()), U.view(r, tuple(t.shape), st, r.storage_offset() + 1))


def _operand(v: Any) -> tuple[torch.Tensor, torch.Tensor | None, bool] | None:
    """``(re, im, is_scalar)`` of a mul operand; None if it is not one the kernel takes."""
    if U.is_trn(v):
        if v.is_neg():
            return None
        if v.dtype == _C64:
            r, i = planes(v)
            return r, i, False
        if v.dtype in U.NATIVE_DTYPES:
            return v, None, False
        return None
    sv = v if isinstance(v, complex) else U.scalar_value(v)
    if sv is None:
        return None
    c = complex(sv)
    return (U.scalar_tensor(c.real, _F32), U.scalar_tensor(c.imag, _F32) if c.imag != 0 else None, True)


def _launch(a: tuple[Any, Any, bool], b: tuple[Any, Any, bool], outr: torch.Tensor, outi: torch.Tensor | None,
            conj_a: bool) -> None:
    """:func:`cbin` over ``out``'s shape: full operands broadcast by strides, dims merged, big outputs split."""
    shape = tuple(outr.shape)
    fulls = [t for (r, i, s) in (a, b) if not s for t in (r, i) if t is not None]
    outs = [outr] + ([outi] if outi is not None else [])
    views = fulls + outs
    strides = [U.broadcast_strides(t, shape) for t in fulls] + [list(o.stride()) for o in outs]
    sh, sts = U.coalesce(shape, strides)
    spec = _cmul(a[2], b[2], conj_a)

    def call(pshape: Any, pstrides: Any, poffs: Any) -> Any:
        vs = [U.view(t, pshape, pstrides[k], t.storage_offset() + poffs[k]) for k, t in enumerate(views)]
        it = iter(vs)
        ops = []
        for (r, i, s) in (a, b):
            if s:
                ops += [r, i]
            else:
                ops += [next(it), next(it) if i is not None else None]
        o_r = next(it)
        o_i = next(it) if outi is not None else None
        return lambda: cbin(ops[0], ops[1], ops[2], ops[3], o_r, o_i, spec)

    U.run_parallel([call(*p) for p in U.split_parts(U.launch_parts(sh, sts), outr.numel())])


def _out(out: torch.Tensor | None, shape: Sequence[int], dtype: torch.dtype,
         inputs: Sequence[Any]) -> torch.Tensor | None:
    """A new output, or the checked ``out=`` (resized when empty); None to decline."""
    if out is None:  # the layout TensorIterator gives (a transposed operand first: a transposed result)
        return U.new_output(tuple(shape), dtype, [t for t in inputs if U.is_trn(t)])
    if U.is_trn(out) and tuple(out.shape) != tuple(shape) and not any(U.is_trn(t) and U.overlaps(out, t)
                                                                      for t in inputs):
        U.resize_out(out, shape)  # torch warns unless it was empty
    if (not U.is_trn(out) or out.dtype != dtype or tuple(out.shape) != tuple(shape) or out.is_conj()
            or out.is_neg() or U.has_internal_overlap(out)):
        return None
    if any(U.is_trn(t) and U.overlaps(out, t) and not U.same_view(out, t) for t in inputs):
        return None
    return out


def complex_mul(a: Any, b: Any, out: torch.Tensor | None = None) -> Any:
    """``a * b`` with a complex64 result (``aten::mul.Tensor`` / ``.out`` / ``mul_`` on complex ``trn`` tensors).

    Operands: complex64 or real ``trn`` tensors, Python numbers (complex too) or 0-dim CPU tensors.
    Returns ``NotImplemented`` for anything else (complex128, a negative-bit view, a partially overlapping
    ``out``), so the call falls back.

    Example:
        >>> a = torch.randn(3, dtype=torch.complex64).to("trn")  # doctest: +SKIP
        >>> complex_mul(a, 2).cpu(), complex_mul(a, a.conj())     # doctest: +SKIP
    """
    try:
        rdt = torch.result_type(a, b)
    except (RuntimeError, TypeError):
        return decline("operands with no common result dtype")
    if rdt != _C64:
        return decline("a result dtype other than complex64")
    oa, ob = _operand(a), _operand(b)
    if oa is None or ob is None:
        return decline("an operand with a neg bit, of a dtype the kernel does not take, or not a number")
    tens = [t for t in (a, b) if U.is_trn(t)]
    if not tens:
        return decline("no trn operand")
    try:
        shape = tuple(torch.broadcast_shapes(*[t.shape for t in tens]))
    except RuntimeError:
        return decline("operands do not broadcast: torch raises")
    res = _out(out, shape, _C64, tens)
    if res is None:
        return decline("out= not a trn tensor of the result's dtype and shape, or conj/neg, expanded or aliased")
    if res.numel() == 0:
        return res
    ors, ois = planes(res)
    _launch(oa, ob, ors, ois, False)
    return res


def conj_physical(x: torch.Tensor, out: torch.Tensor | None = None) -> Any:
    """``conj(x)`` materialised (``aten::conj_physical``): the imaginary plane negated; a copy for real ``x``.

    Example:
        >>> conj_physical(torch.tensor([1 + 2j], dtype=torch.complex64).to("trn")).cpu()  # doctest: +SKIP
        tensor([1.-2.j])
    """
    if not U.is_trn(x) or x.is_neg() or (x.dtype != _C64 and x.dtype not in U.FLOAT_DTYPES):
        return decline("not a trn tensor of complex64 or a float dtype, or a neg bit")
    res = _out(out, tuple(x.shape), x.dtype, [x])
    if res is None:
        return decline("out= not a trn tensor of the result's dtype and shape, or conj/neg, expanded or aliased")
    if res.numel() == 0:
        return res
    one = (U.scalar_tensor(1.0, _F32), None, True)
    if x.dtype != _C64:
        _launch((x, None, False), one, res, None, False)
        return res
    if x.is_conj():  # its value is conj(stored): the result is the stored data
        xr, xi = planes(torch.conj(x))
        conj = False
    else:
        xr, xi = planes(x)
        conj = True
    ors, ois = planes(res)
    _launch((xr, xi, False), one, ors, ois, conj)
    return res


# ---------------------------------------------------------------------------------------------- Bluestein
_CHIRPS: OrderedDict[tuple[int, bool], tuple[torch.Tensor, ...]] = OrderedDict()


def _chirps(n: int, inverse: bool) -> tuple[torch.Tensor, ...]:
    """``(cr, ci)``: the chirp ``c [n]``; ``(br, bi)``: the FFT of the wrapped conjugate chirp, ``[L]``."""
    key = (n, inverse)
    hit = _CHIRPS.get(key)
    if hit is not None:
        _CHIRPS.move_to_end(key)
        return hit
    from stdlib_kernels.fft.dft import dft_last

    sign = 1.0 if inverse else -1.0
    big = 1 << (2 * n - 2).bit_length()
    cr, ci = memory.empty((n,), _F32), memory.empty((n,), _F32)
    chirp(cr, ci, n, sign)
    wr, wi = memory.empty((1, big), _F32), memory.empty((1, big), _F32)
    chirp(wr[0], wi[0], n, -sign)
    br, bi = memory.empty((1, big), _F32), memory.empty((1, big), _F32)
    dft_last(wr, wi, br, bi, big, False, 1.0)
    _CHIRPS[key] = (cr, ci, br[0], bi[0])
    while len(_CHIRPS) > 8:
        _CHIRPS.popitem(last=False)
    return _CHIRPS[key]


def bluestein(xr: torch.Tensor, xi: torch.Tensor | None, yr: torch.Tensor, yi: torch.Tensor | None, n: int,
              inverse: bool, scale: float) -> None:
    """The length-``n`` DFT along the last dim (``dft_last``'s contract) by Bluestein's chirp-z algorithm."""
    from stdlib_kernels.fft.dft import _split, dft_last

    cr, ci, br, bi = _chirps(n, inverse)
    big = br.shape[0]
    batch = tuple(xr.shape[:-1])
    ar, ai = memory.empty((*batch, big), _F32), memory.empty((*batch, big), _F32)
    for v in _split([xr, xi, ar, ai], keep_last=False):
        chirp_mul(v[0], v[1], cr, ci, v[2], v[3], 1.0)
    fr, fi = memory.empty((*batch, big), _F32), memory.empty((*batch, big), _F32)
    dft_last(ar, ai, fr, fi, big, False, 1.0)
    _launch((fr, fi, False), (br, bi, False), fr, fi, False)  # in place: each element read before written
    dft_last(fr, fi, ar, ai, big, True, 1.0)
    for v in _split([ar, ai, yr, yi], keep_last=False):
        chirp_mul(v[0], v[1], cr, ci, v[2], v[3], scale / big)
