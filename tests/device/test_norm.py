"""The norm family (stdlib_kernels/nn/norm.py): layer/group/batch/instance norm forward and backward, trn vs CPU."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.nn import norm as N
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}


def _leaf(t: torch.Tensor | None, dev: str) -> torch.Tensor | None:
    return None if t is None else t.detach().to(dev).requires_grad_(t.is_floating_point())


def _compare(fn, tensors, dtype, grads=True, gtol=None):
    """Run ``fn`` on CPU and trn copies of ``tensors``; compare outputs and (optionally) input gradients."""
    rtol, atol = _TOL[dtype]
    cpu = [_leaf(t, "cpu") for t in tensors]
    dev = [_leaf(t, "trn") for t in tensors]
    trnlang.reset_fallback_stats()
    ref = fn(*cpu)
    out = fn(*dev)
    assert_same(out, ref, rtol=rtol, atol=atol)
    if grads:
        g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        ref.backward(g)
        out.backward(g.to("trn"))
        grt, gat = gtol or (rtol, atol)
        for c, d in zip(cpu, dev):
            if c is not None and c.grad is not None:
                assert_same(d.grad, c.grad, rtol=grt, atol=gat * max(1.0, float(c.grad.abs().max())))
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@_SETTINGS
@given(rows=st.sampled_from([1, 3, 130]), n=st.sampled_from([1, 7, 200]), affine=st.booleans())
def test_layer_norm(dtype, rows, n, affine):
    g = torch.Generator().manual_seed(rows * 1000 + n)
    x = torch.randn(rows, n, generator=g).to(dtype)
    w = torch.randn(n, generator=g).to(dtype) if affine else None
    b = torch.randn(n, generator=g).to(dtype) if affine else None
    _compare(lambda x, w, b: F.layer_norm(x, (n,), w, b, eps=1e-5), [x, w, b], dtype)


def test_layer_norm_multi_dim_noncontiguous_weight_only():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 130, 5, generator=g)
    w = torch.randn(6, 5, generator=g)
    _compare(lambda x, w: F.layer_norm(x.transpose(0, 1), (6, 5), w), [x, w], torch.float32)


def test_layer_norm_long_rows_stream():
    """Rows longer than one SBUF chunk take the streaming kernels, forward and backward."""
    n = N.CHUNK + 5
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, n, generator=g) * 3 + 1
    w, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    _compare(lambda x, w, b: F.layer_norm(x, (n,), w, b), [x, w, b], torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_rows_split_between_threads(dtype, monkeypatch):
    """A big input runs as one launch per thread on disjoint row ranges (ragged last range, stats included)."""
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(300, 4000, generator=g) * 2 + 5).to(dtype)
    w, b = torch.randn(4000, generator=g).to(dtype), torch.randn(4000, generator=g).to(dtype)
    trnlang.reset_fallback_stats()
    out, mean, rstd = torch.native_layer_norm(x.to("trn"), (4000,), w.to("trn"), b.to("trn"), 1e-5)
    ro, rm, rr = torch.native_layer_norm(x, (4000,), w, b, 1e-5)
    tol = _TOL[dtype]
    assert_same(out, ro, rtol=tol[0], atol=tol[1])
    assert_same(mean, rm, rtol=tol[0], atol=tol[1])
    assert_same(rstd, rr, rtol=tol[0], atol=tol[1])
    assert trnlang.fallback_stats() == {}


def test_layer_norm_large_offset_rows():
    """One-pass moments (shifted sums) stay accurate for rows far from zero and for constant rows."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(5, 1000, generator=g)
    x[0] += 1e4
    x[1] *= 1e-3
    x[2] = 3.0
    x[3, 0] = 1e3
    _compare(lambda x: F.layer_norm(x, (1000,)), [x], torch.float32, grads=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@_SETTINGS
@given(rows=st.sampled_from([1, 130]), n=st.sampled_from([1, 33]), weighted=st.booleans())
def test_rms_norm(dtype, rows, n, weighted):
    g = torch.Generator().manual_seed(rows + n)
    x = torch.randn(rows, 2, n, generator=g).to(dtype)
    w = torch.randn(n, generator=g).to(dtype) if weighted else None
    _compare(lambda x, w: F.rms_norm(x.transpose(0, 1), (n,), w, eps=1e-5), [x, w], dtype,
             gtol=(5e-2, 5e-2) if dtype == torch.bfloat16 else None)
    with torch.no_grad():  # inference goes below autograd: the fused kernel directly
        trnlang.reset_fallback_stats()
        xd = x.to("trn")
        ref = F.rms_norm(x, (n,), w)
        assert_same(F.rms_norm(xd, (n,), None if w is None else w.to("trn")), ref, rtol=_TOL[dtype][0],
                    atol=_TOL[dtype][1])
        assert trnlang.fallback_stats() == {}


def test_layer_norm_empty_and_module():
    xe = torch.randn(0, 8)
    out = F.layer_norm(xe.to("trn"), (8,))
    assert out.shape == (0, 8) and out.device.type == "trn"
    m = torch.nn.LayerNorm(16)
    x = torch.randn(4, 16)
    md = torch.nn.LayerNorm(16).to("trn")
    md.load_state_dict(m.state_dict())
    assert_same(md(x.to("trn")), m(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@_SETTINGS
@given(n=st.sampled_from([1, 3]), groups=st.sampled_from([1, 2, 4]), hw=st.sampled_from([(1, 1), (5, 3)]),
       affine=st.booleans())
def test_group_norm(dtype, n, groups, hw, affine):
    c = 4
    g = torch.Generator().manual_seed(n * 10 + groups)
    x = (torch.randn(n, c, *hw, generator=g) * 2 + 1).to(dtype)
    w = torch.randn(c, generator=g).to(dtype) if affine else None
    b = torch.randn(c, generator=g).to(dtype) if affine else None
    _compare(lambda x, w, b: F.group_norm(x, groups, w, b), [x, w, b], dtype, gtol=(5e-2, 5e-2)
             if dtype == torch.bfloat16 else None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,groups", [((2, 6, 7, 9), 3), ((3, 64, 5, 5), 32), ((1, 4, 64, 65), 2)])
def test_group_norm_one_kernel_and_long_groups(dtype, shape, groups):
    """Groups up to one SBUF chunk run as one kernel (non-contiguous input here); longer ones stream."""
    g = torch.Generator().manual_seed(shape[1])
    x = (torch.randn(shape[0], shape[2], shape[3], shape[1], generator=g) * 3 + 2).to(dtype).permute(0, 3, 1, 2)
    w = torch.randn(shape[1], generator=g).to(dtype)
    b = torch.randn(shape[1], generator=g).to(dtype)
    trnlang.reset_fallback_stats()
    got = torch.native_group_norm(x.to("trn"), w.to("trn"), b.to("trn"), shape[0], shape[1],
                                  shape[2] * shape[3], groups, 1e-5)
    ref = torch.native_group_norm(x, w, b, shape[0], shape[1], shape[2] * shape[3], groups, 1e-5)
    tol = _TOL[dtype]
    for a, r in zip(got, ref):
        assert_same(a, r, rtol=tol[0], atol=tol[1])
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 7), (3, 4, 5, 6)])
def test_batch_norm_training_updates_running_stats(dtype, shape):
    c = shape[1]
    g = torch.Generator().manual_seed(len(shape))
    x = (torch.randn(*shape, generator=g) * 2 + 0.5).to(dtype)
    w, b = torch.randn(c, generator=g).to(dtype), torch.randn(c, generator=g).to(dtype)
    rm, rv = torch.randn(c, generator=g).to(dtype), torch.rand(c, generator=g).to(dtype) + 0.5
    rmt, rvt = rm.to("trn"), rv.to("trn")

    def fn(x, w, b):
        on = x.device.type == "trn"
        return F.batch_norm(x, rmt if on else rm, rvt if on else rv, w, b, training=True, momentum=0.3)

    _compare(fn, [x, w, b], dtype)
    rtol, atol = _TOL[dtype]
    assert_same(rmt, rm, rtol=rtol, atol=atol)
    assert_same(rvt, rv, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_eval_and_no_stats(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 4, 5, 5, generator=g).to(dtype)
    w, b = torch.randn(4, generator=g).to(dtype), torch.randn(4, generator=g).to(dtype)
    rm, rv = torch.randn(4, generator=g).to(dtype), (torch.rand(4, generator=g) + 0.5).to(dtype)

    def ev(x, w, b):
        return F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, training=False)

    _compare(ev, [x, w, b], dtype)
    _compare(lambda x: F.batch_norm(x, None, None, training=True), [x.transpose(2, 3)], dtype)
    _compare(lambda x: F.instance_norm(x), [x], dtype)


def test_batch_norm_module_training_step():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1, bias=False), torch.nn.BatchNorm2d(4))
    bn = torch.nn.BatchNorm2d(4)
    x = torch.randn(2, 4, 6, 6)
    bnt = torch.nn.BatchNorm2d(4).to("trn")
    trnlang.reset_fallback_stats()
    out = bnt(x.to("trn"))
    ref = bn(x)
    assert_same(out, ref, rtol=1e-4, atol=1e-4)
    assert_same(bnt.running_mean, bn.running_mean, rtol=1e-5, atol=1e-6)
    assert_same(bnt.running_var, bn.running_var, rtol=1e-5, atol=1e-6)
    assert int(bnt.num_batches_tracked.cpu()) == 1
    del m


