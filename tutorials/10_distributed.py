"""Tutorial 10: training a small transformer on 4 ``trn`` processes (DDP, FSDP2, TP, 2-D FSDP x TP).

Each process is one simulated NeuronCore (``torch.trn.device_count()`` is 1 per process). The processes
talk through ``torch.distributed``: trnlang registers a c10d backend named ``trn`` that moves ``trn``
tensors with gloo, through zero-copy host views of device memory (device memory is host memory). Everything
torch builds on collectives then works on ``trn`` models unchanged:

1. **DDP** (``DistributedDataParallel``): every rank holds the whole model and a quarter of the batch;
   gradients are all-reduced.
2. **FSDP2** (``fully_shard``): parameters, gradients and optimizer state are sharded over the 4 ranks;
   each layer's parameters are all-gathered for its forward/backward and its gradients reduce-scattered.
3. **Tensor parallelism** (``parallelize_module``): attention heads and the MLP's hidden units are split
   over the 4 ranks (``ColwiseParallel`` then ``RowwiseParallel``); every rank sees the whole batch.
4. **2-D**: a 2 x 2 ``DeviceMesh``: tensor parallel inside pairs of ranks (``tp``), FSDP across the
   pairs (``dp``), each pair on half of the batch.

Each way trains the same initial model for 3 SGD steps; rank 0 checks every step's loss and the final
parameters against one CPU process training on the whole batch. ``TRN_FALLBACK=error``: every op and
every collective runs natively on ``trn``.

Run it on one machine (it starts ``torchrun --nproc-per-node 4`` on itself, loopback only)::

    python tutorials/10_distributed.py

or start the 4 processes yourself::

    torchrun --standalone --nproc-per-node 4 tutorials/10_distributed.py

On several machines the script is the same; only the launch changes (run on each machine)::

    torchrun --nnodes 2 --nproc-per-node 2 --node-rank <0|1> --master-addr <node0-ip> --master-port 29500 \\
        tutorials/10_distributed.py

To see what the collectives would cost on a Trainium interconnect, run a rank under the profiler:
``trn profile`` prints the simulated time of each collective (see ``docs/distributed.md``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any, Callable

os.environ.setdefault("TRN_FALLBACK", "error")  # any op without a native lowering raises

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

WORLD, STEPS, LR = 4, 3, 0.5
VOCAB, DIM, HEADS, HIDDEN, SEQ, BATCH = 32, 32, 4, 64, 8, 8


class Block(torch.nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(DIM), torch.nn.LayerNorm(DIM)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(DIM, DIM) for _ in range(4))
        self.up, self.down = torch.nn.Linear(DIM, HIDDEN), torch.nn.Linear(HIDDEN, DIM)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism q/k/v hold this rank's heads only
        q, k, v = (f(x).view(b, s, -1, DIM // HEADS).transpose(1, 2) for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Transformer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(2))
        self.norm = torch.nn.LayerNorm(DIM)
        self.head = torch.nn.Linear(DIM, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


def train(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> list[float]:
    """3 SGD steps; the loss of each step, averaged over the data-parallel ranks (what 1 process would see)."""
    # foreach=False: under TP alone the embedding, norms and head stay plain tensors next to DTensors, and
    # torch's fused (foreach) update cannot mix the two
    opt = torch.optim.SGD(model.parameters(), lr=LR, foreach=False)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v.full_tensor() if hasattr(v, "full_tensor") else v) for v in losses]


def tp_plan() -> dict[str, Any]:
    """Megatron-style: q/k/v and up split by output features (heads, hidden units), o and down by input."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict[str, Any] = {}
    for i in range(2):
        plan.update({f"blocks.{i}.{n}": ColwiseParallel() for n in ("q", "k", "v", "up")})
        plan.update({f"blocks.{i}.{n}": RowwiseParallel() for n in ("o", "down")})
    return plan


