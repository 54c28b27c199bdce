"""Gamma-family special functions: Hurwitz ``zeta``, ``polygamma`` (and so digamma's backward), ``igamma``/``igammac``.

Like ``stdlib_kernels.elementwise.bessel``, every function is an fp32 formula in the table of the elementwise
kernel of ``stdlib_kernels.elementwise.unary`` (any strides, broadcasting, bf16/fp16 rounded once on the store).
The iterative algorithms of torch's CPU kernels (``aten/src/ATen/native/Math.h``: Cephes' ``zeta``,
SciPy's ``igam``/``igamc`` with Temme's uniform expansion and Boost's Lanczos factor) stop per element
when a term falls below the epsilon; a tile cannot branch per element, so here every element runs a
fixed number of iterations (``tl.sequential_range``, state carried in tiles), chosen on the host large
enough for every element of the launch to converge (continuing past convergence adds terms below
fp32's resolution):

* ``zeta(x, q)`` sums ``(q + k)^-x`` for ``k < K`` then adds the Euler-Maclaurin tail at ``w = q + K``;
  ``K`` (a compile-time constant) is 10 unless some ``q`` is negative, then it covers ``9 - min(q)``
  (one device reduction read on the host). Declined (CPU fallback): ``min(q) < -65000``, and integral
  ``x >= 7`` meeting ``q < 0``, where terms of both signs cancel beyond fp32 (torch sums in double).
* ``polygamma(n, x)``: ``digamma`` for ``n = 0``, the reflection + recurrence + asymptotic form of
  torch's float ``trigamma`` for ``n = 1``, ``(-1)^(n+1) n! zeta(n + 1, x)`` for ``2 <= n <= 34``
  (powers by squaring; ``x < 0`` by the reflection formula with the n-th derivative of ``cot``, so no
  cancelling sum); ``n > 34`` is declined (fp32 ``n!`` is inf: torch's result is +-inf or NaN).
* ``igamma(a, x)`` / ``igammac(a, x)``: every method (power series, continued fraction, the small-``x``
  series of the complement, Temme's expansion for ``a ~ x``) is evaluated and the one torch's
  branches pick is selected; series lengths grow like ``sqrt(max(a))`` (host-chosen as for zeta).

Example:
    >>> import torch, trnlang
    >>> x = torch.rand(1000, device="trn") * 5
    >>> torch.polygamma(2, x), torch.special.zeta(x + 1, x), torch.igamma(x, x + 1)  # all native
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import torch

import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.bessel import polevl, run_bucketed
from stdlib_kernels.elementwise.int_tiles import ipow
from stdlib_kernels.elementwise.promote import INT_LIKE, promotes, promoting_binary
from stdlib_kernels.elementwise.unary import DTYPES, EW_OPS
from trnlang.device import REGISTRY, decline, lowering

_INF = math.inf
_NAN = math.nan


# ------------------------------------------------------------------------------------------ zeta
def _bernoulli(n: int) -> Fraction:
    """B_n (exact) by the Akiyama-Tanigawa recurrence."""
    a = [Fraction(0)] * (n + 1)
    for m in range(n + 1):
        a[m] = Fraction(1, m + 1)
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
    return a[0]


#: Euler-Maclaurin, w = q + K: zeta(x, q) ~ sum_{k<K} (q+k)^-x + w^(1-x)/(x-1) + w^-x/2
#: + sum_i B_2i/(2i)! x(x+1)...(x+2i-2) w^(-x-2i+1); these are the B_2i/(2i)!. Eight reach fp32 precision at w >= 9.
_EM = tuple(float(_bernoulli(2 * i) / math.factorial(2 * i)) for i in range(1, 9))
#: the direct sum runs at least this many terms, so that w = q + K >= 9 for q >= 0 (Cephes' threshold)
_K_MIN = 10
_K_MAX = 1 << 16


def _em_tail(x: Any, w: Any, b: Any) -> Any:
    """``w^(1-x)/(x-1) + b/2 + sum_i c_i x(x+1)..(x+2i-2) w^(-x-2i+1)``, ``b = w^-x`` (terms by ratios: no overflow)."""
    s = b * w / (x - 1.0) + 0.5 * b
    t = x * b / w  # x^(1 rising) w^(-x-1)
    for i, c in enumerate(_EM):
        s = s + t * c
        k = 2.0 * i + 1.0
        t = t * (x + k) * (x + (k + 1.0)) / (w * w)
    return s


def _neg_pow(a: Any, x: Any) -> Any:
    """``a^-x`` (C ``pow`` semantics: negative ``a`` with integral ``x`` keeps the sign of ``(-1)^x``)."""
    r = tl.power(tl.abs(a), -x)
    odd = (x - 2.0 * tl.floor(x * 0.5)) == 1.0
    return tl.where((a < 0.0) & odd, -r, r)


def _direct_sum(q: Any, k_terms: int, term: Any) -> Any:
    """``sum_{k < k_terms} term(q + k)``: unrolled when short, else a real loop with the state in tiles."""
    if k_terms <= 16:
        s = term(q)
        for k in range(1, k_terms):
            s = s + term(q + float(k))
        return s
    s = tl.zeros_like(q)
    a = tl.zeros_like(q)
    a[...] = q
    for _ in tl.sequential_range(k_terms):
        s[...] = s + term(a)
        a[...] = a + 1.0
    return s


def _zeta(p: tuple, x: Any, q: Any) -> Any:
    """Hurwitz zeta(x, q) with torch's special values (Cephes' domain tests in the same order)."""
    k_terms = p[0]
    s = _direct_sum(q, k_terms, lambda a: _neg_pow(a, x))
    w = q + float(k_terms)
    s = s + _em_tail(x, w, tl.power(w, -x))
    q_pole = (q <= 0.0) & (q == tl.floor(q))
    v = tl.where(q_pole, _INF, tl.where((q <= 0.0) & (x != tl.floor(x)), _NAN, s))
    return tl.where(x == 1.0, _INF, tl.where(x < 1.0, _NAN, v))


def _cot_derivative(n: int) -> list[int]:
    """Integer coefficients (lowest degree first) of D_n, d^n/dt^n cot(t) = D_n(cot t): D_{k+1} = -(1 + c^2) D_k'."""
    p = [0, 1]
    for _ in range(n):
        d = [k * p[k] for k in range(1, len(p))]
        q = [0] * (len(d) + 2)
        for i, v in enumerate(d):
            q[i] -= v
            q[i + 2] -= v
        p = q
    return p


