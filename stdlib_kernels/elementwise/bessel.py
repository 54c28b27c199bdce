"""Bessel-family special functions (``i0``, ``i1e``, ``bessel_j0``, ``modified_bessel_k1``, ``airy_ai``, ...).

Every function is an elementwise formula of fp32 tiles added to the table of the elementwise kernel
of ``stdlib_kernels.elementwise.unary`` (:func:`unary.ew`), so inputs may have any strides and bf16/fp16 tensors
compute in fp32 and round once on the store. The algorithms are the Cephes ones torch's CPU kernels
use (``aten/src/ATen/native/Math.h``): Chebyshev series evaluated by Clenshaw's recurrence
(:func:`chbevl`), rational approximations on ``[0, 5]`` and Hankel-type asymptotic forms beyond, in
fp32 as torch's float kernels compute them. Branches are computed for the whole tile and chosen by
``tl.where`` in the order torch tests them, so the special values match: ``K0(0) = inf``,
``K0(x < 0) = NaN``, ``Y0(0) = -inf``, ``Ai(+-inf) = NaN``, ``j0(+-inf) = 0``, NaN in -> NaN out.

The gamma-family functions of this group (``zeta``, ``polygamma``, ``igamma``/``igammac``) live in
``stdlib_kernels.elementwise.gamma_fns``, imported at the end of this module.

Example:
    >>> import torch, trnlang
    >>> x = torch.linspace(-10, 10, 64, device="trn")
    >>> y = torch.special.bessel_j0(x)              # one launch of ``ew(x, ..., "bessel_j0")``
    >>> z = torch.i0(x.t() if x.dim() == 2 else x)  # i0 / i1 / i0e / i1e for fp32, bf16 and fp16
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch

import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.promote import INT_LIKE, promoting
from stdlib_kernels.elementwise.unary import DTYPES, EW_OPS, run
from trnlang.device import REGISTRY, decline, lowering, memory

_INF = math.inf
_NAN = math.nan
_TWO_OVER_PI = 0.636619772367581343075535053490057448
_SQRT_2_OVER_PI = 0.797884560802865355879892119868763737
_PI_4 = 0.785398163397448309615660845819875721
_3PI_4 = 2.356194490192344928846982537459627163


# ------------------------------------------------------------------------------------------ evaluation helpers
def chbevl(y: Any, coefs: Sequence[float]) -> Any:
    """``sum' c_i T_i(y / 2)`` by Clenshaw's recurrence (coefficients highest order first, as Cephes stores them)."""
    b0: Any = coefs[0]
    b1: Any = 0.0
    b2: Any = 0.0
    for c in coefs[1:]:
        b2 = b1
        b1 = b0
        b0 = y * b1 - b2 + c
    return (b0 - b2) * 0.5


def cheb2(cond: Any, ya: Any, a: Sequence[float], yb: Any, b: Sequence[float]) -> Any:
    """``chbevl(ya, a)`` where ``cond`` else ``chbevl(yb, b)`` in one recurrence (coefficients chosen per element).

    The shorter series is padded with leading zeros (exact: the recurrence stays at zero until its first
    coefficient), so the two-branch functions cost one series, not two.
    """
    n = max(len(a), len(b))
    a = (0.0,) * (n - len(a)) + tuple(a)
    b = (0.0,) * (n - len(b)) + tuple(b)
    y = tl.where(cond, ya, yb)

    def coef(i: int) -> Any:  # built where it is used: a single-use select fuses into the step
        return a[i] if a[i] == b[i] else tl.where(cond, a[i], b[i])

    b0: Any = coef(0)
    b1: Any = 0.0
    b2: Any = 0.0
    for i in range(1, n):
        b2 = b1
        b1 = b0
        b0 = y * b1 - b2 + coef(i)
    return (b0 - b2) * 0.5


def polevl(z: Any, coefs: Sequence[float]) -> Any:
    """Horner's rule ``((c0 z + c1) z + c2) ...`` (coefficients highest order first)."""
    r: Any = coefs[0]
    for c in coefs[1:]:
        r = r * z + c
    return r