def test_bad_input_raises_torch_error():
    with pytest.raises(RuntimeError, match="normalized_shape|Expected"):
        F.layer_norm(torch.randn(4, 6).to("trn"), (5,))
    with pytest.raises(RuntimeError, match="divisible|group"):
        F.group_norm(torch.randn(2, 5, 3).to("trn"), 2)


def test_profile_layer_norm_is_sane():
    x = torch.randn(256, 512).to("trn")
    w, b = torch.randn(1, 512).to("trn"), torch.randn(1, 512).to("trn")
    out = torch.empty(256, 512, device="trn")
    mean, rstd = torch.empty(256, 1, device="trn"), torch.empty(256, 1, device="trn")
    prof = N.ln_fwd.profile(x, w, b, out, mean, rstd, N.LnFwd(1e-5, has_w=True, has_b=True))
    assert prof.time_us > 0 and prof.cycles > 0
    assert all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    assert 0 < prof.mbu <= 1
    assert prof.dma_bytes >= 2 * 4 * 256 * 512
    ref = F.layer_norm(x.cpu(), (512,), w.cpu()[0], b.cpu()[0])
    assert_same(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("update", [True, False])
def test_batch_norm_with_and_without_update_ops(update):
    g = torch.Generator().manual_seed(7)
    x, w, b = torch.randn(3, 4, 5, generator=g), torch.randn(4, generator=g), torch.randn(4, generator=g)
    rm, rv = torch.randn(4, generator=g), torch.rand(4, generator=g) + 0.5
    rmt, rvt = rm.to("trn"), rv.to("trn")
    op = torch.ops.aten._batch_norm_with_update if update else torch.ops.aten._batch_norm_no_update

    def fn(x, w, b):
        on = x.device.type == "trn"
        return op(x, w, b, rmt if on else rm, rvt if on else rv, 0.1, 1e-5)[0]

    _compare(fn, [x, w, b], torch.float32)
    assert_same(rmt, rm)
    assert_same(rvt, rv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_finalize_updates_running_stats_like_cpu(dtype):
    """``bn_finalize`` (one launch for the per-channel statistics, the running-stat update and the per-row
    coefficients) against the CPU, training and eval, with and without affine parameters."""
    import trnlang
    from stdlib_kernels.nn import batchnorm as BN

    g = torch.Generator().manual_seed(7)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    trnlang.reset_fallback_stats()
    for shape in [(8, 6, 5, 5), (3, 2500, 3), (1, 4, 9)]:
        c = shape[1]
        x = torch.randn(shape, generator=g).to(dtype)
        w, b = torch.randn(c, generator=g).to(dtype), torch.randn(c, generator=g).to(dtype)
        rm, rv = torch.randn(c, generator=g).to(dtype), (torch.rand(c, generator=g) + 0.5).to(dtype)
        rmt, rvt = rm.to("trn"), rv.to("trn")
        for affine in (True, False):
            ww, bb = (w, b) if affine else (None, None)
            want = F.batch_norm(x, rm, rv, ww, bb, training=True, momentum=0.25)
            got = F.batch_norm(x.to("trn"), rmt, rvt, ww.to("trn") if affine else None,
                               bb.to("trn") if affine else None, training=True, momentum=0.25)
            assert_same(got, want, **tol)
            assert_same(rmt, rm, **tol)
            assert_same(rvt, rv, **tol)
            assert_same(F.batch_norm(x.to("trn"), rmt, rvt, training=False), F.batch_norm(x, rm, rv, training=False),
                        **tol)
    assert trnlang.fallback_stats() == {}
    m, v = torch.randn(4, 300).to("trn"), torch.rand(4, 300).to("trn")
    p = [torch.randn(1, 300).to("trn") for _ in range(4)]
    o = [torch.empty(1, 300, device="trn") for _ in range(2)] + [torch.empty(4, 300, device="trn") for _ in range(2)]
    spec = BN.BnFinish(1e-5, 0.1, 1.0, train=True, has_w=True, has_b=True, upd_m=True, upd_v=True)
    prof = BN.bn_finalize.profile(m, v, *p, *o, spec)
    assert prof.time_us > 0 and all(0 <= e.utilization <= 1 for e in prof.engines.values())


@pytest.mark.parametrize("tile", [1, 128])
@pytest.mark.parametrize("rows", [1, 130, 300])
def test_ln_kernels_in_both_tile_orders(tile, rows):
    """``ln_fwd`` / ``ln_bwd`` give the same results in the host order (one row per tile) and the device order."""
    g = torch.Generator().manual_seed(rows)
    n = 96
    x, w, b = torch.randn(rows, n, generator=g) * 3 + 1, torch.randn(1, n, generator=g), torch.randn(1, n, generator=g)
    dy = torch.randn(rows, n, generator=g)
    out, mean, rstd = torch.empty(rows, n), torch.empty(rows, 1), torch.empty(rows, 1)
    N.ln_fwd(x, w, b, out, mean, rstd, N.LnFwd(1e-5, has_w=True, has_b=True, tile=tile))
    ref, rm, rr = torch.native_layer_norm(x.double(), (n,), w[0].double(), b[0].double(), 1e-5)
    torch.testing.assert_close(out, ref.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean, rm.float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rstd, rr.float(), rtol=1e-5, atol=1e-6)
    blocks = -(-rows // min(128, rows))
    dx, pw, pb = torch.empty(rows, n), torch.empty(blocks, n), torch.empty(blocks, n)
    N.ln_bwd(dy, x, mean, rstd, w, dx, pw, pb, N.LnBwd(has_w=True, want_dx=True, want_wb=True, tile=tile))
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward(dy.double(), x.double(), (n,), rm, rr, w[0].double(),
                                                           b[0].double(), [True, True, True])
    torch.testing.assert_close(dx, gx.float(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(pw.sum(0), gw.float(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(pb.sum(0), gb.float(), rtol=1e-4, atol=1e-4)


def test_split_layer_norm_reuses_bound_launches_only_for_the_same_memory():
    """The split forward's bound launches are keyed on the addresses: other tensors get their own, right, results."""
    from stdlib_kernels import _util as U

    n = 1024
    rows = max(256, -(-U.PARALLEL_MIN_WORK // n))
    xs = [torch.randn(rows, n) for _ in range(2)]
    w, b = torch.randn(n), torch.randn(n)
    wt, bt = w.to("trn"), b.to("trn")
    before = len(N._LN_LAUNCHES.entries)
    for _ in range(2):
        for x in xs:
            assert_same(F.layer_norm(x.to("trn"), (n,), wt, bt), F.layer_norm(x, (n,), w, b), rtol=1e-4, atol=1e-4)
    if U.num_threads() > 1:
        assert len(N._LN_LAUNCHES.entries) > before


def test_bound_launches_keep_only_native_launches():
    from stdlib_kernels import _util as U

    cache = U.BoundLaunches(size=2)
    made = []
    assert cache.get(("a",), lambda: made.append(1) or [print]) == [print]
    assert cache.get(("a",), lambda: made.append(1) or [print]) == [print]
    assert len(made) == 2 and cache.entries == {}  # not native: made every time, never kept
