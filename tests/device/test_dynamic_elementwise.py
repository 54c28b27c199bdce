"""Flat elementwise launches are shape-polymorphic (issue 15 item 4, docs/specialization.md "Flat launches").

Contiguous elementwise ops (binary, ternary, unary and activations, casting copies, ``cat`` of contiguous runs,
``arange``) run one variant for every element count: the tiles are ``[128, FLAT_W]`` blocks, ``[1, FLAT_W]`` rows,
``[1, FLAT_TAIL]`` chunks and one masked ``[1, FLAT_TAIL]`` tile, and only the loop trip counts are runtime
values. Checked here against torch's CPU kernels over sizes 0, 1, ragged tails and every tile boundary; the
compile counters stay flat over changing sizes; the variant's accesses are proven in bounds for every size
(no run-time checks, so the loads fuse with the arithmetic), and an index one past the end is not.
"""

from __future__ import annotations

import random

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang as trn
from stdlib_kernels.elementwise import pointwise as P
from trnlang.ir.nodes import Loop, sym
from trnlang.ir.parser import parse_kernel
from trnlang.ir.symbounds import inside
from trnlang.passes import plan_lowering

W, TAIL = P.FLAT_W, P.FLAT_TAIL


@pytest.fixture(autouse=True, scope="module")
def _keep_fast_lanes():
    """These tests run same-shape ops at many sizes, each making a fast lane (at most ``MAX_LANES`` per op):
    put the lane tables back afterwards, so tests that expect to make a lane still can."""
    from trnlang.device import fastlane

    saved = [(t, dict(t)) for t in fastlane._TABLES]
    yield
    for t, old in saved:
        t.clear()
        t.update(old)
#: sizes on every boundary of the flat tiles: empty, one element, the tail chunks, the rows, the 128-row blocks
EDGES = [0, 1, 2, TAIL - 1, TAIL, TAIL + 1, W - 1, W, W + 1, W + TAIL + 3, 128 * W - 1, 128 * W, 128 * W + 1,
         128 * W + 5 * W + 7]


def _ops(x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """The ops under test on (CPU or trn) operands of one shape."""
    return {
        "add": x + y, "sub_alpha": torch.sub(x, y, alpha=0.5), "mul_scalar": x * 2.5, "rsub": 1.0 - x,
        "gt": x > y, "maximum": torch.maximum(x, y), "where": torch.where(x > 0, x, y), "clamp": x.clamp(-0.5, 0.5),
        "lerp": torch.lerp(x, y, 0.3), "addcmul": torch.addcmul(x, x, y, value=0.5), "exp": torch.exp(x),
        "gelu": torch.nn.functional.gelu(x), "silu_bw": torch.ops.aten.silu_backward(y, x), "isnan": torch.isnan(x),
        "to_bf16": x.to(torch.bfloat16), "to_i32": (x * 8).to(torch.int32).to(torch.float32),
        "cat": torch.cat([x, y]), "add_": x.clone().add_(y),
    }


def _check(shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    x, y = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    want = _ops(x, y)
    got = _ops(x.to("trn"), y.to("trn"))
    for k, w in want.items():
        assert got[k].device.type == "trn", k
        torch.testing.assert_close(got[k].cpu(), w, rtol=1e-5, atol=1e-5, msg=k)


@pytest.mark.parametrize("n", EDGES)
def test_flat_ops_match_torch_at_every_tile_edge(n: int) -> None:
    _check((n,))


@pytest.mark.parametrize("shape", [(2, 128), (129, 128), (300, 256), (1, 7, 768), (3, 70, 128), (2, 1, 640)])
def test_row_launches_of_contiguous_tensors_match_torch(shape: tuple[int, ...]) -> None:
    """2-D / 3-D tensors with rows of at least ``ROWS_MIN_W`` run as row launches on the tensors themselves."""
    assert shape[-1] >= P.ROWS_MIN_W
    _check(shape)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3))
def test_flat_ops_match_torch_over_shapes(shape: list[int]) -> None:
    """Any contiguous shape is one run of elements (2-D and 3-D ones too)."""
    _check(tuple(shape))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 3 * W), st.sampled_from([torch.int64, torch.int32, torch.float32]), st.integers(-5, 5))
def test_arange_matches_torch(n: int, dtype: torch.dtype, start: int) -> None:
    torch.testing.assert_close(torch.arange(start, start + n, device="trn", dtype=dtype).cpu(),
                               torch.arange(start, start + n, dtype=dtype))


def _specializations() -> dict[str, int]:
    return {k: v["compiles"] + v["disk_hits"] for k, v in trn.compile_stats()["kernels"].items()}


