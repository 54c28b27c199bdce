"""The one liveness analysis (``trnlang.ir.liveness``): its rule, and that the verifier, the memory planner and
the JIT's arena read the same intervals."""

from __future__ import annotations

import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from tests.kernels import CASES
from trnlang.ir.liveness import Liveness
from trnlang.ir.nodes import Loop
from trnlang.ir.ops import Op
from trnlang.passes import plan_lowering
from trnlang.passes.plan_memory import _Liveness


@trn.kernel
def scaled_rows(x, w, out):
    """w's tile is loaded once before the loop and read inside it; t lives one iteration."""
    cols = tl.arange(64)[None, :]
    wt = tl.load(w[tl.arange(128)[:, None], cols])
    for i in tl.affine_range(2):
        rows = i * 128 + tl.arange(128)[:, None]
        t = tl.load(x[rows, cols]) * wt
        tl.store(out[rows, cols], t + 1.0)


def _trace():
    return scaled_rows.trace(torch.randn(256, 64), torch.randn(128, 64), torch.empty(256, 64))


def test_a_use_inside_a_later_loop_lives_to_its_end() -> None:
    k = _trace()
    live = Liveness(k)
    loop = next(s for s in k.body if isinstance(s, Loop))
    first, last = live.loop_span[id(loop)]
    wt = next(s for s in k.body if not isinstance(s, Loop)).outs[0]
    uses = live.uses[wt]
    assert uses and max(uses) < last  # read in the middle of the body ...
    assert live.interval(wt) == (live.alloc_pos[wt], last)  # ... yet live to the end of it (next iteration)
    inner = next(s for s in loop.body if not isinstance(s, Loop) and s.op is Op.ALLOC).outs[0]
    lo, hi = live.interval(inner)
    assert first <= lo and hi == max(live.uses[inner]) <= last  # allocated in the body: no extension


def test_at_moves_uses() -> None:
    k = _trace()
    live = Liveness(k)
    wt = next(s for s in k.body if not isinstance(s, Loop)).outs[0]
    end = len(live.instrs) - 1
    assert live.interval(wt, at=lambda p: end if p in live.uses[wt] else p)[1] == end


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planner_verifier_and_arena_agree(case) -> None:
    g = torch.Generator().manual_seed(1)
    args = case.make(200, 64, g)
    k = case.kernel.trace(*args, grid=case.grid(args) if case.grid else (1,))
    live = Liveness(k)
    for rec in _Liveness(k).recs:  # the memory planner's intervals
        assert rec.end == live.interval(rec.buf)[1]
    plan = plan_lowering(k, (1,), debug=True)  # debug: nothing deferred; fusion moves uses to the consumer
    for bid, (lo, hi) in plan.live.items():
        buf = plan.bufs[bid]
        moved = any(id(ins) in plan.fused for ins, _ in plan.buf_refs[bid])
        if not moved:
            assert (lo, hi) == live.interval(buf)
