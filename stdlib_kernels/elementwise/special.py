"""Elementwise special functions: ``erfcx``, ``log_ndtr``, ``ndtri``, ``angle``, ``nextafter``, ``frexp``,
``hash_tensor`` and the orthogonal polynomials (``chebyshev_polynomial_{t,u,v,w}``, their shifted forms,
``hermite_polynomial_{h,he}``, ``laguerre_polynomial_l``, ``legendre_polynomial_p``).

The formulas run in the elementwise kernel of ``stdlib_kernels.elementwise.unary`` (:func:`unary.ew`): each is added to
``unary.EW_OPS`` under a compile-time name. They follow torch's CPU kernels (``aten/src/ATen/native/Math.h``),
special cases included (``n < 0``, ``|x| == 1``, NaN and infinite ``n``, ...), evaluated in fp32:

- ``erfcx`` uses a degree-12 polynomial in ``q = (|x| - 2) / (|x| + 2)`` for ``(1 + 2|x|) erfcx(|x|) - 1``
  (fitted to torch's float64 ``erfcx``; relative error ~2e-7 in fp32) and ``erfcx(x) = 2 exp(x^2) - erfcx(-x)``
  for ``x < 0``, with torch's cut-offs. ``log_ndtr`` and ``ndtri`` are torch's (Cephes / SciPy) formulas.
- ``nextafter``, ``frexp`` and ``hash_tensor`` work on the integer view of the floats' bits (no float arithmetic
  touches a subnormal), so they are bit-exact for every input, bf16/fp16 too. ``hash_tensor`` builds each
  element's float64 (int64 for integers) bit pattern as two int32 words on chip and XOR-reduces them over the
  dims with native ``bitwise_xor`` launches (halving the reduced extent each time).
- A polynomial of degree ``n`` (a tensor) runs its three-term recurrence as a loop of ``steps`` iterations
  on chip; each element keeps the value of its own iteration ``n - 1`` (torch's loop stops at NaN, and NaN
  is absorbing, so the result is the same). ``steps`` (a compile-time power of two) comes from a small device
  reduction: the largest ``n - 1`` over the elements that need the recurrence (the others use torch's
  closed forms or special cases; a Chebyshev/Legendre recurrence with ``|x| > 1`` is known to reach NaN
  after ``~90 / acosh|x|`` steps, so it is bounded by that). Above :data:`MAX_STEPS` the call is declined.
  torch's CPU build fuses ``a * q - k * p`` into an FMA; without one, results agree to a few ulps per step
  (1e-4 where the value is not near a root or the fp32 overflow threshold), and the closed forms
  ``cos(n acos x)`` amplify 1-ulp ``acos`` differences by ``n`` (~1e-4 at n ~ 500).

Example:
    >>> import torch
    >>> x = torch.linspace(-2, 2, 9, device="trn")
    >>> n = torch.tensor([0., 1., 2., 3., 4., 5., 6., 7., 9.], device="trn")
    >>> torch.special.chebyshev_polynomial_t(x, n), torch.special.erfcx(x), torch.frexp(x)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.promote import INT_LIKE, promotes, promoting
from stdlib_kernels.elementwise.unary import DTYPES, EW_OPS, run
from trnlang.device import REGISTRY, decline, lowering

F32 = (torch.float32,)
#: Largest recurrence length run on chip; longer ones are declined (the CPU loop is as long).
MAX_STEPS = 1024
_I64 = 9.223372036854775807e18  # 2^63: float n outside [-2^63, 2^63) (and NaN) casts to INT64_MIN on x86: n < 0
_INV_SQRT_PI = 0.5641895835477563
_SQRT_2PI = 2.5066282746310002
_SQRT1_2 = 0.7071067811865476


def _f32(v: float) -> float:
    return float(np.float32(v))


def _horner(z: Any, coeffs: tuple[float, ...]) -> Any:
    """``sum(c * z**k)`` with ``coeffs`` highest degree first (Cephes' ``polevl``)."""
    acc = coeffs[0] + z * 0.0 if len(coeffs) == 1 else z * coeffs[0] + coeffs[1]
    for c in coeffs[2:]:
        acc = acc * z + c
    return acc


# ------------------------------------------------------------------------------------------------ erfcx
#: (1 + 2a) erfcx(a) - 1 as a polynomial in q = (a - 2) / (a + 2), a >= 0 (q in [-1, 1)); highest degree first.
_ERFCX_Q = (-2.0255989568752643e-05, 6.336945837778174e-05, 0.00022157155043177432, -0.0003579204478498412,
            -0.0014640709109222125, 0.0012174105921551699, 0.008724607639934684, -0.008018963078669325,
            -0.0542202666151673, 0.16404945413943112, -0.16603038352631624, -0.09276376277486958,
            0.2769783814270297)


def _erfcx_pos(a: Any) -> Any:
    """erfcx(a) for a >= 0 (a = +inf gives 0, torch's ``1 / (sqrt(pi) a)`` above 5e7)."""
    big = a > 5e7
    am = tl.where(big, 0.0, a)
    p = _horner((am - 2.0) / (am + 2.0), _ERFCX_Q)
    return tl.where(big, _INV_SQRT_PI / a, (p + 1.0) / (am * 2.0 + 1.0))


def _erfcx(x: Any) -> Any:
    pos = _erfcx_pos(tl.abs(x))
    e2 = tl.exp(x * x) * 2.0
    neg = tl.where(x < -26.7, math.inf, tl.where(x < -6.1, e2, e2 - pos))
    return tl.where(x != x, x, tl.where(x >= 0.0, pos, neg))


def _log_ndtr(x: Any) -> Any:
    t = x * _f32(_SQRT1_2)
    lo = tl.log(_erfcx(-t) * 0.5) - t * t
    hi = tl.log1p(tl.erfc(t) * -0.5)
    return tl.where(x < -1.0, lo, hi)


# ------------------------------------------------------------------------------------------------ ndtri
_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1, 1.39312609387279679503E1,
       -1.23916583867381258016E0)