def shard(model: torch.nn.Module, mesh: Any = None) -> torch.nn.Module:
    """FSDP2: each block, then the root (embedding, final norm, head)."""
    from torch.distributed.fsdp import fully_shard

    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def full_params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu() for p in model.parameters()]


def worker() -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group()  # "trn" for trn tensors, gloo for CPU ones; torchrun's env gives the rest
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == WORLD, f"this tutorial runs on {WORLD} processes, got {world}"
    ids, labels = batch()

    def rows(parts: int, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = BATCH // parts
        return ids[index * n:(index + 1) * n].to("trn"), labels[index * n:(index + 1) * n].to("trn")

    def ddp() -> torch.nn.Module:
        return DistributedDataParallel(Transformer().to("trn"))

    def fsdp() -> torch.nn.Module:
        return shard(Transformer().to("trn"))

    def tp() -> torch.nn.Module:
        return parallelize_module(Transformer().to("trn"), init_device_mesh("trn", (world,)), tp_plan())

    mesh2d = init_device_mesh("trn", (2, world // 2), mesh_dim_names=("dp", "tp"))

    def fsdp_tp() -> torch.nn.Module:
        model = parallelize_module(Transformer().to("trn"), mesh2d["tp"], tp_plan())
        return shard(model, mesh2d["dp"])

    runs: dict[str, tuple[Callable[[], torch.nn.Module], tuple[torch.Tensor, torch.Tensor]]] = {
        "DDP": (ddp, rows(world, rank)),
        "FSDP2": (fsdp, rows(world, rank)),
        "TP": (tp, rows(1, 0)),
        "FSDP2 x TP (2x2 mesh)": (fsdp_tp, rows(2, mesh2d.get_local_rank("dp"))),
    }
    results = {}
    for name, (build, (x, y)) in runs.items():
        model = build()
        losses = train(model, x, y)
        if isinstance(model, DistributedDataParallel):
            model = model.module
        # the mean loss over this rank's rows; averaged over the data-parallel ranks it is the whole batch's
        mean = torch.tensor(losses, device="trn")
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        q = model.blocks[0].q.weight  # a DTensor under FSDP2/TP: to_local() is this rank's shard
        local = tuple((q.to_local() if hasattr(q, "to_local") else q).shape)
        results[name] = (mean.cpu().tolist(), full_params(model), local)

    if rank == 0:
        ref = Transformer()
        ref_losses = train(ref, ids, labels)
        print(f"1 CPU process, whole batch: losses {', '.join(f'{v:.6f}' for v in ref_losses)}")
        for name, (losses, params, local) in results.items():
            worst = max((a - b).abs().max().item() for a, b in zip(params, ref.parameters()))
            print(f"{name:>22} on {world} trn processes: losses {', '.join(f'{v:.6f}' for v in losses)}; "
                  f"max parameter difference {worst:.1e}; rank 0 holds {local} of a {DIM}x{DIM} weight")
            torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5, atol=1e-5)
            assert worst < 1e-4, (name, worst)
        assert ref_losses[-1] < ref_losses[0], "the reference did not train"
        # DDP replicates; FSDP2 and TP split 4 ways (rows: FSDP2 shards dim 0, ColwiseParallel output features);
        # 2-D splits rows over tp, then FSDP2 splits the tp shard over dp
        shapes = [local for _, _, local in results.values()]
        assert shapes == [(DIM, DIM), (DIM // 4, DIM), (DIM // 4, DIM), (DIM // 4, DIM)], shapes
        print(f"DDP, FSDP2, TP and 2-D FSDP2 x TP training on {world} trn processes matches 1-process CPU training")
    dist.destroy_process_group()


def launch(timeout: float = 540) -> int:
    """Run this file under ``torchrun --standalone --nproc-per-node 4`` (loopback); kill it after ``timeout``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}", __file__]
    proc = subprocess.Popen(cmd, start_new_session=True)  # its own process group: a timeout kills every rank
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(f"torchrun did not finish within {timeout} s (killed)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:  # started by torchrun
        worker()
    else:
        sys.exit(launch())
