"""Movement (stdlib_kernels/tensor/movement.py) and creation (stdlib_kernels/tensor/creation.py) on trn vs CPU.

Forward and backward through cat/stack/flip/roll/tril/triu/reflection+replication pads; factories
arange/linspace/logspace/eye; no fallbacks (``TRN_FALLBACK=error``), torch's own errors for bad input.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
import trnlang.config
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    trnlang.reset_fallback_stats()
    yield
    assert trnlang.fallback_stats() == {}


def _fwd_bwd(fn, *xs, dtype=torch.float32, tol=None):
    """Run ``fn`` on CPU copies and trn copies of ``xs``; compare outputs and input gradients."""
    cpu = [x.detach().clone().to(dtype).requires_grad_(x.is_floating_point()) for x in xs]
    trn = [x.detach().to(dtype).to("trn").requires_grad_(x.is_floating_point()) for x in xs]
    exp, got = fn(*cpu), fn(*trn)
    rtol, atol = tol or ((1e-5, 1e-6) if dtype == torch.float32 else (1e-2, 1e-2))
    assert_same(got, exp, rtol=rtol, atol=atol)
    if exp.requires_grad and exp.numel():
        g = torch.randn(exp.shape, generator=torch.Generator().manual_seed(0)).to(exp.dtype)
        exp.backward(g)
        got.backward(g.to("trn"))
        for c, t in zip(cpu, trn):
            if c.grad is not None:
                assert_same(t.grad, c.grad, rtol=rtol, atol=atol)


_shape = st.lists(st.integers(0, 140), min_size=1, max_size=3).map(tuple)


@_SETTINGS
@given(shape=_shape, extra=st.integers(0, 9), dim=st.integers(0, 2))
def test_cat_random_shapes(shape, extra, dim):
    dim = dim % len(shape)
    other = list(shape)
    other[dim] = extra
    _fwd_bwd(lambda a, b: torch.cat([a, b, a], dim), torch.randn(shape), torch.randn(other))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cat_stack_noncontiguous_and_dtypes(dtype):
    a = torch.randn(7, 130)
    _fwd_bwd(lambda x: torch.cat([x.t(), x[::2].t()], 1), a, dtype=dtype)
    _fwd_bwd(lambda x: torch.stack([x, x.flip(0)], 1), torch.randn(5, 3), dtype=dtype)
    _fwd_bwd(lambda x: torch.hstack([x, x]), torch.randn(4000), dtype=dtype)


def test_cat_legacy_empty_mixed_dtype_int64_and_out():
    a = torch.randn(3, 4)
    got = torch.cat([torch.empty(0, device="trn"), a.to("trn"), torch.empty(0, device="trn")])
    assert_same(got, a)
    mixed = torch.cat([a.to("trn"), a.to(torch.bfloat16).to("trn")], 1)
    assert_same(mixed, torch.cat([a, a.to(torch.bfloat16)], 1))
    ids = torch.tensor([[2**40 + 7, -3], [5, 2**33]])
    assert_same(torch.cat([ids.to("trn"), ids[:, :1].to("trn")], 1), torch.cat([ids, ids[:, :1]], 1))
    out = torch.empty(0, device="trn")
    torch.cat([a.to("trn"), a.to("trn")], out=out)
    assert_same(out, torch.cat([a, a]))


def test_cat_errors_are_torchs():
    a, b = torch.randn(2, 3), torch.randn(2, 4)
    with pytest.raises(RuntimeError) as cpu_err:
        torch.cat([a, b], 0)
    with pytest.raises(RuntimeError) as trn_err, trnlang.config.override(TRN_FALLBACK="silent"):
        torch.cat([a.to("trn"), b.to("trn")], 0)
    assert str(trn_err.value).split("\n")[0] == str(cpu_err.value).split("\n")[0]
    trnlang.reset_fallback_stats()


@_SETTINGS
@given(shape=st.lists(st.integers(1, 70), min_size=1, max_size=4).map(tuple), data=st.data())
def test_flip_roll_random(shape, data):
    nd = len(shape)
    dims = data.draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
    shifts = data.draw(st.lists(st.integers(-100, 100), min_size=len(dims), max_size=len(dims)))
    x = torch.randn(shape)
    _fwd_bwd(lambda t: t.flip(dims), x)
    _fwd_bwd(lambda t: t.roll(shifts, dims), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flip_roll_noncontiguous_long_and_flat(dtype):
    _fwd_bwd(lambda t: t.t().flip(0).roll(3, 1), torch.randn(9, 200), dtype=dtype)
    _fwd_bwd(lambda t: t.flip(0), torch.randn(5000), dtype=dtype)
    _fwd_bwd(lambda t: t.roll(-7), torch.randn(4, 33), dtype=dtype)
    _fwd_bwd(lambda t: torch.fliplr(t), torch.randn(3, 4, 5), dtype=dtype)
    b = torch.randn(6, 7) > 0
    assert_same(b.to("trn").flip(1), b.flip(1))
    assert_same(torch.arange(10).to("trn").roll(2), torch.arange(10).roll(2))


@_SETTINGS
@given(shape=st.tuples(st.integers(0, 3), st.integers(1, 140), st.integers(1, 70)), k=st.integers(-80, 80))
def test_tril_triu_random(shape, k):
    x = torch.randn(shape)
    _fwd_bwd(lambda t: t.tril(k), x)
    _fwd_bwd(lambda t: t.transpose(-1, -2).triu(k), x)


def test_tril_inplace_int_bf16():
    x = torch.randn(2, 3, 5, 6)
    t = x.to("trn")
    t.tril_(-1)
    assert_same(t, x.tril(-1))
    i = torch.randint(-5, 5, (7, 7), dtype=torch.int32)
    assert_same(i.to("trn").triu(2), i.triu(2))
    _fwd_bwd(lambda a: a.triu(), torch.randn(4, 9), dtype=torch.bfloat16)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 7), (2, 3)), ((3, 7), (0, 4)), ((2, 3, 7, 5), (2, 1, 3, 2)),
                                       ((1, 2, 3, 4, 3), (1, 2, 2, 1, 1, 2))])
def test_reflection_replication_pads(mode, shape, pad):
    _fwd_bwd(lambda t: F.pad(t, pad, mode=mode), torch.randn(shape))
    if len(shape) > 2:  # a non-contiguous input (batch dims swapped)
        _fwd_bwd(lambda t: F.pad(t.transpose(0, 1), pad, mode=mode), torch.randn(shape))


def test_negative_pads_and_empty_batch():
    _fwd_bwd(lambda t: F.pad(t, (-4, 5, 2, -3), mode="replicate"), torch.randn(2, 3, 4, 4))
    _fwd_bwd(lambda t: F.pad(t, (-1, 1, -2, 1), mode="reflect"), torch.randn(1, 3, 4, 4))
    _fwd_bwd(lambda t: F.pad(t, (2, -3), mode="reflect"), torch.randn(2, 3, 6))
    assert F.pad(torch.randn(0, 3, 3, device="trn"), (1, 2), mode="reflect").shape == (0, 3, 6)
    xb = torch.randn(2, 3, 4, 4, dtype=torch.bfloat16)
    for mode in ("reflect", "replicate"):  # bf16 forward native (backward declined: CPU bf16 accumulation order)
        assert torch.equal(F.pad(xb.to("trn"), (1, 2, 1, 1), mode=mode).cpu(), F.pad(xb, (1, 2, 1, 1), mode=mode))


# creation ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,kw", [((10,), {}), ((5, 100000, 3), {}), ((10, -7, -3), {}), ((0,), {}),
                                     ((10,), {"dtype": torch.int32}), ((-3.5, 1000.25, 0.37), {}),
                                     ((0, 10, 0.5), {"dtype": torch.bfloat16}), ((7,), {"dtype": torch.float32}),
                                     ((False, True, True), {})])
def test_arange(args, kw):
    got = torch.arange(*args, device="trn", **kw)
    exp = torch.arange(*args, **kw)
    assert got.dtype == exp.dtype
    if exp.dtype.is_floating_point:
        assert_same(got, exp, rtol=1.3e-6, atol=1e-5)
    else:
        assert torch.equal(got.cpu(), exp)


def test_arange_errors_are_torchs(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    for bad in [(0, 10, -1), (0, 10, 0)]:
        with pytest.raises(RuntimeError) as ce:
            torch.arange(*bad)
        with pytest.raises(RuntimeError) as te:
            torch.arange(*bad, device="trn")
        assert str(te.value) == str(ce.value)
    trnlang.reset_fallback_stats()


@pytest.mark.parametrize("steps", [0, 1, 2, 17, 10001])
def test_linspace_logspace(steps):
    dtype, tol = torch.float32, (1.3e-6, 1e-5)
    assert_same(torch.linspace(-2, 3, steps, device="trn", dtype=dtype), torch.linspace(-2, 3, steps, dtype=dtype),
                *tol)
    assert_same(torch.logspace(-2, 3, steps, device="trn", dtype=dtype),
                torch.logspace(-2, 3, steps, dtype=dtype), rtol=max(tol[0], 3e-6), atol=tol[1])
    assert_same(torch.logspace(0, 10, steps, base=2, device="trn", dtype=dtype),
                torch.logspace(0, 10, steps, base=2, dtype=dtype), *tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linspace_logspace_half_dtypes(dtype):
    """bf16/fp16 linspace equals the CPU's bit for bit (torch rounds every step in ``scalar_t``: step, index,
    product, sum); logspace within one rounding of the dtype."""
    for a, b, steps in ((-2.0, 50.0, 50), (-19.01, 56.76, 64), (68.88, 51.59, 300), (0.3, -91.9, 3000), (1.5, 7.0, 1)):
        assert torch.equal(torch.linspace(a, b, steps, device="trn", dtype=dtype).cpu(),
                           torch.linspace(a, b, steps, dtype=dtype))
        tol = 1.6e-2 if dtype == torch.bfloat16 else 1e-3
        assert_same(torch.logspace(a / 20, b / 20, steps, base=3.0, device="trn", dtype=dtype),
                    torch.logspace(a / 20, b / 20, steps, base=3.0, dtype=dtype), rtol=tol, atol=1e-5)
    out = torch.empty(3, 4, device="trn", dtype=dtype).t()  # a non-contiguous out= is resized like torch does
    torch.linspace(0, 1, 7, out=out)
    assert torch.equal(out.cpu(), torch.linspace(0, 1, 7, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool])
def test_eye_full(dtype):
    for n, m in [(3, 5), (300, 130), (1, 1), (0, 4)]:
        assert torch.equal(torch.eye(n, m, dtype=dtype, device="trn").cpu(), torch.eye(n, m, dtype=dtype))
    assert torch.equal(torch.full((3, 4), 1, dtype=dtype, device="trn").cpu(), torch.full((3, 4), 1, dtype=dtype))


def test_position_ids_pattern():
    """A transformer's ``arange(...).unsqueeze(0).expand(...)`` and a causal mask, all native."""
    pos = torch.arange(0, 37, dtype=torch.long, device="trn").unsqueeze(0).expand(4, -1)
    assert torch.equal(pos.cpu(), torch.arange(37).unsqueeze(0).expand(4, -1))
    mask = torch.ones(37, 37, device="trn").tril()
    assert torch.equal(mask.cpu(), torch.ones(37, 37).tril())


