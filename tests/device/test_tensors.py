"""``trn`` tensors behave like CPU tensors: creation, copies, views and aliasing, printing, saving, autograd."""

import io

import pytest
import torch

from tests.device.conftest import assert_same

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool, torch.float64,
          torch.uint8, torch.complex64]


@pytest.mark.filterwarnings("ignore:Casting complex values")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_and_copy_across_dtypes(dtype):
    src = (torch.randn(3, 5) * 10).to(dtype)
    t = src.to("trn")
    assert t.device == torch.device("trn:0") and t.dtype == dtype and t.shape == src.shape
    assert torch.equal(t.cpu(), src)
    for other in (torch.float32, torch.int32, torch.bfloat16):
        assert torch.equal(t.to(other).cpu(), src.to(other)), other
        dst = torch.empty(3, 5, dtype=other, device="trn")
        dst.copy_(src)  # CPU -> trn with a cast
        assert torch.equal(dst.cpu(), src.to(other))
        back = torch.empty(3, 5, dtype=other)
        back.copy_(t)  # trn -> CPU with a cast
        assert torch.equal(back, src.to(other))


def test_creation_ops():
    assert torch.equal(torch.zeros(2, 3, device="trn").cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.ones(4, dtype=torch.int32, device="trn").cpu(), torch.ones(4, dtype=torch.int32))
    assert torch.equal(torch.full((2, 2), 3.5, device="trn").cpu(), torch.full((2, 2), 3.5))
    assert torch.equal(torch.arange(10, device="trn").cpu(), torch.arange(10))
    assert torch.equal(torch.eye(3, device="trn").cpu(), torch.eye(3))
    assert torch.equal(torch.linspace(0, 1, 5, device="trn").cpu(), torch.linspace(0, 1, 5))
    t = torch.tensor([[1, 2], [3, 4]], device="trn")
    assert t.device.type == "trn" and t.tolist() == [[1, 2], [3, 4]]
    e = torch.empty_strided((2, 3), (1, 2), device="trn")
    assert e.stride() == (1, 2)
    x = torch.randn(2, 3, device="trn")
    for y in (torch.zeros_like(x), torch.empty_like(x), x.new_ones(4), torch.rand_like(x)):
        assert y.device.type == "trn"
    assert torch.randn(2, 3, device="trn").shape == (2, 3)
    assert torch.empty(0, 3, device="trn").numel() == 0


def test_non_dense_to_keeps_values_and_dense_strides_are_preserved():
    base = torch.arange(24.).reshape(4, 6)
    t = base.to("trn")
    tt = t.t()
    assert tt.stride() == (1, 6) and tt.to("cpu").stride() == (1, 6)  # dense: strides kept
    sl = t[:, ::2]
    assert torch.equal(sl.cpu(), base[:, ::2]) and sl.cpu().is_contiguous()
    assert torch.equal(t.t()[1:].cpu(), base.t()[1:])
    assert torch.equal(t.t()[1:].contiguous().cpu(), base.t()[1:].contiguous())


def test_views_share_memory_and_offsets():
    b = torch.zeros(4, 4, device="trn")
    v = b[1:3, 1:3]
    assert v._base is b and v.storage_offset() == 5 and v.data_ptr() - b.data_ptr() == 20
    v.fill_(1)
    v.add_(1)
    b.t()[0].add_(5)
    flat = b.view(16)
    flat[3] = 7.0
    ref = torch.zeros(4, 4)
    ref[1:3, 1:3] = 2
    ref.t()[0] += 5
    ref.view(16)[3] = 7
    assert torch.equal(b.cpu(), ref)
    assert b.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    u = b.unsqueeze(0).expand(2, 4, 4)
    assert u.stride() == (0, 4, 1) and torch.equal(u[1].cpu(), ref)
    assert torch.equal(b.view(torch.int32).cpu(), ref.view(torch.int32))
    assert torch.equal(b.reshape(2, 8).cpu(), ref.reshape(2, 8))
    assert torch.equal(b.diagonal().cpu(), ref.diagonal())
    assert torch.equal(b.unfold(0, 2, 1).cpu(), ref.unfold(0, 2, 1))
    assert torch.equal(b.as_strided((2, 2), (1, 4), 1).cpu(), ref.as_strided((2, 2), (1, 4), 1))


def test_inplace_and_out_aliasing():
    x = torch.arange(6.).reshape(2, 3)
    t = x.to("trn")
    v = t[0]
    v.mul_(10)  # native in-place through a view
    assert torch.equal(t.cpu()[0], x[0] * 10)
    torch.add(t, t, out=t)  # out is an input
    x = x.clone()
    x[0] *= 10
    assert torch.equal(t.cpu(), x * 2)
    o = torch.empty(0, device="trn")
    r = torch.sub(t, 1, out=o)
    assert r is o and torch.equal(o.cpu(), x * 2 - 1)
    s = torch.empty(2, 3, device="trn")
    torch.sin(t, out=s)  # fallback out=
    assert torch.allclose(s.cpu(), torch.sin(x * 2))
    t.t().sin_()  # fallback in place on a transposed view
    assert torch.allclose(t.cpu(), torch.sin(x * 2))
    z = t[:, 1:]
    torch.cos(z, out=z)  # fallback out= aliasing its input, through a view
    assert torch.allclose(t.cpu()[:, 1:], torch.cos(torch.sin(x * 2)[:, 1:]))


def test_overlapping_inplace_errors_like_cpu():
    t = torch.zeros(1, 3, device="trn").expand(2, 3)
    with pytest.raises(RuntimeError, match="single memory location"):
        t.add_(1)


