"""torch.compile semantics on trn: graph breaks, user kernels, device errors, dtype guards (issue 16)."""

import pytest
import torch

import trnlang as trn
import trnlang.compile
import trnlang.language as tl


@trn.kernel
def scale_rows(x, out):
    n, d = x.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        tl.store(out[rows, cols], tl.load(x[rows, cols], mask=rows < n) * 3.0, mask=rows < n)


@pytest.mark.parametrize("breaker", ["print", "item"])
def test_graph_break_in_forward(breaker: str, capsys: pytest.CaptureFixture[str]) -> None:
    from torch._dynamo.utils import counters

    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.exp(x) * 2.0 + 1.0
        if breaker == "print":
            print("between the graphs")
        else:
            y = y + y.sum().item()
        return torch.tanh(y) - x

    counters.clear()
    x = torch.randn(37, 19)
    out = torch.compile(f, backend="trn")(x.to("trn"))
    torch.testing.assert_close(out.cpu(), f(x), atol=1e-5, rtol=1e-5)
    assert sum(counters["graph_break"].values()) >= 1
    if breaker == "print":
        assert "between the graphs" in capsys.readouterr().out


def test_user_kernel_inside_compiled_region() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x) + 1.0
        out = torch.empty_like(y)
        scale_rows(y, out)
        return out * x

    x = torch.randn(200, 33)
    out = torch.compile(f, backend="trn")(x.to("trn"))
    torch.testing.assert_close(out.cpu(), (torch.sigmoid(x) + 1.0) * 3.0 * x, atol=1e-5, rtol=1e-5)


def test_mixed_devices_raise_torch_device_error() -> None:
    f = torch.compile(lambda a, b: torch.relu(a) + b, backend="trn")
    with pytest.raises(Exception, match="(?i)device"):
        f(torch.randn(8, 8).to("trn"), torch.randn(8, 8))


def test_dtype_change_recompiles() -> None:
    from torch._dynamo.utils import counters

    counters.clear()
    f = torch.compile(lambda x: torch.softmax(x * 0.5, -1), backend="trn")
    x = torch.randn(64, 40)
    out32 = f(x.to("trn"))
    frames = counters["stats"]["unique_graphs"]
    out16 = f(x.to(torch.bfloat16).to("trn"))
    assert counters["stats"]["unique_graphs"] == frames + 1  # the dtype guard failed: a new graph
    assert out16.dtype == torch.bfloat16 and out32.dtype == torch.float32
    torch.testing.assert_close(out32.cpu(), torch.softmax(x * 0.5, -1), atol=1e-6, rtol=1e-5)
    ref16 = torch.softmax(x.to(torch.bfloat16) * 0.5, -1)
    torch.testing.assert_close(out16.cpu().float(), ref16.float(), atol=1e-2, rtol=1e-2)
