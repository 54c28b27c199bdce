"""complex64 division on real/imaginary planes (``aten::div.Tensor`` with a complex operand).

Smith's scaled division, as ``c10::complex`` divides: with ``|c| >= |d|``, ``r = d / c``,
``s = 1 / (c + d r)``, ``(a + b i) / (c + d i) = ((a + b r) s) + ((b - a r) s) i`` (else the roles of ``c`` and ``d``
swap), so ``c^2 + d^2`` is never formed and cannot overflow; ``0 / 0`` gives ``a / |c|`` and ``b / |d|`` (infinities
and NaN), as torch. Real operands (tensors, numbers) promote to complex64 with a zero imaginary part. Every step is
a native elementwise op on float32 planes.

Example:
    >>> import torch
    >>> z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64, device="trn")
    >>> torch.div(z, 2j).cpu()
    tensor([ 1.-0.5000j, -2.-1.5000j])
"""

from __future__ import annotations

from typing import Any

import torch

from stdlib_kernels import _util as U
from trnlang.device import decline
from trnlang.device.registry import scalar_type_name

__all__ = ["complex_div", "complex_add", "complex_neg", "half_result", "via_complex64", "up_complex32",
           "unary_via_complex64", "up_half"]


def complex_div(x: Any, y: Any, out: torch.Tensor | None = None) -> Any:
    """``x / y`` with a complex64 result (``NotImplemented``, a decline, for anything else: complex128, a conj/neg
    view, an ``out=`` that is not a complex64 trn tensor of the result's shape)."""
    from stdlib_kernels.elementwise.compare import promoted_planes

    try:
        rdt = torch.result_type(x, y)
    except (RuntimeError, TypeError):
        return decline("operands with no common result dtype")
    if not rdt.is_complex and U.is_trn(out) and out.is_complex():  # a real quotient into a complex out=
        return U.into_out(torch.div(x, y), out, (x, y))
    if rdt != torch.complex64 or not (U.is_trn(x) or U.is_trn(y)):
        return decline("a result dtype other than complex64, or no trn operand")
    px, py = promoted_planes(x), promoted_planes(y)
    if px is None or py is None:
        return decline("an operand that is not complex64/real on trn or a number, or a conj/neg view")
    a, b, c, d = px[..., 0], px[..., 1], py[..., 0], py[..., 1]
    ac, ad = c.abs(), d.abs()
    wide_c = ac >= ad
    rat = torch.where(wide_c, d / c, c / d)
    scl = 1.0 / torch.where(wide_c, c + d * rat, d + c * rat)
    re = torch.where(wide_c, a + b * rat, a * rat + b) * scl
    im = torch.where(wide_c, b - a * rat, b * rat - a) * scl
    zero = (ac == 0) & (ad == 0)
    re = torch.where(zero, a / ac, re)
    im = torch.where(zero, b / ad, im)
    planes = torch.stack((re, im), -1)
    if planes.stride(-1) != 1 or any(st % 2 for st in planes.stride()[:-1]):
        planes = planes.contiguous()  # view_as_complex needs pairs: a last dim of stride 1, even strides
    res = torch.view_as_complex(planes)
    if out is None:
        return res
    if not (U.is_trn(out) and out.dtype == torch.complex64 and out.shape == res.shape):
        return decline("out= not a complex64 trn tensor of the result's shape")
    return out.copy_(res)