# ------------------------------------------------------------------------------------------ I0, I1 (Cephes)
# exp(-x) I0(x) on [0, 8] in T_i(x/2 - 2); exp(-x) sqrt(x) I0(x) on (8, inf) in T_i(32/x - 2)
_I0_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
         1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
         -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
         9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
         -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
         1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
         -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
         1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
         -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
         1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
         3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
         1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
         -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
         7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
         -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
         3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
         2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
         8.04490411014108831608E-1)
# exp(-x) I1(x) / x on [0, 8]; exp(-x) sqrt(x) I1(x) on (8, inf)
_I1_A = (2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
         -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
         3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
         -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
         9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
         -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
         4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
         -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
         2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
         -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1_B = (7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
         -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
         -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
         4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
         -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
         3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
         -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
         -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
         7.78576235018280120474E-1)
# torch's float kernels of i1 / i1e use the tails of these series only (the dropped terms are below fp32 eps)
_I1_A_F32 = _I1_A[12:]
_I1_B_F32 = _I1_B[18:]


def _i_series(ax: Any, a: Sequence[float], b: Sequence[float]) -> Any:
    """Series ``a`` (``[0, 8]``, in ``T_i(x/2 - 2)``) or ``b`` (``(8, inf)``, in ``T_i(32/x - 2)``) at ``ax = |x|``."""
    small = ax <= 8.0
    return cheb2(small, ax * 0.5 - 2.0, a, 32.0 / ax - 2.0, b)


def _i0(x: Any) -> Any:
    ax = tl.abs(x)
    c = _i_series(ax, _I0_A, _I0_B)
    e = tl.exp(ax)
    return tl.where(ax <= 8.0, e * c, e * c / tl.sqrt(ax))


def _i0e(x: Any) -> Any:
    ax = tl.abs(x)
    c = _i_series(ax, _I0_A, _I0_B)
    return tl.where(ax <= 8.0, c, c / tl.sqrt(ax))


def _signed(x: Any, v: Any) -> Any:
    return tl.where(x < 0.0, -v, v)


def _i1_full(x: Any) -> Any:
    """``modified_bessel_i1``: the full double-precision series, as torch's ``modified_bessel_i1_forward``."""
    ax = tl.abs(x)
    c = _i_series(ax, _I1_A, _I1_B)
    e = tl.exp(ax)
    return _signed(x, tl.where(ax <= 8.0, c * ax * e, e * c / tl.sqrt(ax)))


def _i1(x: Any) -> Any:
    ax = tl.abs(x)
    c = _i_series(ax, _I1_A_F32, _I1_B_F32)
    e = tl.exp(ax)
    return _signed(x, tl.where(ax <= 8.0, e * ax * c, e * c / tl.sqrt(ax)))


def _i1e(x: Any) -> Any:
    ax = tl.abs(x)
    c = _i_series(ax, _I1_A_F32, _I1_B_F32)
    return _signed(x, tl.where(ax <= 8.0, c * ax, c / tl.sqrt(ax)))


# ------------------------------------------------------------------------------------------ K0, K1 (Cephes)
# K0(x) + log(x/2) I0(x) on (0, 2] in T_i(x^2 - 2); exp(x) sqrt(x) K0(x) on (2, inf) in T_i(8/x - 2)
_K0_A = (1.37446543561352307156e-16, 4.25981614279661018399e-14, 1.03496952576338420167e-11,
         1.90451637722020886025e-09, 2.53479107902614945675e-07, 2.28621210311945178607e-05,
         1.26461541144692592338e-03, 3.59799365153615016266e-02, 3.44289899924628486886e-01,
         -5.35327393233902768720e-01)
_K0_B = (5.30043377268626276149e-18, -1.64758043015242134646e-17, 5.21039150503902756861e-17,
         -1.67823109680541210385e-16, 5.51205597852431940784e-16, -1.84859337734377901440e-15,
         6.34007647740507060557e-15, -2.22751332699166985548e-14, 8.03289077536357521100e-14,
         -2.98009692317273043925e-13, 1.14034058820847496303e-12, -4.51459788337394416547e-12,
         1.85594911495471785253e-11, -7.95748924447710747776e-11, 3.57739728140030116597e-10,
         -1.69753450938905987466e-09, 8.57403401741422608519e-09, -4.66048989768794782956e-08,
         2.76681363944501510342e-07, -1.83175552271911948767e-06, 1.39498137188764993662e-05,
         -1.28495495816278026384e-04, 1.56988388573005337491e-03, -3.14481013119645005427e-02,
         2.44030308206595545468e+00)
# x (K1(x) - log(x/2) I1(x)) on (0, 2]; exp(x) sqrt(x) K1(x) on (2, inf)
_K1_A = (-7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13,
         -1.41148839263352776110e-10, -2.21338763073472585583e-08, -2.43340614156596823496e-06,
         -1.73028895751305206302e-04, -6.97572385963986435018e-03, -1.22611180822657148235e-01,
         -3.53155960776544875667e-01, 1.52530022733894777053e+00)
_K1_B = (-5.75674448366501715755e-18, 1.79405087314755922667e-17, -5.68946255844285935196e-17,
         1.83809354436663880070e-16, -6.05704724837331885336e-16, 2.03870316562433424052e-15,
         -7.01983709041831346144e-15, 2.47715442448130437068e-14, -8.97670518232499435011e-14,
         3.34841966607842919884e-13, -1.28917396095102890680e-12, 5.13963967348173025100e-12,
         -2.12996783842756842877e-11, 9.21831518760500529508e-11, -4.19035475934189648750e-10,
         2.01504975519703286596e-09, -1.03457624656780970260e-08, 5.74108412545004946722e-08,
         -3.50196060308781257119e-07, 2.40648494783721712015e-06, -1.93619797416608296024e-05,
         1.95215518471351631108e-04, -2.85781685962277938680e-03, 1.03923736576817238437e-01,
         2.72062619048444266945e+00)


def _k_domain(x: Any, v: Any) -> Any:
    """torch's order of tests: ``x == 0`` -> inf, ``x < 0`` -> NaN, else ``v`` (NaN stays NaN)."""
    return tl.where(x == 0.0, _INF, tl.where(x < 0.0, _NAN, v))


def _k_parts(x: Any, order: int) -> tuple[Any, Any, Any]:
    """(small-x value, ``exp(x) sqrt(x) K(x)`` series for x > 2, x <= 2) of K0 / K1.

    One merged Clenshaw recurrence evaluates the I series (x <= 2) or the large-x K series; the short
    small-x K series runs on its own.
    """
    small = x <= 2.0
    if order == 0:
        m = cheb2(small, x * 0.5 - 2.0, _I0_A, 8.0 / x - 2.0, _K0_B)
        v = chbevl(x * x - 2.0, _K0_A) - tl.log(x * 0.5) * (tl.exp(x) * m)
    else:
        m = cheb2(small, x * 0.5 - 2.0, _I1_A, 8.0 / x - 2.0, _K1_B)
        v = tl.log(x * 0.5) * (m * x * tl.exp(x)) + chbevl(x * x - 2.0, _K1_A) / x
    return v, m, small


def _k(order: int, scaled: bool) -> Callable[[Any], Any]:
    def fn(x: Any) -> Any:
        v, m, small = _k_parts(x, order)
        if scaled:
            return _k_domain(x, tl.where(small, v * tl.exp(x), m / tl.sqrt(x)))
        return _k_domain(x, tl.where(small, v, tl.exp(-x) * m / tl.sqrt(x)))

    return fn


_k0, _k1, _k0e, _k1e = _k(0, False), _k(1, False), _k(0, True), _k(1, True)


# ------------------------------------------------------------------------------------------ J0, J1, Y0, Y1 (Cephes)
# modulus / phase rational functions of 25 / x^2 for x > 5 (shared by J and Y of the same order)
_P0_P = (7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e+00,
         5.44725003058768775090e+00, 8.74716500199817011941e+00, 5.30324038235394892183e+00,
         9.99999999999999997821e-01)
_P0_Q = (9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e+00,
         5.47097740330417105182e+00, 8.76190883237069594232e+00, 5.30605288235394617618e+00,
         1.00000000000000000218e+00)
_Q0_P = (-1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01,
         -9.32060152123768231369e+01, -1.77681167980488050595e+02, -1.47077505154951170175e+02,
         -5.14105326766599330220e+01, -6.05014350600728481186e+00)
_Q0_Q = (6.43178256118178023184e+01, 8.56430025976980587198e+02, 3.88240183605401609683e+03,
         7.24046774195652478189e+03, 5.93072701187316984827e+03, 2.06209331660327847417e+03,
         2.42005740240291393179e+02)
_P1_P = (7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e+00,
         5.11207951146807644818e+00, 8.42404590141772420927e+00, 5.21451598682361504063e+00,
         1.00000000000000000254e+00)
_P1_Q = (5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e+00,
         5.07386386128601488557e+00, 8.39985554327604159757e+00, 5.20982848682361821619e+00,
         9.99999999999999997461e-01)
_Q1_P = (5.10862594750176621635e-02, 4.98213872951233449420e+00, 7.58238284132545283818e+01,
         3.66779609360150777800e+02, 7.10856304998926107277e+02, 5.97489612400613639965e+02,
         2.11688757100572135698e+02, 2.52070205858023719784e+01)
_Q1_Q = (7.42373277035675149943e+01, 1.05644886038262816351e+03, 4.98641058337653607651e+03,
         9.56231892404756170795e+03, 7.99704160447350683650e+03, 2.82619278517639096600e+03,
         3.36093607810698293419e+02)
# small-argument rational functions of x^2 on [0, 5]
_J0_RP = (-4.79443220978201773821e+09, 1.95617491946556577543e+12, -2.49248344360967716204e+14,
          9.70862251047306323952e+15)
_J0_RQ = (4.99563147152651017219e+02, 1.73785401676374683123e+05, 4.84409658339962045305e+07,
          1.11855537045356834862e+10, 2.11277520115489217587e+12, 3.10518229857422583814e+14,
          3.18121955943204943306e+16, 1.71086294081043136091e+18)
_J1_RP = (-8.99971225705559398224e+08, 4.52228297998194034323e+11, -7.27494245221818276015e+13,
          3.68295732863852883286e+15)
_J1_RQ = (6.20836478118054335476e+02, 2.56987256757748830383e+05, 8.35146791431949253037e+07,
          2.21511595479792499675e+10, 4.74914122079991414898e+12, 7.84369607876235854894e+14,
          8.95222336184627338078e+16, 5.32278620332680085395e+18)
_Y0_P = (1.55924367855235737965e+04, -1.46639295903971606143e+07, 5.43526477051876500413e+09,
         -9.82136065717911466409e+11, 8.75906394395366999549e+13, -3.46628303384729719441e+15,
         4.42733268572569800351e+16, -1.84950800436986690637e+16)
_Y0_Q = (1.04128353664259848412e+03, 6.26107330137134956842e+05, 2.68919633393814121987e+08,
         8.64002487103935000337e+10, 2.02979612750105546709e+13, 3.17157752842975028269e+15,
         2.50596256172653059228e+17)
_Y1_P = (1.26320474790178026440e+09, -6.47355876379160291031e+11, 1.14509511541823727583e+14,
         -8.12770255501325109621e+15, 2.02439475713594898196e+17, -7.78877196265950026825e+17)
_Y1_Q = (5.94301592346128195359e+02, 2.35564092943068577943e+05, 7.34811944459721705660e+07,
         1.87601316108706159478e+10, 3.88231277496238566008e+12, 6.20557727146953693363e+14,
         6.87141087355300489866e+16, 3.97270608116560655612e+18)
_J0_Z1, _J0_Z2 = 5.78318596294678452118e+00, 3.04712623436620863991e+01  # squares of J0's first zeros
_J1_Z1, _J1_Z2 = 1.46819706421238932572e+01, 4.92184563216946036703e+01


def _hankel(x: Any, z: Any, order: int) -> tuple[Any, Any, Any]:
    """(P(x), Q(x), x - phase) of the x > 5 asymptotic forms; ``z`` is 25/x^2 as torch computes it per order."""
    if order == 0:
        p = polevl(z, _P0_P) / polevl(z, _P0_Q)
        q = polevl(z, _Q0_P) / polevl(z, _Q0_Q)
        return p, q, x - _PI_4
    p = polevl(z, _P1_P) / polevl(z, _P1_Q)
    q = polevl(z, _Q1_P) / polevl(z, _Q1_Q)
    return p, q, x - _3PI_4


def _j0_abs(x: Any) -> Any:
    """J0 at ``x = |x|``."""
    xx = x * x
    small = (xx - _J0_Z1) * (xx - _J0_Z2) * polevl(xx, _J0_RP) / polevl(xx, _J0_RQ)
    small = tl.where(x < 0.00001, 1.0 - xx / 4.0, small)
    p, q, t = _hankel(x, 25.0 / xx, 0)
    large = (p * tl.cos(t) - 5.0 / x * q * tl.sin(t)) * _SQRT_2_OVER_PI / tl.sqrt(x)
    return tl.where(x <= 5.0, small, large)


def _j1_abs(x: Any) -> Any:
    """J1 at ``x = |x|``."""
    xx = x * x
    small = polevl(xx, _J1_RP) / polevl(xx, _J1_RQ) * x * (xx - _J1_Z1) * (xx - _J1_Z2)
    r = 5.0 / x
    p, q, t = _hankel(x, r * r, 1)
    large = (p * tl.cos(t) - r * q * tl.sin(t)) * _SQRT_2_OVER_PI / tl.sqrt(x)
    return tl.where(x <= 5.0, small, large)


def _j0(x: Any) -> Any:
    return _j0_abs(tl.abs(x))


def _j1(x: Any) -> Any:
    v = _j1_abs(tl.abs(x))
    return tl.where(x < 0.0, -v, v)


def _y_domain(x: Any, small: Any, large: Any) -> Any:
    return tl.where(x <= 5.0, tl.where(x == 0.0, -_INF, tl.where(x < 0.0, _NAN, small)), large)


def _y0(x: Any) -> Any:
    xx = x * x
    small = polevl(xx, _Y0_P) / polevl(xx, _Y0_Q) + _TWO_OVER_PI * tl.log(x) * _j0_abs(x)
    p, q, t = _hankel(x, 25.0 / xx, 0)
    large = (p * tl.sin(t) + 5.0 / x * q * tl.cos(t)) * _SQRT_2_OVER_PI / tl.sqrt(x)
    return _y_domain(x, small, large)


def _y1(x: Any) -> Any:
    xx = x * x
    small = x * (polevl(xx, _Y1_P) / polevl(xx, _Y1_Q)) + _TWO_OVER_PI * (_j1_abs(x) * tl.log(x) - 1.0 / x)
    r = 5.0 / x
    p, q, t = _hankel(x, r * r, 1)
    large = (p * tl.sin(t) + r * q * tl.cos(t)) * _SQRT_2_OVER_PI / tl.sqrt(x)
    return _y_domain(x, small, large)


# ------------------------------------------------------------------------------------------ j0 (spherical), Ai
_SJ0 = (1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0, 1.0)


def _spherical_j0(x: Any) -> Any:
    small = polevl(x * x, _SJ0)
    return tl.where(tl.abs(x) == _INF, 0.0, tl.where(tl.abs(x) < 0.5, small, tl.sin(x) / x))


_AI_N = (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
         1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
         1.40264691163389668864e+01, 9.99999999999999995305e-01)
_AI_D = (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
         1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
         1.40959135607834029598e+01, 1.00000000000000000470e+00)
_AI_FN = (-1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
          -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
          -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08)
_AI_FD = (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
          9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
          4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07)
_AI_GN = (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
          9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
          5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
          8.11789239554389293311e-08, 3.41551784765923618484e-10)
_AI_GD = (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
          5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
          4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
          4.91834570062930015649e-09)
_SQRT_1_PI = 5.64189583547756286948e-01
_AI_C1, _AI_C2 = 0.355028053887817239260, 0.258819403792806798405
#: terms of the Maclaurin series used on [-2.09, 2.09): |x^3| <= 9.2, so the 9th term is below fp32 eps
_AI_TERMS = 10


def _airy_ai(x: Any) -> Any:
    # x < -2.09: oscillating asymptotic form in zeta = 2/3 (-x)^(3/2)
    sq = tl.sqrt(-x)
    zn = -2.0 * x * sq / 3.0
    z = 1.0 / zn
    zz = z * z
    t = zn + 0.25 * math.pi
    neg = _SQRT_1_PI / tl.sqrt(sq) * (tl.sin(t) * (1.0 + zz * polevl(zz, _AI_FN) / polevl(zz, _AI_FD))
                                      - tl.cos(t) * (z * polevl(zz, _AI_GN) / polevl(zz, _AI_GD)))
    # x >= 2.09: decaying asymptotic form
    zp = 2.0 * x * tl.sqrt(x) / 3.0
    r = 1.0 / zp
    pos = _SQRT_1_PI * (polevl(r, _AI_N) / polevl(r, _AI_D)) / (2.0 * tl.sqrt(tl.sqrt(x)) * tl.exp(zp))
    # |x| < 2.09: Ai = c1 f(x) - c2 g(x), the two Maclaurin series in x^3
    z3 = x * x * x
    f: Any = 1.0
    g: Any = x
    m: Any = 1.0
    n: Any = x
    k = 1.0
    for _ in range(_AI_TERMS):
        m = m * z3
        k += 1.0
        m = m / k
        n = n * z3
        k += 1.0
        n = n / k
        m = m / k
        f = f + m
        k += 1.0
        n = n / k
        g = g + n
    mid = _AI_C1 * f - _AI_C2 * g
    v = tl.where(x < -2.09, neg, tl.where(x >= 2.09, pos, mid))
    return tl.where(tl.abs(x) == _INF, _NAN, tl.where(x > 103.892, 0.0, v))


# ------------------------------------------------------------------------------------------ table + lowerings
def _simple(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    return lambda p, x: fn(x)


#: ATen op -> formula (all one-input, float in / same float out). ``modified_bessel_i0`` is ``i0``'s kernel.
FUNCS: dict[str, Callable[[Any], Any]] = {
    "i0": _i0,
    "special_i0e": _i0e,
    "special_i1": _i1,
    "special_i1e": _i1e,
    "special_modified_bessel_i1": _i1_full,
    "special_modified_bessel_k0": _k0,
    "special_modified_bessel_k1": _k1,
    "special_scaled_modified_bessel_k0": _k0e,
    "special_scaled_modified_bessel_k1": _k1e,
    "special_bessel_j0": _j0,
    "special_bessel_j1": _j1,
    "special_bessel_y0": _y0,
    "special_bessel_y1": _y1,
    "special_spherical_bessel_j0": _spherical_j0,
    "special_airy_ai": _airy_ai,
}
EW_OPS.update({name: _simple(fn) for name, fn in FUNCS.items()})


#: launches of at most this many elements run on a power-of-two buffer of at least ``_PAD_MIN`` elements
_PAD_MAX = 1 << 18
_PAD_MIN = 2048


def run_bucketed(op: str, ins: Sequence[torch.Tensor], out_dtype: torch.dtype, out: torch.Tensor | None = None,
                 params: tuple = ()) -> Any:
    """``unary.run`` of ``EW_OPS[op]``, small tensors padded to a few bucket sizes first.

    These formulas are long (a Clenshaw step per coefficient), and a kernel is compiled per launch
    shape and dtype; small odd shapes also get their loops fully unrolled by LLVM, so each new small
    shape would cost seconds of compilation. Up to ``_PAD_MAX`` elements, the operands are copied
    (broadcast, converted to fp32) into a contiguous buffer of the next power of two (>= ``_PAD_MIN``),
    the kernel runs on that and the first ``numel`` results are copied out (rounded to the output
    dtype, to nearest even like the kernel's own store): one compiled kernel per bucket instead of one
    per shape and dtype. The padding's values are never read back. Returns NotImplemented to decline,
    like ``unary.run``.
    """
    if not ins or not all(U.is_trn(t) and t.dtype in DTYPES for t in ins):
        return decline("no inputs, or an input not a trn tensor of a float dtype the kernel takes")
    try:
        shape = tuple(torch.broadcast_shapes(*[t.shape for t in ins]))
    except RuntimeError:
        return decline("inputs do not broadcast: torch raises")
    n = U.prod(shape)
    if n == 0 or n > _PAD_MAX:
        return run(op, ins, out_dtype, out, params)
    if out is not None:
        if U.is_trn(out) and out.numel() == 0 and tuple(out.shape) != shape:
            out.resize_(shape)
        if (not U.is_trn(out) or tuple(out.shape) != shape or out.dtype != out_dtype
                or U.has_internal_overlap(out)):
            return decline("out= not a trn tensor of the result's shape and dtype, or with overlapping elements")
    size = _PAD_MIN
    while size < n:
        size *= 2
    bufs = []
    for t in ins:  # fp32 buffers: the kernel computes in fp32 anyway, and bf16/fp16 then share its compilation
        b = memory.empty((size,), torch.float32)
        b[:n].view(shape).copy_(t.expand(shape))
        bufs.append(b)
    res = memory.empty((size,), torch.float32)
    run(op, bufs, torch.float32, res, params)  # the copy below rounds to out_dtype as the kernel's store would
    if out is None:  # strides like TensorIterator's output (those of a dense full-shape operand)
        out = U.new_output(shape, out_dtype, [t for t in ins if tuple(t.shape) == shape])
    out.copy_(res[:n].view(shape))
    return out


def _make(op: str, key: str) -> Callable[..., Any]:
    def lower(self: Any, *, out: torch.Tensor | None = None) -> Any:
        # integer / bool inputs promote to the default float dtype on the CPU: not handled here
        if not isinstance(self, torch.Tensor) or self.dtype not in DTYPES:
            return decline("integer/bool input (the CPU promotes it to float)")
        return run_bucketed(key, [self], self.dtype, out)

    lower.__name__ = op
    lower.__doc__ = f"``aten::{op}`` on ``trn`` (fp32 arithmetic, Cephes' algorithm as torch's CPU kernel)."
    return lower


for _op, _key in [(op, op) for op in FUNCS] + [("special_modified_bessel_i0", "i0")]:
    if f"aten::{_op}" not in REGISTRY:
        lowering(f"aten::{_op}", dtypes=DTYPES + INT_LIKE)(promoting(_make(_op, _key)))  # ints: as float32


from stdlib_kernels.elementwise import gamma_fns  # noqa: E402,F401  (registers zeta / polygamma / igamma)
