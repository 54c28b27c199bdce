"""dynamic=True: new batch sizes neither trace new graphs nor compile new kernel variants (issue 16)."""

import torch.nn as nn

import trnlang.compile
from tests.compile.test_mlp import MLP


def _variants() -> int:
    return trnlang.compile.compile_stats()["kernel_variants"]


def test_six_batch_sizes_two_graphs_flat_kernels() -> None:
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    cpu = MLP()
    trn = MLP()
    trn.load_state_dict(cpu.state_dict())
    trn = trn.to("trn")
    run = torch.compile(trn, backend="trn", dynamic=True)
    graphs_before = trnlang.compile.compile_stats()["graphs"]
    variants = []
    for b in (17, 40, 96, 129, 200, 250):
        x = torch.randn(b, 48)
        y = torch.randint(0, 10, (b,))
        loss_t = nn.functional.cross_entropy(run(x.to("trn")), y.to("trn"))
        loss_t.backward()
        loss_c = nn.functional.cross_entropy(cpu(x), y)
        loss_c.backward()
        torch.testing.assert_close(loss_t.detach().cpu(), loss_c.detach(), atol=1e-4, rtol=1e-4)
        variants.append(_variants())
    for pc, pt in zip(cpu.parameters(), trn.parameters()):
        torch.testing.assert_close(pt.grad.cpu(), pc.grad, atol=1e-4, rtol=1e-4)
    assert counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])
    # forward + backward of each Dynamo graph
    assert trnlang.compile.compile_stats()["graphs"] - graphs_before <= 4
    assert variants[1:] == [variants[1]] * 5, variants