_Q0 = (1.0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1, -2.25462687854119370527E2,
       2.00260212380060660359E2, -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0)
_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1, 4.40805073893200834700E1,
       1.46849561928858024014E1, 2.18663306850790267539E0, -1.40256079171354495875E-1, -3.50424626827848203418E-2,
       -8.57456785154685413611E-4)
_Q1 = (1.0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1, 1.50425385692907503408E1,
       2.50464946208309415979E0, -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0, 1.33303460815807542389E0,
       2.01485389549179081538E-1, 1.23716634817820021358E-2, 3.01581553508235416007E-4, 2.65806974686737550832E-6,
       6.23974539184983293730E-9)
_Q2 = (1.0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0, 2.16236993594496635890E-1,
       1.34204006088543189037E-2, 3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9)
_EXPM2 = 0.13533528323661269189  # exp(-2)
_EXPM2_HI = float(np.float32(1.0) - np.float32(_EXPM2))


def _ndtri(y0: Any) -> Any:
    """The inverse of the standard normal CDF (Cephes ``ndtri``, as torch's ``calc_ndtri``)."""
    flip = y0 > _EXPM2_HI
    y = tl.where(flip, 1.0 - y0, y0)
    c = y - 0.5
    c2 = c * c
    central = (c + c * (c2 * _horner(c2, _P0) / _horner(c2, _Q0))) * _SQRT_2PI
    t = tl.sqrt(tl.log(y) * -2.0)  # NaN / inf in lanes the selects below drop (and NaN for a NaN input)
    z = 1.0 / t
    x1 = tl.where(t < 8.0, z * _horner(z, _P1) / _horner(z, _Q1), z * _horner(z, _P2) / _horner(z, _Q2))
    tail = (t - tl.log(t) / t) - x1
    tail = tl.where(flip, tail, -tail)
    res = tl.where(y > _f32(_EXPM2), central, tail)
    res = tl.where((y0 < 0.0) | (y0 > 1.0), math.nan, res)
    return tl.where(y0 == 0.0, -math.inf, tl.where(y0 == 1.0, math.inf, res))


def _angle(x: Any) -> Any:
    return tl.where(x != x, x, tl.where(x < 0.0, math.pi, 0.0))


# ---------------------------------------------------------------------------------------- bits: nextafter, frexp
#: float dtype -> (integer view dtype, mantissa bits, largest exponent field, exponent bias)
_BITS = {torch.float32: (torch.int32, 23, 255, 127), torch.bfloat16: (torch.int16, 7, 255, 127),
         torch.float16: (torch.int16, 10, 31, 15)}


