"""Integer draws over ranges wider than the draw kernel's 2^24 values (``random_`` on ``trn``): uniform 16-bit
limbs, redrawn where they pass the range, assembled with int32 arithmetic (which wraps as torch's does); int64
values as two int32 words with the carry of their addition done on the device; float draws over ranges far past
2^24 (the CPU makes them with a precision warning, as trn does) as integer-valued floats spread over the range.

Example:
    >>> t = torch.empty(1000, dtype=torch.int64, device="trn").random_()  # [0, 2^63 - 1]  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from stdlib_kernels import _util as U
from stdlib_kernels.tensor.random import Draw, _run
from trnlang.device import decline

__all__ = ["random_wide", "int64_range", "random_huge_float"]


def _limbs(shape: tuple[int, ...], span: int, generator: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(hi, lo)`` int32 16-bit limbs of integers uniform in ``[0, span)`` (``span <= 2^32``): ``hi`` uniform
    below ``ceil(span / 2^16)``, ``lo`` below ``2^16``, pairs at or past ``span`` drawn again (acceptance >= 1/2:
    a few rounds, one device check each)."""
    if span <= 1 << 24:  # one draw of the kernel: no redraws (a short span in 16-bit limbs would rarely land)
        lw = torch.empty(shape, dtype=torch.int32, device="trn")
        if _run(lw, Draw.RANDINT, 0, span, generator) is NotImplemented:
            return None
        return torch.zeros(shape, dtype=torch.int32, device="trn"), lw
    q, r = divmod(span, 1 << 16)
    hmax = q + (1 if r else 0)

    def draw() -> tuple[torch.Tensor, torch.Tensor] | None:
        h = torch.empty(shape, dtype=torch.int32, device="trn")
        lw = torch.empty(shape, dtype=torch.int32, device="trn")
        if _run(h, Draw.RANDINT, 0, hmax, generator) is NotImplemented or \
                _run(lw, Draw.RANDINT, 0, 1 << 16, generator) is NotImplemented:
            return None
        return h, lw

    got = draw()
    if got is None:
        return None
    h, lw = got
    for _ in range(64):
        bad = (h > q) | ((h == q) & (lw >= r)) if r else h >= q
        if not bool(bad.any()):
            return h, lw
        again = draw()
        if again is None:
            return None
        h, lw = torch.where(bad, again[0], h), torch.where(bad, again[1], lw)
    return None


def random_wide(self: torch.Tensor, from_: int, to: int, generator: Any) -> Any:
    """int32/int64 draws over ranges wider than 2^24: uniform 16-bit limbs assembled with int32 arithmetic (it
    wraps as torch's int32 does; an accepted value lies in the dtype, so the wrapped sum is exact). int64 takes
    ranges inside int32's, or the full int64 range (two independent 32-bit words)."""
    if self.dtype == torch.int64 and from_ <= -(1 << 63) and to >= (1 << 63) - 1:
        words = []
        for _ in range(2):
            limbs = _limbs(tuple(self.shape), 1 << 32, generator)
            if limbs is None:
                return decline("the wide-range draws did not settle")
            words.append(limbs[0] * 65536 + limbs[1])
        r = torch.stack(words, -1).view(torch.int64).reshape(self.shape)
        return self.copy_(r)
    if not (-(1 << 31) <= from_ and to <= 1 << 31):
        return int64_range(self, from_, to, generator)
    limbs = _limbs(tuple(self.shape), to - from_, generator)
    if limbs is None:
        return decline("the wide-range draws did not settle")
    base = torch.tensor(from_, dtype=torch.int32, device="trn")
    r = base + (limbs[0] * 65536 + limbs[1])
    return self.copy_(r)


def _word(shape: tuple[int, ...], span: int, generator: Any) -> torch.Tensor | None:
    """int32 words (their bits, read unsigned) uniform below ``span`` (``<= 2^32``)."""
    if span == 1:
        return torch.zeros(shape, dtype=torch.int32, device="trn")
    limbs = _limbs(shape, span, generator)
    return None if limbs is None else limbs[0] * 65536 + limbs[1]


def int64_range(self: torch.Tensor, from_: int, to: int, generator: Any) -> Any:
    """int64 draws uniform in ``[from, to)`` for any range (up to 2^64 values): a high word below
    ``ceil(span / 2^32)`` and a low word, pairs at or past ``span`` drawn again (spans below 2^32: the low word
    alone), then ``from`` added word by word with the carry computed on the device (unsigned compares of the low
    words)."""
    span = to - from_
    q, r = divmod(span, 1 << 32)
    shape = tuple(self.shape)
    if q == 0:  # a short span (at an offset past int32): one word below it, nothing to redraw
        hi, lo = torch.zeros(shape, dtype=torch.int32, device="trn"), _word(shape, span, generator)
    else:
        hi, lo = _word(shape, q + (1 if r else 0), generator), _word(shape, 1 << 32, generator)
    if hi is None or lo is None:
        return decline("the wide-range draws did not settle")
    for _ in range(64):
        if not r or not q:
            break
        bad = (hi == U.s32(q)) & (torch.bitwise_xor(lo, U.SIGN32) >= U.s32(r) ^ U.SIGN32)
        if not bool(bad.any()):
            break
        h2, l2 = _word(shape, q + 1, generator), _word(shape, 1 << 32, generator)
        if h2 is None or l2 is None:
            return decline("the wide-range draws did not settle")
        hi, lo = torch.where(bad, h2, hi), torch.where(bad, l2, lo)
    else:
        return decline("the wide-range draws did not settle")
    rlo, rhi = U.add64_words(lo, hi, from_)
    return self.copy_(torch.stack((rlo, rhi), -1).view(torch.int64).reshape(shape))


def random_huge_float(self: torch.Tensor, from_: int, to: int, generator: Any) -> Any:
    """Floating draws over ranges far past the dtype's exact integers (the CPU draws 64-bit integers and rounds
    them, warning of the precision loss): integer-valued floats ``floor(from (1 - u) + to u)`` for uniform ``u``,
    kept in ``[from, to)`` as the dtype rounds them; with torch's warnings for a ``from`` / ``to - 1`` past the
    exact integers."""
    digits = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}[self.dtype]
    for what, v in (("from", from_), ("to - 1", to - 1)):
        if abs(v) > 1 << digits:  # torch's precision warnings, on every such call
            name = {torch.float32: "float", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16"}[self.dtype]
            warnings.warn(f"{what} is out of bounds [-(2^{digits}), 2^{digits}]. Due to precision limitations {name} "
                          "can support discrete uniform distribution only within this range. This warning will "
                          "become an error in version 1.7 release, please fix the code in advance", UserWarning,
                          stacklevel=4)
    u = torch.empty(self.shape, dtype=torch.float32, device="trn")
    if _run(u, Draw.UNIFORM, 0.0, 1.0, generator) is NotImplemented:
        return NotImplemented
    lo, hi = float(from_), float(to)
    top = float(torch.tensor(hi, dtype=self.dtype).nextafter(torch.tensor(-float("inf"), dtype=self.dtype)))
    x = torch.floor(u * hi + (1.0 - u) * lo).clamp(min=lo, max=min(top, float(torch.finfo(self.dtype).max)))
    return self.copy_(x)
