"""Bounds proofs over runtime sizes: an index stays inside a dimension whatever the sizes are.

A shape-polymorphic variant (docs/specialization.md) has tensor sizes that are runtime symbols (``x_size0``),
and loops whose trip counts are formulas of them (``floor(x_size0/512)``). The interval analysis of
:mod:`trnlang.ir.bounds` needs numbers, so on its own it places a run-time check on every access to such a
dimension, and a checked access is never fused with its consumer. This module proves what the kernel's own
structure guarantees, for every value of the sizes:

- ``floor(E/k)`` and ``ceiling(E/k)`` of an integer affine ``E`` over sizes (``k`` a positive integer) become
  *quotient atoms* ``q``; a proof may use the atom's range (from ``E``'s) or the identity
  ``k*q = E - m`` / ``k*q = E + m`` with the remainder ``m`` in ``[0, k - 1]``. ``Mod(E, k)`` is an atom in
  ``[0, k - 1]``.
- Loop variables are eliminated innermost first, as for numeric bounds: a variable whose coefficient pushes
  towards the wanted extreme is replaced by its last value ``stop - 1`` (a formula of the sizes), otherwise
  by ``start``. Axes and loops with numeric ranges take their numeric extremes.
- A mask conjunct ``D < 0`` (``D`` affine) bounds the index ``e`` through ``e = D + (e - D)`` (or
  ``e = -D + (e + D)``), as :func:`trnlang.ir.bounds.mask_bounds` does with numbers.

The result is affine in sizes and atoms; it is proven non-negative when its minimum over the box (sizes in
``[0, 2^62]``, atoms in their ranges, for each way of expanding the quotient atoms) is. Every step
over-approximates, so a proof holds for every launch of the variant; anything outside these forms is simply
not proven (the access keeps its run-time check).

Example:
    >>> from trnlang.ir.nodes import Loop, sym
    >>> n, i, a = sym("x_size0"), sym("i0"), sym("_a1")
    >>> loops = (Loop("affine", i, 0, sympy.floor(n / 512), 1, []),)
    >>> rng = {a: (0, 511)}
    >>> inside(512 * i + a, n, None, rng, loops)             # full 512-element chunks of n elements
    True
    >>> inside(512 * i + a + 1, n, None, rng, loops)         # one past: not provable
    False
    >>> tail = 512 * sympy.floor(n / 512) + a                # the ragged last chunk, masked
    >>> inside(tail, n, tail < n, rng, ()), inside(tail, n, None, rng, ())
    (True, False)
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
from fractions import Fraction
from typing import Any, Iterator, Mapping, Sequence

import sympy
from sympy.core.relational import GreaterThan, LessThan, Relational, StrictGreaterThan, StrictLessThan

from trnlang.ir.bounds import AffineParts, _aff_add, affine_parts
from trnlang.ir.nodes import Loop, SizeSym

__all__ = ["inside", "proof_scope"]

Affine = tuple[Fraction, dict[Any, Fraction]]
_SIZE_MAX = 2**62
_MAX_EXPANSIONS = 4  # quotient atoms tried both ways (2^4 combinations at most)


class _NotLinear(Exception):
    pass


class _Atoms:
    """The quotient / remainder atoms of one proof (one symbol per distinct ``floor``, ``ceiling``, ``Mod``)."""

    def __init__(self) -> None:
        self.by_expr: dict[Any, sympy.Symbol] = {}
        self.box: dict[Any, tuple[Fraction, Fraction]] = {}
        # quotient atom -> (E, k, sign): k * q = E - sign * m, m in [0, k - 1]
        self.quot: dict[Any, tuple[Affine, int, int]] = {}

    def atom(self, node: Any) -> sympy.Symbol:
        s = self.by_expr.get(node)
        if s is not None:
            return s
        if isinstance(node, sympy.Mod):
            k = node.args[1]
            if not (k.is_Integer and int(k) > 0):
                raise _NotLinear
            s = sympy.Dummy("m", integer=True)
            self.box[s] = (Fraction(0), Fraction(int(k) - 1))
        else:
            arg = linear(node.args[0], self)
            k = math.lcm(arg[0].denominator, *(c.denominator for c in arg[1].values()))
            e = (arg[0] * k, {v: c * k for v, c in arg[1].items()})
            lo, hi = _box(e, self.box, True), _box(e, self.box, False)
            s = sympy.Dummy("q", integer=True)
            if isinstance(node, sympy.floor):
                self.box[s] = (Fraction(math.floor(lo / k)), Fraction(math.floor(hi / k)))
                self.quot[s] = (e, k, 1)
            else:
                self.box[s] = (Fraction(math.ceil(lo / k)), Fraction(math.ceil(hi / k)))
                self.quot[s] = (e, k, -1)
        self.by_expr[node] = s
        return s

    def parts(self, node: Any) -> AffineParts | None:
        """The atom rule of :func:`linear`: a quotient / remainder node is one atom, anything else not affine."""
        if isinstance(node, (sympy.floor, sympy.ceiling, sympy.Mod)):
            return Fraction(0), ((self.atom(node), Fraction(1)),)
        return None


def linear(expr: Any, atoms: _Atoms) -> Affine:
    """``expr`` as an affine form over its symbols and atoms (raises ``_NotLinear`` for anything else)."""
    f = _parts(sympy.sympify(expr), atoms)
    if f is None:
        raise _NotLinear
    return f[0], dict(f[1])


def _parts(e: Any, atoms: _Atoms) -> AffineParts | None:
    """:func:`trnlang.ir.bounds.affine_parts` with ``floor``/``ceiling``/``Mod`` nodes as atoms of this proof."""
    return affine_parts(e, lambda a: _parts(a, atoms), atoms.parts)


def _sym_box(s: Any, box: Mapping[Any, tuple[Fraction, Fraction]]) -> tuple[Fraction, Fraction] | None:
    if s in box:
        return box[s]
    if isinstance(s, SizeSym):
        return Fraction(0), Fraction(_SIZE_MAX)
    return None


def _box(a: Affine, box: Mapping[Any, tuple[Fraction, Fraction]], low: bool) -> Fraction:
    """The minimum (``low``) or maximum of ``a`` over independent symbol ranges (``_NotLinear``: unranged)."""
    v = a[0]
    for s, c in a[1].items():
        r = _sym_box(s, box)
        if r is None:
            raise _NotLinear
        v += c * (r[0] if (c > 0) == low else r[1])
    return v


def _extreme(a: Affine, loops: Sequence[Loop], ranges: Mapping[Any, Any], atoms: _Atoms, high: bool) -> Affine:
    """An upper (``high``) or lower bound of ``a`` affine in sizes and atoms: loop variables eliminated
    innermost first (``stop - 1`` / ``start``), numerically ranged symbols at their extremes."""
    cur = a
    for lp in reversed(loops):
        c = cur[1].get(lp.var)
        if c is None:
            continue
        step = sympy.sympify(lp.step)
        if not (step.is_Integer and int(step) > 0):
            raise _NotLinear
        sub = linear(sympy.sympify(lp.stop) - 1, atoms) if (c > 0) == high else linear(lp.start, atoms)
        coeffs = dict(cur[1])
        del coeffs[lp.var]
        cur = _aff_add((cur[0], coeffs), sub, c)
    const, coeffs = cur[0], {}
    for s, c in cur[1].items():
        r = ranges.get(s)
        if r is not None and not isinstance(s, SizeSym):
            const += c * (r[1] if (c > 0) == high else r[0])
        elif isinstance(s, SizeSym) or s in atoms.box:
            coeffs[s] = c
        else:
            raise _NotLinear  # a loop variable of no enclosing loop, a gather value, ...
    return const, coeffs


def _nonneg(a: Affine, atoms: _Atoms) -> bool:
    """``a >= 0`` for every value of the sizes: some expansion of its quotient atoms has a non-negative
    minimum over the box."""
    quots = [s for s in a[1] if s in atoms.quot][:_MAX_EXPANSIONS]
    for pick in itertools.product((False, True), repeat=len(quots)):
        cur = a
        box = dict(atoms.box)
        for q, expand in zip(quots, pick):
            if not expand or q not in cur[1]:
                continue
            e, k, sign = atoms.quot[q]
            m = sympy.Dummy("r", integer=True)
            box[m] = (Fraction(0), Fraction(k - 1))
            c = cur[1][q]
            coeffs = dict(cur[1])
            del coeffs[q]
            # q = (E - sign * m) / k
            cur = _aff_add(_aff_add((cur[0], coeffs), e, c / k), (Fraction(0), {m: Fraction(1)}), -sign * c / k)
        try:
            if _box(cur, box, True) >= 0:
                return True
        except _NotLinear:
            continue
    return False


def _mask_bounds(idx: Affine, mask: Any, loops: Sequence[Loop], ranges: Mapping[Any, Any], atoms: _Atoms
                 ) -> tuple[list[Affine], list[Affine]]:
    """Upper and lower bounds of ``idx`` implied by the linear conjuncts of ``mask``."""
    ups: list[Affine] = []
    lows: list[Affine] = []
    conj = list(mask.args) if isinstance(mask, sympy.And) else [mask]
    for c in conj:
        if not isinstance(c, Relational):
            continue
        if isinstance(c, (StrictLessThan, LessThan)):
            d_expr, strict = c.lhs - c.rhs, isinstance(c, StrictLessThan)
        elif isinstance(c, (StrictGreaterThan, GreaterThan)):
            d_expr, strict = c.rhs - c.lhs, isinstance(c, StrictGreaterThan)
        else:
            continue
        try:
            d = linear(d_expr, atoms)  # d <= top (d < 0 is d <= -1 only for an integer-valued d)
            integral = d[0].denominator == 1 and all(c.denominator == 1 for c in d[1].values())
            top = Fraction(-1 if strict and integral else 0)
            ups.append(_aff_add(_extreme(_aff_add(idx, d, Fraction(-1)), loops, ranges, atoms, True), (top, {})))
            lows.append(_aff_add(_extreme(_aff_add(idx, d), loops, ranges, atoms, False), (-top, {})))
        except _NotLinear:
            continue
    return ups, lows


#: The proofs of the current :func:`proof_scope` (None: outside one, nothing is remembered).
_PROOFS: contextvars.ContextVar[dict[Any, bool] | None] = contextvars.ContextVar("trn_proofs", default=None)


@contextlib.contextmanager
def proof_scope() -> Iterator[None]:
    """Remember the results of :func:`inside` until the block ends.

    One compilation asks the same question many times: a load and a store with the same index pattern, and the
    verifier's second run after the passes (``run_pipeline``). A result depends only on the question (index, size,
    mask, ranges, loop bounds), so it is kept for the scope; nothing outlives it (a fresh process pays the same as a
    second kernel of this one).

    Example:
        >>> from trnlang.ir.nodes import sym
        >>> n, a = sym("x_size0"), sym("_a0")
        >>> with proof_scope():
        ...     inside(a, n, a < n, {a: (0, 127)}, ()), inside(a, n, a < n, {a: (0, 127)}, ())
        (True, True)
    """
    token = _PROOFS.set({})
    try:
        yield
    finally:
        _PROOFS.reset(token)


def inside(idx: Any, size: Any, mask: Any, ranges: Mapping[Any, Any], loops: Sequence[Loop]) -> bool:
    """Whether ``0 <= idx <= size - 1`` holds for every value of the runtime sizes, wherever ``mask`` holds.

    ``ranges``: numeric ranges of axes, program ids and constant loops; ``loops``: the enclosing loop nest,
    outer to inner (their bounds may be formulas of the sizes). Inside a :func:`proof_scope`, a question asked
    before is answered from memory.
    """
    memo = _PROOFS.get()
    if memo is None:
        return _inside(idx, size, mask, ranges, loops)
    key = (idx, size, mask, frozenset(ranges.items()), tuple((lp.var, lp.start, lp.stop, lp.step) for lp in loops))
    got = memo.get(key)
    if got is None:
        got = memo[key] = _inside(idx, size, mask, ranges, loops)
    return got


def _inside(idx: Any, size: Any, mask: Any, ranges: Mapping[Any, Any], loops: Sequence[Loop]) -> bool:
    """:func:`inside` without the memory; the cheap bounds first, the mask's only when they do not suffice."""
    atoms = _Atoms()
    masked = mask is not None and mask is not True and mask is not sympy.true
    try:
        e = linear(idx, atoms)
        low = _extreme(e, loops, ranges, atoms, False)
    except _NotLinear:
        return False
    got: list[tuple[list[Affine], list[Affine]]] = []

    def by_mask() -> tuple[list[Affine], list[Affine]]:
        if not got:
            got.append(_mask_bounds(e, mask, loops, ranges, atoms) if masked else ([], []))
        return got[0]

    if not (_nonneg(low, atoms) or any(_nonneg(lo, atoms) for lo in by_mask()[1])):
        return False
    if masked and any(isinstance(c, StrictLessThan) and c.lhs == idx and c.rhs == size
                      for c in (mask.args if isinstance(mask, sympy.And) else (mask,))):
        return True  # the mask is ``idx < size`` itself
    try:
        top = _aff_add(linear(size, atoms), (Fraction(-1), {}))
        up = _extreme(e, loops, ranges, atoms, True)
    except _NotLinear:
        return False
    return any(_nonneg(_aff_add(top, u, Fraction(-1)), atoms) for u in (up, *by_mask()[0]))