def test_compile_count_stays_flat_over_sizes() -> None:
    """20 random sizes below 1 MiB (plus the tile edges): after the first three sizes no kernel of these ops
    specializes again (a size of 1 is a constant; every other size shares the variants made for the first ones).
    Contiguous ``[1, T, 256]`` activations over 8 token counts likewise (row launches, the width keyed; under
    1 MiB, as every stdlib launch of 1 MiB or more is keyed exactly)."""
    rnd = random.Random(15)
    sizes = [rnd.randrange(2, P.FLAT_EXACT_MIN_BYTES // 8) for _ in range(20)] + [s for s in EDGES if s > 1]

    def flat_ops(n: int) -> None:
        x, y = torch.randn(n, device="trn"), torch.randn(n, device="trn")
        _ = (x + y, x * 3.0, torch.where(x > 0, x, y), torch.exp(x), torch.empty(n, dtype=torch.bfloat16,
             device="trn").copy_(x), torch.cat([x, y]), torch.arange(n, device="trn"))

    def row_ops(t: int) -> None:
        x = torch.randn(1, t, 256, device="trn")
        _ = (x * 0.5, torch.nn.functional.gelu(x), x + x[:, :1], torch.where(x > 0, x, 0.0))

    trn.reset_compile_stats()
    for n in sizes[:3]:
        flat_ops(n)
    for t in (2, 300, 777):
        row_ops(t)
    warm = _specializations()
    for n in sizes[3:]:
        flat_ops(n)
    for t in [3, 17, 128, 129, 250, 513, 1000, 1023]:  # under 1 MiB (from there launches are keyed exactly)
        row_ops(t)
    after = _specializations()
    mine = ("elementwise", "ternary", "ew", "cast_copy", "ramp", "move3")  # (not rng: randn's own kernel)
    grew = {k: (warm.get(k, 0), v) for k, v in after.items() if k in mine and v != warm.get(k, 0)}
    assert not grew, grew
    assert {"elementwise", "ternary", "ew", "cast_copy", "ramp"} <= set(after), after


def test_the_flat_variant_needs_no_runtime_checks() -> None:
    """The flat add's accesses are proven inside the tensors for every size: no run-time check, so the loads
    and the add fuse into the store (as in the exact kernels)."""
    n = 3 * W + 17
    x, y, out = (torch.randn(n) for _ in range(3))
    scal = (False, False)
    text = P.elementwise_flat.ir(x, y, None, out, "add", scal, "f32", True)
    assert "x_size0" in text  # a runtime size
    k = parse_kernel(text)
    plan = plan_lowering(k, (1,))
    assert not plan.access_checks and not plan.region_checks
    assert plan.fused


def test_symbolic_bounds_prove_tiles_and_reject_one_past_the_end() -> None:
    n, i, r, a0, a1 = sym("x_size0"), sym("i0"), sym("i1"), sym("_a0"), sym("_a1")
    blocks = Loop("affine", i, 0, sympy.floor(n / (128 * W)), 1, [])
    rows = Loop("affine", r, 0, sympy.floor(n / W) - 128 * sympy.floor(n / (128 * W)), 1, [])
    axes = {a0: (0, 127), a1: (0, W - 1)}
    block = (i * 128 + a0) * W + a1
    row = 128 * W * sympy.floor(n / (128 * W)) + r * W + a1
    assert inside(block, n, None, axes, (blocks,))
    assert inside(row, n, None, axes, (rows,))
    assert not inside(block + 1, n, None, axes, (blocks,))
    assert not inside(row + W, n, None, axes, (rows,))
    assert not inside(block, n - 1, None, axes, (blocks,))
    tail = TAIL * sympy.floor(n / TAIL) + a1
    assert inside(tail, n, tail < n, {a1: (0, TAIL - 1)}, ())
    assert not inside(tail, n, tail < n + 1, {a1: (0, TAIL - 1)}, ())
    assert not inside(tail, n, None, {a1: (0, TAIL - 1)}, ())
    flipped = n - 1 - (128 * i + a0)  # a flip of full 128-row tiles
    assert inside(flipped, n, None, {a0: (0, 127)}, (Loop("affine", i, 0, sympy.floor(n / 128), 1, []),))
    assert not inside(flipped, n, None, {a0: (0, 127)}, (Loop("affine", i, 0, sympy.ceiling(n / 128), 1, []),))


def test_an_access_past_a_runtime_size_still_raises() -> None:
    """The proof does not hide real errors: a kernel reading one element past a runtime size is checked and
    raises BoundsError."""
    import trnlang.language as tl

    @trn.kernel
    def shifted(x, out):
        n = out.shape[0]
        for idx, m in P.flat_tiles(n):
            tl.store(out[idx], tl.load(x[idx + 1], mask=m), mask=m)

    x = torch.randn(3 * W + 5)
    out = torch.zeros(3 * W + 5)
    with pytest.raises(trn.BoundsError, match="test_dynamic_elementwise"):
        shifted(x, out)


@pytest.mark.parametrize("c", [1, 2, 63, 511, 512, 513, 1025, 1500])
def test_scans_over_a_runtime_length_match_torch(c: int) -> None:
    """``cumsum`` / ``cummax`` / a bool count along the last dim: 512-wide chunks and one masked chunk."""
    g = torch.Generator().manual_seed(c)
    x = torch.randn(3, c, generator=g)
    xt = x.to("trn")
    torch.testing.assert_close(xt.cumsum(1).cpu(), x.cumsum(1), rtol=1e-4, atol=1e-4)
    v, i = xt.cummax(1)
    v0, i0 = x.cummax(1)
    torch.testing.assert_close(v.cpu(), v0)
    torch.testing.assert_close(i.cpu(), i0)
    torch.testing.assert_close((xt > 0).cumsum(1).cpu(), (x > 0).cumsum(1))


def test_a_growing_cumsum_compiles_once() -> None:
    """A decode-style ``cumsum`` over positions 2..40 (attention-mask positions): one variant of ``row_scan``."""
    trn.reset_compile_stats()
    for t in range(2, 41):
        m = torch.ones(1, t, dtype=torch.int64, device="trn")
        assert m.cumsum(1)[0, -1].item() == t
    k = trn.compile_stats()["kernels"].get("row_scan", {})
    assert k.get("compiles", 0) + k.get("disk_hits", 0) <= 1, k
