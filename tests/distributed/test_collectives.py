"""Every collective on ``trn`` tensors equals the same collective on CPU tensors through gloo.

Two real processes in one ``cpu:gloo,trn:trn`` group (``TRN_FALLBACK=error``): each collective runs once on
``trn`` tensors (the ``trn`` backend) and once on CPU tensors with the same values (torch's gloo), for
fp32, bf16, fp16, int64 and bool; results (or the error raised) must match exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.distributed import _spawn

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool)
OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX")


def _data(rank: int, n: int, dtype: torch.dtype, device: str, salt: int = 0) -> torch.Tensor:
    """Rank-dependent values every dtype can hold exactly (small integers, halves)."""
    i = torch.arange(n, dtype=torch.float64) + salt
    if dtype == torch.bool:
        v = ((i + rank) % 3) != 0
    elif dtype.is_floating_point:
        v = (i - n / 2) * (rank + 1) / 2
    else:
        v = (i - 3) * (rank + 2)
    return v.to(dtype).to(device)


def _host(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.cpu().clone()
    if isinstance(x, (list, tuple)):
        return [_host(e) for e in x]
    return x


_Cases = dict[str, Callable[[], Any]]  # case name -> a function running it
_Data = Callable[..., torch.Tensor]  # d(n=8, salt=0): this rank's values on the case's device
_Empty = Callable[[int], torch.Tensor]  # empty(n): zeros on the case's device


def _cases(rank: int, world: int, dtype: torch.dtype, dev: str) -> _Cases:
    """name -> a function running one collective on ``dev`` tensors and returning its outputs."""
    def d(n: int = 8, salt: int = 0) -> torch.Tensor:
        return _data(rank, n, dtype, dev, salt)

    def empty(n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=dtype, device=dev)

    return {**_reduction_cases(rank, world, d, empty), **_exchange_cases(rank, world, d, empty),
            **_coalesced_cases(rank, world, d, empty)}


def _reduction_cases(rank: int, world: int, d: _Data, empty: _Empty) -> _Cases:
    """all_reduce (each op, and async), broadcast, reduce, the all_gathers and reduce_scatters."""
    import torch.distributed as dist

    R = dist.ReduceOp

    def all_reduce(op: str, async_op: bool = False) -> Callable[[], Any]:
        def f() -> Any:
            t = d()
            w = dist.all_reduce(t, op=getattr(R, op), async_op=async_op)
            if async_op:
                w.wait()
            return t
        return f

    def broadcast() -> Any:
        t = d()
        dist.broadcast(t, src=1)
        return t

    def reduce() -> Any:
        t = d()
        dist.reduce(t, dst=0, op=R.SUM)
        return t if rank == 0 else None

    def all_gather() -> Any:
        out = [empty(4) for _ in range(world)]
        dist.all_gather(out, d(4))
        return out

    def all_gather_into_tensor() -> Any:
        out = empty(4 * world)
        w = dist.all_gather_into_tensor(out, d(4), async_op=True)
        w.wait()
        return out

    def reduce_scatter_tensor() -> Any:
        out = empty(4)
        dist.reduce_scatter_tensor(out, d(4 * world), op=R.SUM)
        return out

    def reduce_scatter() -> Any:
        out = empty(3)
        dist.reduce_scatter(out, [d(3, salt=k) for k in range(world)], op=R.MAX)
        return out

    cases: _Cases = {f"all_reduce_{op}": all_reduce(op) for op in OPS}
    cases["all_reduce_SUM_async"] = all_reduce("SUM", async_op=True)
    for f in (broadcast, reduce, all_gather, all_gather_into_tensor, reduce_scatter_tensor, reduce_scatter):
        cases[f.__name__] = f
    return cases


def _exchange_cases(rank: int, world: int, d: _Data, empty: _Empty) -> _Cases:
    """all_to_all (even, uneven, lists), gather, scatter, point to point."""
    import torch.distributed as dist

    other = 1 - rank

    def all_to_all_single() -> Any:
        out = empty(8)
        dist.all_to_all_single(out, d(8))
        return out

    def all_to_all_single_uneven() -> Any:
        ins, outs = [[1, 3], [2, 4]][rank], [[1, 2], [3, 4]][rank]
        out = empty(sum(outs))
        dist.all_to_all_single(out, d(sum(ins)), output_split_sizes=outs, input_split_sizes=ins)
        return out

    def all_to_all() -> Any:
        out = [empty(2) for _ in range(world)]
        dist.all_to_all(out, [d(2, salt=k) for k in range(world)])
        return out

    def gather() -> Any:
        out = [empty(4) for _ in range(world)] if rank == 1 else None
        dist.gather(d(4), out, dst=1)
        return out

    def scatter() -> Any:
        out = empty(4)
        dist.scatter(out, [d(4, salt=k) for k in range(world)] if rank == 0 else None, src=0)
        return out

    def send_recv() -> Any:
        if rank == 0:
            dist.send(d(5), dst=1)
            return None
        out = empty(5)
        dist.recv(out, src=0)
        return out

    def isend_irecv() -> Any:
        out = empty(6)
        ops = [dist.P2POp(dist.isend, d(6), other), dist.P2POp(dist.irecv, out, other)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return out

    return {f.__name__: f for f in (all_to_all_single, all_to_all_single_uneven, all_to_all, gather, scatter, send_recv,
                                   isend_irecv)}


def _coalesced_cases(rank: int, world: int, d: _Data, empty: _Empty) -> _Cases:
    """Coalesced collectives (``_coalescing_manager``, ``all_gather_coalesced``) and the barrier."""
    import torch.distributed as dist

    def coalesced_all_reduce() -> Any:
        ts = [d(3), d(5, salt=1)]
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        return ts

    def coalesced_all_gather_into_tensor() -> Any:
        outs = [empty(2 * world), empty(3 * world)]
        with dist._coalescing_manager(async_ops=True) as cm:
            dist.all_gather_into_tensor(outs[0], d(2))
            dist.all_gather_into_tensor(outs[1], d(3, salt=1))
        cm.wait()
        return outs

    def coalesced_reduce_scatter_tensor() -> Any:
        outs = [empty(2), empty(3)]
        with dist._coalescing_manager(async_ops=True) as cm:
            dist.reduce_scatter_tensor(outs[0], d(2 * world))
            dist.reduce_scatter_tensor(outs[1], d(3 * world, salt=1))
        cm.wait()
        return outs

    def all_gather_coalesced() -> Any:
        outs = [[empty(2), empty(3)] for _ in range(world)]
        dist.all_gather_coalesced(outs, [d(2), d(3, salt=1)])
        return outs

    def barrier() -> Any:
        dist.barrier()
        return "passed"

    return {f.__name__: f for f in (coalesced_all_reduce, coalesced_all_gather_into_tensor,
                                   coalesced_reduce_scatter_tensor, all_gather_coalesced, barrier)}


def collectives_worker(rank: int, world: int) -> dict[str, Any]:
    """Each case on trn and on CPU tensors: ``{"<dtype>/<case>": {"trn": out, "cpu": out}}``."""
    import warnings

    warnings.simplefilter("ignore", FutureWarning)  # torch's deprecation notes on the *_tensor names
    out: dict[str, Any] = {}
    for dtype in DTYPES:
        for dev in ("trn", "cpu"):
            for name, fn in _cases(rank, world, dtype, dev).items():
                try:
                    got: Any = _host(fn())
                except Exception as e:  # the error is the result compared (e.g. AVG on integers)
                    got = f"raised {type(e).__name__}: {str(e).splitlines()[0]}"
                out.setdefault(f"{str(dtype)[6:]}/{name}", {})[dev] = got
    out["_inline"] = _trace_gloo_calls(rank)
    out["_front"] = _front_door(rank)
    return out


def _front_door(rank: int) -> dict[str, Any]:
    """Per path, whether torch's dispatcher saw ``c10d::allreduce_`` (the profiler records every op it
    dispatches) and the value: ``dist.all_reduce`` on trn (the front door, checked and unchecked, sync and
    async), torch's own ``all_reduce`` on trn (dispatcher -> trnlang's PrivateUse1 kernel) and on CPU."""
    import os

    import torch.distributed as dist
    from torch.profiler import profile

    torch_all_reduce = dist.all_reduce.__wrapped__  # type: ignore[attr-defined]
    out: dict[str, Any] = {}

    def one(name: str, dev: str, fn: Callable[[torch.Tensor], Any], check: str = "1") -> None:
        os.environ["TRN_DIST_CHECK"] = check
        t = _data(rank, 8, torch.float32, dev)
        with profile() as prof:
            w = fn(t)
            if w is not None:
                w.wait()
        os.environ["TRN_DIST_CHECK"] = "1"
        out[name] = (any(e.name == "c10d::allreduce_" for e in prof.events()), t.cpu())

    one("front", "trn", dist.all_reduce)
    one("front_nocheck", "trn", dist.all_reduce, "0")
    one("front_async", "trn", lambda t: dist.all_reduce(t, async_op=True))
    one("front_async_nocheck", "trn", lambda t: dist.all_reduce(t, async_op=True), "0")
    one("torch_trn", "trn", torch_all_reduce)
    one("torch_cpu", "cpu", torch_all_reduce)
    one("cpu", "cpu", dist.all_reduce)
    return out


#: (name, numel, dtype, op) of the all-reduces :func:`_trace_gloo_calls` runs in this order, each once
_SEQUENCE = [("f32_sum_small", 8, torch.float32, "SUM"), ("i64_max_small", 8, torch.int64, "MAX"),
             ("bf16_product_small", 8, torch.bfloat16, "PRODUCT"),
             ("f32_max_small", 8, torch.float32, "MAX"),  # NaN rules: gloo's
             ("f32_avg_small", 8, torch.float32, "AVG"), ("f32_sum_32KiB", 8192, torch.float32, "SUM"),
             ("f32_sum_32KiB_again", 8192, torch.float32, "SUM"), ("i64_sum_40KiB_after", 5120, torch.int64, "SUM"),
             ("bf16_sum_24KiB_fits", 12288, torch.bfloat16, "SUM"), ("f32_sum_80KiB", 5 * 2**12, torch.float32, "SUM"),
             ("f32_sum_80KiB_again", 5 * 2**12, torch.float32, "SUM"),
             ("f32_sum_32KiB_after_80", 8192, torch.float32, "SUM"),
             ("f32_sum_1MiB", 2**18, torch.float32, "SUM"), ("f32_sum_1MiB_2", 2**18, torch.float32, "SUM"),
             ("f32_sum_1MiB_3", 2**18, torch.float32, "SUM"), ("f32_sum_1MiB_4", 2**18, torch.float32, "SUM"),
             ("f32_sum_1MiB_5", 2**18, torch.float32, "SUM"), ("f32_sum_512KiB_after", 2**17, torch.float32, "SUM"),
             ("f32_max_small_after", 8, torch.float32, "MAX"), ("f32_sum_1MiB_6", 2**18, torch.float32, "SUM")]


def _trace_gloo_calls(rank: int) -> dict[str, Any]:
    """Which gloo operations each checked all-reduce on trn posts, in order: ``G`` the agreement frame's
    all-gather, ``R`` an all-reduce (the real one or speculative scratch), and the value it leaves."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import ProcessGroupGloo

    from trnlang.distributed import c10d

    world: Any = dist.group.WORLD
    c10d._group_of(world.boxed())[0].forget()  # every rank at this point: the same history
    calls: list[str] = []
    gloo: Any = ProcessGroupGloo
    orig = gloo.allreduce, gloo._allgather_base

    def allreduce(self: Any, *args: Any) -> Any:
        calls.append("R")
        return orig[0](self, *args)

    def allgather(self: Any, *args: Any) -> Any:
        calls.append("G")
        return orig[1](self, *args)

    gloo.allreduce, gloo._allgather_base = allreduce, allgather
    out: dict[str, Any] = {}
    try:
        for name, n, dtype, op in _SEQUENCE:
            before = len(calls)
            t = _data(rank, n, dtype, "trn")
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            out[name] = ("".join(calls[before:]), t.cpu())
    finally:
        gloo.allreduce, gloo._allgather_base = orig
    return out


