"""Powers and the other binary lowerings on the pointwise engine (``stdlib_kernels.elementwise.pointwise``):
``pow`` (tensor/number bases and exponents), ``maximum``/``minimum``, ``fmax``/``fmin``, ``fmod``/``remainder``,
``copysign``, ``hypot``, ``xlogy``, ``clamp_min``/``clamp_max``.

A number exponent CPU torch computes without ``exp``/``log`` is computed the same way here: 2 and 3 multiply,
1 copies, 0 gives ones, 0.5 / -0.5 / -1 are ``sqrt`` / ``rsqrt`` / ``reciprocal`` and -2 (float32) ``1 / (x * x)``,
so the results are torch's (``-0.0 ** 0.5`` is -0.0) and ``pow``'s backward, ``grad * 2 * x.pow(1)``, costs a copy
instead of a double-precision ``exp(log)``.

Example:
    >>> import torch
    >>> x = torch.tensor([-0.0, 4.0, 9.0], device="trn")
    >>> x.pow(2).cpu(), x.pow(0.5).cpu(), x.pow(1.0).cpu()
    (tensor([ 0., 16., 81.]), tensor([-0., 2., 3.]), tensor([-0., 4., 9.]))
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.lanes import fast as _fast
from stdlib_kernels.elementwise.pointwise import OPERAND_DTYPES, run_binary
from stdlib_kernels.elementwise.unsigned import WIDE_UNSIGNED
from trnlang.device import decline, lowering

_MAX_INT_EXPONENT = 64


#: number exponents CPU torch computes without exp/log (its results, -0.0 and infinities included)
_SPECIAL: dict[float, Callable[[torch.Tensor], torch.Tensor]] = {
    1.0: torch.clone,
    0.0: torch.ones_like,
    0.5: torch.sqrt,
    -0.5: torch.rsqrt,
    -1.0: torch.reciprocal,
    -2.0: lambda x: torch.reciprocal(x * x),  # float32 only: narrower dtypes would round x * x first
}


def _ipow64(base: Any, exponent: Any, out: torch.Tensor | None) -> Any:
    """int64 ``base ** exponent`` whose every result fits int32 (checked on the device: ``|b|`` and ``e`` within
    int32, and ``e log2|b| < 30.5`` where ``|b| >= 2``), computed by int32 square-and-multiply; larger results
    (which wrap modulo 2^64 in torch) are declined."""
    from stdlib_kernels.elementwise.pointwise import int64_ok

    k = None if U.is_trn(exponent) else U.scalar_value(exponent)
    if isinstance(k, int) and k < 0 and U.is_trn(base):
        return decline("an integer tensor to a negative integer power: torch raises")
    ts = [t for t in (base, exponent) if isinstance(t, torch.Tensor)]
    if not all(U.is_trn(t) or t.dim() == 0 for t in ts) or (out is not None and not U.is_trn(out)):
        return decline("operands on another device")
    shape = U.broadcast_shape(*(t.shape for t in ts))
    if shape is None:
        return decline("operands do not broadcast: torch raises")
    b, e = (torch.as_tensor(v).to(device="trn", dtype=torch.int64) if not U.is_trn(v) else v.to(torch.int64)
            for v in (base, exponent))
    if not (int64_ok(b, 2**31) and int64_ok(e, 2**31)):
        return decline("int64 powers with operands beyond int32")
    b32, e32 = b.to(torch.int32), e.to(torch.int32)
    mag = b32.abs().float()
    if bool(((mag >= 2) & (e32.float() * torch.log2(mag.clamp(min=2)) >= 30.5)).any()):
        return decline("int64 powers past int32's range (they wrap modulo 2^64 in torch)")
    res = run_binary("ipow_t", b32, e32, None, rdt=torch.int32)
    if res is NotImplemented:
        return res
    return U.into_out(res.to(torch.int64), out, (base, exponent))


def _pow(self: Any, exponent: Any, out: torch.Tensor | None) -> Any:
    rdt = torch.result_type(self, exponent)
    if rdt.is_complex:
        from stdlib_kernels.elementwise.complex_fns import complex_pow

        return complex_pow(self, exponent, out)
    if not rdt.is_floating_point:
        # integer powers wrap around: exact only as int32 multiplications, so a small non-negative number
        # exponent (square-and-multiply, one kernel per exponent); negative ones raise (left to torch)
        if rdt == torch.bool:
            return decline("a bool power")
        if rdt == torch.int64:
            return _ipow64(self, exponent, out)
        if U.is_trn(exponent):  # a tensor of exponents: all 31 bits
            if U.is_trn(self):
                return run_binary("ipow_t", self, exponent, out, rdt=rdt)
            return run_binary("ripow_t", exponent, self, out, rdt=rdt)
        k = U.scalar_value(exponent)
        if not U.is_trn(self) or not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= _MAX_INT_EXPONENT:
            return decline("an integer power whose exponent is not a Python int in [0, 64] (negative ones raise in "
                           "torch)")
        return run_binary(f"ipow:{k}", self, 0, out, rdt=rdt)
    if U.is_trn(exponent) and not U.is_trn(self):
        return run_binary("rpow", exponent, self, out, rdt=rdt)
    if out is None and type(exponent) in (int, float) and U.is_trn(self) and self.dtype == rdt:
        special = _SPECIAL.get(float(exponent))
        if special is not None and (exponent != -2 or rdt == torch.float32):
            return special(self)
    if type(exponent) in (int, float) and exponent in (2, 3):  # torch multiplies for these: exact, no exp/log
        op = "cube_bf16" if exponent == 3 and rdt == torch.bfloat16 else f"ipow:{int(exponent)}"
        return run_binary(op, self, 0, out, rdt=rdt)
    return run_binary("pow", self, exponent, out, rdt=rdt)


@lowering("aten::pow.Tensor_Tensor", dtypes=(*OPERAND_DTYPES, torch.complex64, torch.complex32))
def pow_tt(self: Any, exponent: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self ** exponent`` (both tensors; a complex32 result is computed in complex64 and rounded once, as CUDA's
    ComplexHalf kernels compute in complex<float>)."""
    if torch.result_type(self, exponent) == torch.complex32:
        from stdlib_kernels.elementwise.complex_arith import up_half

        return _complex_power_of_real(lambda: _pow(up_half(self), up_half(exponent), None), torch.complex32, out)
    return _pow(self, exponent, out)


