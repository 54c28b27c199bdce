"""memory.resize_storage: a trn storage resized in place (what FSDP2's free/re-allocate of params needs)."""

import torch

import trnlang.device  # noqa: F401 - registers trn
from trnlang.device import memory


def test_grow_keeps_bytes_and_every_tensor_follows() -> None:
    t = torch.arange(8.0, device="trn")
    view = t[2:6]
    st = t.untyped_storage()
    memory.resize_storage(st, 64)
    assert st.nbytes() == 64 and t.untyped_storage().nbytes() == 64
    assert t.cpu().tolist() == [float(i) for i in range(8)] and view.cpu().tolist() == [2.0, 3.0, 4.0, 5.0]
    t.mul_(2)  # a kernel launch on the new bytes
    assert view.cpu().tolist() == [4.0, 6.0, 8.0, 10.0]


def test_free_then_reallocate_like_fsdp2() -> None:
    t = torch.ones(1024, device="trn")
    st = t.untyped_storage()
    before = torch.trn.memory_allocated()
    memory.resize_storage(st, 0)
    assert st.nbytes() == 0 and torch.trn.memory_allocated() == before - 4096
    memory.resize_storage(st, 4096)
    assert torch.trn.memory_allocated() == before
    t.copy_(torch.arange(1024.0))
    assert torch.equal(t.cpu(), torch.arange(1024.0)) and torch.equal((t + 1).cpu(), torch.arange(1024.0) + 1)