def _bit_consts(p: tuple) -> tuple[int, int, int, int]:
    """(sign value, magnitude mask, +inf bits, quiet NaN bits) of the sign-extended integer view."""
    mb, emax = p[0], p[1]
    width = 32 if mb == 23 else 16
    mag = (1 << (width - 1)) - 1
    inf = emax << mb
    return -(1 << (width - 1)), mag, inf, inf | (1 << (mb - 1))


def _nextafter(p: tuple, ix: Any, iy: Any) -> Any:
    """The float after ``x`` towards ``y``, on the integer views (sign-magnitude -> ordered keys)."""
    smin, mag, inf, nan = _bit_consts(p)
    ax = ix & mag
    ay = iy & mag
    kx = tl.where(ix < 0, 0 - ax, ax)
    ky = tl.where(iy < 0, 0 - ay, ay)
    d = tl.where(kx < ky, 1, -1)
    stepped = ix + tl.where(ix < 0, 0 - d, d)
    tiny = tl.where(iy < 0, smin + 1, 1)  # the smallest subnormal with y's sign
    res = tl.where(kx == ky, iy, tl.where(ax == 0, tiny, stepped))
    return tl.where((ax > inf) | (ay > inf), nan, res)


def _normalise(frac: Any) -> tuple[Any, Any]:
    """(t in [1, 2), k) with ``frac = t * 2**k`` for an integer-valued fp32 ``frac`` in [1, 2^31) (0 gives (0, 0))."""
    t = frac
    k = frac * 0.0
    for s in (16, 8, 4, 2, 1):
        c = t >= float(2 ** s)
        t = tl.where(c, t * float(2.0 ** -s), t)
        k = k + tl.where(c, float(s), 0.0)
    return t, k


def _frexp_parts(p: tuple, ix: Any) -> tuple[Any, Any]:
    """(mantissa in [0.5, 1) with x's sign, exponent as fp32) from the integer view ``ix``."""
    mb, emax, bias = p
    fmask = (1 << mb) - 1
    ef = (ix & (emax << mb)).astype(tl.float32) * float(2.0 ** -mb)  # the exponent field, exactly
    frac = (ix & fmask).astype(tl.float32)
    normal_m = (frac * float(2.0 ** -mb) + 1.0) * 0.5
    t, e = _normalise(frac)  # a subnormal's integer fraction as t * 2**e
    sub = ef == 0.0
    special = ef == float(emax)
    m = tl.where(sub, t * 0.5, normal_m)
    m = tl.where(special, tl.where(frac == 0.0, math.inf, math.nan), m)
    m = tl.where(ix < 0, m * -1.0, m)  # -0.0 for a negative zero
    ex = tl.where(sub, e + float(2 - bias - mb), ef - float(bias - 1))
    ex = tl.where(special | (sub & (frac == 0.0)), 0.0, ex)
    return m, ex


EW_OPS.update({
    "special_erfcx": lambda p, x: _erfcx(x),
    "special_log_ndtr": lambda p, x: _log_ndtr(x),
    "special_ndtri": lambda p, x: _ndtri(x),
    "angle_real": lambda p, x: _angle(x),
    "nextafter_bits": _nextafter,
    "frexp_mantissa": lambda p, ix: _frexp_parts(p, ix)[0],
    "frexp_exponent": lambda p, ix: _frexp_parts(p, ix)[1].astype(tl.int32),
})


def _register(name: str, fn: Callable[..., Any], dtypes: Any, **kw: Any) -> None:
    if f"aten::{name}" not in REGISTRY:  # another family may own it: never register twice
        lowering(f"aten::{name}", dtypes=dtypes, **kw)(fn)


def _unary(op: str, dtypes: tuple = F32) -> Callable[..., Any]:
    def lower(self: Any, *, out: torch.Tensor | None = None) -> Any:
        if not U.is_trn(self) or self.dtype not in dtypes:
            return decline("not a trn tensor of a dtype this op takes")
        return run(op, [self], self.dtype, out, in_dtypes=dtypes)

    lower.__name__ = op
    lower.__doc__ = f"``aten::{op}`` on ``trn`` (and its ``out=`` variant)."
    return lower