#: polygamma orders computed natively: torch's factor exp(lgamma(n + 1)) is inf in fp32 from n = 35 on
_POLYGAMMA_MAX_N = 34


def _polygamma_n(p: tuple, q: Any) -> Any:
    """psi^(n)(q) for a compile-time integer 2 <= n <= 34: ``(-1)^(n+1) n! zeta(n + 1, q)``.

    For q < 0 the direct sum cancels (terms of both signs up to 2^(n+1) near half-integers) where torch
    sums in double, so negative q use the reflection formula instead:
    ``psi^(n)(q) = -n! (zeta(n+1, 1-q) + pi^(n+1) D_n(cot(pi q)) / n!)``, every term of one sign.
    """
    n = p[0]

    def term(a: Any) -> Any:  # a^-(n+1) by squaring (a compile-time exponent: ~2 log2(n) multiplies)
        return ipow(1.0 / a, n + 1)

    neg = q < 0.0
    qq = tl.where(neg, 1.0 - q, q)
    z = _direct_sum(qq, _K_MIN, term)
    w = qq + float(_K_MIN)
    z = z + _em_tail(float(n + 1), w, term(w))
    fact = float(math.factorial(n))
    scale = math.pi ** (n + 1) / fact
    coefs = [float(v) * scale for v in reversed(_cot_derivative(n))]
    # cot(pi q) = cot(pi r) with r = q - round(q) in [-1/2, 1/2] (exact); near r = +-1/2, where cot vanishes,
    # as -tan(pi t) with t = r -+ 1/2 (exact too): pi * r itself would carry an error larger than the value
    r = q - tl.round(q)
    t = r - tl.where(r > 0.0, 0.5, -0.5)
    cot = tl.where(tl.abs(r) < 0.25, tl.cos(r * float(math.pi)) / tl.sin(r * float(math.pi)),
                   -tl.tan(t * float(math.pi)))
    sign = 1.0 if n % 2 else -1.0
    v = tl.where(neg, -fact * (z + polevl(cot, coefs)), (sign * fact) * z)
    return tl.where((q <= 0.0) & (q == tl.floor(q)), sign * _INF, v)


