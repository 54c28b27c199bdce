"""complex64 elementary functions on real/imaginary planes: ``exp``, ``log`` (and ``log2``/``log10``/``log1p``),
``expm1``, ``exp2``, ``sqrt``, ``rsqrt``, ``reciprocal``, ``sin``/``cos``/``tan``/``sinh``/``cosh``/``tanh`` and the
inverse functions ``asin``/``acos``/``atan``/``asinh``/``acosh``/``atanh``.

Every step is a native float32 elementwise op on the planes ``a = Re z``, ``b = Im z``; the formulas are the
textbook ones written to avoid the usual cancellations (``log1p`` from ``a (2 + a) + b^2``, ``expm1``'s real part
from ``expm1(a) cos b - 2 sin^2(b / 2)``, ``sqrt`` from ``|a|`` and ``|z|`` by the sign of ``a``). Principal
branches follow C99 (and so ``c10::complex``): cuts on the real axis take the sign of the imaginary part's zero.
Inputs with an infinite or NaN element go to the CPU (C99's table of special values is long and rarely needed),
except for the ops of :data:`NONFINITE_OK`, whose formulas already give those values.

Example:
    >>> import torch
    >>> z = torch.tensor([1j * 3.14159265, 0.0], dtype=torch.complex64, device="trn")
    >>> torch.exp(z).cpu().real.round()
    tensor([-1.,  1.])
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from stdlib_kernels import _util as U
from trnlang.device import decline

__all__ = ["UNARY", "NONFINITE_OK", "complex_unary", "complex_pow", "complex_logaddexp", "planes", "join"]


def planes(z: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(Re z, Im z)`` float32 views of a complex64 ``trn`` tensor without conj/neg bits, else None."""
    if not U.is_trn(z) or z.dtype != torch.complex64 or z.is_conj() or z.is_neg():
        return None
    v = torch.view_as_real(z)
    return v[..., 0], v[..., 1]


