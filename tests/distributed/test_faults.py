"""Faults on ``trn`` collectives end in clear errors on every rank, within the group's timeout, never hangs.

2 processes, a 10 s process-group timeout.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from tests.distributed import _spawn

PG_TIMEOUT = 10.0


def _outcome(fn: Any) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        fn()
        return {"raised": None, "seconds": time.monotonic() - t0}
    except Exception as e:  # the error is what is checked
        return {"raised": type(e).__name__, "message": str(e), "seconds": time.monotonic() - t0}


def faults_worker(rank: int, world: int) -> dict[str, Any]:
    import torch.distributed as dist

    out: dict[str, Any] = {}
    dist.all_reduce(torch.ones(2, device="trn"))  # warm: kernels registered, connections up

    n = 4 if rank == 0 else 8
    out["shapes"] = _outcome(lambda: dist.all_reduce(torch.ones(n, device="trn")))
    dt = torch.float32 if rank == 0 else torch.bfloat16
    out["dtypes"] = _outcome(lambda: dist.broadcast(torch.ones(4, dtype=dt, device="trn"), src=0))
    out["ops"] = _outcome(lambda: dist.all_reduce(torch.ones(4, device="trn")) if rank == 0
                          else dist.all_gather_into_tensor(torch.empty(8, device="trn"), torch.ones(4, device="trn")))
    # after two 32 KiB all-reduces the frame's payload slot has grown to 32 KiB (they ride in the check):
    # sizes that disagree still raise on every rank, and a mismatched size bigger than the slot too
    for _ in range(2):
        dist.all_reduce(torch.ones(8192, device="trn"))
    n = 8192 if rank == 0 else 4096
    out["shapes_grown_slot"] = _outcome(lambda: dist.all_reduce(torch.ones(n, device="trn")))
    n = 8192 if rank == 0 else 2**20
    out["shapes_past_slot"] = _outcome(lambda: dist.all_reduce(torch.ones(n, device="trn")))
    # a run of same 1 MiB all-reduces makes the group predict the next one: its gloo all-reduce is posted with
    # the check. Calls that break the prediction, on one rank or both, still raise on every rank
    for _ in range(4):
        dist.all_reduce(torch.ones(2**18, device="trn"))
    n = 2**18 if rank == 0 else 2**17
    out["shapes_predicted"] = _outcome(lambda: dist.all_reduce(torch.ones(n, device="trn")))
    out["ops_predicted"] = _outcome(lambda: dist.all_reduce(torch.ones(2**18, device="trn")) if rank == 0
                                    else dist.broadcast(torch.ones(2**18, device="trn"), src=0))
    n = 2**16 if rank == 0 else 2**17
    out["shapes_both_unpredicted"] = _outcome(lambda: dist.all_reduce(torch.ones(n, device="trn")))
    out["mixed_devices"] = _outcome(lambda: dist.all_gather([torch.empty(2), torch.empty(2)],
                                                            torch.ones(2, device="trn")))
    # the group still works after the errors above
    t = torch.full((3,), float(rank + 1), device="trn")
    dist.all_reduce(t)
    out["after"] = t.cpu()

    # a rank that never joins: rank 0's collective times out (rank 1 waits it out, then leaves)
    if rank == 0:
        out["absent_peer"] = _outcome(lambda: dist.all_reduce(torch.ones(4, device="trn")))
    else:
        time.sleep(PG_TIMEOUT + 8)
    return out


def dying_worker(rank: int, world: int) -> dict[str, Any]:
    """Rank 1 dies (exits without a word) after a first all-reduce; rank 0's next collectives must raise."""
    import os

    import torch.distributed as dist

    for _ in range(4):  # the group now predicts a fifth 1 MiB all-reduce (posted with the check)
        dist.all_reduce(torch.ones(2**18, device="trn"))
    if rank == 1:
        os._exit(3)
    time.sleep(1.0)  # rank 1 is gone
    out = {"predicted": _outcome(lambda: dist.all_reduce(torch.ones(2**18, device="trn"))),
           "small": _outcome(lambda: dist.all_reduce(torch.ones(4, device="trn"))),
           "large": _outcome(lambda: dist.all_reduce(torch.ones(2**20, device="trn")))}
    import pickle  # the group is broken: save the result here, _spawn's destroy_process_group may not return
    with open(os.environ["TRN_TEST_OUT"], "wb") as f:
        pickle.dump(out, f)
    os._exit(0)


