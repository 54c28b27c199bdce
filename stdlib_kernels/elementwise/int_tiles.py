"""Integer tile functions of the binary family (int32 arithmetic that wraps as torch's does): powers by
square-and-multiply, shifts, Euclid's gcd. Used by :data:`stdlib_kernels.elementwise.pointwise.BINARY_OPS`.

Example:
    >>> tile_shape(type("T", (), {"shape": (1, 1)})(), type("T", (), {"shape": (4, 64)})())
    (4, 64)
"""

from __future__ import annotations

from typing import Any

import trnlang.language as tl

__all__ = ["tile_shape", "ipow", "ipow_t", "pow2", "lshift", "gcd", "GCD_STEPS"]


def ipow(x: Any, k: int) -> Any:
    """``x ** k`` for a Python int ``k >= 0`` by square-and-multiply (int32 products wrap like torch's)."""
    r = None
    while k:
        if k & 1:
            r = x if r is None else r * x
        k >>= 1
        if k:
            x = x * x
    return r if r is not None else x * 0 + 1


def tile_shape(x: Any, y: Any) -> tuple[int, ...]:
    """The broadcast shape of two tiles (either may be the [1, 1] scalar tile)."""
    xs, ys = tuple(x.shape), tuple(y.shape)
    n = max(len(xs), len(ys))
    xs, ys = (1,) * (n - len(xs)) + xs, (1,) * (n - len(ys)) + ys
    return tuple(max(p, q) for p, q in zip(xs, ys))


def ipow_t(x: Any, e: Any) -> Any:
    """Integer ``x ** e`` for an int32 exponent tile: square-and-multiply over the 31 exponent bits (exact,
    wrapping like torch); a negative exponent gives 1 / x ** -e truncated (0 unless x is +-1), as torch."""
    shape = tile_shape(x, e)
    rb = tl.ndarray(shape, x.dtype, buffer=tl.sbuf)  # a runtime loop over the bits (one body to compile)
    pb = tl.ndarray(shape, x.dtype, buffer=tl.sbuf)
    mb = tl.ndarray(shape, e.dtype, buffer=tl.sbuf)
    rb[...] = tl.broadcast_to(x * 0 + 1, shape)
    pb[...] = tl.broadcast_to(x, shape)
    mb[...] = tl.broadcast_to(e * 0 + 1, shape)
    for _ in tl.sequential_range(31):
        m, p = mb[...], pb[...]
        rb[...] = tl.where(tl.bitwise_and(e, m) != 0, rb[...] * p, rb[...])
        pb[...] = p * p
        mb[...] = m + m  # 2^k (wraps to the sign bit at k = 31: never tested)
    r = rb[...]
    odd = tl.bitwise_and(e, 1) != 0
    neg = tl.where(x == 1, 1, tl.where(x == -1, tl.where(odd, -1, 1), 0))
    return tl.where(e < 0, neg, r)


def pow2(s: Any) -> Any:
    """``2 ** (s & 31)`` as int32 (``2 ** 31`` wraps to the minimum, as a shifted bit does)."""
    p = s * 0 + 1
    for k in range(5):
        p = tl.where(tl.bitwise_and(s, 1 << k) != 0, p * (1 << (1 << k)), p)
    return p


def lshift(x: Any, s: Any) -> Any:
    """torch's ``x << s`` on int32: the product by ``2 ** s`` wraps like the shift; 0 for ``s`` outside [0, 32)."""
    return tl.where((s < 0) | (s >= 32), 0, x * pow2(s))


#: Euclid steps that finish every int32 gcd: operands below F(47) > 2^31 need at most 45 (Lame's bound).
GCD_STEPS = 46


def gcd(x: Any, y: Any) -> Any:
    """gcd of int32 tiles by Euclid's algorithm: a sequential loop over two on-chip buffers (a lane whose divisor
    reached 0 keeps its result)."""
    shape = tile_shape(x, y)
    a = tl.ndarray(shape, tl.int32, buffer=tl.sbuf)
    b = tl.ndarray(shape, tl.int32, buffer=tl.sbuf)
    a[...] = tl.broadcast_to(tl.where(x < 0, -x, x), shape)  # integer negation (tl.abs computes in fp32)
    b[...] = tl.broadcast_to(tl.where(y < 0, -y, y), shape)
    for _ in tl.sequential_range(GCD_STEPS):
        av, bv = a[...], b[...]
        nz = bv != 0
        r = tl.fmod(av, tl.where(nz, bv, 1))
        a[...] = tl.where(nz, bv, av)
        b[...] = tl.where(nz, r, 0)
    return a[...]


#: op name -> function of two compute-type tiles (or a tile and a [1, 1] scalar tile).
