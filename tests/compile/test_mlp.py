"""An MLP with LayerNorm and GELU, compiled on trn both ways, trains like eager CPU (issue 16)."""

import pytest
import torch
import torch.nn as nn

import trnlang.compile
from tests.compile.helpers import train_compare


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(48, 96)
        self.ln = nn.LayerNorm(96)
        self.fc2 = nn.Linear(96, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.ln(self.fc1(x))))


def _batches() -> list:
    g = torch.Generator().manual_seed(1)
    return [((torch.randn(300, 48, generator=g),), torch.randint(0, 10, (300,), generator=g)) for _ in range(2)]


def test_backend_is_listed() -> None:
    import torch._dynamo

    assert "trn" in torch._dynamo.list_backends()


@pytest.mark.parametrize("backend", ["trn", None], ids=["trn", "default"])
def test_mlp_trains_like_cpu(backend: str | None) -> None:
    before = trnlang.compile.compile_stats()
    losses = train_compare(MLP, _batches(), backend, nn.functional.cross_entropy)
    after = trnlang.compile.compile_stats()
    assert len(losses) == 2 and losses[0] == losses[0]
    assert after["graphs"] - before["graphs"] >= 2  # forward and backward went through the trn backend
    assert after["fused_nodes"] > before["fused_nodes"]


def test_layernorm_gelu_forward_is_one_kernel() -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    from trnlang.compile.backend import decompositions
    from trnlang.compile.graph import fuse_graph

    torch.manual_seed(0)
    ln = nn.LayerNorm(64)

    def f(x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(ln(x))

    gm = make_fx(f, decomposition_table=decompositions())(torch.randn(40, 64))
    _, report = fuse_graph(gm, device_type="cpu")
    assert len(report) == 1, report
    name, fused = report[0]
    assert "gelu" in name and "mean" in name


def test_softmax_fuses_and_matches() -> None:
    f = torch.compile(lambda x: torch.softmax(x * 2.0, -1) + 1.0, backend="trn")
    x = torch.randn(257, 131)
    before = trnlang.compile.compile_stats()["kernels"]
    out = f(x.to("trn"))
    assert trnlang.compile.compile_stats()["kernels"] == before + 1
    torch.testing.assert_close(out.cpu(), torch.softmax(x * 2.0, -1) + 1.0, atol=1e-6, rtol=1e-5)


class Stack(nn.Module):
    """Three identical pre-norm blocks: each layer's fused kernels compute the same thing."""

    def __init__(self) -> None:
        super().__init__()
        self.lns = nn.ModuleList(nn.LayerNorm(56) for _ in range(3))
        self.fcs = nn.ModuleList(nn.Linear(56, 56) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for ln, fc in zip(self.lns, self.fcs):
            x = x + nn.functional.gelu(fc(ln(x)))
        return x


def test_identical_layers_share_one_kernel() -> None:
    """The same block in every layer is one generated kernel (one trace and compilation), not one per layer."""
    g = torch.Generator().manual_seed(2)
    batches = [((torch.randn(90, 56, generator=g),), torch.randn(90, 56, generator=g)) for _ in range(2)]
    before = len(trnlang.compile.launchers())
    train_compare(Stack, batches, "trn", lambda out, t: (out - t).square().mean())
    new = trnlang.compile.launchers()[before:]
    users: dict[int, list] = {}
    for fk in new:
        users.setdefault(id(fk.kern), []).append(fk)
    # layer 1's norm reads the input, layers 2 and 3 fuse the residual add before theirs: 2 alike
    shared = [fks for fks in users.values() if len(fks) >= 2]
    assert shared, [(fk.name, fk.nodes) for fk in new]
    for fks in shared:
        assert len({fk.nodes for fk in fks}) == len(fks)  # different graph nodes, one kernel
        assert fks[0].kern.compile_stats()["variants"] == 1
