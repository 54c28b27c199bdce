"""Exact int64 ``add``/``sub``/``rsub`` and the division family (quotients, ``fmod``, ``remainder``) for every value,
on the two int32 words of each element.

The engines compute 32-bit integers; int64 arithmetic whose values stay within int32 runs as int32 (the common
case, checked per call by ``pointwise``). Beyond that, a sum is formed word by word as a 64-bit adder does: the low
words add (wrapping), the carry is the unsigned overflow of that addition (``lo < a_lo`` as unsigned, i.e. the
signed comparison of both with their sign bits flipped), and the high words add with the carry. A difference
borrows the same way. The result wraps modulo 2^64, as torch's int64 arithmetic does. Division is a restoring long
division over the unsigned magnitudes (:func:`udivmod64`, one kernel), signs fixed up on the words afterwards.

Example:
    >>> import torch, trnlang  # doctest: +SKIP
    >>> x = torch.tensor([2**40, -(2**62)], device="trn")  # doctest: +SKIP
    >>> add64(x, 2**40 + 1, None, "add").cpu().tolist()  # doctest: +SKIP
    [2199023255553, -4611684918500130815]
"""

from __future__ import annotations

from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise import flat as F

__all__ = ["DIVISIONS", "add64", "mul64", "divmod64", "supports"]

_FLIP = -(1 << 31)  # the sign bit of an int32 word: xor-ing it maps unsigned order onto signed order


def supports(op: str, alpha: Any) -> bool:
    """Whether :func:`add64` computes ``op`` with this ``alpha`` (None or an int: other alphas scale by
    :func:`mul64` first)."""
    return op in ("add", "sub", "rsub") and (alpha is None or type(alpha) is int)


def _words(v: Any, shape: tuple[int, ...]) -> torch.Tensor:
    """The (low, high) int32 words of an integer operand (a trn tensor of any integer dtype, or an int), broadcast
    to ``shape``."""
    if isinstance(v, torch.Tensor) and v.device.type == "trn":
        t = v if v.dtype == torch.int64 else v.to(torch.int64)
    else:
        t = torch.tensor(int(v), dtype=torch.int64, device="trn")
    return U.int32_words(t.expand(shape))


