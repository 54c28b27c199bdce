"""trn tensors over memory the device layer did not allocate (DLPack capsules) run natively like any other."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.utils.dlpack as dl

import trnlang.device as td


@pytest.fixture
def strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")  # every op below must run natively


def test_a_dlpack_capsule_round_trip_aliases_and_runs_natively(strict: None) -> None:
    x = torch.arange(12.0).reshape(3, 4).to("trn")
    y = dl.from_dlpack(dl.to_dlpack(x))
    assert y.device.type == "trn" and y.data_ptr() == x.data_ptr() and y.shape == x.shape
    torch.testing.assert_close((y * 2 + 1).sum(1).cpu(), (torch.arange(12.0).reshape(3, 4) * 2 + 1).sum(1))
    y.add_(1.0)  # a kernel writing through the foreign storage: seen through the original tensor
    assert x.cpu()[0].tolist() == [1.0, 2.0, 3.0, 4.0]
    torch.testing.assert_close((y @ y.t()).cpu(), x.cpu() @ x.cpu().t())


def test_torch_from_dlpack_of_a_trn_tensor_aliases_it(strict: None) -> None:
    x = torch.randn(5, 7).to("trn")
    assert x.__dlpack_device__() == (dl.DLDeviceType.kDLExtDev, 0)
    y = torch.from_dlpack(x)
    assert y.device.type == "trn" and y.data_ptr() == x.data_ptr()
    torch.testing.assert_close(torch.softmax(y, -1).cpu(), torch.softmax(x.cpu(), -1))


def test_a_strided_view_exported_keeps_its_strides(strict: None) -> None:
    base = torch.arange(24.0).reshape(4, 6).to("trn")
    v = base[:, 1::2]  # non-contiguous
    y = dl.from_dlpack(dl.to_dlpack(v))
    assert y.stride() == v.stride()
    torch.testing.assert_close((y + 0).cpu(), v.cpu())


def test_the_cpu_fallback_sees_foreign_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """An op without a lowering runs on CPU views of the same bytes (no copy, no error)."""
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    a = torch.tensor([[2.0, 1.0], [1.0, 3.0]]).to("trn")
    y = dl.from_dlpack(dl.to_dlpack(a))
    before = td.fallback_stats().get("aten::linalg_eigvals", 0) + td.fallback_stats().get("aten::_linalg_eigvals", 0)
    got = torch.linalg.eigvals(y).cpu()
    torch.testing.assert_close(got, torch.linalg.eigvals(a.cpu()))
    assert td.fallback_stats().get("aten::linalg_eigvals", 0) + td.fallback_stats().get("aten::_linalg_eigvals", 0) \
        >= before  # counted as what it is: a fallback, on the foreign storage


def test_a_launch_reads_the_foreign_tensor_through_a_user_kernel(strict: None) -> None:
    import trnlang as trn
    import trnlang.language as tl

    @trn.kernel
    def double(x, out):
        tl.store(out[0:4, 0:8], tl.load(x[0:4, 0:8]) * 2.0)

    x = torch.randn(4, 8).to("trn")
    y = dl.from_dlpack(dl.to_dlpack(x))
    out = torch.empty_like(y)
    double(y, out)
    np.testing.assert_allclose(out.cpu().numpy(), 2 * x.cpu().numpy())


def test_cpu_dlpack_unchanged() -> None:
    """The patch leaves CPU tensors to torch: same answers with and without trnlang loaded."""
    code = ("import torch, torch.utils.dlpack as dl; x = torch.arange(4.0); "
            "print(x.__dlpack_device__(), torch.from_dlpack(x).data_ptr() == x.data_ptr(), "
            "dl.from_dlpack(dl.to_dlpack(x)).tolist())")
    outs = []
    for autoload in ("1", "0"):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**__import__("os").environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": autoload})
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1] and "True" in outs[0]