@pytest.mark.parametrize("case", ["flip0", "flip01", "flip1_3d", "flip_flat_ragged", "roll", "cat", "reflect",
                                  "replicate", "int64"])
def test_big_moves_split_into_row_blocks(case):
    """Moves above the split size run as one launch per thread on row blocks (flipped rows map to mirrored blocks)."""
    from stdlib_kernels import _util as U

    g = torch.Generator().manual_seed(3)
    n = max(512, int((2 * U.PARALLEL_MIN_WORK) ** 0.5) + 37)  # ragged row blocks
    x = torch.randn(n, n + 3, generator=g)
    fns = {
        "flip0": lambda t: t.flip(0),
        "flip01": lambda t: t.flip(0, 1),
        "flip1_3d": lambda t: t.view(1, n, n + 3).expand(2, n, n + 3).flip(1, 2),
        "flip_flat_ragged": lambda t: t.reshape(-1)[5:].flip(0),
        "roll": lambda t: t.roll(300, 0),
        "cat": lambda t: torch.cat([t[:, 1:], t[:, :7]], 1),
        "reflect": lambda t: F.pad(t[None, None], (2, 3, 200, 100), mode="reflect"),
        "replicate": lambda t: F.pad(t[None, None], (2, 3, 4, 300), mode="replicate"),
        "int64": lambda t: (t * 100).long().flip(0),
    }
    fn = fns[case]
    assert torch.equal(fn(x.to("trn")).cpu(), fn(x))


