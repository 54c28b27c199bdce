"""Big device ops run as one launch per thread on disjoint row blocks (stdlib_kernels/_util.py): same results."""

import torch

import trnlang
from stdlib_kernels import _util as U


def test_chunks_cover_exactly_with_aligned_boundaries():
    for n in (0, 1, 127, 128, 300, 1000, 4096):
        for parts in (1, 2, 3, 8):
            cs = U.chunks(n, parts)
            assert [x for lo, hi in cs for x in range(lo, hi)] == list(range(n))
            assert all(lo % 128 == 0 for lo, _ in cs) and len(cs) <= parts


def test_split_launches_match_cpu(monkeypatch):
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    monkeypatch.setenv("TRN_FALLBACK", "error")
    assert len(U.row_blocks(1000, 1 << 21)) == 2 and len(U.row_blocks(1000, 10)) == 1
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, 1100, generator=g)
    w, b = torch.randn(1100, generator=g), torch.randn(1100, generator=g)
    a, m = torch.randn(700, 300, generator=g), torch.randn(300, 640, generator=g)
    xt = x.to("trn")
    trnlang.reset_fallback_stats()
    torch.testing.assert_close(torch.softmax(xt, -1).cpu(), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.log_softmax(xt, 0).cpu(), torch.log_softmax(x, 0), rtol=1e-5, atol=1e-5)
    ln = torch.nn.functional.layer_norm
    torch.testing.assert_close(ln(xt, (1100,), w.to("trn"), b.to("trn")).cpu(), ln(x, (1100,), w, b),
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close((a.to("trn") @ m.to("trn")).cpu(), a @ m, rtol=1e-4, atol=1e-4)
    bias = torch.randn(640, generator=g)
    torch.testing.assert_close(torch.addmm(bias.to("trn"), a.to("trn"), m.to("trn")).cpu(), torch.addmm(bias, a, m),
                               rtol=1e-4, atol=1e-4)
    bb = torch.randn(4, 300, 200, generator=g)
    torch.testing.assert_close(torch.bmm(bb.to("trn"), bb.to("trn").mT).cpu(), torch.bmm(bb, bb.mT),
                               rtol=1e-4, atol=1e-3)
    assert trnlang.fallback_stats() == {}


def test_split_elementwise_matches_cpu(monkeypatch):
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1030, 1100, generator=g)
    row, col = torch.randn(1100, generator=g), torch.randn(1030, 1, generator=g)
    v = torch.randn(1 << 21, generator=g)
    three = torch.randn(3, 600, 700, generator=g)
    xt = x.to("trn")
    trnlang.reset_fallback_stats()
    torch.testing.assert_close((xt + row.to("trn")).cpu(), x + row)
    torch.testing.assert_close((xt * col.to("trn")).cpu(), x * col)
    torch.testing.assert_close(torch.tanh(xt.t()).cpu(), torch.tanh(x.t()), rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(torch.sigmoid(v.to("trn")).cpu(), torch.sigmoid(v), rtol=2e-6, atol=2e-6)
    torch.testing.assert_close((three.to("trn") - 1.5).cpu(), three - 1.5)
    y = xt.clone()
    y.mul_(2.0)  # in place: each block reads and writes its own rows
    torch.testing.assert_close(y.cpu(), x * 2)
    assert trnlang.fallback_stats() == {}


def test_split_layer_norm_backward_and_reductions_match_cpu(monkeypatch):
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1000, 1100, generator=g)  # 1000 rows: blocks of 512 and 488 (a ragged last tile)
    w, b, gy = torch.randn(1100, generator=g), torch.randn(1100, generator=g), torch.randn(1000, 1100, generator=g)
    ln = torch.nn.functional.layer_norm
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(ln(leaves[0], (1100,), leaves[1], leaves[2]), leaves, gy)
    trnlang.reset_fallback_stats()
    tl = [t.to("trn").requires_grad_() for t in (x, w, b)]
    got = torch.autograd.grad(ln(tl[0], (1100,), tl[1], tl[2]), tl, gy.to("trn"))
    for a, c in zip(got, want):
        torch.testing.assert_close(a.cpu(), c, rtol=1e-4, atol=1e-3)
    v = torch.randn((1 << 21) + 5, generator=g)
    vt = v.to("trn")
    torch.testing.assert_close(vt.sum().cpu(), v.double().sum().float(), rtol=1e-6, atol=1e-3)
    torch.testing.assert_close(vt.amax().cpu(), v.amax())
    torch.testing.assert_close(x.to("trn").sum(-1).cpu(), x.sum(-1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(vt.clone().cpu(), v)
    assert trnlang.fallback_stats() == {}


def test_column_sums_split_and_stay_accurate(monkeypatch):
    """Sums over leading dims (col_sum: ``ones.T @ tile`` on the Tensor engine) split their kept columns across
    threads; the small-M product sums each K tile from zero before adding it to PSUM, so the result is as
    accurate as the CPU's against a float64 reference."""
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(3)
    trnlang.reset_fallback_stats()
    for shape in [(4096, 1024), (3000, 700), (2, 300, 520)]:
        x = torch.randn(shape, generator=g)
        got = x.to("trn").sum(0).cpu().double()
        ref = x.double().sum(0)
        cpu_err = (x.sum(0).double() - ref).abs().max().item()
        assert (got - ref).abs().max().item() <= 4 * cpu_err + 1e-5, shape
    assert trnlang.fallback_stats() == {}


def test_split_attention_by_batch_and_by_kv_heads(monkeypatch):
    """Flash attention forward and backward split across threads by batch, or (one batch) by kv-head blocks that
    keep GQA groups whole: same results as the CPU, masks and causality included."""
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    monkeypatch.setenv("TRN_FALLBACK", "error")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    g = torch.Generator().manual_seed(4)
    trnlang.reset_fallback_stats()
    for b, h, hk, s, d, causal, masked in [(2, 4, 4, 256, 32, False, True), (1, 4, 2, 256, 64, True, False)]:
        q = torch.randn(b, h, s, d, generator=g)
        k, v = torch.randn(b, hk, s, d, generator=g), torch.randn(b, hk, s, d, generator=g)
        m = torch.randn(b, 1, s, s, generator=g) if masked else None
        gy = torch.randn(b, h, s, d, generator=g)
        kw = dict(is_causal=causal, enable_gqa=hk != h)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        want = sdpa(*leaves, attn_mask=m, **kw)
        wgrads = torch.autograd.grad(want, leaves, gy)
        tl = [t.to("trn").requires_grad_() for t in (q, k, v)]
        got = sdpa(*tl, attn_mask=m.to("trn") if masked else None, **kw)
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
        for a, c in zip(torch.autograd.grad(got, tl, gy.to("trn")), wgrads):
            torch.testing.assert_close(a.cpu(), c, rtol=1e-3, atol=1e-3)
    assert trnlang.fallback_stats() == {}


def test_split_scans_sorts_and_topk_match_cpu(monkeypatch):
    """Row kernels launched through ``U.split_rows`` (cumsum/cummax, sort, topk): every row block gets its own
    rows of every operand, values and indices equal to the CPU's."""
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(5)
    trnlang.reset_fallback_stats()
    for shape, d in [((1000, 1100), 1), ((3, 600, 700), 2), ((700, 1500), 0)]:
        x = torch.randn(shape, generator=g)
        xt = x.to("trn")
        torch.testing.assert_close(xt.cumsum(d).cpu(), x.cumsum(d), rtol=1e-4, atol=1e-3)
        for got, want in ((xt.cummax(d), x.cummax(d)), (xt.topk(8, d), x.topk(8, d)),
                          (xt.sort(dim=d, stable=True), x.sort(dim=d, stable=True)),
                          (xt.topk(3, d, largest=False), x.topk(3, d, largest=False))):
            assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    assert trnlang.fallback_stats() == {}


def test_split_convolution_by_batch(monkeypatch):
    """conv2d forward and input gradient run one batch block per thread (the weight gradient sums over the batch
    and stays one launch): same results as the CPU, groups and strides included."""
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    monkeypatch.setenv("TRN_FALLBACK", "error")
    conv = torch.nn.functional.conv2d
    g = torch.Generator().manual_seed(6)
    trnlang.reset_fallback_stats()
    for n, c, hw, co, k, s, groups in [(4, 32, 24, 32, 3, 1, 1), (3, 16, 30, 32, 3, 2, 2)]:
        x, w = torch.randn(n, c, hw, hw, generator=g), torch.randn(co, c // groups, k, k, generator=g)
        leaves = [t.clone().requires_grad_() for t in (x, w)]
        want = conv(*leaves, stride=s, padding=1, groups=groups)
        gy = torch.randn(want.shape, generator=g)
        wg = torch.autograd.grad(want, leaves, gy)
        tl = [t.to("trn").requires_grad_() for t in (x, w)]
        got = conv(*tl, stride=s, padding=1, groups=groups)
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-3)
        for a, b in zip(torch.autograd.grad(got, tl, gy.to("trn")), wg):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-3, atol=1e-2)
    assert trnlang.fallback_stats() == {}


def test_split_upsampling_matches_cpu(monkeypatch):
    """The separable interpolation matmuls split their rows / planes across threads (the matrix is shared)."""
    monkeypatch.setenv("TRN_NUM_THREADS", "2")
    monkeypatch.setenv("TRN_FALLBACK", "error")
    interp = torch.nn.functional.interpolate
    g = torch.Generator().manual_seed(8)
    trnlang.reset_fallback_stats()
    for shape, kw in [((4, 32, 40, 40), dict(scale_factor=2, mode="bilinear")),
                      ((2, 8, 60, 50), dict(size=(77, 31), mode="bicubic", align_corners=True))]:
        x = torch.randn(shape, generator=g)
        leaf, tleaf = x.clone().requires_grad_(), x.to("trn").requires_grad_()
        want, got = interp(leaf, **kw), interp(tleaf, **kw)
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
        gy = torch.randn(want.shape, generator=g)
        torch.testing.assert_close(torch.autograd.grad(got, tleaf, gy.to("trn"))[0].cpu(),
                                   torch.autograd.grad(want, leaf, gy)[0], rtol=1e-4, atol=1e-3)
    assert trnlang.fallback_stats() == {}