def _below(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a < b`` for int32 words read as unsigned, as int32 0/1."""
    return torch.lt(torch.bitwise_xor(a, _FLIP), torch.bitwise_xor(b, _FLIP)).to(torch.int32)


def add64(self: Any, other: Any, alpha: Any, op: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """``self + alpha * other`` (op ``add``), ``self - alpha * other`` (``sub``) or ``other - alpha * self``
    (``rsub``) in int64 with torch's wrapping, for any values; ``alpha`` is None, 1 or -1 (see :func:`supports`).
    ``shape``: the broadcast shape (default: from the tensor operands)."""
    if shape is None:
        shape = tuple(torch.broadcast_shapes(*(t.shape for t in (self, other) if isinstance(t, torch.Tensor))))
    if op == "rsub":
        self, other, op = other, self, "sub"
    if alpha == -1:
        op = "sub" if op == "add" else "add"
    elif alpha is not None and alpha != 1:
        other = mul64(other, alpha, shape)
    a, b = _words(self, shape), _words(other, shape)
    a_lo, a_hi, b_lo, b_hi = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    if op == "add":
        lo = torch.add(a_lo, b_lo)
        hi = torch.add(torch.add(a_hi, b_hi), _below(lo, a_lo))  # carry: the low sum wrapped past 2^32
    else:
        lo = torch.sub(a_lo, b_lo)
        hi = torch.sub(torch.sub(a_hi, b_hi), _below(a_lo, b_lo))  # borrow: a_lo < b_lo as unsigned
    return U.from_int32_words(torch.stack((lo, hi), -1))


def _ushr16(x: torch.Tensor) -> torch.Tensor:
    """``x >> 16`` of int32 words read as unsigned (the high half-word)."""
    return torch.bitwise_and(torch.bitwise_right_shift(x, 16), 0xFFFF)


def _umul32(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The full 64-bit product of int32 words read as unsigned, as (low, high) words: four products of 16-bit
    halves (each below 2^32, exact in wrapping int32), the middle ones added into the low word with their carries."""
    a0, a1 = torch.bitwise_and(a, 0xFFFF), _ushr16(a)
    b0, b1 = torch.bitwise_and(b, 0xFFFF), _ushr16(b)
    p00, p01, p10, p11 = torch.mul(a0, b0), torch.mul(a0, b1), torch.mul(a1, b0), torch.mul(a1, b1)
    s1 = torch.add(p00, torch.bitwise_left_shift(p01, 16))
    s2 = torch.add(s1, torch.bitwise_left_shift(p10, 16))
    hi = p11 + _ushr16(p01) + _ushr16(p10) + _below(s1, p00) + _below(s2, s1)
    return s2, hi


def mul64(self: Any, other: Any, shape: tuple[int, ...]) -> torch.Tensor:
    """``self * other`` in int64 with torch's wrapping (modulo 2^64), for any values: the low words' full product
    plus the cross products ``a_lo b_hi + a_hi b_lo`` in the high word (their high halves fall past 2^64)."""
    a, b = _words(self, shape), _words(other, shape)
    a_lo, a_hi, b_lo, b_hi = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    lo, hi = _umul32(a_lo, b_lo)
    hi = hi + torch.mul(a_lo, b_hi) + torch.mul(a_hi, b_lo)
    return U.from_int32_words(torch.stack((lo, hi), -1))


#: the int64 division family :func:`divmod64` computes (pointwise's kernel-op names)
DIVISIONS = ("div_trunc_i", "div_floor_i", "fmod", "remainder", "rremainder")


def _neg_words(lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two's complement negation of (lo, hi): ``~x + 1``, the carry into the high word when the low word is 0."""
    nlo = torch.neg(lo)  # int32 wrapping: ~lo + 1
    nhi = torch.add(torch.bitwise_not(hi), torch.eq(lo, 0).to(torch.int32))
    return nlo, nhi


def _select(c: torch.Tensor, x: tuple[torch.Tensor, torch.Tensor], y: tuple[torch.Tensor, torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.where(c, x[0], y[0]), torch.where(c, x[1], y[1])


_MIN32 = -(1 << 31)


def _ult(a: Any, b: Any) -> Any:
    """``a < b`` for int32 tiles read as unsigned: adding 2^31 (wrapping) flips the sign bits."""
    return (a + _MIN32) < (b + _MIN32)


def _bit(c: Any) -> Any:
    return tl.where(c, 1, 0)


@trn.kernel
def udivmod64(nl, nh, dl, dh, ql, qh, rl, rh, flat=True):
    """Unsigned 64-bit ``(q, r) = divmod(n, d)`` of int32 word planes (``d != 0``), by restoring long division: 64
    steps of a runtime loop, each shifting the remainder left by one dividend bit, comparing it with ``d`` as
    unsigned and subtracting where it is not below (the quotient takes that bit). Left shifts are doublings
    (wrapping); the bit shifted out of a word is its sign."""
    for acc, m in F.spaces(ql, flat):
        d_lo = tl.load(acc(dl), mask=m)
        d_hi = tl.load(acc(dh), mask=m)
        n_lo = tl.load(acc(nl), mask=m)
        st = [tl.ndarray(n_lo.shape, tl.int32, buffer=tl.sbuf) for _ in range(6)]  # n, r, q words
        st[0][...] = n_lo
        st[1][...] = tl.load(acc(nh), mask=m)
        for b in st[2:]:
            b[...] = n_lo * 0
        for _ in tl.sequential_range(64):
            a_lo, a_hi, r_lo, r_hi, q_lo, q_hi = (b[...] for b in st)
            top = _bit(a_hi < 0)
            st[1][...] = a_hi * 2 + _bit(a_lo < 0)
            st[0][...] = a_lo * 2
            r_hi = r_hi * 2 + _bit(r_lo < 0)
            r_lo = r_lo * 2 + top
            low = _ult(r_lo, d_lo)
            ge = _ult(d_hi, r_hi) | ((r_hi == d_hi) & (low == 0))
            st[2][...] = tl.where(ge, r_lo - d_lo, r_lo)
            st[3][...] = tl.where(ge, r_hi - d_hi - _bit(low), r_hi)
            st[5][...] = q_hi * 2 + _bit(q_lo < 0)
            st[4][...] = q_lo * 2 + _bit(ge)
        tl.store(acc(rl), st[2][...], mask=m)
        tl.store(acc(rh), st[3][...], mask=m)
        tl.store(acc(ql), st[4][...], mask=m)
        tl.store(acc(qh), st[5][...], mask=m)


udivmod64_flat = F.flat_kernel(udivmod64)


def _udivmod(n: tuple[torch.Tensor, torch.Tensor], d: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Unsigned 64-bit ``(n // d, n % d)`` of word planes of one shape (no d is 0): one :func:`udivmod64` launch
    over contiguous copies of the planes."""
    shape = tuple(n[0].shape)
    planes = [p.contiguous().reshape(-1) for p in (*n, *d)]
    outs = [torch.empty_like(planes[0]) for _ in range(4)]
    if planes[0].numel():
        udivmod64_flat(*planes, *outs, True)
    ql, qh, rl, rh = (o.view(shape) for o in outs)
    return (ql, qh), (rl, rh)


def divmod64(self: Any, other: Any, op: str, shape: tuple[int, ...]) -> torch.Tensor:
    """int64 ``op`` (one of :data:`DIVISIONS`: truncating / flooring quotient, C ``fmod``, Python ``remainder``,
    ``rremainder`` = ``other % self``) for any values, as torch computes them; no divisor may be 0 (the caller
    checks: torch raises)."""
    if op == "rremainder":
        self, other, op = other, self, "remainder"
    a, b = _words(self, shape), _words(other, shape)
    (a_lo, a_hi), (b_lo, b_hi) = (a[..., 0], a[..., 1]), (b[..., 0], b[..., 1])
    sa, sb = torch.lt(a_hi, 0), torch.lt(b_hi, 0)
    ua = _select(sa, _neg_words(a_lo, a_hi), (a_lo, a_hi))  # |a| as unsigned (|INT64_MIN| = 2^63 fits)
    ub = _select(sb, _neg_words(b_lo, b_hi), (b_lo, b_hi))
    q, r = _udivmod(ua, ub)
    r_nz = torch.logical_or(torch.ne(r[0], 0), torch.ne(r[1], 0))
    if op in ("div_trunc_i", "div_floor_i"):
        neg = torch.logical_xor(sa, sb)
        q = _select(neg, _neg_words(*q), q)
        if op == "div_floor_i":  # a truncated negative quotient with a remainder: one lower
            lower = torch.logical_and(neg, r_nz)
            dec = (torch.sub(q[0], 1), torch.sub(q[1], torch.eq(q[0], 0).to(torch.int32)))
            q = _select(lower, dec, q)
        return U.from_int32_words(torch.stack(q, -1))
    r = _select(sa, _neg_words(*r), r)  # fmod: the dividend's sign
    if op == "remainder":  # Python's: the divisor's sign, so a nonzero r of the other sign moves by b
        fix = torch.logical_and(r_nz, torch.logical_xor(sa, sb))
        summed = add64(U.from_int32_words(torch.stack(r, -1)), U.from_int32_words(torch.stack((b_lo, b_hi), -1)),
                       None, "add", shape)
        sw = U.int32_words(summed)
        r = _select(fix, (sw[..., 0], sw[..., 1]), r)
    return U.from_int32_words(torch.stack(r, -1))