def test_device_mismatch_raises():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="trn") + torch.ones(3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.sin(torch.ones(3), out=torch.ones(3, device="trn"))
    assert torch.equal((torch.ones(3, device="trn") + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))


def test_item_printing_and_scalar_reads():
    t = torch.tensor([1.5, -2.0], device="trn")
    assert t[0].item() == 1.5 and t.sum().item() == -0.5
    assert repr(t) == "tensor([ 1.5000, -2.0000], device='trn:0')"
    assert "grad_fn" in repr(t.requires_grad_() * 2)
    assert repr(torch.zeros(0, device="trn")) == "tensor([], device='trn:0')"
    assert bool(torch.ones(1, device="trn")) and int(torch.tensor(3, device="trn")) == 3


def test_save_and_load():
    t = torch.arange(12.).reshape(3, 4).to("trn")
    buf = io.BytesIO()
    torch.save({"t": t, "view": t[1:, ::2]}, buf)
    buf.seek(0)
    d = torch.load(buf, map_location="cpu")
    assert d["t"].device.type == "cpu" and torch.equal(d["view"], torch.arange(12.).reshape(3, 4)[1:, ::2])
    assert d["view"].untyped_storage().data_ptr() == d["t"].untyped_storage().data_ptr()  # sharing kept
    buf.seek(0)
    d2 = torch.load(buf)
    assert d2["t"].device.type == "trn" and torch.equal(d2["view"].cpu(), d["view"])
    buf = io.BytesIO()
    torch.save(torch.nn.Linear(3, 2).to("trn").state_dict(), buf)
    buf.seek(0)
    assert torch.load(buf, map_location="cpu")["weight"].shape == (2, 3)


def test_module_to_and_parameters():
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    ref = [p.detach().clone() for p in m.parameters()]
    m.to("trn")
    assert all(p.device.type == "trn" and isinstance(p, torch.nn.Parameter) for p in m.parameters())
    assert all(torch.equal(p.detach().cpu(), r) for p, r in zip(m.parameters(), ref))
    assert m[1].running_mean.device.type == "trn"
    m.to("cpu")
    assert m[0].weight.device.type == "cpu"


def test_autograd_hooks_no_grad_inference_mode():
    p = torch.ones(3, device="trn", requires_grad=True)
    seen = []
    p.register_hook(lambda g: seen.append(g.cpu()) or g * 2)
    (p * 3).sum().backward()
    assert torch.equal(seen[0], torch.full((3,), 3.0)) and torch.equal(p.grad.cpu(), torch.full((3,), 6.0))
    with torch.no_grad():
        assert not (p * 2).requires_grad
    with torch.inference_mode():
        y = p * 2
    assert y.is_inference() and torch.equal(y.cpu(), torch.full((3,), 2.0))
    a = torch.randn(4, 5, device="trn", requires_grad=True)
    b = torch.randn(5, 2, device="trn", requires_grad=True)
    torch.softmax(a @ b, dim=-1).sum(0).mean().backward()
    ac, bc = a.detach().cpu().requires_grad_(), b.detach().cpu().requires_grad_()
    torch.softmax(ac @ bc, dim=-1).sum(0).mean().backward()
    assert_same(a.grad, ac.grad, 1e-5, 1e-6)
    assert_same(b.grad, bc.grad, 1e-5, 1e-6)


def test_resize_set_and_storage():
    t = torch.empty(0, device="trn")
    t.resize_(3, 4)
    t.fill_(2)
    assert t.shape == (3, 4) and t.sum().item() == 24
    t.resize_(2)
    assert t.tolist() == [2.0, 2.0]
    s = torch.empty(0, device="trn")
    s.set_(t)
    assert s.data_ptr() == t.data_ptr()
    s2 = torch.empty(0, device="trn").set_(t.untyped_storage(), 1, (2,), (1,))
    assert s2.tolist() == [2.0, 2.0] and s2.data_ptr() == t.data_ptr() + 4
    assert t.untyped_storage().cpu().nbytes() == t.untyped_storage().nbytes()


def test_deepcopy_and_storage_ops():
    import copy

    x = torch.arange(6.0).to("trn")
    y = copy.deepcopy(x[1:])
    assert y.device.type == "trn" and y.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0] and y.data_ptr() != x.data_ptr() + 4
    m = torch.nn.Linear(3, 2).to("trn")
    m2 = copy.deepcopy(m)
    assert m2.weight.device.type == "trn" and torch.equal(m2.weight.cpu(), m.weight.cpu())
    assert m2.weight.data_ptr() != m.weight.data_ptr()
    st = torch.UntypedStorage(16).to(device="trn")
    assert st.device.type == "trn" and st.nbytes() == 16
    assert x.untyped_storage().clone().device.type == "trn"
    assert "MiB allocated" in torch.trn.memory_summary()


def test_caching_allocator_reuses_freed_blocks_and_empties():
    torch.trn.empty_cache()
    x = torch.empty(3000, device="trn")
    ptr = x.data_ptr()
    keep = torch.ones(3000, device="trn")  # alive: never handed out again while it lives
    del x
    assert torch.trn.memory_reserved() >= torch.trn.memory_allocated() + 12000
    y = torch.empty(2990, device="trn")  # same size class: the freed block comes back
    assert y.data_ptr() == ptr and y.data_ptr() != keep.data_ptr()
    y.fill_(2.0)
    assert keep.cpu().sum().item() == 3000.0
    del y
    torch.trn.empty_cache()
    assert torch.trn.memory_reserved() == torch.trn.memory_allocated()
    # a CPU view keeps the block (and its memory) alive after the device tensor is gone
    z = torch.arange(100.0).to("trn")
    from trnlang.device import memory

    v = memory.cpu_view(z)
    del z
    w = torch.zeros(100, device="trn")
    assert v.sum().item() == 4950.0 and w.sum().item() == 0.0