CASE_NAMES = sorted(_cases(0, 2, torch.float32, "cpu"))


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return _spawn.run("tests.distributed.test_collectives:collectives_worker", 2, timeout=400)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


@pytest.mark.parametrize("dtype", [str(d)[6:] for d in DTYPES])
@pytest.mark.parametrize("case", CASE_NAMES)
def test_trn_equals_gloo_on_cpu(results: list[dict[str, Any]], dtype: str, case: str) -> None:
    for rank, res in enumerate(results):
        r = res[f"{dtype}/{case}"]
        assert _same(r["trn"], r["cpu"]), (rank, r)


def test_values_are_the_reductions(results: list[dict[str, Any]]) -> None:
    """The reference itself is right (so the comparisons above compare something real)."""
    a = [_data(r, 8, torch.float32, "cpu") for r in range(2)]
    for res in results:
        assert torch.equal(res["float32/all_reduce_SUM"]["trn"], a[0] + a[1])
        assert torch.equal(res["float32/all_reduce_AVG"]["trn"], (a[0] + a[1]) / 2)
        assert torch.equal(res["float32/all_reduce_MAX"]["trn"], torch.maximum(a[0], a[1]))
        assert torch.equal(res["float32/all_gather_into_tensor"]["trn"],
                           torch.cat([_data(r, 4, torch.float32, "cpu") for r in range(2)]))
        assert torch.equal(res["float32/broadcast"]["trn"], a[1])
        assert res["int64/all_reduce_AVG"]["trn"].startswith("raised"), "gloo's AVG divides in place: ints raise"
    b = [_data(r, 8, torch.bool, "cpu") for r in range(2)]
    assert torch.equal(results[0]["bool/all_reduce_SUM"]["trn"], b[0] | b[1])
    assert torch.equal(results[1]["bfloat16/send_recv"]["trn"], _data(0, 5, torch.bfloat16, "cpu"))