def complex_add(self: Any, other: Any, alpha: Any, out: torch.Tensor | None, sign: int) -> Any:
    """``self + sign * alpha * other`` in complex64 on real/imaginary planes (real operands promoted first)."""
    from stdlib_kernels.elementwise.compare import complex_planes, promoted_planes

    rdt = torch.result_type(self, other)
    if not rdt.is_complex and U.is_trn(out) and isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        # a real sum into a complex out=: computed, then cast
        return U.into_out(torch.add(self, other, alpha=sign * alpha), out, (self, other))
    if rdt == torch.complex32 and isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        return via_complex64(lambda x, y, out=None: complex_add(x, y, alpha, out, sign), self, other, out)
    self, other = up_complex32(self), up_complex32(other)
    scaled = False  # other already holds alpha * other (a complex product), so no cross terms below
    if isinstance(alpha, complex) and rdt == torch.complex64 and U.is_trn(other) and not other.is_neg():
        # a complex alpha: its product first (native mul), by -alpha for sub as the CPU forms it
        other, alpha, sign, scaled = torch.mul(other, sign * alpha), 1, 1, True
    if isinstance(out, torch.Tensor) and not out.is_complex():  # torch's check, before any work or fallback
        raise RuntimeError(f"result type {scalar_type_name(rdt)} can't be cast to the desired output type "
                           f"{scalar_type_name(out.dtype)}")
    shape = U.broadcast_shape(*(t.shape for t in (self, other) if U.is_trn(t)))
    if U.is_trn(out) and shape is not None and tuple(out.shape) != shape:
        if any(U.is_trn(t) and U.overlaps(out, t) for t in (self, other)):
            return decline("out= (or self, in place) of another shape than the broadcast: torch raises")
        U.resize_out(out, shape)  # before its planes are taken (torch warns unless it was empty)
    out_planes = complex_planes(out, out) if out is not None else None
    if rdt != torch.complex64 or (out is not None and out_planes is None) \
            or isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        return decline("complex operands not promoting to complex64 (or a complex alpha, or a non-complex64 out=)")
    if (a := promoted_planes(self)) is None or (b := promoted_planes(other)) is None:
        return decline("complex operands other than trn tensors or numbers (or a conj/neg bit)")
    k = sign * alpha
    b = b if scaled else _real_times(k, b)
    if out_planes is not None:  # in place / out=: written through the out tensor's planes
        torch.add(a, b, out=out_planes[0])
        return out
    ts = [t for t in (self, other) if U.is_trn(t)]
    shape = U.broadcast_shape(*(t.shape for t in ts))
    if shape is None:
        return decline("operands do not broadcast: torch raises")
    res = U.new_output(shape, torch.complex64, ts)  # the layout TensorIterator gives
    torch.add(a, b, out=torch.view_as_real(res))
    return res


def _real_times(k: float, b: torch.Tensor) -> torch.Tensor:
    """The planes of ``(k + 0i) * b`` as torch's CPU kernels form ``alpha * other`` in add/sub (a complex product,
    even for alpha = 1): ``(k br - 0 bi, k bi + 0 br)``, so an infinite plane makes the other one NaN, as there."""
    cross = b.flip(-1) * torch.tensor([-0.0, 0.0], device="trn")  # (-(0 bi), 0 br): +-0, or NaN beside inf/NaN
    return torch.add(cross, b, alpha=k)


def complex_neg(self: Any, out: torch.Tensor | None) -> Any:
    """``-self`` of a complex64 ``trn`` tensor: both planes negated (signed zeros as torch gives them)."""
    if not (U.is_trn(self) and self.dtype == torch.complex64 and not self.is_conj() and not self.is_neg()):
        return decline("complex neg of other than a plain complex64 trn tensor")
    if out is None:
        return torch.view_as_complex(torch.neg(torch.view_as_real(self)).contiguous())
    if U.is_trn(out) and not out.is_complex():  # torch's error
        raise RuntimeError(f"Found dtype {scalar_type_name(out.dtype)} but expected ComplexFloat")
    if not (U.is_trn(out) and out.dtype == torch.complex64 and not out.is_conj() and not out.is_neg()):
        return decline("complex neg into an out= that is not a plain complex64 trn tensor")
    if out.numel() == 0 and out.shape != self.shape:
        out.resize_(self.shape)
    if out.shape != self.shape:
        return decline("out= of another shape")
    torch.neg(torch.view_as_real(self), out=torch.view_as_real(out))
    return out


def half_result(x: Any, y: Any) -> bool:
    """The operands promote to complex32 (ComplexHalf: a float16 tensor with a complex number or 0-dim tensor)."""
    try:
        return torch.result_type(x, y) == torch.complex32
    except (RuntimeError, TypeError):
        return False


def _up(v: Any) -> Any:
    """complex32 -> complex64 and float16 -> float32 (trn tensors, through their planes); others unchanged."""
    if U.is_trn(v) and v.dtype == torch.complex32 and not (v.is_conj() or v.is_neg()):
        return torch.view_as_complex(torch.view_as_real(v).float().contiguous())
    if U.is_trn(v) and v.dtype == torch.float16:
        return v.float()
    return v


def up_half(v: Any) -> Any:
    """complex32 -> complex64 and float16 -> float32 for trn tensors (exact); others unchanged (a complex32 tensor
    with a conj/neg bit too: the caller's op declines it)."""
    return _up(v)


def up_complex32(v: Any) -> Any:
    """A complex32 trn tensor as complex64 (exactly, through its planes); anything else unchanged (for results that
    promote past complex32)."""
    return _up(v) if U.is_trn(v) and v.dtype == torch.complex32 else v


