"""Registration of the ``trn`` device and the ``torch.trn`` module."""

import torch

from tests.device.conftest import run_py


def test_autoload_registers_without_importing_trnlang():
    r = run_py("import sys, torch; x = torch.randn(2, device='trn'); "
               "print(x.device, 'trnlang' in sys.modules, torch.trn.is_available())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["trn:0", "True", "True"]


def test_import_trnlang_registers_when_autoload_is_off():
    r = run_py("import trnlang.device, torch; print(torch.ones(3, device='trn').sum().item())",
               env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "3.0"


def test_import_hook_before_torch_with_autoload_off():
    r = run_py("import trnlang.device, sys; assert 'torch' not in sys.modules; import torch; "
               "print(torch._C._get_privateuse1_backend_name(), hasattr(torch, 'trn'))",
               env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["trn", "True"]


def test_device_module():
    assert torch._C._get_privateuse1_backend_name() == "trn"
    assert torch.trn.is_available() and torch.trn.device_count() == 1 and torch.trn.current_device() == 0
    torch.trn.set_device(0)
    torch.trn.synchronize()
    with torch.trn.device(0):
        pass
    assert "NeuronCore" in torch.trn.get_device_name()
    assert torch.device("trn").type == "trn"


def test_memory_stats_track_hbm():
    import gc

    from trnlang.sim.targets import get_target

    gc.collect()  # device tensors in garbage cycles of earlier tests must not be freed mid-measurement
    gc.disable()
    try:
        _check_memory_stats(get_target())
    finally:
        gc.enable()


def _check_memory_stats(target) -> None:
    torch.trn.reset_peak_memory_stats()
    before = torch.trn.memory_allocated()
    x = torch.empty(1 << 16, device="trn")
    assert torch.trn.memory_allocated() - before == 4 << 16
    assert torch.trn.max_memory_allocated() >= torch.trn.memory_allocated()
    stats = torch.trn.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.trn.memory_allocated()
    free, total = torch.trn.mem_get_info()
    assert total == target.hbm_bytes_per_core and free == total - torch.trn.memory_allocated()
    del x
    assert torch.trn.memory_allocated() == before


def test_out_of_memory_is_torch_oom():
    import pytest

    with pytest.raises(torch.OutOfMemoryError, match="simulated HBM"):
        torch.empty(torch.trn.mem_get_info()[1] // 2 + 1, dtype=torch.int16, device="trn")


def test_seeding_is_reproducible():
    # the device has its own generator (like CUDA): torch.manual_seed seeds it too, streams differ from the CPU's
    torch.manual_seed(7)
    a = torch.randn(5, device="trn").cpu()
    torch.manual_seed(7)
    b = torch.randn(5, device="trn").cpu()
    assert torch.equal(a, b)
    torch.manual_seed(8)
    assert not torch.equal(torch.randn(5, device="trn").cpu(), a)
    torch.trn.manual_seed(3)
    s = torch.trn.get_rng_state()
    c = torch.rand(4, device="trn").cpu()
    torch.trn.set_rng_state(s)
    assert torch.equal(torch.rand(4, device="trn").cpu(), c)


def test_accelerator():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "trn"
    assert torch.accelerator.device_count() == 1
    torch.accelerator.synchronize()
    x = torch.empty(256, device="trn")
    assert torch.accelerator.memory_allocated() >= x.numel() * 4


def test_autocast_bf16():
    lin = torch.nn.Linear(8, 4).to("trn")
    x = torch.randn(3, 8, device="trn")
    with torch.autocast(device_type="trn", dtype=torch.bfloat16):
        y = lin(x)
        z = x + x
    assert y.dtype == torch.bfloat16 and z.dtype == torch.float32
    ref = torch.nn.functional.linear(x.cpu().bfloat16(), lin.weight.cpu().bfloat16(), lin.bias.cpu().bfloat16())
    torch.testing.assert_close(y.cpu(), ref, rtol=2e-2, atol=2e-2)


def test_generated_methods():
    x = torch.ones(2)
    assert x.trn().is_trn and not x.is_trn
    m = torch.nn.Linear(2, 2).trn()
    assert m.weight.device.type == "trn"