@lowering("aten::pow.Tensor_Scalar", dtypes=(*OPERAND_DTYPES, torch.complex64),
          fast=_fast(lambda a, b: pow_ts(a, b), "pow", False))
def pow_ts(self: Any, exponent: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self ** exponent`` (a Python-number exponent; a complex one of a real tensor: computed in complex64, rounded
    to ComplexHalf for a float16 tensor)."""
    if isinstance(exponent, complex) and U.is_trn(self) and self.dtype in OPERAND_DTYPES:
        return _complex_power_of_real(lambda: _pow(self.to(torch.complex64), exponent, None),
                                      torch.result_type(self, exponent), out)
    if isinstance(exponent, complex) and not (U.is_trn(self) and self.dtype == torch.complex64):
        return decline("a complex exponent of a tensor other than a real or complex64 trn tensor")
    return _pow(self, exponent, out)


def _complex_power_of_real(power: Callable[[], Any], rdt: torch.dtype, out: torch.Tensor | None) -> Any:
    """The complex64 result of ``power()`` as ``rdt`` (complex64, or complex32 rounded plane by plane), into ``out``
    (resized as torch does) or a new tensor."""
    if rdt not in (torch.complex64, torch.complex32) or (out is not None and not (U.is_trn(out) and out.dtype == rdt)):
        return decline("a complex power of another result dtype, or out= of another dtype or device")
    res = power()
    if res is NotImplemented:
        return res
    if rdt == torch.complex64 and out is None:
        return res
    dst = out if out is not None else torch.empty(res.shape, dtype=rdt, device="trn")
    U.resize_out(dst, res.shape)
    torch.view_as_real(dst).copy_(torch.view_as_real(res))
    return dst


@lowering("aten::pow.Scalar", dtypes=(*OPERAND_DTYPES, torch.complex64))
def pow_s(self: Any, exponent: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self ** exponent`` (a Python-number base; a complex base with a real exponent tensor is computed in complex64,
    rounded to ComplexHalf for a float16 exponent, as CUDA does; the CPU has no ComplexHalf pow)."""
    if isinstance(self, complex) and U.is_trn(exponent) and exponent.dtype in OPERAND_DTYPES:
        return _complex_power_of_real(lambda: _pow(self, exponent.to(torch.complex64), None),
                                      torch.result_type(self, exponent), out)
    if isinstance(self, complex) and not (U.is_trn(exponent) and exponent.dtype == torch.complex64):
        return decline("a complex base of a real tensor")
    return _pow(self, exponent, out)


def _simple(op: str, name: str, doc: str, *, float_only: bool = False, divisor: bool = False,
            rdt_float: bool = False) -> Callable[..., Any]:
    def lower(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
        rdt = None
        if rdt_float:
            rdt = torch.result_type(self, other)
            if not rdt.is_floating_point:
                rdt = torch.get_default_dtype()
            return run_binary(op, self, other, out, rdt=rdt, compute="f32")
        if torch.result_type(self, other) == torch.bool and op in ("fmod", "remainder"):
            return decline("bool fmod/remainder: torch raises")
        return run_binary(op, self, other, out, float_only=float_only, int_scalar_divisor=divisor)

    lower.__name__ = name
    lower.__doc__ = doc
    return lower


_MORE = {
    # aten name: (table op, docstring, options)
    "maximum": ("maximum", "Elementwise maximum (NaN propagates).", {}),
    "minimum": ("minimum", "Elementwise minimum (NaN propagates).", {}),
    "fmax": ("fmax", "Elementwise maximum ignoring NaN.", {}),
    "fmin": ("fmin", "Elementwise minimum ignoring NaN.", {}),
    "fmod.Tensor": ("fmod", "C remainder (sign of the dividend).", {"divisor": True}),
    "fmod.Scalar": ("fmod", "C remainder by a number.", {"divisor": True}),
    "remainder.Tensor": ("remainder", "Python modulus (sign of the divisor).", {"divisor": True}),
    "remainder.Scalar": ("remainder", "Python modulus by a number.", {"divisor": True}),
    "copysign.Scalar": ("copysign", "|self| with the sign of a number.", {"rdt_float": True}),
    "hypot": ("hypot", "sqrt(self^2 + other^2) without overflow.", {"float_only": True}),
    "xlogy.Tensor": ("xlogy", "self * log(other), 0 where self == 0.", {"rdt_float": True}),
    "xlogy.Scalar_Other": ("xlogy", "self * log(number).", {"rdt_float": True}),
    "clamp_min": ("maximum", "max(self, min) (NaN propagates).", {}),
    "clamp_min.Tensor": ("maximum", "max(self, min) (NaN propagates).", {}),
    "clamp_max": ("minimum", "min(self, max) (NaN propagates).", {}),
    "clamp_max.Tensor": ("minimum", "min(self, max) (NaN propagates).", {}),
}

for _name, (_op, _doc, _kw) in _MORE.items():
    _fn = _simple(_op, _name.replace(".", "_"), f"``aten::{_name}``: {_doc}", **_kw)
    if _name.startswith("clamp_"):  # schema names: clamp_min(self, min), clamp_max(self, max)
        _arg = "min" if _name.startswith("clamp_min") else "max"

        def _clamp(self: Any, *args: Any, _f: Callable[..., Any] = _fn, _a: str = _arg, **kwargs: Any) -> Any:
            other = args[0] if args else kwargs.pop(_a)
            return _f(self, other, **kwargs)

        _clamp.__name__ = _fn.__name__
        _clamp.__doc__ = _fn.__doc__
        lowering(f"aten::{_name}", dtypes=OPERAND_DTYPES)(_clamp)
    else:
        _fa = _fast(_fn) if _name in ("maximum", "minimum") else None
        _dt = (*OPERAND_DTYPES, *WIDE_UNSIGNED) if _name.startswith("xlogy") else OPERAND_DTYPES  # the CPU's
        lowering(f"aten::{_name}", dtypes=_dt, fast=_fa)(_fn)


_COPYSIGN = _simple("copysign", "copysign_Tensor", "", rdt_float=True)
#: The integer type whose sign is a float dtype's sign bit (the float's bits viewed in place).
_SIGN_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


@lowering("aten::copysign.Tensor", dtypes=OPERAND_DTYPES)
def copysign_tensor(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``|self|`` with the sign of ``other``, NaN's sign bit included (a float ``other`` is read through its bits).

    Example:
        >>> torch.copysign(torch.tensor([2.0], device="trn"), torch.tensor([-0.0], device="trn"))  # doctest: +SKIP
        tensor([-2.], device='trn:0')
    """
    if U.is_trn(other) and other.dtype in _SIGN_BITS:
        rdt = torch.result_type(self, other)
        return run_binary("copysign_bits", self, other.view(_SIGN_BITS[other.dtype]), out, rdt=rdt, compute="f32")
    return _COPYSIGN(self, other, out=out)


@lowering("aten::heaviside", dtypes=OPERAND_DTYPES)
def heaviside(self: Any, values: Any, *, out: torch.Tensor | None = None) -> Any:
    """Step function of ``self`` (``values`` where ``self == 0``); operands of one dtype, as torch requires.

    Example:
        >>> x = torch.tensor([-1.0, 0.0, 2.0], device="trn")  # doctest: +SKIP
        >>> torch.heaviside(x, torch.tensor([0.5], device="trn"))  # doctest: +SKIP
        tensor([0.0000, 0.5000, 1.0000], device='trn:0')
    """
    if not (isinstance(self, torch.Tensor) and isinstance(values, torch.Tensor)) or self.dtype != values.dtype:
        return decline("operands of different dtypes: torch raises")
    return run_binary("heaviside", self, values, out)


_REAL_LOGADDEXP = _simple("logaddexp", "logaddexp", "", float_only=True)


@lowering("aten::logaddexp", dtypes=(*OPERAND_DTYPES, torch.complex64))
def logaddexp(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``log(exp(self) + exp(other))`` without overflow: ``max + log1p(exp(-|self - other|))`` in one kernel (float
    dtypes, computed in fp32); complex64 factors out the operand of larger real part (finite values).

    Example:
        >>> x = torch.tensor([0.0, 100.0], device="trn")  # doctest: +SKIP
        >>> torch.logaddexp(x, x)  # doctest: +SKIP
        tensor([  0.6931, 100.6931], device='trn:0')
    """
    try:
        rdt = torch.result_type(self, other)
    except (RuntimeError, TypeError):
        return decline("operands torch cannot promote: torch raises")
    if rdt != torch.complex64:
        return _REAL_LOGADDEXP(self, other, out=out)
    from stdlib_kernels.elementwise.complex_fns import complex_logaddexp

    if not (U.is_trn(self) and U.is_trn(other)) or self.is_conj() or other.is_conj() \
            or (out is not None and not (U.is_trn(out) and out.dtype == rdt)):
        return decline("complex operands other than two trn tensors (or a conj bit, or another out=)")
    x, y = self.to(rdt), other.to(rdt)
    if not bool(torch.isfinite(torch.view_as_real(x)).all() & torch.isfinite(torch.view_as_real(y)).all()):
        return decline("complex infinities or NaN: the CPU's special cases")
    return U.into_out(complex_logaddexp(x, y), out, (self, other))


@lowering("aten::floor_divide.Scalar", dtypes=OPERAND_DTYPES)
def floor_divide_scalar(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self // number``."""
    return run_binary("div_floor", self, other, out, int_scalar_divisor=True)


def _floor_divide_(self: Any, other: Any) -> Any:
    """``self //= other`` in place (its overloads are named ``Tensor``/``Scalar``, so the functional op's routing
    does not find them)."""
    return run_binary("div_floor", self, other, self, int_scalar_divisor=True)


lowering("aten::floor_divide_.Tensor", dtypes=OPERAND_DTYPES, variants=False)(_floor_divide_)
lowering("aten::floor_divide_.Scalar", dtypes=OPERAND_DTYPES, variants=False)(_floor_divide_)


@lowering("aten::remainder.Scalar_Tensor", dtypes=OPERAND_DTYPES)
def remainder_scalar_tensor(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``number % tensor`` (Python's modulus: the sign of the divisor).

    Example:
        >>> 7 % torch.tensor([3, -3], device="trn")  # doctest: +SKIP
        tensor([ 1, -2], device='trn:0')
    """
    if isinstance(self, bool) or not isinstance(self, (int, float)) or not U.is_trn(other):
        return decline("a bool or complex number, or other not a trn tensor")
    if not other.is_floating_point() and bool((other == 0).any()):
        return decline("an integer division by zero: torch raises")
    return run_binary("rremainder", other, self, out, rdt=torch.result_type(self, other))


_GCD_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@lowering("aten::gcd", dtypes=_GCD_DTYPES)
def gcd(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::gcd`` of integer tensors (non-negative; ``gcd(0, 0) = 0``): Euclid's algorithm in one int32 kernel
    (int64 operands within int32's range, checked on the device).

    Example:
        >>> a, b = torch.tensor([12, -18, 0], device="trn"), torch.tensor([8, 12, 0], device="trn")  # doctest: +SKIP
        >>> torch.gcd(a, b)  # doctest: +SKIP
        tensor([4, 6, 0], device='trn:0')
    """
    return _int_binary("gcd", self, other, out, _GCD_DTYPES, "gcd of floating-point, complex or bool operands: torch "
                       "raises")


def _int_binary(op: str, self: Any, other: Any, out: torch.Tensor | None, dtypes: tuple[torch.dtype, ...],
                why: str) -> Any:
    """``op`` of integer operands whose promoted dtype is one of ``dtypes`` (else declined with ``why``)."""
    try:
        rdt = torch.result_type(self, other)
    except (RuntimeError, TypeError):
        return decline("operands torch cannot promote: torch raises")
    if rdt not in dtypes:
        return decline(why)
    return run_binary(op, self, other, out)


_SHIFT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _lsr32(v: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Logical right shift of int32 words ``v`` by ``k`` in [0, 32] (32: 0): the arithmetic shift masked to the
    ``32 - k`` low bits (``(1 << 32) - 1`` is -1 in torch's int32 arithmetic: all bits)."""
    return (v >> k) & ((1 << (32 - k)) - 1)


def _shift64(op: str, self: Any, other: Any, out: torch.Tensor | None) -> Any:
    """int64 ``self << other`` / ``self >> other`` on the two int32 words of each value, with torch's rules: a left
    shift outside [0, 64) gives 0, a right shift outside [0, 63) the sign fill."""
    ts = [t for t in (self, other) if isinstance(t, torch.Tensor)]
    if not all(U.is_trn(t) or t.dim() == 0 for t in ts):
        return decline("operands on another device")
    shape = U.broadcast_shape(*(t.shape for t in ts))
    if shape is None:
        return decline("operands do not broadcast: torch raises")
    x = torch.empty(shape, dtype=torch.int64, device="trn")
    x.copy_(self if isinstance(self, torch.Tensor) else torch.tensor(self))
    s64 = torch.empty(shape, dtype=torch.int64, device="trn")
    s64.copy_(other if isinstance(other, torch.Tensor) else torch.tensor(other))
    words = x.view(torch.int32).view(*shape, 2)
    lo, hi = words[..., 0], words[..., 1]
    top = 64 if op == "lshift" else 63
    bad = (s64 < 0) | (s64 >= top)
    s = torch.where(bad, 63, s64).to(torch.int32)  # in range now; bad lanes: 0 below (left), the sign fill (right)
    small, k = s < 32, s - 32
    if op == "lshift":
        rlo = torch.where(small, lo << s, 0)
        rhi = torch.where(small, (hi << s) | _lsr32(lo, 32 - s), lo << k)
        rlo, rhi = torch.where(bad, 0, rlo), torch.where(bad, 0, rhi)
    else:
        rlo = torch.where(small, _lsr32(lo, s) | (hi << (32 - s)), hi >> k)
        rhi = torch.where(small, hi >> s, hi >> 31)  # s = 63: the sign fill in both words
    return U.into_out(torch.stack((rlo, rhi), -1).view(torch.int64).view(shape), out, (self, other))


def _shift(op: str) -> Any:
    def lower(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
        try:
            if torch.result_type(self, other) == torch.int64:
                if out is None or out.dtype == torch.int64:
                    return _shift64(op, self, other, out)
                if U.is_trn(out) and torch.can_cast(torch.int64, out.dtype):  # computed, then cast as torch casts
                    return U.into_out(_shift64(op, self, other, None), out, (self, other))
        except (RuntimeError, TypeError):
            return decline("operands torch cannot promote: torch raises")
        return _int_binary(op, self, other, out, _SHIFT_DTYPES[1:], "a shift of float or bool operands")

    lower.__name__ = f"bitwise_{'left' if op == 'lshift' else 'right'}_shift"
    lower.__doc__ = (f"``aten::{lower.__name__}`` of integers (int32 arithmetic, int64 on its two words; torch's "
                     "results for shifts outside the width).")
    return lower


for _n in ("Tensor", "Tensor_Scalar", "Scalar_Tensor"):
    lowering(f"aten::bitwise_left_shift.{_n}", dtypes=_SHIFT_DTYPES)(_shift("lshift"))
    lowering(f"aten::bitwise_right_shift.{_n}", dtypes=_SHIFT_DTYPES)(_shift("rshift"))
def _ishift(op: str) -> Any:
    shift = _shift(op)

    def lower(self: Any, other: Any) -> Any:
        r = shift(self, other, out=self)
        return self if r is not NotImplemented else r

    lower.__name__ = f"{shift.__name__}_"
    lower.__doc__ = f"In place: {shift.__doc__}"
    return lower


for _n in ("Tensor", "Scalar"):  # the operators x << s, x >> s, x <<= s, x >>= s
    lowering(f"aten::__lshift__.{_n}", dtypes=_SHIFT_DTYPES)(_shift("lshift"))
    lowering(f"aten::__rshift__.{_n}", dtypes=_SHIFT_DTYPES)(_shift("rshift"))
    lowering(f"aten::__ilshift__.{_n}", dtypes=_SHIFT_DTYPES, variants=False)(_ishift("lshift"))
    lowering(f"aten::__irshift__.{_n}", dtypes=_SHIFT_DTYPES, variants=False)(_ishift("rshift"))


@lowering("aten::xlogy.Scalar_Self", dtypes=OPERAND_DTYPES)
def xlogy_scalar_self(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``number * log(other)``."""
    rdt = torch.result_type(self, other)
    if not rdt.is_floating_point:
        rdt = torch.get_default_dtype()
    return run_binary("xlogy", self, other, out, rdt=rdt, compute="f32")