def _trigamma(p: tuple, x: Any) -> Any:
    """torch's float trigamma: reflection below 1/2, six recurrence steps, then the asymptotic series."""
    s = tl.sin(x * float(math.pi))
    refl = (float(math.pi) * float(math.pi)) / (s * s)
    xr = tl.where(x < 0.5, 1.0 - x, x)
    acc = tl.zeros_like(x)
    for _ in range(6):
        acc = acc + 1.0 / (xr * xr)
        xr = xr + 1.0
    ixx = 1.0 / (xr * xr)
    acc = acc + (1.0 + 1.0 / (2.0 * xr) + ixx * (1.0 / 6.0 - ixx * (1.0 / 30.0 - ixx * (1.0 / 42.0)))) / xr
    return tl.where(x < 0.5, refl - acc, acc)


EW_OPS.update({"zeta": _zeta, "polygamma_n": _polygamma_n, "trigamma": _trigamma,
               "digamma_": lambda p, x: tl.digamma(x)})


def _host_min(t: torch.Tensor) -> float:
    """The smallest finite value of a device tensor (a device reduction; one number comes back)."""
    if t.numel() == 0:
        return 0.0
    v = torch.nan_to_num(t.float(), nan=0.0, posinf=0.0, neginf=0.0).amin()
    return float(v.item())


def _host_max(t: torch.Tensor) -> float:
    if t.numel() == 0:
        return 0.0
    v = torch.nan_to_num(t.float(), nan=0.0, posinf=0.0, neginf=0.0).amax()
    return float(v.item())


def _shift_terms(q: torch.Tensor) -> int | None:
    """Direct-sum length ``K`` with ``q + K >= 9`` for every finite q (10, then powers of four: few compilations)."""
    need = 9.0 - _host_min(q) + 1.0
    if need <= _K_MIN:
        return _K_MIN
    k = 16
    while k < need:
        k *= 4
    return k if k <= _K_MAX else None


def _operand(v: Any, dtype: torch.dtype) -> Any:
    """A device tensor operand: trn tensors as they are, numbers and 0-dim CPU tensors as a 0-dim device scalar."""
    if U.is_trn(v):
        return v
    s = U.scalar_value(v)
    if s is None or isinstance(s, complex):
        return None
    return U.scalar_tensor(float(s), dtype).view(())


def _binary(self: Any, other: Any) -> tuple[Any, Any, torch.dtype] | None:
    """Operands of a float binary op (at least one on trn), with torch's result dtype; None to decline."""
    if not (U.is_trn(self) or U.is_trn(other)):
        return None
    try:
        rdt = torch.result_type(self, other)
    except (RuntimeError, TypeError):
        return None
    if rdt not in DTYPES:
        return None
    a, b = _operand(self, rdt), _operand(other, rdt)
    if a is None or b is None or a.dtype not in DTYPES or b.dtype not in DTYPES:
        return None
    return a, b, rdt


