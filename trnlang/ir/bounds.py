"""Interval analysis of sympy integer index expressions.

The verifier uses this module to prove that regions stay inside their buffers
and that HBM accesses stay inside their tensors. Every function is *sound*: a
range it reports contains every value the expression takes on its domain. It is
also *exact* where that is cheap and useful:

- For an affine expression over a box of integer ranges the extremes are attained
  at corners, so :func:`expr_range` returns the true minimum and maximum.
- For loop nests whose bounds depend on outer loop variables (triangular loops),
  affine expressions are maximised by eliminating loop variables innermost
  first (a loop variable with a positive coefficient is replaced by its last
  value, ``stop - 1``, which is affine in the outer variables). This is exact
  when every loop is provably non-empty and the substituted bounds are attained.
- Everything else (``floor``, ``Mod``, products, ``Min``/``Max``) goes through
  conservative interval arithmetic; unknown symbols give ``None``.

Domains are :class:`Ranges`: a dict ``Symbol -> (lo, hi)`` (inclusive ints) that
may also remember the loop nest it came from (:func:`loop_ranges`). A plain dict
works everywhere and means "this box".

Example:
    >>> import sympy
    >>> from trnlang.ir.nodes import sym
    >>> i, a = sym("i0"), sym("_a0")
    >>> expr_range(128 * i + a, {i: (0, 3), a: (0, 127)})
    (0, 511)
    >>> expr_range(sympy.floor((i + a) / 4), {i: (0, 3), a: (0, 127)})
    (0, 32)
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import sympy
from sympy.core.relational import (
    Equality,
    GreaterThan,
    LessThan,
    Relational,
    StrictGreaterThan,
    StrictLessThan,
)

from trnlang.ir.nodes import Access, Loop, axis_sym, gather_sym, pid_sym
from trnlang.ir.types import DType

Bound = tuple[int, int]
_FBound = tuple[Fraction, Fraction]
#: An affine form: constant and ``{symbol: coefficient}`` (no zero coefficients).
Affine = tuple[Fraction, dict[sympy.Symbol, Fraction]]

_MAX_PIDS = 3

#: Magnitude bound of any index value of a kernel (its index arithmetic is 64-bit).
_INDEX_LIMIT = 2**63


class Ranges(dict):
    """Inclusive integer ranges of symbols, plus the loop nest they describe.

    ``loops`` (outer to inner) lets affine expressions be bounded exactly over
    non-box domains (loop bounds depending on outer loop variables);
    ``nonempty`` is True when every loop is provably non-empty at every point of
    the outer domain, which is what makes the extremes *attained* (needed to
    prove an access out of bounds rather than merely not provably inside).
    A range with ``lo > hi`` is empty: the loop never runs.
    """

    def __init__(self, data: Mapping[sympy.Symbol, Bound] | None = None, loops: Sequence[Loop] = (),
                 nonempty: bool = True) -> None:
        super().__init__(data or {})
        self.loops: tuple[Loop, ...] = tuple(loops)
        self.nonempty = nonempty

    def extended(self, extra: Mapping[sympy.Symbol, Bound]) -> Ranges:
        """A copy with more (independent) symbols, e.g. the axes of an access."""
        r = Ranges(self, self.loops, self.nonempty)
        r.update(extra)
        return r

    @property
    def empty(self) -> bool:
        """True if some symbol has an empty range (the code it guards never runs)."""
        return any(lo > hi for lo, hi in self.values())


def _as_ranges(ranges: Mapping[sympy.Symbol, Bound]) -> Ranges:
    return ranges if isinstance(ranges, Ranges) else Ranges(ranges)


# --------------------------------------------------------------------------------------------
# affine forms
# --------------------------------------------------------------------------------------------


#: An affine form as a cache can keep it: constant and ``((symbol, coefficient), ...)``.
AffineParts = tuple[Fraction, tuple[tuple[sympy.Symbol, Fraction], ...]]


def affine_parts(expr: sympy.Basic, part: Callable[[sympy.Basic], AffineParts | None] | None = None,
                 atom: Callable[[sympy.Basic], AffineParts | None] | None = None) -> AffineParts | None:
    """One step of the affine decomposition of ``expr`` (None: not affine).

    A rational or a symbol is its own form; a sum adds the forms of its terms and a product scales the
    form of its one non-constant factor, both taken from ``part`` (the caller's recursion; by default the
    cached decomposition behind :func:`affine_form`, which is this function under ``functools.lru_cache``);
    any other node is left to ``atom`` (by default: not affine; the runtime-size prover of
    :mod:`trnlang.ir.symbounds` makes ``floor``/``ceiling``/``Mod`` symbols of their own).

    Example:
        >>> from trnlang.ir.nodes import sym
        >>> affine_parts(3 * sym("i0") + 2)
        (Fraction(2, 1), ((i0, Fraction(3, 1)),))
        >>> q = sympy.floor(sym("i0") / 2)
        >>> affine_parts(2 * q) is None
        True
        >>> def as_symbol(e):  # a recursion whose atom rule takes any other node as a symbol
        ...     return affine_parts(e, as_symbol, lambda a: (Fraction(0), ((a, Fraction(1)),)))
        >>> as_symbol(2 * q + 1)
        (Fraction(1, 1), ((floor(i0/2), Fraction(2, 1)),))
    """
    if part is None:
        part = _affine_cached
    if expr.is_Rational:
        return Fraction(int(expr.p), int(expr.q)), ()
    if expr.is_Symbol:
        return Fraction(0), ((expr, Fraction(1)),)
    if expr.is_Add:
        const = Fraction(0)
        coeffs: dict[sympy.Symbol, Fraction] = {}
        for a in expr.args:
            f = part(a)
            if f is None:
                return None
            const += f[0]
            for s, c in f[1]:
                coeffs[s] = coeffs.get(s, 0) + c
        return const, tuple((s, c) for s, c in coeffs.items() if c != 0)
    if expr.is_Mul:
        scale, inner = Fraction(1), None
        for a in expr.args:
            if a.is_Rational:
                scale *= Fraction(int(a.p), int(a.q))
            elif inner is None:
                inner = part(a)
                if inner is None:
                    return None
            else:
                return None  # product of two non-constant factors
        if inner is None:
            return scale, ()
        return scale * inner[0], tuple((s, scale * c) for s, c in inner[1] if scale * c != 0)
    return atom(expr) if atom is not None else None


# affine_parts with its default rules, cached (hot at trace time): one call frame per node, key ``expr``
_affine_cached = functools.lru_cache(maxsize=65536)(affine_parts)
_affine_cached.__doc__ = "affine_parts(expr) with the default rules, cached (the recursion of affine_form)."


def affine_form(expr: Any) -> Affine | None:
    """``(const, {symbol: coeff})`` if ``expr`` is affine in its symbols, else None.

    Example:
        >>> from trnlang.ir.nodes import sym
        >>> const, coeffs = affine_form(2 * (sym("i0") + 3) - sym("_a0"))
        >>> const, coeffs[sym("i0")], coeffs[sym("_a0")]
        (Fraction(6, 1), Fraction(2, 1), Fraction(-1, 1))
    """
    if isinstance(expr, bool):
        return None
    if isinstance(expr, int):
        return Fraction(expr), {}
    expr = sympy.sympify(expr)
    if not isinstance(expr, sympy.Expr):
        return None
    f = _affine_cached(expr)
    if f is None:
        return None
    return f[0], dict(f[1])


def _aff_add(a: Affine, b: Affine, scale: Fraction = Fraction(1)) -> Affine:
    """a + scale * b."""
    coeffs = dict(a[1])
    for s, c in b[1].items():
        v = coeffs.get(s, 0) + scale * c
        if v == 0:
            coeffs.pop(s, None)
        else:
            coeffs[s] = v
    return a[0] + scale * b[0], coeffs


def _aff_is_integral(a: Affine) -> bool:
    return a[0].denominator == 1 and all(c.denominator == 1 for c in a[1].values())


def _aff_box(a: Affine, ranges: Mapping[sympy.Symbol, Bound]) -> _FBound | None:
    lo = hi = a[0]
    for s, c in a[1].items():
        r = ranges.get(s)
        if r is None:
            return None
        if c > 0:
            lo, hi = lo + c * r[0], hi + c * r[1]
        else:
            lo, hi = lo + c * r[1], hi + c * r[0]
    return lo, hi


def const_int(e: Any) -> int | None:
    """The value of a constant integer expression (not a bool), else None."""
    if isinstance(e, bool):
        return None
    e = sympy.sympify(e)
    return int(e) if e.is_Integer else None


def _loop_last(lp: Loop) -> int | None:
    """The last value of a loop with constant bounds and a positive constant step (None otherwise / if empty)."""
    start, stop, step = const_int(lp.start), const_int(lp.stop), const_int(lp.step)
    if start is None or stop is None or step is None or step <= 0 or stop <= start:
        return None
    return start + step * ((stop - 1 - start) // step)


def _aff_extreme(a: Affine, ranges: Ranges, maximize: bool) -> tuple[Fraction, bool] | None:
    """Max (or min) of an affine form over the loop nest of ``ranges``, and whether it is attained.

    Loop variables are eliminated innermost first: a variable whose coefficient
    pushes towards the wanted extreme is replaced by its last value (``stop - 1``,
    affine in outer variables), otherwise by ``start``. Remaining symbols range
    over their (independent) boxes.
    """
    exact = ranges.nonempty
    cur = (a[0], dict(a[1]))
    for lp in reversed(ranges.loops):
        c = cur[1].get(lp.var)
        if c is None:
            continue
        if lp.var not in ranges:  # the step is not provably positive: its values are unknown
            return None
        high = (c > 0) == maximize
        sub: Affine | None
        last = _loop_last(lp) if high else None
        if last is not None:
            sub = (Fraction(last), {})
        elif high:
            sub = affine_form(sympy.sympify(lp.stop) - 1)
            if const_int(lp.step) != 1:
                exact = False  # stop - 1 bounds the last value but need not be one
        else:
            sub = affine_form(lp.start)
        if sub is None:  # a non-affine bound: fall back to the variable's box
            r = ranges.get(lp.var)
            if r is None:
                return None
            sub, exact = (Fraction(r[1] if high else r[0]), {}), False
        coeffs = dict(cur[1])
        del coeffs[lp.var]
        cur = _aff_add((cur[0], coeffs), sub, c)
    box = _aff_box(cur, ranges)
    if box is None:
        return None
    return (box[1] if maximize else box[0]), exact


def _aff_range(a: Affine, ranges: Mapping[sympy.Symbol, Bound]) -> tuple[_FBound, bool] | None:
    """Sound range of an affine form and whether both ends are attained."""
    box = _aff_box(a, ranges)
    rr = _as_ranges(ranges)
    if not rr.loops or not any(lp.var in a[1] for lp in rr.loops):
        return (box, rr.nonempty) if box is not None else None
    hi = _aff_extreme(a, rr, True)
    lo = _aff_extreme(a, rr, False)
    if hi is None or lo is None:
        return (box, False) if box is not None else None
    lo_v, hi_v = lo[0], hi[0]
    if box is not None:  # both are sound; keep the tighter ends
        lo_v, hi_v = max(lo_v, box[0]), min(hi_v, box[1])
    return (lo_v, hi_v), lo[1] and hi[1]


# --------------------------------------------------------------------------------------------
# interval arithmetic
# --------------------------------------------------------------------------------------------


def _mul(a: _FBound, b: _FBound) -> _FBound:
    p = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(p), max(p)


def _iv(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, Bound]) -> _FBound | None:
    if expr.is_Rational:
        v = Fraction(int(expr.p), int(expr.q))
        return v, v
    if expr.is_Symbol:
        b = ranges.get(expr)
        return (Fraction(b[0]), Fraction(b[1])) if b is not None else None
    aff = _affine_cached(expr) if isinstance(expr, sympy.Expr) else None
    if aff is not None:
        got = _aff_range((aff[0], dict(aff[1])), ranges)
        return got[0] if got is not None else None
    if isinstance(expr, (Relational, sympy.logic.boolalg.Boolean)):
        return Fraction(0), Fraction(1)  # predicates used as integers are 1/0
    if expr.is_Add:
        return _iv_add(expr, ranges)
    if expr.is_Mul:
        return _iv_mul(expr, ranges)
    if expr.is_Pow:
        return _iv_pow(expr, ranges)
    return _iv_func(expr, ranges)


def _iv_add(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, Bound]) -> _FBound | None:
    lo = hi = Fraction(0)
    for a in expr.args:
        r = _iv(a, ranges)
        if r is None:
            return None
        lo, hi = lo + r[0], hi + r[1]
    return lo, hi


def _iv_mul(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, Bound]) -> _FBound | None:
    acc: _FBound = (Fraction(1), Fraction(1))
    for a in expr.args:
        r = _iv(a, ranges)
        if r is None:
            return None
        acc = _mul(acc, r)
    return acc


def _iv_pow(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, Bound]) -> _FBound | None:
    base, ex = expr.args
    if not (ex.is_Integer and int(ex) >= 0):
        return None
    r = _iv(base, ranges)
    if r is None:
        return None
    n = int(ex)
    lo_p, hi_p = r[0] ** n, r[1] ** n
    if n % 2 == 1:
        return lo_p, hi_p
    if r[0] <= 0 <= r[1]:
        return Fraction(0), max(lo_p, hi_p)
    return min(lo_p, hi_p), max(lo_p, hi_p)


def _iv_func(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, Bound]) -> _FBound | None:
    """The range of floor / ceiling / Mod / Min / Max / Abs of ranged arguments (None for anything else)."""
    if isinstance(expr, sympy.floor):
        r = _iv(expr.args[0], ranges)
        return (Fraction(math.floor(r[0])), Fraction(math.floor(r[1]))) if r else None
    if isinstance(expr, sympy.ceiling):
        r = _iv(expr.args[0], ranges)
        return (Fraction(math.ceil(r[0])), Fraction(math.ceil(r[1]))) if r else None
    if isinstance(expr, sympy.Mod):
        return _iv_mod(expr, ranges)
    if isinstance(expr, (sympy.Min, sympy.Max)):
        rs = [_iv(a, ranges) for a in expr.args]
        known = [r for r in rs if r is not None]
        is_min = isinstance(expr, sympy.Min)
        if not known:
            return None
        if len(known) != len(rs):
            # one bounded argument bounds a Min from above (a Max from below) whatever the others are,
            # e.g. a loop over min(cdiv(n, 128), CAP) blocks of a CAP-block buffer with a runtime n; the
            # other side is only bounded by the 64-bit index range (never proves an access safe by itself)
            if is_min:
                return Fraction(-_INDEX_LIMIT), min(r[1] for r in known)
            return max(r[0] for r in known), Fraction(_INDEX_LIMIT)
        pick = min if is_min else max
        return pick(r[0] for r in known), pick(r[1] for r in known)
    if isinstance(expr, sympy.Abs):
        r = _iv(expr.args[0], ranges)
        if r is None:
            return None
        if r[0] >= 0:
            return r
        if r[1] <= 0:
            return -r[1], -r[0]
        return Fraction(0), max(-r[0], r[1])
    return None


def _iv_mod(expr: sympy.Mod, ranges: Mapping[sympy.Symbol, Bound]) -> _FBound | None:
    a, b = expr.args
    ra, rb = _iv(a, ranges), _iv(b, ranges)
    if ra is None or rb is None or rb[0] <= 0:
        return None  # only positive moduli (what index arithmetic produces)
    if rb[0] == rb[1]:
        m = rb[0]
        q_lo, q_hi = math.floor(ra[0] / m), math.floor(ra[1] / m)
        if q_lo == q_hi:
            return ra[0] - q_lo * m, ra[1] - q_lo * m
    if ra[0] >= 0 and ra[1] < rb[0]:
        return ra
    top = rb[1] - 1 if expr.is_integer else rb[1]
    return Fraction(0), top


def expr_range(expr: Any, ranges: Mapping[sympy.Symbol, Bound]) -> Bound | None:
    """Inclusive integer range ``(lo, hi)`` of ``expr`` over ``ranges``; None if unknown.

    Exact for affine expressions over a box (and over a :class:`Ranges` loop
    nest whose loops are non-empty); conservative for ``floor``, ``ceiling``,
    ``Mod``, products, powers, ``Min``/``Max``/``Abs``. Returns None when a
    symbol has no known range (e.g. a gather symbol ``_g0``) or the expression
    has a form the analysis does not know. If some symbol of ``expr`` has an
    empty range the result is empty (``lo > hi``).

    Args:
        expr: a sympy expression (or int) over integer symbols.
        ranges: ``{symbol: (lo, hi)}``, inclusive; a :class:`Ranges` adds loop structure.

    Example:
        >>> from trnlang.ir.nodes import sym
        >>> expr_range(sym("i0") - sym("_g0"), {sym("i0"): (0, 7)}) is None
        True
    """
    if isinstance(expr, bool):
        expr = int(expr)
    if isinstance(expr, int):
        return expr, expr
    expr = sympy.sympify(expr)
    syms = expr.free_symbols
    for s in syms:
        r = ranges.get(s)
        if r is not None and r[0] > r[1]:
            return 0, -1
    iv = _iv(expr, ranges)
    if iv is None:
        return None
    if getattr(expr, "is_integer", False) or isinstance(expr, Relational):
        return math.ceil(iv[0]), math.floor(iv[1])
    return math.floor(iv[0]), math.ceil(iv[1])


# --------------------------------------------------------------------------------------------
# loop nests
# --------------------------------------------------------------------------------------------


def loop_ranges(loops: Sequence[Loop], grid: Sequence[int]) -> Ranges:
    """Ranges of the program ids and loop variables of a loop nest (outer to inner).

    ``pidK`` ranges over ``[0, grid[K] - 1]`` (``[0, 0]`` for axes beyond the
    grid). A loop variable ranges over its values ``start, start+step, ...``
    below ``stop``: exactly when the bounds are constant, otherwise over
    ``[min(start), max(stop) - 1]`` computed from the enclosing ranges. Loops
    whose step is not provably positive leave their variable unknown.

    Example:
        >>> from trnlang.ir.nodes import Loop, sym
        >>> i, j = sym("i0"), sym("i1")
        >>> r = loop_ranges([Loop("affine", i, 0, 10, 3), Loop("affine", j, i, 10, 1)], (2,))
        >>> r[sym("pid0")], r[i], r[j]
        ((0, 1), (0, 9), (0, 9))
    """
    r = Ranges(loops=loops)
    for k in range(max(_MAX_PIDS, len(grid))):
        r[pid_sym(k)] = (0, int(grid[k]) - 1) if k < len(grid) else (0, 0)
    for lp in loops:
        if r.empty:
            r[lp.var] = (0, -1)
            continue
        start, stop, step = const_int(lp.start), const_int(lp.stop), const_int(lp.step)
        if start is not None and stop is not None and step is not None and step > 0:
            last = _loop_last(lp)
            r[lp.var] = (start, last) if last is not None else (start, start - 1)
            continue
        st = expr_range(lp.step, r)
        lo_r, hi_r = expr_range(lp.start, r), expr_range(lp.stop, r)
        if st is None or st[0] <= 0 or lo_r is None or hi_r is None:
            r.nonempty = False
            continue
        r[lp.var] = (lo_r[0], hi_r[1] - 1)
        trip = expr_range(sympy.sympify(lp.stop) - sympy.sympify(lp.start), r)
        if trip is None or trip[0] < 1:
            r.nonempty = False
    return r


# --------------------------------------------------------------------------------------------
# access patterns
# --------------------------------------------------------------------------------------------


class AccessVerdict(NamedTuple):
    """Result of :func:`access_check`.

    ``status`` is ``"safe"`` (every accessed element is inside the tensor),
    ``"oob"`` (some element of the domain is provably outside: ``dim`` is the
    first such dimension, ``index_range`` its attained index range) or
    ``"runtime"`` (neither could be proven: ``runtime_dims`` need a check at run
    time). ``reason`` is a human explanation naming the dimension, its index
    range and the dimension's size.
    """

    status: str
    reason: str
    dim: int | None = None
    index_range: Bound | None = None
    size: Any = None
    runtime_dims: tuple[int, ...] = ()


_GATHER_RANGES: dict[DType, Bound] = {
    DType.bool_: (0, 1), DType.uint8: (0, 255), DType.int8: (-128, 127),
    DType.int16: (-(2 ** 15), 2 ** 15 - 1), DType.int32: (-(2 ** 31), 2 ** 31 - 1),
}


def _conjuncts(mask: Any) -> list[Any]:
    if isinstance(mask, sympy.And):
        out: list[Any] = []
        for a in mask.args:
            out.extend(_conjuncts(a))
        return out
    return [mask]


def _rel_bounds(c: Relational, d_integral: bool) -> tuple[Fraction | None, Fraction | None] | None:
    """Bounds on ``D = lhs - rhs`` implied by the relation ``c``."""
    step = Fraction(1) if d_integral else Fraction(0)
    if isinstance(c, StrictLessThan):
        return None, -step
    if isinstance(c, LessThan):
        return None, Fraction(0)
    if isinstance(c, StrictGreaterThan):
        return step, None
    if isinstance(c, GreaterThan):
        return Fraction(0), None
    if isinstance(c, Equality):
        return Fraction(0), Fraction(0)
    return None


def mask_bounds(expr: Any, mask: Any, ranges: Mapping[sympy.Symbol, Bound]) -> tuple[int | None, int | None]:
    """Bounds on ``expr`` implied by the linear conjuncts of ``mask`` (``None`` = no bound).

    For each conjunct ``D rel 0`` (``D = lhs - rhs`` affine) and each ratio
    ``lam`` of the coefficients of a symbol shared by ``expr`` and ``D``, writes
    ``expr = lam * D + rest`` and bounds ``rest`` over ``ranges``: so
    ``rows < n`` with ``rows = 128*i0 + _a0`` bounds ``rows`` by ``n - 1``.

    Example:
        >>> from trnlang.ir.nodes import sym
        >>> i, a = sym("i0"), sym("_a0")
        >>> mask_bounds(128 * i + a, 128 * i + a < 300, {i: (0, 2), a: (0, 127)})
        (None, 299)
    """
    e = affine_form(expr)
    if e is None or mask is None or mask is True or mask is sympy.true:
        return None, None
    integral = _aff_is_integral(e)
    lo: Fraction | None = None
    hi: Fraction | None = None
    for c in _conjuncts(mask):
        if not isinstance(c, Relational):
            continue
        d = affine_form(c.lhs - c.rhs)
        if d is None:
            continue
        db = _rel_bounds(c, _aff_is_integral(d))
        if db is None:
            continue
        lams = {e[1][s] / d[1][s] for s in e[1] if s in d[1]}
        for lam in lams:
            rest = _aff_add(e, d, -lam)
            rr = _aff_range(rest, ranges)
            if rr is None:
                continue
            (r_lo, r_hi), _ = rr
            d_top, d_bot = (db[1], db[0]) if lam > 0 else (db[0], db[1])
            if d_top is not None:
                v = lam * d_top + r_hi
                hi = v if hi is None else min(hi, v)
            if d_bot is not None:
                v = lam * d_bot + r_lo
                lo = v if lo is None else max(lo, v)
    if integral:
        return (math.ceil(lo) if lo is not None else None), (math.floor(hi) if hi is not None else None)
    return (math.floor(lo) if lo is not None else None), (math.ceil(hi) if hi is not None else None)


def access_ranges(access: Access, ranges: Mapping[sympy.Symbol, Bound]) -> Ranges:
    """``ranges`` plus the axes ``_ak`` of the access and the gather symbols whose dtype bounds them."""
    extra: dict[sympy.Symbol, Bound] = {axis_sym(k): (0, n - 1) for k, n in enumerate(access.shape)}
    for k, g in enumerate(access.gathers):
        gs = gather_sym(k)
        if gs not in ranges and g.dtype in _GATHER_RANGES:
            extra[gs] = _GATHER_RANGES[g.dtype]
    return _as_ranges(ranges).extended(extra)


def _is_gather(s: sympy.Symbol) -> bool:
    return s.name.startswith("_g")


def _fmt_range(lo: int, hi: int) -> str:
    return f"[{lo}, {hi}]"


def _index_bounds(idx: Any, aff: Affine | None, mask: Any, r: Ranges) -> tuple[int | None, int | None, bool]:
    """Integer bounds of one index of an access (None: unbounded), tightened by ``mask`` (None: unmasked),
    and whether the bounds are attained (an affine index over the loops' ranges)."""
    lo: int | None
    hi: int | None
    got = _aff_range(aff, r) if aff is not None else None
    if got is not None:
        (flo, fhi), attained = got
        lo, hi = math.ceil(flo), math.floor(fhi)
    else:
        er = expr_range(idx, r)
        lo, hi = (er if er is not None else (None, None))
        attained = False
    if mask is not None:
        m_lo, m_hi = mask_bounds(idx, mask, r)
        if m_lo is not None:
            lo = m_lo if lo is None else max(lo, m_lo)
        if m_hi is not None:
            hi = m_hi if hi is None else min(hi, m_hi)
    return lo, hi, attained


def _runtime_why(idx: Any, gathered: bool, lo: int | None, hi: int | None, masked: bool) -> str:
    """Why an index cannot be proven inside its dimension at compile time."""
    if gathered:
        return "depends on gathered (indirect) index values"
    if lo is None or hi is None:
        return f"{idx} cannot be bounded at compile time"
    return f"ranges over {_fmt_range(lo, hi)}" + (" where the mask allows" if masked else "")


def _inside_for_all_sizes(idx: Any, size: Any, mask: Any, r: Ranges) -> bool:
    """``idx`` provably inside ``[0, size - 1]`` for every value of the runtime sizes (``symbounds``)."""
    from trnlang.ir.symbounds import inside

    return not any(_is_gather(s) for s in sympy.sympify(idx).free_symbols) and inside(idx, size, mask, r, r.loops)


def access_check(access: Access, ranges: Mapping[sympy.Symbol, Bound]) -> AccessVerdict:
    """Decide whether an HBM access pattern stays inside its tensor.

    ``ranges`` gives loop variables and program ids (use :func:`loop_ranges`);
    the axis symbols ``_ak`` range over ``[0, shape[k] - 1]``. Per dimension:

    - the index range (tightened by a ``mask``'s linear conjuncts) inside
      ``[0, size - 1]``: safe;
    - an unmasked affine index without gathers whose attained extremes fall
      outside: ``"oob"`` (an affine expression attains its extremes over the
      domain, so this is exact when the loops are non-empty);
    - otherwise (masked, gathered, non-affine, symbolic sizes): ``"runtime"``.

    Returns an :class:`AccessVerdict` (compare ``.status``).

    Example:
        >>> from trnlang.ir.nodes import Access, HbmTensor, sym
        >>> from trnlang.ir.types import DType
        >>> i, a0, a1 = sym("i0"), sym("_a0"), sym("_a1")
        >>> x = HbmTensor("x", (200, 64), DType.float32)
        >>> acc = Access(x, (128, 64), (128 * i + a0, a1))
        >>> access_check(acc, {i: (0, 1)}).status
        'oob'
        >>> acc.mask = 128 * i + a0 < 200
        >>> access_check(acc, {i: (0, 1)}).status
        'safe'
    """
    name = access.tensor.name
    if any(n <= 0 for n in access.shape):
        return AccessVerdict("safe", f"the access to '{name}' has no elements")
    mask = access.mask
    if mask is False or mask is sympy.false:
        return AccessVerdict("safe", f"the access to '{name}' is masked off entirely")
    masked = not (mask is None or mask is True or mask is sympy.true)
    r = access_ranges(access, ranges)
    if r.empty:
        return AccessVerdict("safe", f"the access to '{name}' is never executed (an enclosing loop is empty)")
    runtime: list[int] = []
    first_runtime = ""
    for d, (idx, size) in enumerate(zip(access.index, access.tensor.shape)):
        size_r = expr_range(size, r)
        where = f"dim {d} of '{name}' (size {size})"
        if size_r is None:
            if _inside_for_all_sizes(idx, size, mask if masked else None, r):
                continue
            runtime.append(d)
            first_runtime = first_runtime or f"{where}: the size is not known at compile time"
            continue
        aff = affine_form(idx)
        gathered = any(_is_gather(s) for s in sympy.sympify(idx).free_symbols)
        lo, hi, attained = _index_bounds(idx, aff, mask if masked else None, r)
        if lo is not None and hi is not None and lo > hi:
            return AccessVerdict("safe", f"the access to '{name}' is masked off entirely")
        if lo is not None and hi is not None and lo >= 0 and hi <= size_r[0] - 1:
            continue
        if (not masked and aff is not None and not gathered and attained and size_r[0] == size_r[1]
                and lo is not None and hi is not None):
            return AccessVerdict(
                "oob",
                f"the index of {where} takes values in {_fmt_range(lo, hi)}, outside {_fmt_range(0, size_r[0] - 1)}",
                d, (lo, hi), size)
        if _inside_for_all_sizes(idx, size, mask if masked else None, r):
            continue  # bounds that are formulas of runtime sizes (loop trip counts)
        runtime.append(d)
        if first_runtime:
            continue
        why = _runtime_why(idx, gathered, lo, hi, masked)
        first_runtime = f"the index of {where} {why}; it cannot be proven inside {_fmt_range(0, size_r[0] - 1)}"
    if runtime:
        return AccessVerdict("runtime", first_runtime + " (checked at run time)", runtime[0], None,
                             access.tensor.shape[runtime[0]], tuple(runtime))
    return AccessVerdict("safe", f"every index of the access to '{name}' is inside the tensor")
