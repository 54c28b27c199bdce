"""The simulated cost of collectives: the alpha-beta formulas, the recorder on a real 2-process DDP step, and
``trn profile`` of a distributed script showing collective time next to kernel time."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from typing import Any

import pytest
import torch

from tests.distributed import _spawn
from trnlang.distributed import cost


def test_ring_and_tree_formulas() -> None:
    link = cost.INTERCONNECTS["trn2"]
    a, bw = link.latency_s, link.bandwidth_bytes_per_s
    s, n = 8 * 2**20, 8
    assert cost.collective_time_s("all_reduce", s, n, target="trn2") == pytest.approx(2 * (n - 1) * (a + s / n / bw))
    assert cost.collective_time_s("all_reduce", s, n, target="trn2", algorithm="tree") == pytest.approx(
        2 * 3 * (a + s / bw))
    for kind in ("all_gather", "reduce_scatter", "all_to_all"):
        assert cost.collective_time_s(kind, s, n, target="trn2") == pytest.approx((n - 1) * (a + s / n / bw))
    assert cost.collective_time_s("broadcast", s, n, target="trn2") == pytest.approx((n - 1) * a + s / bw)
    assert cost.collective_time_s("send", s, 2, target="trn2") == pytest.approx(a + s / bw)
    assert cost.collective_time_s("barrier", 0, n, target="trn2") == pytest.approx(6 * a)
    assert cost.collective_time_s("all_reduce", s, 1) == 0.0


def test_auto_takes_the_cheaper_algorithm() -> None:
    for nbytes in (64, 2**10, 2**16, 2**20, 2**26):
        ring = cost.collective_time_s("all_reduce", nbytes, 16, target="trn1")
        tree = cost.collective_time_s("all_reduce", nbytes, 16, target="trn1", algorithm="tree")
        assert cost.collective_time_s("all_reduce", nbytes, 16, target="trn1", algorithm="auto") == min(ring, tree)
    # latency-bound small messages favour the tree, bandwidth-bound large ones the ring
    assert cost.collective_time_s("all_reduce", 64, 16, algorithm="tree") < cost.collective_time_s(
        "all_reduce", 64, 16)
    assert cost.collective_time_s("all_reduce", 2**26, 16, algorithm="tree") > cost.collective_time_s(
        "all_reduce", 2**26, 16)


def test_targets_and_their_bandwidths() -> None:
    t = {name: cost.collective_time_s("all_gather", 2**30, 2, target=name) for name in cost.INTERCONNECTS}
    assert t["trn1"] > t["trn2"] > t["trn3"]  # 384 GiB/s, 1.28 TB/s, 2.56 TB/s
    assert cost.INTERCONNECTS["trn1"].bandwidth_bytes_per_s == 384 * 2**30
    with pytest.raises(ValueError, match="no interconnect for target 'trn9'"):
        cost.interconnect("trn9")
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        cost.collective_time_s("allreduce", 1, 2)
    with pytest.raises(ValueError, match="algorithm must be"):
        cost.collective_time_s("all_reduce", 1, 2, algorithm="butterfly")


def test_target_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_TARGET", "trn3")
    assert cost.interconnect().name == "NeuronLink-v4"
    monkeypatch.delenv("TRN_TARGET")
    assert cost.interconnect().name == "NeuronLink-v3"


def test_payload_bytes_is_the_whole_buffer() -> None:
    x4, x8 = torch.ones(4), torch.ones(8)  # 16 and 32 bytes
    assert cost.payload_bytes("allreduce_", ([x4, x4],), 2) == 32
    assert cost.payload_bytes("allgather_", ([[x4, x4]], [x4]), 2) == 32  # each rank's 16 gathered twice
    assert cost.payload_bytes("_allgather_base_", (x8, x4), 2) == 32
    assert cost.payload_bytes("_reduce_scatter_base_", (x4, x8), 2) == 32
    assert cost.payload_bytes("reduce_scatter_", ([x4], [[x4, x4]]), 2) == 32
    assert cost.payload_bytes("alltoall_base_", (x8, x8, None, [], []), 2) == 32
    assert cost.payload_bytes("barrier", (x4, None, []), 2) == 0
    assert set(cost.KIND) == set(cost._PAYLOAD_ARG)


def test_trace_path_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    assert cost.trace_path("out/t.json") == "out/t.rank3.json"
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert cost.trace_path("out/t.json") == "out/t.json"


_SCRIPT = """
import torch, torch.distributed as dist
t = torch.ones(1024, device="trn")          # 4 KiB
dist.all_reduce(t)
out = torch.empty(2048, device="trn")
dist.all_gather_into_tensor(out, t)
y = (t * 2.0).sum()
assert float(y) == 2 * 1024 * 2.0
"""


def cost_worker(rank: int, world: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from trnlang import cli

    model = DistributedDataParallel(torch.nn.Linear(16, 8).to("trn"))  # 136 float parameters
    x = torch.randn(4, 16).to("trn")
    with cost.record("trn2") as log:
        model(x).sum().backward()
        dist.broadcast(torch.ones(10, device="trn"), src=0)
        dist.reduce_scatter_tensor(torch.empty(4, device="trn"), torch.ones(8, device="trn"))
    out: dict[str, Any] = {"records": [(r.op, r.kind, r.nbytes, r.ranks, r.sim_s) for r in log.records],
                           "summary": log.summary(), "outside": len(log.records)}
    dist.all_reduce(torch.ones(2, device="trn"))
    out["after"] = len(log.records)  # nothing is recorded once the block is left

    with tempfile.TemporaryDirectory() as d:
        script, trace = os.path.join(d, "step.py"), os.path.join(d, f"trace{rank}.json")
        with open(script, "w") as f:
            f.write(_SCRIPT)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            out["profile_rc"] = cli.main(["profile", "--trace", trace, script])
        out["profile_out"] = buf.getvalue()
        with open(trace) as f:
            out["trace"] = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "collective"]
    dist.barrier()
    return out


@pytest.fixture(scope="module")
def recorded() -> list[dict[str, Any]]:
    return _spawn.run("tests.distributed.test_cost:cost_worker", 2, timeout=300)


def test_a_ddp_step_records_its_collectives(recorded: list[dict[str, Any]]) -> None:
    for res in recorded:
        recs = res["records"]
        kinds = [r[1] for r in recs]
        assert kinds == ["all_reduce", "broadcast", "reduce_scatter"], recs
        assert recs[0][2] == 136 * 4 and recs[1][2] == 40 and recs[2][2] == 32  # DDP's one bucket, then ours
        for op, kind, nbytes, ranks, sim in recs:
            assert ranks == 2 and op in cost.KIND
            assert sim == cost.collective_time_s(kind, nbytes, 2, target="trn2")
        assert res["after"] == res["outside"] == 3
        assert "collectives on NeuronLink-v3 (trn2" in res["summary"] and "all_reduce" in res["summary"]


def test_trn_profile_shows_collective_time(recorded: list[dict[str, Any]]) -> None:
    want = {"all_reduce": cost.collective_time_s("all_reduce", 4096, 2),
            "all_gather": cost.collective_time_s("all_gather", 8192, 2)}
    for res in recorded:
        assert res["profile_rc"] == 0, res["profile_out"]
        text = res["profile_out"]
        assert "collectives on NeuronLink-v3" in text and "2 calls" in text, text
        assert "compute (kernels)" in text and "communication (collectives)" in text, text
        events = {e["name"]: e for e in res["trace"]}
        assert set(events) == set(want)
        for name, seconds in want.items():
            assert math.isclose(events[name]["dur"], seconds * 1e6), events[name]
            assert events[name]["args"]["ranks"] == 2
        # laid end to end in the order called
        assert events["all_gather"]["ts"] == pytest.approx(events["all_reduce"]["dur"])
