"""Pipeline parallelism (``torch.distributed.pipelining``) on ``trn`` in 2 processes equals unpipelined CPU.

A 4-layer MLP is cut into 2 stages, one per rank (rank 0: layers 0-1, rank 1: layers 2-3 and the loss). The
batch of 8 is split into 4 micro-batches; GPipe, 1F1B and Interleaved1F1B (2 stages per rank, 4 in all)
each run one training step. The reference is one CPU process: the same model on the whole batch, loss =
mean over micro-batches of each micro-batch's mean-squared error (what the schedules' ``scale_grads``
averages to). The micro-batch losses (last stage), every parameter's gradient and the parameters after one
SGD step must equal the reference. ``TRN_FALLBACK=error``: every op and every send/recv runs natively on trn.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.distributed import _spawn

MICRO, LR = 4, 0.1
SCHEDULES = ("ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B")


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out - y) ** 2).mean()


def reference() -> dict[str, Any]:
    """One CPU process: micro-batch losses, gradients of the mean loss, parameters after one SGD step."""
    m = _model()
    x, y = _batch()
    losses = [_loss(m(xc), yc) for xc, yc in zip(x.chunk(MICRO), y.chunk(MICRO))]
    torch.stack(losses).mean().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    torch.optim.SGD(m.parameters(), lr=LR).step()
    return {"losses": [v.detach() for v in losses], "grads": grads,
            "params": {n: p.detach().clone() for n, p in m.named_parameters()}}


def _stage_layers(stage: int, stages: int) -> list[int]:
    """Indices of the model's layers in ``stage`` (of ``stages``): the 7 layers cut after each Tanh."""
    cuts = {2: [0, 2, 7], 4: [0, 2, 4, 6, 7]}[stages]
    return list(range(cuts[stage], cuts[stage + 1]))


def _run(schedule_name: str, rank: int, world: int) -> dict[str, Any]:
    from torch.distributed import pipelining

    per_rank = 2 if "Interleaved" in schedule_name else 1
    stages_total = world * per_rank
    full = _model()
    stage_ids = [rank + world * k for k in range(per_rank)]  # interleaved: rank r holds stages r, r + world
    stages, mods = [], []
    for s in stage_ids:
        idx = _stage_layers(s, stages_total)
        mod = torch.nn.Sequential(*[full[i] for i in idx]).to("trn")
        mods.append((idx, mod))
        stages.append(pipelining.PipelineStage(mod, s, stages_total, torch.device("trn")))
    cls = getattr(pipelining, schedule_name)
    sched = cls(stages if per_rank > 1 else stages[0], n_microbatches=MICRO, loss_fn=_loss)
    x, y = _batch()
    losses: list[torch.Tensor] = []
    last = stages_total - 1 in stage_ids
    if rank == 0:
        sched.step(x.to("trn"), target=y.to("trn") if last else None, losses=losses if last else None)
    else:
        sched.step(target=y.to("trn"), losses=losses)
    out: dict[str, Any] = {"losses": [v.detach().cpu() for v in losses], "grads": {}, "params": {},
                           "devices": set()}
    for idx, mod in mods:
        for (local, p) in mod.named_parameters():
            name = f"{idx[int(local.split('.')[0])]}.{local.split('.')[1]}"
            out["grads"][name] = p.grad.detach().cpu().clone()
            out["devices"] |= {str(p.device), str(p.grad.device)}
        torch.optim.SGD(mod.parameters(), lr=LR).step()
        for (local, p) in mod.named_parameters():
            out["params"][f"{idx[int(local.split('.')[0])]}.{local.split('.')[1]}"] = p.detach().cpu().clone()
    return out


def pipeline_worker(rank: int, world: int) -> dict[str, Any]:
    import torch.distributed as dist

    res = {name: _run(name, rank, world) for name in SCHEDULES}
    dist.barrier()
    return res


@pytest.fixture(scope="module")
def piped() -> list[dict[str, Any]]:
    return _spawn.run("tests.distributed.test_pipeline:pipeline_worker", 2, timeout=400)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_pipeline_equals_unpipelined_cpu(piped: list[dict[str, Any]], schedule: str) -> None:
    ref = reference()
    assert len(ref["grads"]) == 8 and all(g.abs().max() > 0 for g in ref["grads"].values())
    got_grads: dict[str, torch.Tensor] = {}
    got_params: dict[str, torch.Tensor] = {}
    for res in piped:
        got_grads.update(res[schedule]["grads"])
        got_params.update(res[schedule]["params"])
        assert res[schedule]["devices"] == {"trn:0"}
    assert sorted(got_grads) == sorted(ref["grads"]), "every parameter lives on exactly one stage"
    for n, g in ref["grads"].items():
        torch.testing.assert_close(got_grads[n], g, rtol=1e-5, atol=1e-6, msg=lambda m, n=n: f"grad {n}: {m}")
        torch.testing.assert_close(got_params[n], ref["params"][n], rtol=1e-5, atol=1e-6)
    last = piped[1][schedule]["losses"]  # the last stage is on rank 1 in all three schedules
    assert len(last) == MICRO
    for got, want in zip(last, ref["losses"]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert piped[0][schedule]["losses"] == []
