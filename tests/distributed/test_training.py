"""Data and tensor parallel training of a small MLP on ``trn`` in 2 processes equals CPU training.

Each rank trains on its half of the batch for 3 SGD steps; the reference is one CPU process training the
same initial model on the whole batch (the mean loss over halves, averaged across 2 ranks, is the mean over
the whole batch). ``TRN_FALLBACK=error``: every op, collectives included, runs natively on ``trn``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.distributed import _spawn

STEPS, LR = 3, 0.1


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out - y) ** 2).mean()


def reference() -> list[torch.Tensor]:
    """Parameters after single-process CPU training on the whole batch."""
    m = _model()
    x, y = _batch()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        _loss(m(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def _train(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        _loss(m(x), y).backward()
        opt.step()


def _host(p: torch.Tensor) -> torch.Tensor:
    full = p.full_tensor() if hasattr(p, "full_tensor") else p
    return full.detach().cpu().clone()


def _install_storage_resize() -> None:
    """FSDP2 frees/re-allocates unsharded parameters with ``UntypedStorage.resize_``; the package routes trn
    storages to ``memory.resize_storage`` (a row of ``torch_patches.PATCHES``): check that it did."""
    assert getattr(torch.UntypedStorage.resize_, "_trn_patched", False), "trnlang did not patch resize_"


def training_worker(rank: int, world: int) -> dict[str, Any]:
    """DDP, FSDP2 and tensor parallelism, each from the same initial model; parameters after 3 steps."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.nn.parallel import DistributedDataParallel

    x, y = _batch()
    half = x.shape[0] // world
    xs, ys = x[rank * half:(rank + 1) * half].to("trn"), y[rank * half:(rank + 1) * half].to("trn")
    out: dict[str, Any] = {}

    ddp = DistributedDataParallel(_model().to("trn"))
    _train(ddp, xs, ys)
    out["ddp"] = [_host(p) for p in ddp.module.parameters()]
    out["ddp_devices"] = sorted({str(p.device) for p in ddp.module.parameters()})
    # gradients as views of DDP's buckets, one small bucket per parameter or so (several all-reduces per step)
    ddp_views = DistributedDataParallel(_model().to("trn"), gradient_as_bucket_view=True, bucket_cap_mb=1e-4)
    _train(ddp_views, xs, ys)
    out["ddp_bucket_view"] = [_host(p) for p in ddp_views.module.parameters()]
    out["ddp_grad_devices"] = sorted({str(p.grad.device) for p in ddp_views.module.parameters()})

    _install_storage_resize()
    fsdp = _model().to("trn")
    for layer in fsdp:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(fsdp)
    _train(fsdp, xs, ys)
    out["fsdp"] = [_host(p) for p in fsdp.parameters()]
    out["fsdp_local_shapes"] = [tuple(p.to_local().shape) for p in fsdp.parameters()]
    out["fsdp_devices"] = sorted({str(p.device) for p in fsdp.parameters()})

    # tensor parallel: every rank sees the whole batch; the hidden layer is split across the 2 ranks
    mesh = init_device_mesh("trn", (world,))
    tp = parallelize_module(_model().to("trn"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    _train(tp, x.to("trn"), y.to("trn"))
    out["tp"] = [_host(p) for p in tp.parameters()]
    out["tp_local_shapes"] = [tuple(p.to_local().shape) for p in tp.parameters()]
    dist.barrier()
    return out


@pytest.fixture(scope="module")
def trained() -> list[dict[str, Any]]:
    return _spawn.run("tests.distributed.test_training:training_worker", 2, timeout=500)


@pytest.mark.parametrize("kind", ["ddp", "ddp_bucket_view", "fsdp", "tp"])
def test_parameters_equal_single_process_cpu_training(trained: list[dict[str, Any]], kind: str) -> None:
    ref = reference()
    init = [p.detach() for p in _model().parameters()]
    assert any((a - b).abs().max() > 1e-3 for a, b in zip(ref, init)), "the reference did not train"
    for res in trained:
        assert len(res[kind]) == len(ref)
        for got, want in zip(res[kind], ref):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_parameters_live_on_trn_and_are_sharded(trained: list[dict[str, Any]]) -> None:
    for res in trained:
        assert res["ddp_devices"] == ["trn:0"] and res["fsdp_devices"] == ["trn:0"]
        assert res["ddp_grad_devices"] == ["trn:0"]
        assert res["fsdp_local_shapes"] == [(8, 8), (8,), (2, 16), (2,)]  # dim-0 halves
        assert res["tp_local_shapes"] == [(8, 8), (8,), (4, 8), (4,)]  # colwise then rowwise (bias whole)

