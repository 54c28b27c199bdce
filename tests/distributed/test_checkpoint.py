"""Distributed checkpointing (DCP) of a ``trn`` model sharded with FSDP2: save, load back, reshard."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.distributed import _spawn
from tests.distributed.test_training import _install_storage_resize, _model


def checkpoint_worker(rank: int, world: int) -> dict[str, Any]:
    import os

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard

    path = os.environ["TRN_TEST_CKPT"]
    _install_storage_resize()
    saved = _model().to("trn")
    fully_shard(saved)
    with torch.no_grad():
        for i, p in enumerate(saved.parameters()):
            p.mul_(-2.0).add_(i)  # values no fresh model has
    dcp.save({"model": saved.state_dict()}, checkpoint_id=path)
    want = [p.full_tensor().cpu() for p in saved.parameters()]

    sharded = _model().to("trn")
    fully_shard(sharded)
    before = [p.full_tensor().cpu() for p in sharded.parameters()]
    sd = {"model": sharded.state_dict()}
    dcp.load(sd, checkpoint_id=path)
    sharded.load_state_dict(sd["model"])

    whole = _model().to("trn")  # not sharded: DCP reshards the saved shards into full tensors
    sd = {"model": whole.state_dict()}
    dcp.load(sd, checkpoint_id=path)
    whole.load_state_dict(sd["model"])
    dist.barrier()
    return {"want": want, "before": before, "sharded": [p.full_tensor().cpu() for p in sharded.parameters()],
            "sharded_devices": sorted({str(p.device) for p in sharded.parameters()}),
            "whole": [p.detach().cpu() for p in whole.parameters()],
            "whole_devices": sorted({str(p.device) for p in whole.parameters()}), "files": sorted(os.listdir(path))}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    path = tmp_path_factory.mktemp("dcp")
    return _spawn.run("tests.distributed.test_checkpoint:checkpoint_worker", 2, timeout=400,
                      env={"TRN_TEST_CKPT": str(path)})


def test_sharded_trn_model_round_trips(loaded: list[dict[str, Any]]) -> None:
    for res in loaded:
        assert res["files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # one file per rank's shards
        assert not any(torch.equal(a, b) for a, b in zip(res["before"], res["want"]))
        assert all(torch.equal(a, b) for a, b in zip(res["sharded"], res["want"]))
        assert res["sharded_devices"] == ["trn:0"]


def test_loads_into_an_unsharded_trn_model(loaded: list[dict[str, Any]]) -> None:
    for res in loaded:
        assert all(torch.equal(a, b) for a, b in zip(res["whole"], res["want"]))
        assert res["whole_devices"] == ["trn:0"]
