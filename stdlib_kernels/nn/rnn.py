"""Fused RNN cells on ``trn``: the LSTM and GRU gate math in one kernel each, forward and backward.

On a PrivateUse1 device PyTorch's ``nn.LSTM`` / ``nn.GRU`` / ``nn.LSTMCell`` / ``nn.GRUCell`` (the
CompositeImplicitAutograd ``aten::lstm`` / ``gru`` / ``lstm_cell`` / ``gru_cell``) take the same path as on
CUDA: the gate pre-activations ``x @ W_ih^T`` and ``h @ W_hh^T`` come from matmuls (the matmul family's
kernels) and the elementwise gate math goes to ``aten::_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell``,
whose backward is ``_thnn_fused_lstm_cell_backward_impl`` / ``_thnn_fused_gru_cell_backward``. Those four ops
are lowered here, each to one trnlang kernel: rows are the batch (128 per partition tile), the hidden size is
the free dimension; biases are ``[1, f]`` rows broadcast over the partitions; the workspace layout is the one
CUDA uses (LSTM: activated gates ``[i, f, g, o]``; GRU: ``[r, z, n, hx, hn]``), so autograd's formulas apply
unchanged. The bias gradient is a batch reduction of the gate gradients (the reduce family's sum).

:func:`lstm_cell_fused` is the fully fused cell (both matmuls accumulated into one PSUM tile, then the gate
math); ``aten::lstm_cell`` uses it when no gradient is needed (inference), the composite path otherwise.

Example:
    >>> import torch
    >>> lstm = torch.nn.LSTM(16, 32, num_layers=2, batch_first=True).to("trn")   # doctest: +SKIP
    >>> out, (h, c) = lstm(torch.randn(4, 10, 16, device="trn"))                 # doctest: +SKIP
    >>> out.sum().backward()                                                      # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import decline, lowering

DTYPES = (torch.float32, torch.bfloat16)
_F = 512  # hidden-size chunk per instruction


def _blk(n: int, h: int) -> tuple[int, int, bool]:
    p = min(128, n)
    f = min(h, _F)
    return p, f, (n % p != 0 or h % f != 0)


def _tiles(n, h):
    """``(rows, cols, mask)`` of each tile of an ``[n, h]`` state, 128 batch rows by ``_F`` hidden columns
    (trace-time helper of the kernels below: the two loops it opens enclose the caller's loop body); the mask
    is None unless the tiles are ragged."""
    p, f, ragged = _blk(n, h)
    for r in tl.affine_range(tl.cdiv(n, p)):
        rows = r * p + tl.arange(p)[:, None]
        for j in tl.affine_range(tl.cdiv(h, f)):
            cols = j * f + tl.arange(f)[None, :]
            yield rows, cols, (((rows < n) & (cols < h)) if ragged else None)


def _ld(t, rows, cols, m):
    """``t[rows, cols]`` loaded (under ``m``) as fp32."""
    return tl.load(t[rows, cols], mask=m).astype(tl.float32)


def _plus_bias(z, b, cols, mb):
    """``z + b[cols]`` (a ``[1, f]`` row broadcast over the partitions), or ``z`` when there is no bias."""
    return z if b is None else z + tl.load(b[cols], mask=mb).astype(tl.float32)


@trn.kernel
def lstm_fwd(ig, hg, cx, ib, hb, hy, cy, ws):
    """LSTM gate math: ``gates = ig + hg (+ ib + hb)``; ``i, f, o = sigmoid``, ``g = tanh``;
    ``cy = f * cx + i * g``; ``hy = o * tanh(cy)``; ``ws`` = the activated gates ``[i, f, g, o]``."""
    n, h = cx.shape
    for rows, cols, m in _tiles(n, h):
        mb = None if m is None else cols < h
        acts = []
        for k in tl.static_range(4):
            z = _ld(ig, rows, k * h + cols, m) + _ld(hg, rows, k * h + cols, m)
            z = _plus_bias(_plus_bias(z, ib, k * h + cols, mb), hb, k * h + cols, mb)
            a = tl.tanh(z) if k == 2 else tl.sigmoid(z)
            tl.store(ws[rows, k * h + cols], a, mask=m)
            acts.append(a)
        c1 = acts[1] * _ld(cx, rows, cols, m) + acts[0] * acts[2]
        tl.store(cy[rows, cols], c1, mask=m)
        tl.store(hy[rows, cols], acts[3] * tl.tanh(c1), mask=m)


@trn.kernel
def lstm_bwd(ghy, gcy, cx, cy, ws, ggates, gcx):
    """Backward of :func:`lstm_fwd` from the saved activated gates (``ghy``/``gcy`` may be None: zeros)."""
    n, h = cx.shape
    for rows, cols, m in _tiles(n, h):
        ai, af, ag, ao = (_ld(ws, rows, k * h + cols, m) for k in range(4))
        c0 = _ld(cx, rows, cols, m)
        tc = tl.tanh(_ld(cy, rows, cols, m))
        if ghy is not None:
            gh = _ld(ghy, rows, cols, m)
            gc = gh * ao * (1.0 - tc * tc)
            if gcy is not None:
                gc = gc + _ld(gcy, rows, cols, m)
            go = gh * tc * ao * (1.0 - ao)
        else:
            gc = _ld(gcy, rows, cols, m)
            go = gc * 0.0
        tl.store(ggates[rows, cols], gc * ag * ai * (1.0 - ai), mask=m)
        tl.store(ggates[rows, h + cols], gc * c0 * af * (1.0 - af), mask=m)
        tl.store(ggates[rows, 2 * h + cols], gc * ai * (1.0 - ag * ag), mask=m)
        tl.store(ggates[rows, 3 * h + cols], go, mask=m)
        tl.store(gcx[rows, cols], gc * af, mask=m)


@trn.kernel
def gru_fwd(ig, hg, hx, ib, hb, hy, ws):
    """GRU gate math: ``r = sigmoid(ir + hr)``, ``z = sigmoid(ii + hi)``, ``n = tanh(in + r * hn)``,
    ``hy = n + z * (hx - n)``; ``ws = [r, z, n, hx, hn]`` (biases included)."""
    n, h = hx.shape
    for rows, cols, m in _tiles(n, h):
        mb = None if m is None else cols < h
        xs = []
        hs = []
        for k in tl.static_range(3):
            a = _ld(ig, rows, k * h + cols, m)
            b = _ld(hg, rows, k * h + cols, m)
            xs.append(_plus_bias(a, ib, k * h + cols, mb))
            hs.append(_plus_bias(b, hb, k * h + cols, mb))
        rg = tl.sigmoid(xs[0] + hs[0])
        zg = tl.sigmoid(xs[1] + hs[1])
        ng = tl.tanh(xs[2] + rg * hs[2])
        h0 = _ld(hx, rows, cols, m)
        tl.store(hy[rows, cols], ng + zg * (h0 - ng), mask=m)
        for k, v in enumerate((rg, zg, ng, h0, hs[2])):
            tl.store(ws[rows, k * h + cols], v, mask=m)


@trn.kernel
def gru_bwd(ghy, ws, gig, ghg, ghx):
    """Backward of :func:`gru_fwd` from its workspace."""
    n, h = ghx.shape
    for rows, cols, m in _tiles(n, h):
        rg, zg, ng, h0, hn = (_ld(ws, rows, k * h + cols, m) for k in range(5))
        gh = _ld(ghy, rows, cols, m)
        gz = gh * (h0 - ng) * zg * (1.0 - zg)
        gn = gh * (1.0 - zg) * (1.0 - ng * ng)
        gr = gn * hn * rg * (1.0 - rg)
        tl.store(ghx[rows, cols], gh * zg, mask=m)
        for k, v in enumerate((gr, gz, gn)):
            tl.store(gig[rows, k * h + cols], v, mask=m)
        tl.store(ghg[rows, cols], gr, mask=m)
        tl.store(ghg[rows, h + cols], gz, mask=m)
        tl.store(ghg[rows, 2 * h + cols], gn * rg, mask=m)


@trn.kernel
def lstm_cell_fused(x, hx, cx, wih, whh, bias, hy, cy):
    """One LSTM step with everything on chip: for each gate, ``x @ W_ih^T`` and ``h @ W_hh^T`` accumulate into
    one PSUM tile (K tiled by 128), then bias, activations and the cell update run on the evicted tile.

    ``x [B, I]``, ``hx/cx [B, H]``, ``wih [4H, I]``, ``whh [4H, H]`` (read transposed), ``bias``: None or the
    summed ``[4H]`` bias.
    """
    n, in_dim = x.shape
    h = cx.shape[1]
    p, f, _ = _blk(n, h)
    for rows, cols, m in _tiles(n, h):
        acts = []
        for g in tl.static_range(4):
            z = _gate_matmuls(x, hx, wih, whh, rows, cols, n, in_dim, h, g, p, f)
            z = _plus_bias(z, bias, g * h + cols, None if m is None else cols < h)
            acts.append(tl.tanh(z) if g == 2 else tl.sigmoid(z))
        c1 = acts[1] * _ld(cx, rows, cols, m) + acts[0] * acts[2]
        tl.store(cy[rows, cols], c1, mask=m)
        tl.store(hy[rows, cols], acts[3] * tl.tanh(c1), mask=m)


def _proj(acc: Any, src: Any, w: Any, rows: Any, cols: Any, n: int, k_dim: int, h: int, g: int) -> None:
    """``acc += src[rows, :] @ w[g * h + cols, :]^T`` (K tiled by 128; trace-time helper of the fused cells)."""
    tk = min(128, k_dim)
    # masks only where a tile is ragged: unmasked loads feed the host gemm in place (passes.plan_matmul_operands)
    rag_a = n % rows.shape[0] != 0 or k_dim % tk != 0
    rag_w = k_dim % tk != 0 or h % cols.shape[1] != 0
    for k in tl.affine_range(tl.cdiv(k_dim, tk)):
        kc = k * tk + tl.arange(tk)[None, :]
        kr = k * tk + tl.arange(tk)[:, None]
        a = tl.load(src[rows, kc], mask=((rows < n) & (kc < k_dim)) if rag_a else None)
        acc += tl.matmul(a, tl.load(w[g * h + cols, kr], mask=((kr < k_dim) & (cols < h)) if rag_w else None))


def _gate_matmuls(x, hx, wih, whh, rows, cols, n, in_dim, h, g, p, f):
    """``x @ W_ih[g]^T + h @ W_hh[g]^T`` of one tile, accumulated in one PSUM tile and evicted."""
    acc = tl.zeros((p, f), tl.float32, buffer=tl.psum)
    _proj(acc, x, wih, rows, cols, n, in_dim, h, g)
    _proj(acc, hx, whh, rows, cols, n, h, h, g)
    return tl.copy(acc)


@trn.kernel
def gru_cell_fused(x, hx, wih, whh, bih, bhh, hy):
    """One GRU step on chip: ``r``/``z`` accumulate both matmuls in one PSUM tile each; the ``n`` gate keeps
    ``x W_in^T`` and ``h W_hn^T`` apart (``n = tanh(i_n + r * h_n)``); then ``hy = n + z * (h - n)``.
    ``bih``/``bhh``: None or ``[3H]``."""
    n, in_dim = x.shape
    h = hx.shape[1]
    p, f, _ = _blk(n, h)
    for rows, cols, m in _tiles(n, h):
        mb = None if m is None else cols < h
        gates = []
        for g in tl.static_range(2):
            z = _gate_matmuls(x, hx, wih, whh, rows, cols, n, in_dim, h, g, p, f)
            gates.append(tl.sigmoid(_plus_bias(_plus_bias(z, bih, g * h + cols, mb), bhh, g * h + cols, mb)))
        acc_i = tl.zeros((p, f), tl.float32, buffer=tl.psum)
        _proj(acc_i, x, wih, rows, cols, n, in_dim, h, 2)
        acc_h = tl.zeros((p, f), tl.float32, buffer=tl.psum)
        _proj(acc_h, hx, whh, rows, cols, n, h, h, 2)
        ni = tl.copy(acc_i)
        nh = tl.copy(acc_h)
        ni = _plus_bias(ni, bih, 2 * h + cols, mb)
        nh = _plus_bias(nh, bhh, 2 * h + cols, mb)
        ng = tl.tanh(ni + gates[0] * nh)
        tl.store(hy[rows, cols], ng + gates[1] * (_ld(hx, rows, cols, m) - ng), mask=m)


def _ok2(*ts: Any) -> bool:
    return all(t is None or (U.is_trn(t) and t.dtype in DTYPES) for t in ts)


def _bias(b: Any, size: int) -> Any:
    if b is None:
        return None
    if b.dim() != 1 or b.shape[0] != size:
        return decline("a bias of the wrong shape")
    return b


def _gate_operands(ig: torch.Tensor, hg: torch.Tensor, state: torch.Tensor, ib: torch.Tensor | None,
                   hb: torch.Tensor | None, gates: int, name: str) -> Any:
    """The checks of a fused cell's forward (``gates`` gate pre-activations per hidden unit, ``state`` ``[n, h]``
    called ``name``): the two biases (None or checked), or NotImplemented after a decline."""
    if not _ok2(ig, hg, state, ib, hb) or state.dim() != 2:
        return decline(f"tensors not float32/bfloat16 on trn, or {name} not 2-D")
    n, h = state.shape
    if tuple(ig.shape) != (n, gates * h) or tuple(hg.shape) != (n, gates * h):
        return decline("gates of the wrong shape")
    ib, hb = _bias(ib, gates * h), _bias(hb, gates * h)
    if ib is NotImplemented or hb is NotImplemented:
        return NotImplemented
    return ib, hb


def _rows(n: int, dt: torch.dtype, *widths: int) -> list[torch.Tensor]:
    """New ``[n, w]`` trn tensors of dtype ``dt``, one per width."""
    return [torch.empty((n, w), dtype=dt, device="trn") for w in widths]


@lowering("aten::_thnn_fused_lstm_cell", dtypes=DTYPES)
def thnn_fused_lstm_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
                         input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> Any:
    """``(hy, cy, workspace)`` of one LSTM step from the gate pre-activations (one kernel)."""
    biases = _gate_operands(input_gates, hidden_gates, cx, input_bias, hidden_bias, 4, "cx")
    if biases is NotImplemented:
        return NotImplemented
    n, h = cx.shape
    hy, cy, ws = _rows(n, input_gates.dtype, h, h, 4 * h)
    if n * h:
        lstm_fwd(input_gates, hidden_gates, cx, *biases, hy, cy, ws)
    return hy, cy, ws


def _bias_grad(g: torch.Tensor, has_bias: bool) -> Any:
    return g.sum(0) if has_bias else None


@lowering("aten::_thnn_fused_lstm_cell_backward_impl", dtypes=DTYPES)
def thnn_fused_lstm_cell_backward_impl(grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None,
                                       cx: torch.Tensor, cy: torch.Tensor, workspace: torch.Tensor,
                                       has_bias: bool) -> Any:
    """``(grad_gates, grad_cx, grad_bias)`` of :func:`thnn_fused_lstm_cell` (one kernel + a batch sum)."""
    if not _ok2(grad_hy, grad_cy, cx, cy, workspace) or cx.dim() != 2:
        return decline("tensors not float32/bfloat16 on trn, or cx not 2-D")
    n, h = cx.shape
    gg, gcx = _rows(n, workspace.dtype, 4 * h, h)
    if grad_hy is None and grad_cy is None:
        gg.zero_()
        gcx.zero_()
    elif n * h:
        lstm_bwd(grad_hy, grad_cy, cx, cy, workspace, gg, gcx)
    return gg, gcx, _bias_grad(gg, has_bias)


@lowering("aten::_thnn_fused_gru_cell", dtypes=DTYPES)
def thnn_fused_gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
                        input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> Any:
    """``(hy, workspace)`` of one GRU step from the gate pre-activations (one kernel)."""
    biases = _gate_operands(input_gates, hidden_gates, hx, input_bias, hidden_bias, 3, "hx")
    if biases is NotImplemented:
        return NotImplemented
    n, h = hx.shape
    hy, ws = _rows(n, input_gates.dtype, h, 5 * h)
    if n * h:
        gru_fwd(input_gates, hidden_gates, hx, *biases, hy, ws)
    return hy, ws


@lowering("aten::_thnn_fused_gru_cell_backward", dtypes=DTYPES)
def thnn_fused_gru_cell_backward(grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool) -> Any:
    """``(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)`` (one kernel)."""
    if not _ok2(grad_hy, workspace) or grad_hy.dim() != 2:
        return decline("tensors not float32/bfloat16 on trn, or grad_hy not 2-D")
    n, h = grad_hy.shape
    gig, ghg, ghx = _rows(n, workspace.dtype, 3 * h, 3 * h, h)
    if n * h:
        gru_bwd(grad_hy, workspace, gig, ghg, ghx)
    return gig, ghg, ghx, _bias_grad(gig, has_bias), _bias_grad(ghg, has_bias)


@lowering("aten::lstm_cell", dtypes=DTYPES)
def lstm_cell(input: torch.Tensor, hx: list[torch.Tensor], w_ih: torch.Tensor, w_hh: torch.Tensor,
              b_ih: torch.Tensor | None = None, b_hh: torch.Tensor | None = None) -> Any:
    """``torch.lstm_cell`` / ``nn.LSTMCell`` without gradients: one :func:`lstm_cell_fused` launch.

    (With gradients the registry runs the composite path: matmuls + ``_thnn_fused_lstm_cell``.)
    """
    if len(hx) != 2 or not _ok2(input, w_ih, w_hh, b_ih, b_hh, *hx) or input.dim() != 2:
        return decline("hx not a pair, tensors not float32/bfloat16 on trn, or input not 2-D")
    h0, c0 = hx
    n, in_dim = input.shape
    if h0.dim() != 2 or c0.shape != h0.shape or h0.shape[0] != n:
        return decline("h0/c0 of the wrong shape")
    h = h0.shape[1]
    if tuple(w_ih.shape) != (4 * h, in_dim) or tuple(w_hh.shape) != (4 * h, h):
        return decline("weights of the wrong shape")
    if len({t.dtype for t in (input, w_ih, w_hh, h0, c0)}) != 1:
        return decline("tensors of mixed dtypes")
    bias = None
    if b_ih is not None or b_hh is not None:
        bs = [b for b in (b_ih, b_hh) if b is not None]
        if any(tuple(b.shape) != (4 * h,) for b in bs):
            return decline("a bias of the wrong shape")
        bias = bs[0] if len(bs) == 1 else torch.add(bs[0].float(), bs[1].float())
    hy = torch.empty((n, h), dtype=input.dtype, device="trn")
    cy = torch.empty((n, h), dtype=input.dtype, device="trn")
    if n * h:
        if in_dim == 0:
            return decline("an input of size 0")
        lstm_cell_fused(input, h0, c0, w_ih, w_hh, bias, hy, cy)
    return hy, cy


def _lstm_composite(*args: Any) -> Any:
    """The CompositeImplicitAutograd path (matmuls + ``_thnn_fused_lstm_cell``), each piece on ``trn``."""
    return torch.ops.aten.lstm.input.decompose(*args)


def _row_major_t(w: torch.Tensor) -> torch.Tensor:
    """``w [4H, K]`` as a view of its transpose stored row-major (``[K, 4H]`` contiguous, then ``.t()``).

    The fused cells read ``w[g * H + cols, k]`` tiles: on ``w`` itself a tile row is a column of ``w`` (one
    element per row of memory); on this view it is a contiguous run. One copy per layer and direction
    serves every time step.
    """
    return w.t().contiguous().t()


def _time_major(input: torch.Tensor, states: list[torch.Tensor], params: list[torch.Tensor], per: int, dirs: int,
                num_layers: int, dropout: float, train: bool, batch_first: bool) -> torch.Tensor | None:
    """The input as ``[steps, batch, in]`` when the fused-cell loop of :func:`_run_layers` takes this
    ``nn.LSTM`` / ``nn.GRU`` call (``states``: ``[h0, c0]`` or ``[hx]``), else None (the composite path)."""
    if (input.dtype != torch.float32 or input.dim() != 3 or len(params) != per * dirs * num_layers
            or (train and dropout > 0 and num_layers > 1) or not _ok2(input, *states, *params)
            or any(p.dtype != torch.float32 for p in (*states, *params))):
        return None
    x = input.transpose(0, 1) if batch_first else input
    steps, batch, in_dim = x.shape
    hidden = states[0].shape[-1]
    if (any(tuple(s.shape) != (num_layers * dirs, batch, hidden) for s in states) or params[1].shape[1] != hidden
            or steps == 0 or batch == 0 or hidden == 0 or in_dim == 0):
        return None
    return x


def _run_layers(x: torch.Tensor, params: list[torch.Tensor], per: int, dirs: int, num_layers: int, hidden: int,
                direction: Any) -> torch.Tensor:
    """The layer and direction loops of a multi-layer RNN over ``x`` ``[steps, batch, in]``: per layer and
    direction ``direction(k, w, layer_in, out, order)`` runs the steps in ``order`` (reversed for the second
    direction) on ``layer_in`` with the parameters ``w``, writing each step's ``h`` into ``out[t]`` (the
    direction's columns of the layer output); ``k`` indexes the direction's initial and final states.
    Returns the last layer's output ``[steps, batch, dirs * hidden]``."""
    steps, batch = x.shape[0], x.shape[1]
    layer_in = x
    for layer in range(num_layers):
        out = torch.empty((steps, batch, dirs * hidden), dtype=x.dtype, device="trn")
        for d in range(dirs):
            k = layer * dirs + d
            direction(k, params[k * per:(k + 1) * per], layer_in, out[:, :, d * hidden:(d + 1) * hidden],
                      range(steps - 1, -1, -1) if d else range(steps))
        layer_in = out
    return layer_in


