"""Fused RNN cells (stdlib_kernels/nn/rnn.py): nn.LSTM / nn.GRU / cells on trn vs CPU, forward and backward."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    trnlang.reset_fallback_stats()
    yield
    assert trnlang.fallback_stats() == {}


def _pair(cls, *args, dtype=torch.float32, **kw):
    torch.manual_seed(0)
    cpu = cls(*args, **kw).to(dtype)
    trn = cls(*args, **kw).to(dtype).to("trn")
    trn.load_state_dict(cpu.state_dict())
    return cpu, trn


def _check_layer(cls, in_size, hidden, seq, batch, dtype=torch.float32, with_state=False, **kw):
    cpu, trn = _pair(cls, in_size, hidden, dtype=dtype, **kw)
    bf = kw.get("batch_first", False)
    dirs = 2 if kw.get("bidirectional") else 1
    shape = (batch, seq, in_size) if bf else (seq, batch, in_size)
    x = torch.randn(shape).to(dtype)
    xc, xt = x.clone().requires_grad_(), x.to("trn").requires_grad_()
    state = None
    if with_state:
        h0 = torch.randn(kw.get("num_layers", 1) * dirs, batch, hidden).to(dtype)
        state = (h0, torch.randn_like(h0)) if cls is torch.nn.LSTM else h0
    st_c = state
    st_t = tuple(s.to("trn") for s in state) if isinstance(state, tuple) else (
        state.to("trn") if state is not None else None)
    oc, hc = cpu(xc, st_c)
    ot, ht = trn(xt, st_t)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert_same(ot, oc, **tol)
    hcs = hc if isinstance(hc, tuple) else (hc,)
    hts = ht if isinstance(ht, tuple) else (ht,)
    for a, b in zip(hts, hcs):
        assert_same(a, b, **tol)
    g = torch.randn(oc.shape).to(dtype)
    (oc * g).float().sum().add(hcs[0].float().sum()).backward()
    (ot * g.to("trn")).float().sum().add(hts[0].float().sum()).backward()
    gtol = tol if dtype == torch.float32 else dict(rtol=5e-2, atol=5e-2)
    assert_same(xt.grad, xc.grad, **gtol)
    for (name, pc), pt in zip(cpu.named_parameters(), trn.parameters()):
        assert_same(pt.grad, pc.grad, **gtol)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_layers_multilayer_bidirectional_batch_first(cls):
    _check_layer(cls, 5, 7, seq=4, batch=3, num_layers=2, bidirectional=True, batch_first=True)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_layers_no_bias_initial_state(cls):
    _check_layer(cls, 5, 7, seq=3, batch=3, bias=False, with_state=True)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
def test_layers_bf16(cls):
    _check_layer(cls, 5, 7, seq=3, batch=3, dtype=torch.bfloat16)


@_SETTINGS
@given(batch=st.sampled_from([1, 130]), hidden=st.sampled_from([1, 129]))
def test_layer_shapes(batch, hidden):
    """Size-1 and ragged (> 128 rows / columns) batch and hidden sizes."""
    _check_layer(torch.nn.LSTM, 5, hidden, seq=2, batch=batch)
    _check_layer(torch.nn.GRU, 5, hidden, seq=2, batch=batch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cells_fwd_bwd_and_fused_inference(dtype):
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for cls in (torch.nn.LSTMCell, torch.nn.GRUCell):
        cpu, trn = _pair(cls, 5, 7, dtype=dtype)
        x = torch.randn(3, 5).to(dtype)
        h = torch.randn(3, 7).to(dtype)
        state = (h, torch.randn(3, 7).to(dtype)) if cls is torch.nn.LSTMCell else h
        st_t = tuple(s.to("trn") for s in state) if isinstance(state, tuple) else state.to("trn")
        with torch.no_grad():  # LSTMCell: the fully fused kernel (matmuls + gates)
            rc, rt = cpu(x, state), trn(x.to("trn"), st_t)
        for a, b in zip(rt if isinstance(rt, tuple) else (rt,), rc if isinstance(rc, tuple) else (rc,)):
            assert_same(a, b, **tol)
        xc, xt = x.clone().requires_grad_(), x.to("trn").requires_grad_()
        oc, ot = cpu(xc, state), trn(xt, st_t)
        oc = oc[0] if isinstance(oc, tuple) else oc
        ot = ot[0] if isinstance(ot, tuple) else ot
        oc.float().sum().backward()
        ot.float().sum().backward()
        assert_same(xt.grad, xc.grad, **(tol if dtype == torch.float32 else dict(rtol=5e-2, atol=5e-2)))


def test_empty_batch():
    cpu, trn = _pair(torch.nn.LSTM, 4, 5)
    oc, _ = cpu(torch.randn(3, 0, 4))
    ot, _ = trn(torch.randn(3, 0, 4, device="trn"))
    assert ot.shape == oc.shape


def test_profile_fused_cell():
    from stdlib_kernels.nn.rnn import lstm_cell_fused

    b, i, h = 32, 64, 64
    x, hx, cx = torch.randn(b, i), torch.randn(b, h), torch.randn(b, h)
    wih, whh, bias = torch.randn(4 * h, i) * 0.1, torch.randn(4 * h, h) * 0.1, torch.randn(4 * h)
    hy, cy = torch.empty(b, h, device="trn"), torch.empty(b, h, device="trn")
    prof = lstm_cell_fused.profile(*(t.to("trn") for t in (x, hx, cx, wih, whh, bias)), hy, cy)
    assert prof.time_us > 0 and prof.flops > 0
    assert all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    rh, rc = torch.lstm_cell(x, (hx, cx), wih, whh, bias, None)
    assert_same(hy, rh, rtol=1e-4, atol=1e-5)
    assert_same(cy, rc, rtol=1e-4, atol=1e-5)


def test_lstm_inference_runs_the_fused_cell(monkeypatch):
    """``nn.LSTM`` under no_grad: one fused-cell launch per layer, direction and step; matches the CPU."""
    from stdlib_kernels.nn import rnn

    calls = []
    real = rnn.lstm_cell_fused
    monkeypatch.setattr(rnn, "lstm_cell_fused", lambda *a: calls.append(1) or real(*a))
    cpu, trn = _pair(torch.nn.LSTM, 5, 7, num_layers=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 4, 5)
    h0, c0 = torch.randn(4, 3, 7), torch.randn(4, 3, 7)
    with torch.no_grad():
        oc, (hc, cc) = cpu(x, (h0, c0))
        ot, (ht, ct) = trn(x.to("trn"), (h0.to("trn"), c0.to("trn")))
    assert len(calls) == 2 * 2 * 4
    for a, b in ((ot, oc), (ht, hc), (ct, cc)):
        assert_same(a, b, rtol=1e-5, atol=1e-6)


def test_lstm_training_input_without_grad():
    """Weights need gradients, the input does not (a training loop): autograd still sees the whole layer."""
    cpu, trn = _pair(torch.nn.LSTM, 5, 7, num_layers=2)
    x = torch.randn(4, 3, 5)
    cpu(x)[0].pow(2).sum().backward()
    trn(x.to("trn"))[0].pow(2).sum().backward()
    for pc, pt in zip(cpu.parameters(), trn.parameters()):
        assert_same(pt.grad, pc.grad, rtol=1e-5, atol=1e-6)


def test_gru_inference_runs_the_fused_cell(monkeypatch):
    """``nn.GRU`` / ``nn.GRUCell`` under no_grad: fused launches (r/z matmuls share a PSUM tile); matches the CPU."""
    from stdlib_kernels.nn import rnn

    calls = []
    real = rnn.gru_cell_fused
    monkeypatch.setattr(rnn, "gru_cell_fused", lambda *a: calls.append(1) or real(*a))
    cpu, trn = _pair(torch.nn.GRU, 5, 7, num_layers=2, bidirectional=True, batch_first=True)
    x, h0 = torch.randn(3, 4, 5), torch.randn(4, 3, 7)
    with torch.no_grad():
        oc, hc = cpu(x, h0)
        ot, ht = trn(x.to("trn"), h0.to("trn"))
    assert len(calls) == 2 * 2 * 4
    assert_same(ot, oc, rtol=1e-5, atol=1e-6)
    assert_same(ht, hc, rtol=1e-5, atol=1e-6)
    cell_c, cell_t = _pair(torch.nn.GRUCell, 5, 7)
    with torch.no_grad():
        assert_same(cell_t(x[:, 0].to("trn"), h0[0].to("trn")), cell_c(x[:, 0], h0[0]), rtol=1e-5, atol=1e-6)
    assert len(calls) == 2 * 2 * 4 + 1