def join(re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """A new complex64 tensor from float32 planes (broadcast against each other)."""
    re, im = torch.broadcast_tensors(re, im)
    planes = torch.stack((re.float(), im.float()), -1)
    if planes.stride(-1) != 1 or any(st % 2 for st in planes.stride()[:-1]):
        planes = planes.contiguous()  # view_as_complex needs pairs: a last dim of stride 1, even strides
    return torch.view_as_complex(planes)


P = tuple[torch.Tensor, torch.Tensor]


def _exp(a: torch.Tensor, b: torch.Tensor) -> P:
    """``exp(a + bi) = e^a (cos b + i sin b)`` with C99's special values (glibc cexpf's, as the CPU): an imaginary
    part that is 0 stays (also beside +inf and NaN), +inf with an infinite or NaN b gives (inf, NaN), -inf with one
    gives (0, +-0) (the sign of b's zero; +0 for NaN); finite a with such b gives NaN, NaN (from cos/sin)."""
    e = torch.exp(a)
    re, im = e * torch.cos(b), torch.where(b == 0, b, e * torch.sin(b))  # a real z stays real (inf * 0 is NaN)
    wild = ~torch.isfinite(b)
    pos, neg = (a == math.inf) & wild, (a == -math.inf) & wild
    re = torch.where(pos, math.inf, torch.where(neg, 0.0, re))
    im = torch.where(pos, math.nan, torch.where(neg, torch.where(b < 0, -0.0, 0.0), im))
    return re, im


def _log(a: torch.Tensor, b: torch.Tensor) -> P:
    return torch.log(torch.hypot(a, b)), torch.atan2(b, a)


def _scaled_log(scale: float) -> Callable[[torch.Tensor, torch.Tensor], P]:
    def f(a: torch.Tensor, b: torch.Tensor) -> P:
        re, im = _log(a, b)
        return re * scale, im * scale
    return f


def _log1p(a: torch.Tensor, b: torch.Tensor) -> P:
    # |1 + z|^2 - 1 = a (2 + a) + b^2: no cancellation for small z; large z goes through log|1 + z|
    s = a * (a + 2.0) + b * b
    big = torch.hypot(a + 1.0, b)
    re = torch.where(s.abs() < 0.5, 0.5 * torch.log1p(s), torch.log(big))
    im = torch.atan2(b, a + 1.0)
    # torch's special values: a zero z is returned as is (signed zeros), a NaN plane makes both NaN
    zero, nan = (a == 0) & (b == 0), torch.isnan(a) | torch.isnan(b)
    re = torch.where(zero, a, torch.where(nan, math.nan, re))
    im = torch.where(zero, b, torch.where(nan, math.nan, im))
    return re, im


def _expm1(a: torch.Tensor, b: torch.Tensor) -> P:
    h = torch.sin(0.5 * b)
    return torch.expm1(a) * torch.cos(b) - 2.0 * h * h, torch.exp(a) * torch.sin(b)


def _exp2(a: torch.Tensor, b: torch.Tensor) -> P:
    return _exp(a * math.log(2.0), b * math.log(2.0))


def _sqrt(a: torch.Tensor, b: torch.Tensor) -> P:
    t = torch.sqrt(0.5 * (a.abs() + torch.hypot(a, b)))
    zero = t == 0
    safe = torch.where(zero, 1.0, t)
    q = torch.where(zero, 0.0, b.abs() / (2.0 * safe))
    re = torch.where(a >= 0, t, q)
    im = torch.where(a >= 0, torch.where(zero, b, b / (2.0 * safe)), torch.copysign(t, b))
    im = torch.where(b.isinf(), b, im)
    re = torch.where(b.isinf(), b.abs(), re)
    return re, im


def _div(xa: Any, xb: Any, ya: torch.Tensor, yb: torch.Tensor) -> P:
    from stdlib_kernels.elementwise.complex_arith import complex_div

    num = join(torch.as_tensor(xa, device="trn").float().expand_as(ya),
               torch.as_tensor(xb, device="trn").float().expand_as(ya))
    r = torch.view_as_real(complex_div(num, join(ya, yb)))
    return r[..., 0], r[..., 1]


def _reciprocal(a: torch.Tensor, b: torch.Tensor) -> P:
    return _div(1.0, 0.0, a, b)


def _rsqrt(a: torch.Tensor, b: torch.Tensor) -> P:
    return _reciprocal(*_sqrt(a, b))


# (a zero plane times an infinite cosh/sinh is NaN: on the axes the signed zero is the C99 result)
def _sin(a: torch.Tensor, b: torch.Tensor) -> P:
    re, im = _sinh(-b, a)  # sin z = -i sinh(i z): C99 defines its special values so, too
    # where C99 leaves the infinity's sign open (infinite b beside an infinite or NaN a) glibc's csinf gives +inf
    return im, torch.where(torch.isinf(b) & ~torch.isfinite(a), math.inf, -re)


def _cos(a: torch.Tensor, b: torch.Tensor) -> P:
    return _cosh(-b, a)  # cos z = cosh(i z)


def _sinh(a: torch.Tensor, b: torch.Tensor) -> P:
    """``sinh(a + bi)`` with C99's special values (glibc csinhf's): an infinite or NaN ``b`` gives (a, NaN) for
    ``a = +-0``, (inf, NaN) for an infinite ``a``, NaN otherwise."""
    re, im = torch.sinh(a) * torch.cos(b), torch.where(b == 0, b, torch.cosh(a) * torch.sin(b))
    wild = ~torch.isfinite(b)
    re = torch.where(wild & (a == 0), a, torch.where(wild & torch.isinf(a), math.inf, re))
    return re, torch.where(wild, math.nan, im)


def _cosh(a: torch.Tensor, b: torch.Tensor) -> P:
    """``cosh(a + bi)`` with C99's special values (glibc ccoshf's): an infinite or NaN ``b`` gives (NaN, +0) for
    ``a = +-0`` and (inf, NaN) for an infinite ``a``; a zero ``b`` keeps the sign of ``sinh(a) * b``."""
    re = torch.cosh(a) * torch.cos(b)
    im = torch.where(b == 0, torch.where(a == 0, a * b, b * torch.sign(a)), torch.sinh(a) * torch.sin(b))
    wild = ~torch.isfinite(b)
    re = torch.where(wild & torch.isinf(a), math.inf, re)
    im = torch.where(wild & (a == 0), 0.0, torch.where(wild, math.nan, im))
    return re, im


def _tanh(a: torch.Tensor, b: torch.Tensor) -> P:
    # tanh(a + ib) = (sinh 2a + i sin 2b) / (cosh 2a + cos 2b), the denominator as 2 (sinh^2 a + cos^2 b) (no
    # cancellation near the poles); beyond |a| > 20 the real part is sign(a) and the imaginary part vanishes
    big = a.abs() > 20.0
    sa = torch.sinh(torch.where(big, 0.0, a))
    ca, sb, cb = torch.sqrt(1.0 + sa * sa), torch.sin(b), torch.cos(b)
    d = sa * sa + cb * cb
    re = torch.where(big, torch.sign(a), sa * ca / d)
    im = torch.where(big, 4.0 * sb * cb * torch.exp(-2.0 * a.abs()), sb * cb / d)
    # C99's special values (glibc ctanhf's): an infinite or NaN b gives (a, NaN) for a = +-0, (+-1, +-0) for an
    # infinite a (the zero takes b's sign; +0 for NaN), NaN otherwise; a NaN a with b = 0 keeps b
    wild = ~torch.isfinite(b)
    inf_a = torch.isinf(a)
    re = torch.where(wild & (a == 0), a, torch.where(wild & ~inf_a, math.nan, re))
    im = torch.where(wild & inf_a, torch.where(b < 0, -0.0, 0.0), torch.where(wild, math.nan, im))
    im = torch.where(torch.isnan(a) & (b == 0), b, im)
    return re, im


def _tan(a: torch.Tensor, b: torch.Tensor) -> P:
    re, im = _tanh(-b, a)  # tan z = -i tanh(i z)
    return im, -re


def _asinh(a: torch.Tensor, b: torch.Tensor) -> P:
    # asinh is odd: compute for Re >= 0 (no cancellation in z + sqrt(z^2 + 1)), then mirror
    s = torch.copysign(torch.ones_like(a), a)  # -0 mirrors too: the sign of z^2 + 1's zero imaginary part
    pa, pb = a * s, b * s
    w = _sqrt(pa * pa - pb * pb + 1.0, 2.0 * pa * pb)
    re, im = _log(pa + w[0], pb + w[1])
    small = torch.hypot(a, b) < 1e-3  # asinh z = z - z^3 / 6 near 0 (the log above loses the low bits)
    z2a, z2b = pa * pa - pb * pb, 2.0 * pa * pb
    ta = pa - (pa * z2a - pb * z2b) / 6.0
    tb = pb - (pa * z2b + pb * z2a) / 6.0
    re, im = torch.where(small, ta, re), torch.where(small, tb, im)
    return re * s, im * s


def _asin(a: torch.Tensor, b: torch.Tensor) -> P:
    re, im = _asinh(-b, a)  # asin z = -i asinh(i z)
    return im, -re


def _acos(a: torch.Tensor, b: torch.Tensor) -> P:
    re, im = _asin(a, b)
    return math.pi / 2 - re, -im


def _atanh(a: torch.Tensor, b: torch.Tensor) -> P:
    # atanh z = (log1p(z) - log1p(-z)) / 2: real part from |1 + z|^2 / |1 - z|^2 = 1 + 4a / ((1 - a)^2 + b^2)
    # (near z = +-1 the ratio's log1p cancels: there the difference of the two logs is exact enough)
    d = (1.0 - a) * (1.0 - a) + b * b
    n = (1.0 + a) * (1.0 + a) + b * b
    re = torch.where(a.abs() < 0.5, 0.25 * torch.log1p(4.0 * a / d), 0.25 * (torch.log(n) - torch.log(d)))
    im = 0.5 * torch.atan2(2.0 * b, (1.0 - a) * (1.0 + a) - b * b)
    # far out (|z| > 1e9, where the squares above overflow) atanh z = 1/z + i pi/2 sign(b) to float precision
    h = torch.hypot(a, b)
    far = h > 1e9
    re = torch.where(far, (a / h) / h, re)
    im = torch.where(far, torch.copysign(torch.full_like(b, math.pi / 2), b), im)
    return re, im


def _atan(a: torch.Tensor, b: torch.Tensor) -> P:
    re, im = _atanh(-b, a)  # atan z = -i atanh(i z)
    return im, -re


def _acosh(a: torch.Tensor, b: torch.Tensor) -> P:
    # acosh z = log(z + sqrt(z + 1) sqrt(z - 1)), the product of the two principal roots keeping the branch
    p = _sqrt(a + 1.0, b)
    m = _sqrt(a - 1.0, b)
    re, im = _log(a + p[0] * m[0] - p[1] * m[1], b + p[0] * m[1] + p[1] * m[0])
    return re, im


def _square(a: torch.Tensor, b: torch.Tensor) -> P:
    return a * a - b * b, 2.0 * a * b  # z * z, as torch


def _sigmoid(a: torch.Tensor, b: torch.Tensor) -> P:
    ea, eb = _exp(-a, -b)  # 1 / (1 + exp(-z)), as torch
    return _reciprocal(1.0 + ea, eb)


def _silu(a: torch.Tensor, b: torch.Tensor) -> P:
    ea, eb = _exp(-a, -b)  # z / (1 + exp(-z)), as torch
    return _div(a, b, 1.0 + ea, eb)


def _sinc(a: torch.Tensor, b: torch.Tensor) -> P:
    pa, pb = a * math.pi, b * math.pi  # sin(pi z) / (pi z); 1 at 0
    sa, sb = _sin(pa, pb)
    re, im = _div(sa, sb, pa, pb)
    zero = (a == 0) & (b == 0)
    return torch.where(zero, 1.0, re), torch.where(zero, 0.0, im)


#: op name -> plane function
UNARY: dict[str, Callable[[torch.Tensor, torch.Tensor], P]] = {
    "exp": _exp, "log": _log, "log2": _scaled_log(1.0 / math.log(2.0)), "log10": _scaled_log(1.0 / math.log(10.0)),
    "log1p": _log1p, "expm1": _expm1, "exp2": _exp2, "sqrt": _sqrt, "rsqrt": _rsqrt, "reciprocal": _reciprocal,
    "sin": _sin, "cos": _cos, "tan": _tan, "sinh": _sinh, "cosh": _cosh, "tanh": _tanh, "asinh": _asinh, "asin": _asin,
    "acos": _acos, "atanh": _atanh, "atan": _atan, "acosh": _acosh, "square": _square, "sigmoid": _sigmoid,
    "sinc": _sinc, "silu": _silu,
}


#: ops whose plane formulas give C99's special values for infinite and NaN inputs too (checked against the CPU on
#: a grid of every combination of 0, -0, finite, +-inf and NaN planes); the others send such inputs to the CPU
NONFINITE_OK = frozenset({"sqrt", "rsqrt", "reciprocal", "log", "log2", "log10", "exp", "exp2", "expm1", "square",
                          "sigmoid", "sin", "cos", "tan", "sinh", "cosh", "tanh", "log1p"})


def complex_unary(op: str, z: Any, out: torch.Tensor | None = None) -> Any:
    """``op(z)`` for a complex64 ``trn`` tensor (into ``out`` when given); a decline otherwise."""
    p = planes(z)
    if p is None or op not in UNARY:
        return decline("not a complex64 trn tensor without conj/neg bits")
    if out is not None and not (U.is_trn(out) and out.dtype == torch.complex64 and out.shape == z.shape):
        return decline("out= not a complex64 trn tensor of the input's shape")
    if z.numel() == 0:
        res = torch.empty(z.shape, dtype=torch.complex64, device="trn")
    elif op not in NONFINITE_OK and not bool(torch.isfinite(z).all()):  # one device reduction and sync
        return decline("infinite or NaN elements: C99's special values for them are the CPU's")
    elif op == "sinc" and bool((p[1].abs() > 25.0).any()):
        return decline("sinc with |Im z| > 25: sin(pi z) overflows, and the CPU divides its infinities")
    else:
        res = join(*UNARY[op](*p))
    return res if out is None else out.copy_(res)


def _mul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> P:
    return a * c - b * d, a * d + b * c


#: exponents torch's CPU evaluates by products, roots and reciprocals rather than exp(w log z)
_POW_SPECIAL: dict[float, Callable[[torch.Tensor, torch.Tensor], P]] = {
    0.5: _sqrt, -0.5: _rsqrt, -1.0: _reciprocal,
    2.0: lambda a, b: _mul(a, b, a, b),
    3.0: lambda a, b: _mul(*_mul(a, b, a, b), a, b),
    -2.0: lambda a, b: _reciprocal(*_mul(a, b, a, b)),
}


def _as_planes(v: Any) -> P | None:
    from stdlib_kernels.elementwise.compare import promoted_planes

    p = promoted_planes(v)
    return None if p is None else (p[..., 0], p[..., 1])


def complex_pow(base: Any, exponent: Any, out: torch.Tensor | None = None) -> Any:
    """``base ** exponent`` with a complex64 result: ``exp(w log z)`` on planes (a real number exponent as
    ``polar(|z|^w, w arg z)``, as libstdc++'s ``pow(complex, real)``; ``0.5, 2, 3, -0.5, -1, -2`` by roots, products
    and reciprocals, as torch's CPU kernel)."""
    try:
        rdt = torch.result_type(base, exponent)
    except (RuntimeError, TypeError):
        return decline("operands with no common result dtype")
    if rdt != torch.complex64:
        return decline("a result dtype other than complex64")
    zb, we = _as_planes(base), _as_planes(exponent)
    if zb is None or we is None:
        return decline("an operand that is not complex64/real on trn or a number, or a conj/neg view")
    if any(U.is_trn(t) and t.numel() and not bool(torch.isfinite(t).all()) for t in (base, exponent)):
        return decline("infinite or NaN elements: C99's special values for them are the CPU's")
    a, b = zb
    num = None if U.is_trn(exponent) else complex(exponent)
    if num == 0:
        re, im = torch.ones_like(a), torch.zeros_like(b)
    elif num is not None and num.imag == 0 and num.real in _POW_SPECIAL:
        re, im = _POW_SPECIAL[num.real](a, b)
    elif num is not None and num.imag == 0:
        lr, li = _log(a, b)
        mag, ang = torch.exp(lr * num.real), li * num.real
        re, im = mag * torch.cos(ang), torch.where(ang == 0, ang, mag * torch.sin(ang))
    else:
        re, im = _exp(*_mul(*_log(a, b), *we))
    if num is None or not (num == 0 or (num.imag == 0 and num.real in _POW_SPECIAL)):
        # a zero base, as the CPU's cpow: 0 for Re w > 0, inf + NaN i for Re w < 0, NaN for w = 0
        wr = we[0] if num is None else torch.tensor(num.real, device="trn")
        zero = (a == 0) & (b == 0)
        nan = torch.tensor(math.nan, device="trn")
        re = torch.where(zero, torch.where(wr > 0, 0.0, torch.where(wr < 0, math.inf, nan)), re)
        im = torch.where(zero, torch.where(wr > 0, -0.0, nan), im)
    res = join(re, im)
    if out is None:
        return res
    if not (U.is_trn(out) and out.dtype == torch.complex64 and out.shape == res.shape):
        return decline("out= not a complex64 trn tensor of the result's shape")
    return out.copy_(res)


def complex_logaddexp(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """complex ``log(exp(x) + exp(y))``: the operand of larger real part ``M`` factored out, ``M + log1p(exp(m -
    M))`` (the other term's magnitude is at most 1, so nothing overflows and nothing that matters underflows)."""
    first = torch.view_as_real(x)[..., 0] >= torch.view_as_real(y)[..., 0]
    big, small = torch.where(first, x, y), torch.where(first, y, x)
    return big + torch.log1p(torch.exp(small - big))