# torch's CPU kernels exist for float32/float64 (and integers, promoted) only: bf16/fp16 raise on the CPU.
_register("special_erfcx", promoting(_unary("special_erfcx")), F32 + INT_LIKE)  # ints promote to float32
_register("special_log_ndtr", promoting(_unary("special_log_ndtr")), F32 + INT_LIKE)
_register("special_ndtri", promoting(_unary("special_ndtri")), F32 + INT_LIKE)


def angle(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::angle`` of a real float tensor: pi for negative values, 0 otherwise, NaN kept; of a complex64 one,
    ``atan2(Im, Re)`` (float32)."""
    if U.is_trn(self) and self.dtype == torch.complex64 and not self.is_conj() and not self.is_neg():
        v = torch.view_as_real(self)
        r = torch.atan2(v[..., 1], v[..., 0])
        return r if out is None else out.copy_(r)
    if not U.is_trn(self) or self.dtype not in DTYPES:
        return decline("not a trn tensor of a real float dtype")
    return run("angle_real", [self], self.dtype, out)


_register("angle", promoting(angle), DTYPES + INT_LIKE + (torch.complex64,))  # integers: 0 or pi as float32, as torch


def _int_view(t: torch.Tensor) -> torch.Tensor:
    return t.view(_BITS[t.dtype][0])


def nextafter(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::nextafter``: the next representable float after ``self`` towards ``other`` (same float dtype)."""
    if not (U.is_trn(self) and U.is_trn(other)) or self.dtype != other.dtype or self.dtype not in _BITS:
        return decline("not two trn tensors of one float dtype")
    if out is not None and (not U.is_trn(out) or out.dtype != self.dtype):
        return decline("out= not a trn tensor of the input dtype")
    idt, mb, emax, _ = _BITS[self.dtype]
    try:
        shape = tuple(torch.broadcast_shapes(self.shape, other.shape))
    except RuntimeError:
        return decline("inputs do not broadcast: torch raises")
    if out is None:
        out = U.new_output(shape, self.dtype, [t for t in (self, other) if tuple(t.shape) == shape])
    elif out.numel() == 0 and tuple(out.shape) != shape:
        out.resize_(shape)
    if out.numel() == 0:
        if tuple(out.shape) != shape:
            return decline("an empty out= of another shape")
        return out
    r = run("nextafter_bits", [_int_view(self), _int_view(other)], idt, _int_view(out), (mb, emax),
            compute="i32", in_dtypes=(idt,))
    return NotImplemented if r is NotImplemented else out


_register("nextafter", nextafter, tuple(_BITS))


@lowering("aten::frexp.Tensor_out", dtypes=tuple(_BITS) + (torch.int32,))
def frexp_out(self: Any, *, mantissa: torch.Tensor, exponent: torch.Tensor) -> Any:
    """``torch.frexp(x, out=(mantissa, exponent))``: ``x = mantissa * 2**exponent``, ``|mantissa|`` in [0.5, 1).

    Zeros give (±0, 0); inf and NaN give (x, 0); subnormals are normalised, as C's ``frexp``.
    """
    if (not U.is_trn(self) or self.dtype not in _BITS or not U.is_trn(mantissa) or not U.is_trn(exponent)
            or mantissa.dtype != self.dtype or exponent.dtype != torch.int32):
        return decline("not trn tensors of a float dtype with a same-dtype mantissa and an int32 exponent")
    shape = tuple(self.shape)
    for o in (mantissa, exponent):
        if tuple(o.shape) != shape:
            if o.numel() != 0:
                return decline("out= tensors of another non-empty shape")
            o.resize_(shape)
    if self.numel() == 0:
        return mantissa, exponent
    if U.overlaps(exponent, self) or U.overlaps(exponent, mantissa):
        return decline("the exponent out= overlapping the input or the mantissa")
    idt, mb, emax, bias = _BITS[self.dtype]
    ix = _int_view(self)
    # ``mantissa`` over ``self`` (in place): written through a temporary
    m = torch.empty_like(mantissa) if U.overlaps(mantissa, self) else mantissa
    for op, o in (("frexp_exponent", exponent), ("frexp_mantissa", m)):
        if run(op, [ix], o.dtype, o, (mb, emax, bias), compute="i32", in_dtypes=(idt,)) is NotImplemented:
            return NotImplemented
    if m is not mantissa:
        mantissa.copy_(m)
    return mantissa, exponent


# ------------------------------------------------------------------------------------------ orthogonal polynomials
#: Chebyshev kinds: op name -> (kind letter, shifted, n above which torch uses the closed form for |y| < 1)
_CHEB = {"chebyshev_polynomial_t": ("t", False, 6), "chebyshev_polynomial_u": ("u", False, 8),
         "chebyshev_polynomial_v": ("v", False, 8), "chebyshev_polynomial_w": ("w", False, 8),
         "shifted_chebyshev_polynomial_t": ("t", True, 6), "shifted_chebyshev_polynomial_u": ("u", True, 6),
         "shifted_chebyshev_polynomial_v": ("v", True, 6), "shifted_chebyshev_polynomial_w": ("w", True, 4)}
_OTHER = ("hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p")
_HERMITE_LIMIT = 128.0  # torch's getHermitianLimit<float>: NaN above
_2M32, _2P32 = 2.0 ** -32, 2.0 ** 32


def _degree(nr: Any) -> tuple[Any, Any, Any]:
    """(n = trunc(nr), n is a valid non-negative int64, n is even): torch casts the float n to int64."""
    n = tl.trunc(nr)
    ok = (n >= 0.0) & (n < _I64)
    even = (n - tl.floor(n * 0.5) * 2.0) == 0.0
    return n, ok, even


def _arg(name: str, x: Any) -> Any:
    """The Chebyshev argument: ``x``, or ``2x - 1`` for the shifted kinds (as torch writes it)."""
    return x + x - 1.0 if name.startswith("shifted") else x


def _first(name: str, x: Any, y: Any) -> Any:
    """The degree-1 polynomial (the recurrence's second seed; the first is 1)."""
    if name in _CHEB:
        return {"t": y, "u": y + y, "v": y + y - 1.0, "w": y + y + 1.0}[_CHEB[name][0]]
    return {"hermite_polynomial_h": x + x, "hermite_polynomial_he": x, "laguerre_polynomial_l": 1.0 - x,
            "legendre_polynomial_p": x}[name]


def _step(name: str, x: Any, m: Any, j: Any, p: Any, q: Any) -> Any:
    """Iteration ``j`` (1, 2, ...) of the three-term recurrence (previous two values ``p``, ``q``)."""
    if name in _CHEB:
        return m * q - p
    # torch's CPU build fuses ``a * q - k * p`` into fma(a, q, -(k * p)): the product a * q may exceed the fp32
    # range while the difference does not (the terms nearly cancel); q scaled by 2^-32 and back keeps it finite
    if name == "hermite_polynomial_h":
        a, k = m, j + j
    elif name == "hermite_polynomial_he":
        a, k = x, j
    elif name == "laguerre_polynomial_l":
        a, k = (j + j) + (1.0 - x), j
    else:  # legendre
        a, k = (j + j + 1.0) * x, j
    r = (a * (q * _2M32) - (k * p) * _2M32) * _2P32
    return r if name.startswith("hermite") else r / (j + 1.0)


def _recurrence(name: str, steps: int, x: Any, y: Any, n: Any) -> Any:
    """The recurrence's value after ``n - 1`` iterations, per element (NaN where ``n - 1 > steps``)."""
    if steps == 0:
        return x * math.nan
    shape = tuple(x.shape)
    pb = tl.full(shape, 1.0, tl.float32)
    qb = tl.zeros(shape, tl.float32)
    qb[...] = _first(name, x, y)
    res = tl.full(shape, math.nan, tl.float32)
    jb = tl.full((shape[0], 1), 1.0, tl.float32)
    last = n - 1.0
    m = y + y if name in _CHEB else x + x
    for _ in tl.sequential_range(steps):
        j = jb
        r = _step(name, x, m, j, pb, qb)
        res[...] = tl.where(j == last, r, res)  # torch stops at NaN: NaN is absorbing, so the kept value agrees
        pb[...] = qb
        qb[...] = r
        jb[...] = j + 1.0
    return res


def _cheb_closed(letter: str, shifted: bool, x: Any, y: Any, n: Any, even: Any) -> Any:
    """torch's trigonometric forms for |y| < 1 and large n."""
    a = tl.acos(y)
    odd2 = n + n + 1.0
    if letter == "t":
        return tl.cos(n * a)
    if letter == "u":
        s = tl.sin(a)
        n1 = n + 1.0
        return tl.where(s != 0.0, tl.sin(n1 * a) / s, n1 * tl.cos(n1 * a) / y)
    h = n + 0.5
    if letter == "v":
        return tl.where(tl.sin(a * 0.5) != 1.0, tl.cos(h * a) / tl.cos(a * 0.5), tl.where(even, odd2, 0.0 - odd2))
    alt = tl.where(even, 1.0, -1.0)
    edge = alt if shifted else tl.where(x > 0.0, odd2, alt)
    return tl.where(tl.cos(a * 0.5) != 1.0, tl.sin(h * a) / tl.sin(a * 0.5), edge)


def _cheb_special(letter: str, shifted: bool, x: Any, n: Any, even: Any, res: Any) -> Any:
    """Values at ``|x| == 1`` (``x == 1`` or ``x == 0`` for the shifted kinds), which override the rest."""
    n1 = n + 1.0
    odd2 = n + n + 1.0
    alt = tl.where(even, 1.0, -1.0)
    if shifted:
        at1 = {"t": 1.0, "u": n1, "v": 1.0, "w": odd2}[letter]
        at0 = {"t": alt, "u": alt * n1, "v": alt * odd2, "w": alt}[letter]
        return tl.where(x == 1.0, at1, tl.where(x == 0.0, at0, res))
    up = (x > 0.0) | even
    val = {"t": tl.where(up, 1.0, -1.0), "u": tl.where(up, n1, 0.0 - n1),
           "v": tl.where(x > 0.0, 1.0, alt * odd2), "w": tl.where(x > 0.0, odd2, alt)}[letter]
    return tl.where(tl.abs(x) == 1.0, val, res)


def _escape_bound(y: Any) -> Any:
    """Iterations after which a Chebyshev/Legendre recurrence at |y| > 1 is NaN for sure (it grows like
    ``exp(n acosh|y|)``: inf past ``n acosh|y| ~ 89``, then inf - inf); a 4x margin covers rounding."""
    ay = tl.abs(y)
    return tl.where(ay > 1.0, 400.0 / tl.acosh(tl.maximum(ay, 1.0)) + 16.0, math.inf)


def _rec_lanes(name: str, x: Any, n: Any, ok: Any) -> tuple[Any, Any]:
    """(elements computed by the recurrence, their iteration bound or None)."""
    rec = ok & (n >= 2.0) & (x == x)
    if name in _CHEB:
        letter, shifted, thr = _CHEB[name]
        y = _arg(name, x)
        sp = ((x == 1.0) | (x == 0.0)) if shifted else (tl.abs(x) == 1.0)
        return rec & ~sp & ~((n > float(thr)) & (tl.abs(y) < 1.0)), _escape_bound(y)
    if name in ("hermite_polynomial_h", "hermite_polynomial_he"):
        return rec & (n <= _HERMITE_LIMIT), None
    if name == "laguerre_polynomial_l":
        return rec & (x != 0.0), None
    return rec & (tl.abs(x) != 1.0), _escape_bound(x)


def _poly_steps(p: tuple, x: Any, nr: Any) -> Any:
    """Per element: the recurrence iterations it needs (0 where a closed form or special case applies)."""
    n, ok, _ = _degree(nr)
    rec, bound = _rec_lanes(p[0], x, n, ok)
    return tl.where(rec, n - 1.0 if bound is None else tl.minimum(n - 1.0, bound), 0.0)


def _poly(p: tuple, x: Any, nr: Any) -> Any:
    """Polynomial ``p[0]`` of degree ``trunc(nr)`` at ``x``, with ``p[1]`` recurrence iterations on chip."""
    name, steps = p
    n, ok, even = _degree(nr)
    y = _arg(name, x)
    res = _recurrence(name, steps, x, y, n)
    if name in ("hermite_polynomial_h", "hermite_polynomial_he"):
        res = tl.where(n > _HERMITE_LIMIT, math.nan, res)
    res = tl.where(n == 1.0, _first(name, x, y), res)
    res = tl.where(n == 0.0, 1.0, res)
    if name in _CHEB:
        letter, shifted, thr = _CHEB[name]
        closed = (n > float(thr)) & (tl.abs(y) < 1.0)
        res = tl.where(closed, _cheb_closed(letter, shifted, x, y, n, even), res)
        res = _cheb_special(letter, shifted, x, n, even, res)
    elif name == "laguerre_polynomial_l":
        res = tl.where(x == 0.0, 1.0, res)
    elif name == "legendre_polynomial_p":
        res = tl.where(tl.abs(x) == 1.0, tl.where((x > 0.0) | even, 1.0, -1.0), res)
    return tl.where(ok, res, 0.0)


EW_OPS["special_poly"] = _poly
EW_OPS["special_poly_steps"] = _poly_steps


def _dev(v: Any) -> torch.Tensor | None:
    """A float32 ``trn`` operand: the tensor itself, or a 0-dim device view of a number / CPU 0-dim tensor."""
    if U.is_trn(v):
        return v
    s = U.scalar_value(v)
    if s is None or isinstance(s, (bool, complex)):
        return None
    t = U.scalar_tensor(float(s), torch.float32)
    return torch.as_strided(t, (), (), t.storage_offset())


def _make_poly(name: str) -> Callable[..., Any]:
    def lower(x: Any, n: Any, *, out: torch.Tensor | None = None) -> Any:
        rt = torch.result_type(x, n)
        if (rt if rt.is_floating_point else torch.get_default_dtype()) == torch.float32:
            # integer tensors join a float32 result (torch promotes integer operands)
            x, n = (v.to(torch.float32) if promotes(v) else v for v in (x, n))
        xs, ns = _dev(x), _dev(n)
        if xs is None or ns is None or xs.dtype != torch.float32 or ns.dtype != torch.float32:
            return decline("operands not float32 (a trn tensor or a real number)")
        if torch.result_type(x, n) != torch.float32:
            return decline("a result dtype other than float32")
        try:
            shape = tuple(torch.broadcast_shapes(xs.shape, ns.shape))
        except RuntimeError:
            return decline("operands do not broadcast: torch raises")
        steps = 0
        if math.prod(shape):
            need = run("special_poly_steps", [xs, ns], torch.float32, None, (name,))
            if need is NotImplemented:
                return NotImplemented
            most = float(need.max().item())  # one device reduction and a one-element copy
            if not most <= MAX_STEPS:
                return decline("a very large n: the recurrence would need more than 1024 steps")
            steps = 0 if most <= 0 else max(8, 1 << (int(most) - 1).bit_length())
        return run("special_poly", [xs, ns], torch.float32, out, (name, steps))

    lower.__name__ = name
    lower.__doc__ = (f"``aten::special_{name}`` (x and n tensors or numbers, float32): torch's recurrence, "
                     "closed forms and special cases, on chip.")
    return lower


for _name in (*_CHEB, *_OTHER):
    _fn = _make_poly(_name)
    for _ov in ("", ".x_scalar", ".n_scalar"):
        _register(f"special_{_name}{_ov}", _fn, F32 + INT_LIKE)


# ------------------------------------------------------------------------------------------------ hash_tensor
def _double_words(p: tuple, ix: Any) -> tuple[Any, Any]:
    """(low, high) int32 words of the float64 that the float with integer view ``ix`` converts to (exactly)."""
    mb, emax, bias = p
    ef = (ix & (emax << mb)).astype(tl.float32) * float(2.0 ** -mb)
    frac = (ix & ((1 << mb) - 1)).astype(tl.float32)
    t, k = _normalise(frac)
    sub = (ef == 0.0) & (frac != 0.0)
    special = ef == float(emax)
    quiet = float(2 ** (mb - 1))  # the conversion quiets a signalling NaN
    f = tl.where(special & (frac != 0.0) & (frac < quiet), frac + quiet, frac)
    f = tl.where(sub, (t - 1.0) * float(2 ** mb), f)
    e = tl.where(sub, k + float(1024 - bias - mb), ef + float(1023 - bias))
    e = tl.where(special, 2047.0, tl.where((ef == 0.0) & (frac == 0.0), 0.0, e))
    if mb > 20:  # fp32: 52 - 23 = 29 bits of the fraction's shift land in the low word
        lo_bits = float(2 ** (mb - 20))
        hi_f = tl.floor(f * (1.0 / lo_bits))
        lo = (f - hi_f * lo_bits).astype(tl.int32) * (1 << (52 - mb))  # wraps into the sign bit as intended
    else:
        hi_f = f * float(2 ** (20 - mb))
        lo = (ix & 0) + 0
    hi = e.astype(tl.int32) * (1 << 20) + hi_f.astype(tl.int32) + tl.where(ix < 0, -(1 << 31), 0)
    return lo, hi


EW_OPS.update({
    "hash_lo": lambda p, ix: _double_words(p, ix)[0],
    "hash_hi": lambda p, ix: _double_words(p, ix)[1],
    "hash_int_hi": lambda p, x: tl.where(x < 0, -1, 0),  # the sign extension to int64
})
_HASH_INTS = (torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


def _xor_rows(w: torch.Tensor) -> torch.Tensor:
    """XOR-reduce ``w [K, L, 2]`` (int32) along dim 1 by halving: log2(L) native ``bitwise_xor`` launches."""
    while w.shape[1] > 1:
        h = w.shape[1] // 2
        r = torch.bitwise_xor(w[:, :h], w[:, h:2 * h])
        if w.shape[1] % 2:
            r[:, :1] ^= w[:, 2 * h:]
        w = r
    return w[:, 0]


def hash_tensor(self: Any, dim: Any = (), *, keepdim: bool = False, mode: int = 0,
                out: torch.Tensor | None = None) -> Any:
    """``aten::hash_tensor`` (mode 0): XOR of the elements' 64-bit patterns (floats as float64, ints as int64)
    over ``dim`` (all dims when empty), as a uint64 tensor."""
    if not U.is_trn(self) or mode != 0 or (self.dtype not in _BITS and self.dtype not in _HASH_INTS
                                           and self.dtype != torch.int64):
        return decline("not a trn tensor of a float/int/bool dtype, or a mode other than 0")
    nd = self.dim()
    dims = list(range(nd)) if not dim else [int(d) for d in ([dim] if isinstance(dim, int) else dim)]
    if any(not -max(nd, 1) <= d < max(nd, 1) for d in dims):
        return decline("dim out of range: torch raises")
    dims = sorted({d % max(nd, 1) for d in dims} & set(range(nd)))
    if not dim and self.numel() == 0:  # torch's errors, word for word
        raise RuntimeError("hash_tensor: Expected reduction dim to be specified for input.numel() == 0. Specify the "
                           "reduction dim with the 'dim' argument.")
    for d in dims:
        if self.shape[d] == 0:
            raise IndexError(f"hash_tensor: Expected reduction dim {d} to have non-zero size.")
    kept = [d for d in range(nd) if d not in dims]
    oshape = tuple(1 if d in dims else self.shape[d] for d in range(nd)) if keepdim else \
        tuple(self.shape[d] for d in kept)
    if out is None:
        out = torch.empty(oshape, dtype=torch.uint64, device="trn")
    elif not U.is_trn(out) or out.dtype != torch.uint64 or (tuple(out.shape) != oshape and out.numel()):
        return decline("out= not a uint64 trn tensor of the result's shape")
    elif tuple(out.shape) != oshape:
        out.resize_(oshape)
    if out.numel() == 0:
        return out
    if self.dtype == torch.int64:  # its own (low, high) words
        words = self.contiguous().view(-1).view(torch.int32).view(*self.shape, 2)
    else:
        words = torch.empty((*self.shape, 2), dtype=torch.int32, device="trn")
    lo, hi = words[..., 0], words[..., 1]
    if self.dtype in _BITS:
        idt, mb, emax, bias = _BITS[self.dtype]
        for op, o in (("hash_lo", lo), ("hash_hi", hi)):
            run(op, [self.view(idt)], torch.int32, o, (mb, emax, bias), compute="i32", in_dtypes=(idt,))
    elif self.dtype != torch.int64:
        run("hash_int_hi", [self], torch.int32, hi, compute="i32", in_dtypes=_HASH_INTS)
        lo.copy_(self)
    k = U.prod(self.shape[d] for d in kept)
    red = _xor_rows(words.permute(*kept, *dims, nd).reshape(k, -1, 2))
    out.view(-1).view(torch.int32).view(k, 2).copy_(red)
    return out


_register("hash_tensor", hash_tensor, None)
