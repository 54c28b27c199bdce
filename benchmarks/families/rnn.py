"""nn.LSTM / nn.GRU forward+backward and the fused LSTM cell on ``trn`` vs CPU."""

from __future__ import annotations

from typing import Any, Callable

import torch


def _fwd_bwd(m: torch.nn.Module, x: torch.Tensor) -> Callable[[], Any]:
    def run() -> Any:
        m.zero_grad(set_to_none=True)
        out, _ = m(x)
        out.sum().backward()
        return out

    return run


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case: LSTM seq 64, batch 32, hidden 256 (quick: 8/8/64)."""
    seq, batch, hidden = (8, 8, 64) if quick else (64, 32, 256)
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(hidden, hidden)
    lstm_t = torch.nn.LSTM(hidden, hidden).to("trn")
    lstm_t.load_state_dict(lstm.state_dict())
    gru = torch.nn.GRU(hidden, hidden)
    gru_t = torch.nn.GRU(hidden, hidden).to("trn")
    gru_t.load_state_dict(gru.state_dict())
    x = torch.randn(seq, batch, hidden)
    xt = x.to("trn")
    cell = torch.nn.LSTMCell(hidden, hidden)
    cell_t = torch.nn.LSTMCell(hidden, hidden).to("trn")
    cell_t.load_state_dict(cell.state_dict())
    h = (torch.randn(batch, hidden), torch.randn(batch, hidden))
    ht = tuple(t.to("trn") for t in h)

    def cell_cpu() -> Any:
        with torch.no_grad():
            return cell(x[0], h)

    def cell_trn() -> Any:
        with torch.no_grad():
            return cell_t(xt[0], ht)

    def infer(m: torch.nn.Module, inp: torch.Tensor) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return m(inp)[0]

        return run

    return [
        (f"LSTM fwd (no grad, fused cells) seq{seq} b{batch} h{hidden}", infer(lstm, x), infer(lstm_t, xt)),
        (f"GRU fwd (no grad, fused cells) seq{seq} b{batch} h{hidden}", infer(gru, x), infer(gru_t, xt)),
        (f"LSTM fwd+bwd seq{seq} b{batch} h{hidden}", _fwd_bwd(lstm, x), _fwd_bwd(lstm_t, xt)),
        (f"GRU fwd+bwd seq{seq} b{batch} h{hidden}", _fwd_bwd(gru, x), _fwd_bwd(gru_t, xt)),
        (f"LSTMCell fused fwd b{batch} h{hidden}", cell_cpu, cell_trn),
    ]
