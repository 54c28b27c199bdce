"""The runtime-size prover (``trnlang.ir.symbounds``) is sound: whatever it proves holds when every size, loop
iteration, axis value and mask is enumerated on small concrete sizes. Random index / mask / loop shapes of the kinds
kernels produce (tiles of ``k`` rows over ``floor``/``ceiling`` trip counts, ragged masked tails, flips, offsets)."""

from __future__ import annotations

from typing import Any

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlang.ir.nodes import Loop, sym
from trnlang.ir.symbounds import inside, proof_scope

N, IV, A = sym("x_size0"), sym("i0"), sym("_a0")


def _stop(kind: str, k: int, c: int) -> Any:
    return {"ceil": sympy.ceiling((N + c) / k), "floor": sympy.floor((N + c) / k), "n": N + c}[kind]


@st.composite
def _case(draw: st.DrawFn) -> tuple[Any, Any, Any, int, Loop]:
    k = draw(st.sampled_from([1, 2, 3, 4, 8]))      # rows per tile
    width = draw(st.integers(1, 8))                   # axis values per tile
    c = draw(st.integers(-2, 2))
    stop = _stop(draw(st.sampled_from(["ceil", "floor", "n"])), k, draw(st.integers(-1, 1)))
    sign = draw(st.sampled_from([1, -1]))
    base = k * IV + A + c
    idx = base if sign == 1 else N - 1 - base
    size = draw(st.sampled_from([N, N + 1, N - 1, 2 * N]))
    bound = draw(st.sampled_from([None, "idx", "base", "both"]))
    off = draw(st.integers(-1, 1))
    mask: Any = {None: None, "idx": idx < N + off, "base": base < N + off,
                 "both": sympy.And(idx < N + off, idx >= 0)}[bound]
    return idx, size, mask, width, Loop("affine", IV, 0, stop, 1, [])


def _holds(idx: Any, size: Any, mask: Any, width: int, loop: Loop, n_max: int = 24) -> bool:
    """Brute force: every accessed index is inside ``[0, size - 1]`` for every size up to ``n_max``."""
    f_idx, f_size, f_stop = (sympy.lambdify((N, IV, A), e, "math") for e in (idx, size, loop.stop))
    f_mask = sympy.lambdify((N, IV, A), mask if mask is not None else sympy.true, "math")
    for n in range(n_max + 1):
        sz = int(f_size(n, 0, 0))
        for i in range(0, int(f_stop(n, 0, 0))):
            for a in range(width):
                if f_mask(n, i, a) and not 0 <= int(f_idx(n, i, a)) <= sz - 1:
                    return False
    return True


@settings(max_examples=120, deadline=None)
@given(_case())
def test_a_proof_holds_for_every_small_size(case: tuple[Any, Any, Any, int, Loop]) -> None:
    idx, size, mask, width, loop = case
    got = inside(idx, size, mask, {A: (0, width - 1)}, (loop,))
    if got:
        assert _holds(idx, size, mask, width, loop), (idx, size, mask, loop.stop)


def test_the_common_tile_shapes_are_proven_and_one_past_is_not() -> None:
    axes = {A: (0, 127)}
    tiles = Loop("affine", IV, 0, sympy.ceiling(N / 128), 1, [])
    row = 128 * IV + A
    with proof_scope():  # answers from the scope's memory are the same answers
        for _ in range(2):
            assert inside(row, N, row < N, axes, (tiles,))
            assert not inside(row, N, None, axes, (tiles,))
            assert not inside(row + 1, N, row < N, axes, (tiles,))
            assert not inside(row, N - 1, row < N, axes, (tiles,))
            assert inside(row, N, sympy.And(row < N, row >= 0), axes, (tiles,))
            assert not inside(row - 1, N, row - 1 < N, axes, (tiles,))  # -1 at i = 0, a = 0