def trn_only_worker(rank: int, world: int) -> dict[str, Any]:
    import torch.distributed as dist

    t = torch.ones(2, device="trn")
    dist.all_reduce(t)
    return {"cpu": _outcome(lambda: dist.all_reduce(torch.ones(2))), "trn": t.cpu()}


@pytest.fixture(scope="module")
def faults() -> list[dict[str, Any]]:
    return _spawn.run("tests.distributed.test_faults:faults_worker", 2, pg_timeout_s=PG_TIMEOUT, timeout=300)


@pytest.mark.parametrize("case,said", [
    ("shapes", ["rank 0 called allreduce_ float32[4]", "rank 1 called allreduce_ float32[8]"]),
    ("dtypes", ["rank 0 called broadcast_ float32[4]", "rank 1 called broadcast_ bfloat16[4]"]),
    ("ops", ["rank 0 called allreduce_ float32[4]", "rank 1 called _allgather_base_ float32[8] float32[4]"]),
    ("shapes_grown_slot", ["rank 0 called allreduce_ float32[8192] SUM", "rank 1 called allreduce_ float32[4096]"]),
    ("shapes_past_slot", ["rank 0 called allreduce_ float32[8192] SUM", "rank 1 called allreduce_ float32[1048576]"]),
    ("shapes_predicted", ["rank 0 called allreduce_ float32[262144] SUM", "rank 1 called allreduce_ float32[131072]"]),
    ("ops_predicted", ["rank 0 called allreduce_ float32[262144] SUM", "rank 1 called broadcast_ float32[262144]"]),
    ("shapes_both_unpredicted", ["rank 0 called allreduce_ float32[65536]",
                                 "rank 1 called allreduce_ float32[131072]"]),
])
def test_mismatched_calls_raise_on_every_rank(faults: list[dict[str, Any]], case: str, said: list[str]) -> None:
    for res in faults:
        r = res[case]
        assert r["raised"] == "TrnDistributedError", r
        assert "collective mismatch" in r["message"] and all(s in r["message"] for s in said), r["message"]
        assert r["seconds"] < PG_TIMEOUT, r


def test_mixed_devices_raise_before_communicating(faults: list[dict[str, Any]]) -> None:
    for res in faults:
        r = res["mixed_devices"]
        assert r["raised"] == "TrnDistributedError" and "got a cpu tensor together with trn tensors" in r["message"]
        assert torch.equal(res["after"], torch.full((3,), 3.0)), "the group is usable after the errors"


def test_absent_peer_times_out_within_the_group_timeout(faults: list[dict[str, Any]]) -> None:
    r = faults[0]["absent_peer"]
    assert r["raised"] == "RuntimeError" and "timed out" in r["message"].lower(), r
    assert PG_TIMEOUT - 1 < r["seconds"] < PG_TIMEOUT + 5, r


def test_a_rank_that_dies_makes_the_others_raise(tmp_path: Any) -> None:
    import pickle

    out = tmp_path / "rank0.pkl"
    res = _spawn.run("tests.distributed.test_faults:dying_worker", 2, pg_timeout_s=PG_TIMEOUT, timeout=300,
                     env={"TRN_TEST_OUT": str(out)}, expect_fail=True)
    assert res[1]["rc"] == 3 and res[0]["rc"] == 0, res
    got = pickle.loads(out.read_bytes())
    for case in ("predicted", "small", "large"):
        r = got[case]
        assert r["raised"] == "RuntimeError", r
        assert r["seconds"] < PG_TIMEOUT + 5, r  # an error, not a hang: within the group timeout


def test_cpu_tensor_on_a_trn_only_group_raises() -> None:
    res = _spawn.run("tests.distributed.test_faults:trn_only_worker", 2, backend="trn", timeout=300)
    for r in res:
        assert r["cpu"]["raised"] == "RuntimeError", r
        assert r["cpu"]["message"] == "No backend type associated with device type cpu"
        assert torch.equal(r["trn"], torch.full((2,), 2.0))