def test_profile_move_kernel():
    from stdlib_kernels.tensor.movement import move3

    x = torch.randn(1, 256, 1024, device="trn")
    out = torch.empty_like(x)
    prof = move3.profile(x, out, (False, True, True))
    assert prof.time_us > 0
    assert all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    assert prof.engines["dma"].instructions >= 2
    assert 0.0 < prof.mbu <= 1.0
    assert torch.equal(out.cpu(), x.cpu().flip(1, 2))


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_empty_non_batch_dim_raises_torchs_error(nd, mode):
    """Only the batch dim may be empty: the CPU raises for an empty channel dim, and so does trn (it declined)."""
    pads = {"reflect": [torch.nn.ReflectionPad1d, torch.nn.ReflectionPad2d, torch.nn.ReflectionPad3d],
            "replicate": [torch.nn.ReplicationPad1d, torch.nn.ReplicationPad2d, torch.nn.ReplicationPad3d]}
    pad = pads[mode][nd - 1](2)
    bad = torch.randn(3, 0, *([10] * nd))
    with pytest.raises(RuntimeError, match=f"{nd + 1}D or {nd + 2}D") as cpu:
        pad(bad)
    with pytest.raises(RuntimeError, match=f"{nd + 1}D or {nd + 2}D") as trn:
        pad(bad.to("trn"))
    assert str(cpu.value)[:60] in str(trn.value)
    ok = torch.randn(0, 3, *([10] * nd))  # an empty batch is fine
    assert pad(ok.to("trn")).shape == pad(ok).shape


@pytest.mark.parametrize("mod,shape", [(torch.nn.ReflectionPad1d(2), (2, 3, 10)),
                                       (torch.nn.ReflectionPad2d((1, 2, 3, 1)), (2, 3, 5, 6)),
                                       (torch.nn.ReplicationPad3d(1), (0, 2, 3, 4, 5)),
                                       (torch.nn.ReplicationPad1d((3, -1)), (2, 4))])
def test_pad_backward_complex64_natively(mod, shape):
    x = torch.randn(shape, dtype=torch.complex64, requires_grad=True)
    xt = x.detach().to("trn").requires_grad_()
    y, yt = mod(x), mod(xt)
    g = torch.randn(y.shape, dtype=torch.complex64)
    trnlang.reset_fallback_stats()
    y.backward(g)
    yt.backward(g.to("trn"))
    assert trnlang.fallback_stats() == {}
    torch.testing.assert_close(yt.detach().cpu(), y.detach())
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