@lowering("aten::lstm.input", dtypes=DTYPES)
def lstm_layers(input: torch.Tensor, hx: list[torch.Tensor], params: list[torch.Tensor], has_biases: bool,
                num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> Any:
    """``nn.LSTM`` without gradients (fp32): one :func:`lstm_cell_fused` launch per layer, direction and step.

    Each step writes ``h`` straight into its slice of the layer output (directions side by side). Other cases
    (gradients: the registry routes them to the composite; bf16, projections, dropout between layers, ...) run
    the composite path, whose pieces are ``trn`` kernels too.
    """
    args = (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    x = _time_major(input, hx, params, per, dirs, num_layers, dropout, train, batch_first) if len(hx) == 2 else None
    if x is None:
        return _lstm_composite(*args)
    h0, c0 = hx
    steps, batch, hidden = x.shape[0], x.shape[1], h0.shape[-1]
    hn = torch.empty(h0.shape, dtype=input.dtype, device="trn")
    cn = torch.empty(c0.shape, dtype=input.dtype, device="trn")

    def direction(k: int, w: list[torch.Tensor], layer_in: torch.Tensor, out: torch.Tensor, order: range) -> None:
        wih, whh = _row_major_t(w[0]), _row_major_t(w[1])
        bias = torch.add(w[2], w[3]) if has_biases else None
        h, c = h0[k], c0[k]
        cbuf = [torch.empty((batch, hidden), dtype=input.dtype, device="trn") for _ in range(2)]
        for i, t in enumerate(order):
            hy = out[t]
            cy = cn[k] if i == steps - 1 else cbuf[i % 2]
            lstm_cell_fused(layer_in[t], h, c, wih, whh, bias, hy, cy)
            h, c = hy, cy
        hn[k].copy_(h)

    y = _run_layers(x, params, per, dirs, num_layers, hidden, direction)
    return (y.transpose(0, 1) if batch_first else y), hn, cn


@lowering("aten::gru_cell", dtypes=DTYPES)
def gru_cell(input: torch.Tensor, hx: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor,
             b_ih: torch.Tensor | None = None, b_hh: torch.Tensor | None = None) -> Any:
    """``torch.gru_cell`` / ``nn.GRUCell`` without gradients: one :func:`gru_cell_fused` launch."""
    if not _ok2(input, hx, w_ih, w_hh, b_ih, b_hh) or input.dim() != 2 or hx.dim() != 2:
        return decline("tensors not float32/bfloat16 on trn, or input/hx not 2-D")
    n, in_dim = input.shape
    h = hx.shape[1]
    if (hx.shape[0] != n or tuple(w_ih.shape) != (3 * h, in_dim) or tuple(w_hh.shape) != (3 * h, h) or in_dim == 0
            or any(b is not None and tuple(b.shape) != (3 * h,) for b in (b_ih, b_hh))
            or len({t.dtype for t in (input, hx, w_ih, w_hh)}) != 1):
        return decline("mismatched shapes or dtypes, or an input of size 0")
    hy = torch.empty((n, h), dtype=input.dtype, device="trn")
    if n * h:
        gru_cell_fused(input, hx, w_ih, w_hh, b_ih, b_hh, hy)
    return hy


@lowering("aten::gru.input", dtypes=DTYPES)
def gru_layers(input: torch.Tensor, hx: torch.Tensor, params: list[torch.Tensor], has_biases: bool,
               num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> Any:
    """``nn.GRU`` without gradients (fp32): one :func:`gru_cell_fused` launch per layer, direction and step
    (other cases run the composite path, on ``trn`` kernels too)."""
    args = (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    x = _time_major(input, [hx], params, per, dirs, num_layers, dropout, train, batch_first)
    if x is None:
        return torch.ops.aten.gru.input.decompose(*args)
    hidden = hx.shape[-1]
    hn = torch.empty(hx.shape, dtype=input.dtype, device="trn")

    def direction(k: int, w: list[torch.Tensor], layer_in: torch.Tensor, out: torch.Tensor, order: range) -> None:
        bih, bhh = (w[2], w[3]) if has_biases else (None, None)
        wih, whh = _row_major_t(w[0]), _row_major_t(w[1])
        h = hx[k]
        for t in order:
            hy = out[t]
            gru_cell_fused(layer_in[t], h, wih, whh, bih, bhh, hy)
            h = hy
        hn[k].copy_(h)

    y = _run_layers(x, params, per, dirs, num_layers, hidden, direction)
    return (y.transpose(0, 1) if batch_first else y), hn