def test_all_reduce_front_door(results: list[dict[str, Any]]) -> None:
    """``dist.all_reduce`` of a trn tensor skips torch's dispatcher (trnlang's front door, a row of the torch
    patch table); torch's own function still reaches trnlang's kernel through it, as C++ callers (DDP) do;
    CPU tensors take torch's path. Every path gives the reduction."""
    a = [_data(r, 8, torch.float32, "cpu") for r in range(2)]
    for res in results:
        got = res["_front"]
        dispatched = {name: seen for name, (seen, _) in got.items()}
        assert dispatched == {"front": False, "front_nocheck": False, "front_async": False,
                              "front_async_nocheck": False, "torch_trn": True, "torch_cpu": True,
                              "cpu": True}, dispatched
        for name, (_, value) in got.items():
            assert torch.equal(value, a[0] + a[1]), (name, value)


def test_what_each_checked_all_reduce_posts(results: list[dict[str, Any]]) -> None:
    """The agreement check's plans (trnlang/distributed/agree.py), seen from gloo: ``G`` = the frame's
    all-gather, ``R`` = an all-reduce. An all-reduce whose result cannot depend on the order rides in the
    frame (``G`` only) when it fits the slot: 1 KiB, or the size of what followed the previous call last time
    (a repeat at first), up to 256 KiB with 2 ranks. Others take the check, then gloo (``GR``). The 4th of a
    run of same all-reduces is predicted: its gloo all-reduce is posted with the check (``RG``, zero-copy);
    a call that breaks the prediction costs a scratch all-reduce of the predicted size first (``RGR``).
    Every value is the reduction."""
    ops = {"sum": torch.add, "max": torch.maximum, "product": torch.mul}
    for res in results:
        got = res["_inline"]
        posted = {name: p for name, (p, _) in got.items()}
        assert posted == {"f32_sum_small": "G", "i64_max_small": "G", "bf16_product_small": "G",
                          "f32_max_small": "GR", "f32_avg_small": "GR", "f32_sum_32KiB": "GR",
                          "f32_sum_32KiB_again": "G", "i64_sum_40KiB_after": "GR", "bf16_sum_24KiB_fits": "G",
                          "f32_sum_80KiB": "GR", "f32_sum_80KiB_again": "G", "f32_sum_32KiB_after_80": "G",
                          "f32_sum_1MiB": "GR", "f32_sum_1MiB_2": "GR", "f32_sum_1MiB_3": "GR",
                          "f32_sum_1MiB_4": "RG", "f32_sum_1MiB_5": "RG", "f32_sum_512KiB_after": "RGR",
                          "f32_max_small_after": "GR", "f32_sum_1MiB_6": "GR"}, posted
        for name, (_, value) in got.items():
            kind, red = name.split("_")[:2]
            dtype = {"f32": torch.float32, "i64": torch.int64, "bf16": torch.bfloat16}[kind]
            a = [_data(r, value.numel(), dtype, "cpu") for r in range(2)]
            want = (a[0] + a[1]) / 2 if red == "avg" else ops[red](a[0], a[1])
            assert torch.equal(value, want), (name, value, want)
