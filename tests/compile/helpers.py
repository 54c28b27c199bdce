"""Shared helpers: train a model compiled on trn next to the same model in eager mode on the CPU."""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch


def train_compare(build: Callable[[], torch.nn.Module], batches: list[tuple[Any, ...]], backend: str | None,
                  loss_fn: Callable[[Any, Any], torch.Tensor], steps: int = 2, atol: float = 1e-4,
                  rtol: float = 1e-4, dynamic: bool | None = None) -> list[float]:
    """``steps`` SGD steps of ``build()`` compiled on trn and eager on the CPU; asserts equal losses and grads.

    ``batches[i]`` is ``(inputs, target)`` for step ``i`` (CPU tensors). Returns the trn losses.
    """
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(0)
    cpu = build()
    trn = copy.deepcopy(cpu).to("trn")
    if backend is None:
        run = torch.compile(trn, dynamic=dynamic)
    else:
        run = torch.compile(trn, backend=backend, dynamic=dynamic)
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_t = torch.optim.SGD(trn.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        inputs, target = batches[step % len(batches)]
        loss_c = loss_fn(cpu(*inputs), target)
        loss_t = loss_fn(run(*[x.to("trn") for x in inputs]), target.to("trn"))
        torch.testing.assert_close(loss_t.cpu(), loss_c, atol=atol, rtol=rtol)
        opt_c.zero_grad()
        opt_t.zero_grad()
        loss_c.backward()
        loss_t.backward()
        for (name, pc), (_, pt) in zip(cpu.named_parameters(), trn.named_parameters()):
            if pc.grad is None:
                assert pt.grad is None, name
                continue
            assert pt.grad is not None and pt.grad.device.type == "trn", name
            torch.testing.assert_close(pt.grad.cpu(), pc.grad, atol=atol, rtol=rtol, msg=f"step {step}: {name}")
        opt_c.step()
        opt_t.step()
        losses.append(float(loss_t.detach()))
    return losses