def special_zeta(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::special_zeta`` (Hurwitz zeta of x = self, q = other; scalar overloads too)."""
    ops = _binary(self, other)
    if ops is None:
        return decline("no trn operand, or a result dtype other than float32/bfloat16/float16")
    x, q, rdt = ops
    k_terms = _shift_terms(q)
    if k_terms is None:
        return decline("q far below 0 (the shift would need more than 65536 terms)")
    if k_terms > _K_MIN and _cancels(x, q):
        return decline("q < 0 with an integral x >= 7: the fp32 sum cancels (torch sums in double)")
    return run_bucketed("zeta", [x, q], rdt, out, (k_terms,))


#: integral x from which the direct sum at q < 0 may cancel beyond fp32's reach (terms up to 2^x, error ~ 2^x eps)
_ZETA_CANCEL_X = 7.0


def _cancels(x: torch.Tensor, q: torch.Tensor) -> bool:
    """Some q < 0 meets an integral x >= 7: terms of both signs near half-integers cancel (torch sums in double).

    Non-integral x with q < 0 is NaN anyway, and an integral q <= 0 is a pole (inf), so this is the only case the fp32
    sum cannot follow; it goes to the CPU. (One device reduction; one flag comes back.)
    """
    bad = (q < 0) & (q != torch.floor(q)) & (x == torch.floor(x)) & (x >= _ZETA_CANCEL_X)  # integral q: a pole
    return bool(bad.any().item())


for _name in ("special_zeta", "special_zeta.self_scalar", "special_zeta.other_scalar"):
    if f"aten::{_name}" not in REGISTRY:
        lowering(f"aten::{_name}", dtypes=DTYPES + INT_LIKE)(promoting_binary(special_zeta))  # ints: as float32


def polygamma(n: Any, self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::polygamma(n, self)`` (also reached as ``self.polygamma_(n)``, whose arguments come swapped)."""
    if isinstance(n, torch.Tensor) and not isinstance(self, torch.Tensor):
        n, self = self, n
    if promotes(self) and torch.get_default_dtype() == torch.float32:
        self = self.to(torch.float32)  # torch promotes integer/bool inputs to the default dtype
    if not isinstance(n, int) or n < 0 or not U.is_trn(self) or self.dtype not in DTYPES:
        return decline("n not a non-negative int (torch raises for n < 0), or self not a float trn tensor")
    if n > _POLYGAMMA_MAX_N:
        return decline("n above 34: n! overflows fp32")
    if n == 0:
        return run_bucketed("digamma_", [self], self.dtype, out)
    if n == 1:
        return run_bucketed("trigamma", [self], self.dtype, out)
    return run_bucketed("polygamma_n", [self], self.dtype, out, (n,))


if "aten::polygamma" not in REGISTRY:
    lowering("aten::polygamma", dtypes=DTYPES + INT_LIKE)(polygamma)


# ------------------------------------------------------------------------------------------ igamma / igammac
_MACHEP_F = 5.9604644775390625e-08
_BIG_F = 16777216.0
_MAXLOG_F = 88.72283905206835
_LANCZOS_G = 6.024680040776729583740234375
#: Boost's Lanczos sum (scaled by exp(g)) as P(a)/Q(a), coefficients highest degree first; Q(a) = a(a+1)...(a+11)
_LANCZOS_P = (0.006061842346248906525783753964555936883222, 0.5098416655656676188125178644804694509993,
              19.51992788247617482847860966235652136208, 449.9445569063168119446858607650988409623,
              6955.999602515376140356310115515198987526, 75999.29304014542649875303443598909137092,
              601859.6171681098786670226533699352302507, 3481712.15498064590882071018964774556468,
              14605578.08768506808414169982791359218571, 43338889.32467613834773723740590533316085,
              86363131.28813859145546927288977868422342, 103794043.1163445451906271053616070238554,
              56906521.91347156388090791033559122686859)
_LANCZOS_Q = (1.0, 66.0, 1925.0, 32670.0, 357423.0, 2637558.0, 13339535.0, 45995730.0, 105258076.0, 150917976.0,
              120543840.0, 39916800.0, 0.0)
#: Temme's uniform expansion (DLMF 8.12): c_k(eta) = sum_n D[k][n] eta^n; rows and columns beyond these are below
#: fp32 resolution for a > 20 and |eta| < 0.35 (the region torch uses it in)
_TEMME = (
    (-3.3333333333333333e-1, 8.3333333333333333e-2, -1.4814814814814815e-2, 1.1574074074074074e-3,
     3.527336860670194e-4, -1.7875514403292181e-4, 3.9192631785224378e-5, -2.1854485106799922e-6,
     -1.85406221071516e-6, 8.296711340953086e-7, -1.7665952736826079e-7, 6.7078535434014986e-9),
    (-1.8518518518518519e-3, -3.4722222222222222e-3, 2.6455026455026455e-3, -9.9022633744855967e-4,
     2.0576131687242798e-4, -4.0187757201646091e-7, -1.8098550334489978e-5, 7.6491609160811101e-6,
     -1.6120900894563446e-6, 4.6471278028074343e-9, 1.378633446915721e-7, -5.752545603517705e-8),
    (4.1335978835978836e-3, -2.6813271604938272e-3, 7.7160493827160494e-4, 2.0093878600823045e-6,
     -1.0736653226365161e-4, 5.2923448829120125e-5, -1.2760635188618728e-5, 3.4235787340961381e-8,
     1.3721957309062933e-6, -6.298992138380055e-7, 1.4280614206064242e-7, -2.0477098421990866e-10),
    (6.4943415637860082e-4, 2.2947209362139918e-4, -4.6918949439525571e-4, 2.6772063206283885e-4,
     -7.5618016718839764e-5, -2.3965051138672967e-7, 1.1082654115347302e-5, -5.6749528269915966e-6,
     1.4230900732435884e-6, -2.7861080291528142e-11, -1.6958404091930277e-7, 8.0994649053880824e-8),
    (-8.618882909167117e-4, 7.8403922172006663e-4, -2.9907248030319018e-4, -1.4638452578843418e-6,
     6.6414982154651222e-5, -3.9683650471794347e-5, 1.1375726970678419e-5, 2.5074972262375328e-10,
     -1.6954149536558306e-6, 8.9075075322053097e-7, -2.2929348340008049e-7, 2.956794137544049e-11),
    (-3.3679855336635815e-4, -6.9728137583658578e-5, 2.7727532449593921e-4, -1.9932570516188848e-4,
     6.7977804779372078e-5, 1.419062920643967e-7, -1.3594048189768693e-5, 8.0184702563342015e-6,
     -2.2914811765080952e-6, -3.252473551298454e-10, 3.4652846491085265e-7, -1.8447187191171343e-7),
    (5.3130793646399222e-4, -5.9216643735369388e-4, 2.7087820967180448e-4, 7.9023532326603279e-7,
     -8.1539693675619688e-5, 5.6116827531062497e-5, -1.8329116582843376e-5, -3.0796134506033048e-9,
     3.4651553688036091e-6, -2.0291327396058604e-6, 5.7887928631490037e-7, 2.338630673826657e-13),
)
#: iterations of the continued fraction (enough for every (a, x) it is chosen for; at most ~45 in fp32)
_CF_ITERS = 64
#: terms of the complement's series (x <= 1.1 there: 1.1^n / n! is below fp32 eps at n = 16)
_IGAMC_TERMS = 20


def _lanczos_sum(a: Any) -> Any:
    """Boost's ``lanczos_sum_expg_scaled(a)``: P(a)/Q(a), evaluated in 1/a above 1 (as ``ratevl``: no overflow)."""
    y = 1.0 / a
    big = polevl(y, _LANCZOS_P[::-1]) / polevl(y, _LANCZOS_Q[::-1])
    small = polevl(a, _LANCZOS_P) / polevl(a, _LANCZOS_Q)
    return tl.where(a > 1.0, big, small)


def _igam_fac(a: Any, x: Any) -> Any:
    """``x^a exp(-x) / Gamma(a)`` (Lanczos form near ``x ~ a``, logarithms elsewhere), as torch's helper."""
    ax = a * tl.log(x) - x - tl.lgamma(a)
    far = tl.where(ax < -_MAXLOG_F, 0.0, tl.exp(ax))
    fac = a + (_LANCZOS_G - 0.5)
    res = tl.sqrt(fac / math.e) / _lanczos_sum(a)
    num = x - a - (_LANCZOS_G - 0.5)
    numfac = num / fac
    mid = tl.exp(a - x) * tl.power(x / fac, a)
    high = tl.exp(a * (tl.log1p(numfac) - numfac) + x * (0.5 - _LANCZOS_G) / fac)
    near = res * tl.where((a < 200.0) & (x < 200.0), mid, high)
    return tl.where(tl.abs(a - x) > 0.4 * tl.abs(a), far, near)


def _igam_series(a: Any, x: Any, ax: Any, iters: int) -> Any:
    """Lower regularized gamma by its power series (DLMF 8.11.4): ``ax/a * sum_k x^k / ((a+1)...(a+k))``."""
    r = tl.zeros_like(a)
    r[...] = a
    c = tl.full(a.shape, 1.0, tl.float32)
    ans = tl.full(a.shape, 1.0, tl.float32)
    for _ in tl.sequential_range(iters):
        r[...] = r + 1.0
        c[...] = c * (x / r)
        ans[...] = ans + c
    return tl.where(ax == 0.0, 0.0, ans * ax / a)


def _igamc_series(a: Any, x: Any) -> Any:
    """Upper regularized gamma for small x (DLMF 8.7.3), the cancellation-free form torch uses."""
    fac: Any = 1.0
    s: Any = 0.0
    for n in range(1, _IGAMC_TERMS + 1):
        fac = fac * (-x / float(n))
        s = s + fac / (a + float(n))
    logx = tl.log(x)
    term = -tl.expm1(a * logx - tl.lgamma(a + 1.0))
    return term - tl.exp(a * logx - tl.lgamma(a)) * s


def _igamc_cf(a: Any, x: Any, ax: Any) -> Any:
    """Upper regularized gamma by its continued fraction (DLMF 8.9.2), rescaled like torch's when it grows."""
    y = tl.zeros_like(a)
    y[...] = 1.0 - a
    z = tl.zeros_like(a)
    z[...] = x + y + 1.0
    c = tl.zeros_like(a)
    pkm2 = tl.full(a.shape, 1.0, tl.float32)
    qkm2 = tl.zeros_like(a)
    qkm2[...] = x
    pkm1 = tl.zeros_like(a)
    pkm1[...] = x + 1.0
    qkm1 = tl.zeros_like(a)
    qkm1[...] = z * x
    ans = tl.zeros_like(a)
    ans[...] = pkm1 / qkm1
    for _ in tl.sequential_range(_CF_ITERS):
        c[...] = c + 1.0
        y[...] = y + 1.0
        z[...] = z + 2.0
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        ans[...] = tl.where(qk != 0.0, pk / qk, ans)
        scale = tl.where(tl.abs(pk) > _BIG_F, _MACHEP_F, 1.0)
        pkm2[...] = pkm1 * scale
        qkm2[...] = qkm1 * scale
        pkm1[...] = pk * scale
        qkm1[...] = qk * scale
    return tl.where(ax == 0.0, 0.0, ans * ax)


def _igam_asym(a: Any, x: Any, sgn: float) -> Any:
    """Temme's uniform asymptotic expansion for large a with x ~ a (DLMF 8.12.3 / 8.12.4); sgn -1: lower, +1: upper."""
    sigma = (x - a) / a
    eta = tl.sqrt(-2.0 * (tl.log1p(sigma) - sigma))
    lam = x / a
    eta = tl.where(lam > 1.0, eta, tl.where(lam < 1.0, -eta, 0.0))
    res = 0.5 * tl.erfc((sgn * eta) * tl.sqrt(a * 0.5))
    s: Any = 0.0
    afac: Any = 1.0
    for row in _TEMME:
        s = s + polevl(eta, row[::-1]) * afac
        afac = afac / a
    return res + sgn * tl.exp(-0.5 * a * eta * eta) * s / tl.sqrt((2.0 * float(math.pi)) * a)


def _asym_region(a: Any, x: Any) -> Any:
    r = tl.abs(x - a) / a
    return ((a > 20.0) & (a < 200.0) & (r < 0.3)) | ((a > 200.0) & (r < 4.5 / tl.sqrt(a)))


def _igamma(p: tuple, a: Any, x: Any) -> Any:
    """Lower regularized incomplete gamma P(a, x), torch's branch structure and boundary values."""
    iters = p[0]
    fac = _igam_fac(a, x)  # x^a e^-x / Gamma(a), shared by the series and the continued fraction
    series = _igam_series(a, x, fac, iters)
    upper = tl.where(x > 1.1, _igamc_cf(a, x, fac), _igamc_series(a, x))
    core = tl.where(_asym_region(a, x), _igam_asym(a, x, -1.0),
                    tl.where((x > 1.0) & (x > a), 1.0 - upper, series))
    return _boundary(a, x, core, lower=True)


def _igammac(p: tuple, a: Any, x: Any) -> Any:
    """Upper regularized incomplete gamma Q(a, x) = 1 - P(a, x), computed without the cancellation."""
    iters = p[0]
    fac = _igam_fac(a, x)
    one_minus = 1.0 - _igam_series(a, x, fac, iters)
    small = _igamc_series(a, x)
    core = tl.where(x > 1.1, tl.where(x < a, one_minus, _igamc_cf(a, x, fac)),
                    tl.where(x <= 0.5, tl.where(-0.4 / tl.log(x) < a, one_minus, small),
                             tl.where(x * 1.1 < a, one_minus, small)))
    core = tl.where(_asym_region(a, x), _igam_asym(a, x, 1.0), core)
    return _boundary(a, x, core, lower=False)


def _boundary(a: Any, x: Any, core: Any, lower: bool) -> Any:
    """SciPy's boundary values, tested in torch's order (NaN operands fall through to ``core``, which is NaN)."""
    at_zero, at_inf = (0.0, 1.0) if lower else (1.0, 0.0)
    v = tl.where(tl.abs(x) == _INF, at_inf, core)
    v = tl.where(tl.abs(a) == _INF, tl.where(tl.abs(x) == _INF, _NAN, at_zero), v)
    v = tl.where(x == 0.0, at_zero, v)
    v = tl.where(a == 0.0, tl.where(x > 0.0, at_inf, _NAN), v)
    return tl.where((x < 0.0) | (a < 0.0), _NAN, v)


EW_OPS.update({"igamma": _igamma, "igammac": _igammac})
#: largest a whose power series fits the longest launch (its length grows like 2.5 sqrt(a))
_SERIES_MAX = 4096


def _series_terms(a: torch.Tensor) -> int | None:
    """Power-series length for the largest finite ``a`` of a launch (64, 256, 1024 or 4096: few compilations).

    Measured in fp32 (torch's stopping rule): at most ~31 terms for a <= 200 (x ~ a at a = 200: ~80),
    then about 2.2 sqrt(a); ``48 + 2.5 sqrt(a)`` bounds both. None (decline) beyond 4096 terms.
    """
    need = 48.0 + 2.5 * math.sqrt(max(_host_max(a), 0.0))
    k = 64
    while k < need:
        k *= 4
    return k if k <= _SERIES_MAX else None


def _igamma_op(op: str) -> Any:
    def lower(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
        ops = _binary(self, other)
        if ops is None:
            return decline("no trn operand, or a result dtype other than float32/bfloat16/float16")
        a, x, rdt = ops
        iters = _series_terms(a)
        if iters is None:
            return decline("a above about 2.6e6: the series would need more than 4096 terms")
        return run_bucketed(op, [a, x], rdt, out, (iters,))

    lower.__name__ = op
    lower.__doc__ = f"``aten::{op}(self=a, other=x)``: regularized incomplete gamma, fp32 arithmetic."
    return lower


for _name in ("igamma", "igammac"):
    if f"aten::{_name}" not in REGISTRY:
        lowering(f"aten::{_name}", dtypes=DTYPES)(_igamma_op(_name))
