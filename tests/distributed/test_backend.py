"""The ``trn`` c10d backend: registration at ``import torch``, and the three ways of asking for it."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import torch

from tests.distributed import _spawn


def test_registered_with_the_device_and_kernels_wait_for_a_group() -> None:
    """``import torch`` registers the backend (devices ['trn']) but loads none of its collective kernels."""
    code = ("import sys, torch, torch.distributed as dist\n"
            "print(dist.Backend.default_device_backend_map.get('trn'), dist.Backend.backend_capability.get('trn'),"
            " 'trnlang.distributed.c10d' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=str(_spawn.ROOT), env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["trn", "['trn']", "False"]


def configs_worker(rank: int, world: int) -> dict[str, Any]:
    """For each backend string: what the group serves, and an all_reduce on trn (and CPU) tensors."""
    import datetime

    import torch.distributed as dist

    port = int(os.environ["MASTER_PORT"])
    out: dict[str, Any] = {}
    for i, backend in enumerate((None, "trn", "cpu:gloo,trn:trn", "trn:trn,cpu:gloo")):
        kw = {} if backend is None else {"backend": backend}
        dist.init_process_group(init_method=f"tcp://127.0.0.1:{port + 1 + i}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60), **kw)
        pg = dist.distributed_c10d._get_default_group()
        t = torch.full((3,), rank + 1.0, device="trn")
        dist.all_reduce(t)
        c = torch.full((3,), rank + 1.0)
        try:
            dist.all_reduce(c)
            cpu: Any = c
        except RuntimeError as e:
            cpu = str(e)
        dist.barrier()
        sub = dist.new_group([0, 1])  # a second group: its own gloo pair, found by group name
        s = torch.full((2,), rank + 1.0, device="trn")
        dist.all_reduce(s, op=dist.ReduceOp.MAX, group=sub)
        out[f"{backend}/subgroup"] = s.cpu()
        out[str(backend)] = {"config": dist.get_backend_config(), "devices": sorted(str(d) for d in pg._device_types),
                             "trn": t.cpu(), "trn_device": str(t.device), "cpu": cpu}
        dist.destroy_process_group()
    return out


@pytest.fixture(scope="module")
def configs() -> list[dict[str, Any]]:
    # the worker makes its own groups (one port each) after the launcher's port
    return _spawn.run("tests.distributed.test_backend:configs_worker", 2, backend=None, timeout=400)


@pytest.mark.parametrize("backend,config", [("None", "cpu:gloo,trn:trn"), ("cpu:gloo,trn:trn", "cpu:gloo,trn:trn"),
                                            ("trn:trn,cpu:gloo", "trn:trn,cpu:gloo")])
def test_trn_and_cpu_tensors_each_get_their_backend(configs: list[dict[str, Any]], backend: str, config: str) -> None:
    for res in configs:
        r = res[backend]
        assert r["config"] == config and r["devices"] == ["cpu", "trn"]
        assert torch.equal(r["trn"], torch.full((3,), 3.0)) and r["trn_device"] == "trn:0"
        assert torch.equal(r["cpu"], torch.full((3,), 3.0))
        assert torch.equal(res[f"{backend}/subgroup"], torch.full((2,), 2.0))


def test_trn_only_group_refuses_cpu_tensors(configs: list[dict[str, Any]]) -> None:
    for res in configs:
        r = res["trn"]
        assert r["config"] == "trn:trn" and r["devices"] == ["trn"]
        assert torch.equal(r["trn"], torch.full((3,), 3.0))
        assert r["cpu"] == "No backend type associated with device type cpu", r["cpu"]