def unary_via_complex64(fn: Any, x: torch.Tensor, out: torch.Tensor | None) -> Any:
    """``fn(x)`` of a complex32 trn tensor, computed in complex64 and rounded once to complex32 (exact for neg and
    conj; torch's CPU rounds after each float16 step, so other ops may differ in the last bit)."""
    u = _up(x)
    if u is x:
        return decline("a complex32 tensor with a conj/neg bit")
    r = fn(u)
    if r is NotImplemented:
        return r
    if out is not None and not (U.is_trn(out) and out.dtype == torch.complex32 and not (out.is_conj() or out.is_neg())):
        return decline("out= not a plain complex32 trn tensor")
    if out is not None and out.shape != r.shape:
        if U.overlaps(out, x):
            return decline("out= of another shape overlapping the input: torch raises")
        U.resize_out(out, r.shape)
    res = out if out is not None else torch.empty(r.shape, dtype=torch.complex32, device="trn")
    torch.view_as_real(res).copy_(torch.view_as_real(r))
    return res


def via_complex64(fn: Any, x: Any, y: Any, out: torch.Tensor | None) -> Any:
    """``fn(x, y)`` for operands promoting to complex32: computed in complex64 (each plane rounded once to float16
    at the end; torch's CPU rounds after each float16 step, so the last bit may differ)."""
    ux, uy = _up(x), _up(y)
    if any(U.is_trn(v) and v.dtype == torch.complex32 for v in (ux, uy)):
        return decline("a complex32 operand with a conj/neg bit")
    r = fn(ux, uy)
    if r is NotImplemented:
        return r
    if out is not None and not (U.is_trn(out) and out.dtype == torch.complex32 and out.shape == r.shape
                                and not (out.is_conj() or out.is_neg())):
        return decline("out= not a complex32 trn tensor of the result's shape")
    res = out if out is not None else torch.empty(r.shape, dtype=torch.complex32, device="trn")
    torch.view_as_real(res).copy_(torch.view_as_real(r))
    return res


def _plain64(*vs: Any) -> bool:
    """Every tensor among ``vs`` is a complex64 or real trn tensor without conj/neg bits (numbers pass)."""
    return all(not isinstance(v, torch.Tensor) or (U.is_trn(v) and v.dtype != torch.complex128
                                                   and v.dtype != torch.float64 and not v.is_conj()
                                                   and not v.is_neg()) for v in vs)


def _into(res: Any, out: torch.Tensor | None) -> Any:
    if out is None or res is NotImplemented:
        return res
    if not (U.is_trn(out) and out.dtype == res.dtype):
        return decline("out= not a trn tensor of the result's dtype")
    U.resize_out(out, res.shape)  # res is computed: out may be resized (torch warns unless it was empty)
    return out.copy_(res)


def complex_lerp(self: Any, end: Any, weight: Any, out: torch.Tensor | None) -> Any:
    """complex64 ``lerp`` as torch's CPU kernel: ``self + w (end - self)`` where ``|w| < 0.5``, else
    ``end - (end - self)(1 - w)`` (native complex products, sums and a select)."""
    if not (U.is_trn(self) and U.is_trn(end) and self.dtype == end.dtype == torch.complex64) \
            or not _plain64(self, end, weight):
        return decline("lerp of other than complex64 trn tensors without conj/neg bits")
    diff = end - self
    if not isinstance(weight, torch.Tensor):
        if not isinstance(weight, (bool, int, float, complex)):
            return decline("a weight that is neither a tensor nor a number")
        w = complex(weight)
        return _into(self + w * diff if abs(w) < 0.5 else end - diff * (1 - w), out)
    if weight.dtype != torch.complex64:
        return decline("a weight of another dtype than self (torch raises)")
    return _into(torch.where(weight.abs() < 0.5, self + weight * diff, end - diff * (1 - weight)), out)


def complex_addc(op: str, self: Any, tensor1: Any, tensor2: Any, value: Any, out: torch.Tensor | None) -> Any:
    """complex64 ``addcmul`` / ``addcdiv``: ``self + (value * tensor1) * tensor2`` or ``... / tensor2`` (the CPU
    kernel's order), by native complex products, quotients and sums."""
    v = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
    if not all(U.is_trn(t) for t in (self, tensor1, tensor2)) or not isinstance(v, (bool, int, float, complex)) \
            or not _plain64(self, tensor1, tensor2) \
            or torch.promote_types(torch.promote_types(self.dtype, tensor1.dtype), tensor2.dtype) != torch.complex64:
        return decline("not complex64 trn tensors without conj/neg bits, or no value")
    scaled = tensor1 * v if v != 1 else tensor1
    prod = scaled * tensor2 if op == "addcmul" else scaled / tensor2
    return _into(self + prod, out)
