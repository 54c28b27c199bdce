"""The agreement check of the ``trn`` backend: every rank learns what the others called, in as few round trips
as possible.

Before a checked collective (``TRN_DIST_CHECK=1``) the ranks all-gather a *frame*: a 256-byte description of
the call (op, dtypes, shapes, reduce op) and a payload slot. If the descriptions differ every rank raises
:class:`TrnDistributedError`. gloo aborts a process that receives a message of an unexpected size, so what a
rank posts for a checked call must never depend on the call itself, only on the calls every rank has already
agreed on: the group keeps a :class:`Plan` for the next call, computed from that shared history.

A plan is one of

- a **frame** with a payload slot of ``slot`` bytes (1 KiB by default): an all-reduce that fits the slot and
  whose result cannot depend on the order of the reduction rides in the frame, each rank reduces the gathered
  rows in rank order (gloo's bits), and gloo's all-reduce is skipped: one gloo operation instead of two;
- a **speculative all-reduce**: the group predicts the next call exactly (its description, so its byte count).
  Every rank posts the frame (description only) *and*, at the same time, a gloo all-reduce of the predicted
  size: on the tensor itself (zero-copy) if its call is the predicted one, on a scratch buffer otherwise. gloo
  runs the two on its two worker threads, so a checked all-reduce costs about one gloo all-reduce. When the
  descriptions agree with the prediction the all-reduce was the real one on every rank; when they agree with
  each other but not with the prediction every rank all-reduced scratch and the call runs as usual
  afterwards; when they differ every rank raises (and, as with NCCL, the tensors of that call hold
  unspecified values).

Plans are learned per group: after an agreed call ``P`` the next call ``N`` is remembered as what follows
``P``; a speculative plan is used only once the same successor was seen twice (a loop of same-sized
all-reduces, DDP's bucket sequence), a frame plan at once (a wrong frame plan wastes at most its slot).

Example:
    >>> p = Plan(1024); (p.slot, p.head)
    (1024, b'')
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["Group", "Plan", "TrnDistributedError", "rides"]

DESC_BYTES = 256
#: the default payload slot: an all-reduce this small rides in the check on the first call
INLINE_BYTES = 1024
#: the largest payload that rides in a frame with 2 ranks. Above it gloo's all-gather of the frame costs more
#: than its all-reduce of the tensor (measured on the 2-vCPU host at load ~9: a 256 KiB ride 1.4x gloo's
#: all-reduce, 1 MiB 0.6-0.8x, 16 MiB 0.3x), so larger all-reduces take the speculative plan.
#: At load 15-18 (6 runs of bench_distributed) a checked 256 KiB call was 0.17-1.0x (median ~0.7x) of the
#: unchecked one when it rode, 0.53-0.62x with a 64 KiB limit (check then gloo, predicted from the 4th call).
RIDE_MAX = 256 * 1024
#: with more ranks the all-gather moves (n-1) payloads per rank against the ring all-reduce's 2(n-1)/n
RIDE_MAX_MANY = 64 * 1024
#: elements per torch call of the local reduction: below torch's parallel grain size, so the reduction runs
#: on the calling thread (an OpenMP region needs both cores of the loaded host at once)
_CHUNK = 32768
#: a bound on the remembered successors (cleared at the same call on every rank: they share the history)
_MAX_LEARNED = 4096


class TrnDistributedError(RuntimeError):
    """A collective on ``trn`` tensors that cannot run as asked (e.g. ``trn`` and CPU tensors mixed).

    Example:
        >>> issubclass(TrnDistributedError, RuntimeError)
        True
    """


@dataclass(frozen=True)
class Plan:
    """What every rank posts for a group's next checked call (see the module docstring).

    ``slot``: the frame's payload bytes (0 with a speculative plan). ``head``: the predicted all-reduce's
    description (empty: no speculation); ``numel``, ``dtype``, ``red``: its size, dtype and reduce op.

    Example:
        >>> Plan(0, b"allreduce_ float32[4] SUM", 4, torch.float32).numel
        4
    """

    slot: int
    head: bytes = b""
    numel: int = 0
    dtype: Any = field(default=None, compare=False)
    red: Any = field(default=None, compare=False)


DEFAULT = Plan(INLINE_BYTES)

#: dtypes whose SUM/PRODUCT/MIN/MAX give the same bits in any order (two's-complement integers)
_INT_DTYPES = frozenset({torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64})
#: float dtypes reduced inline when 2 ranks take part (a + b == b + a: the same bits as gloo's reduction)
_FLOAT_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16})
INLINE_OPS: dict[Any, Any] = {dist.ReduceOp.SUM: torch.add, dist.ReduceOp.PRODUCT: torch.mul,
                              dist.ReduceOp.MIN: torch.minimum, dist.ReduceOp.MAX: torch.maximum}


def rides(t: torch.Tensor, red: Any, ranks: int) -> bool:
    """Whether an all-reduce of ``t`` may ride in the agreement frame, size aside. Depends only on what the
    description carries (dtype, op) and the group size, so every rank decides alike.

    Example:
        >>> rides(torch.ones(4, dtype=torch.int64), dist.ReduceOp.MAX, 4)
        True
    """
    if t.dtype in _INT_DTYPES:
        return red in INLINE_OPS
    # floats: only where the order cannot change the bits (MIN/MAX are left to gloo: NaN handling differs)
    return ranks == 2 and t.dtype in _FLOAT_DTYPES and red in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT)


def _round_slot(nbytes: int) -> int:
    return -(-nbytes // 64) * 64


class Group:
    """What a ``trn`` process group keeps between collectives: its gloo backend and shadow group, the plan
    for the next checked call and what it learned, and the frame buffers the exchange reuses."""

    __slots__ = ("gloo", "shadow", "size", "ride_max", "plan", "after", "prev", "frames", "busy")

    def __init__(self, gloo: Any, shadow: Any) -> None:
        self.gloo, self.shadow, self.size = gloo, shadow, gloo.size()
        self.ride_max = RIDE_MAX if self.size == 2 else RIDE_MAX_MANY
        self.plan = DEFAULT
        self.after: dict[bytes, tuple[Plan, bool]] = {}  # agreed head -> (plan for its successor, seen twice)
        self.prev: bytes | None = None  # the last agreed call's head
        self.frames: dict[int, _Frame] = {}  # frame bytes -> its buffers
        self.busy = threading.Lock()  # the buffers are one call's at a time (another thread gets fresh ones)

    # -- the plans -------------------------------------------------------------------------------------

    def forget(self) -> None:
        """Drop what the group learned (back to the default plan). Every rank must call it at the same point
        of the call sequence, as for a collective."""
        self.plan, self.prev = DEFAULT, None
        self.after.clear()

    def learn(self, head: bytes, plan: Plan) -> None:
        """After an agreed call ``head``: ``plan`` is what would have served it best; set the next plan."""
        if self.prev is not None:
            if len(self.after) >= _MAX_LEARNED:
                self.after.clear()
            old = self.after.get(self.prev)
            self.after[self.prev] = (plan, old is not None and old[0] == plan)
        self.prev = head
        nxt = self.after.get(head)
        if nxt is None:  # guess a repeat; speculation waits for evidence
            self.plan = DEFAULT if plan.head else plan
        else:
            self.plan = DEFAULT if nxt[0].head and not nxt[1] else nxt[0]

    def plan_for(self, head: bytes, view: torch.Tensor | None, red: Any) -> Plan:
        """The plan that serves a call best: for a one-tensor all-reduce (``view``) riding in the frame or
        speculating; otherwise the default frame."""
        if view is None:
            return DEFAULT
        nbytes = view.numel() * view.element_size()
        if rides(view, red, self.size) and nbytes <= self.ride_max:
            return Plan(max(_round_slot(nbytes), INLINE_BYTES))
        return Plan(0, head, view.numel(), view.dtype, red)

    # -- the exchange ----------------------------------------------------------------------------------

    def _buffers(self, f: int, own: bool) -> _Frame:
        """This rank's frame (``f`` bytes) and the buffer gathering every rank's, kept per frame size (a few
        sizes at a time); fresh memory when another thread holds them."""
        fr = self.frames.get(f) if own else None
        if fr is None:
            fr = _Frame(f, self.size)
            if own:
                if len(self.frames) >= 8:
                    self.frames.clear()
                self.frames[f] = fr
        return fr

    def exchange(self, group: str, head: bytes, payload: torch.Tensor | None = None, red: Any = None) -> None:
        """All-gather every rank's frame of the current plan's size (description, then the payload slot);
        raise on every rank if the descriptions differ. With ``payload`` (fitting the slot; the calling
        rank's CPU view of an all-reduce) every rank's payload travels in the frame and is reduced with
        ``red`` into ``payload``."""
        own = self.busy.acquire(blocking=False)
        try:
            f = DESC_BYTES + self.plan.slot
            fr = self._buffers(f, own)
            fr.mine_np[:DESC_BYTES] = np.frombuffer(head, dtype=np.uint8)
            if payload is not None and payload.numel():
                nbytes = payload.numel() * payload.element_size()
                if payload.is_contiguous() and not payload.is_neg():
                    ctypes.memmove(fr.mine_ptr + DESC_BYTES, payload.data_ptr(), nbytes)
                else:
                    fr.mine[DESC_BYTES:DESC_BYTES + nbytes].view(payload.dtype).view(payload.shape).copy_(payload)
            self.gloo._allgather_base(fr.every, fr.mine).wait()  # raises gloo's timeout if a rank never calls
            mv = fr.every_mv
            if any(mv[r * f:r * f + DESC_BYTES] != head for r in range(self.size)):
                said = [bytes(mv[r * f:r * f + DESC_BYTES]).rstrip(b"\0").decode(errors="replace")
                        for r in range(self.size)]
                raise TrnDistributedError(
                    f"trn: collective mismatch in process group {group!r}: "
                    + "; ".join(f"rank {r} called {d}" for r, d in enumerate(said))
                    + " (every rank must call the same collective on the same dtypes and shapes)")
            if payload is not None:
                _reduce_rows(fr, payload, red)
        finally:
            if own:
                self.busy.release()

    # -- checked calls ---------------------------------------------------------------------------------

    def _post_speculative(self, tensor: torch.Tensor | None, timeout_ms: int) -> Any:
        """Post the speculative plan's gloo all-reduce: on ``tensor`` (this rank's call is the predicted one)
        or on scratch memory of the predicted size and dtype."""
        p = self.plan
        opts = dist.AllreduceOptions()
        opts.reduceOp = p.red
        if timeout_ms >= 0:
            opts.timeout = timedelta(milliseconds=timeout_ms)
        buf = tensor if tensor is not None else torch.empty(p.numel, dtype=p.dtype)
        return self.gloo.allreduce([buf], opts)

    def agree(self, group: str, head: bytes, timeout_ms: int = -1) -> None:
        """The check of a call that moves no data in the exchange (any collective but a riding or predicted
        all-reduce): exchange, raise on a mismatch, learn."""
        spec = self._post_speculative(None, timeout_ms) if self.plan.head else None
        self._exchange_then(group, head, spec)
        if spec is not None:
            spec.wait()
        self.learn(head, DEFAULT)

    def _exchange_then(self, group: str, head: bytes, spec: Any) -> None:
        """:meth:`exchange` while ``spec`` (a posted gloo all-reduce, or None) runs; on a mismatch wait for it
        first (every rank posted it), so the group stays in step and the tensors are settled."""
        try:
            self.exchange(group, head)
        except TrnDistributedError:
            if spec is not None:
                spec.wait()
            raise

    def allreduce(self, group: str, head: bytes, view: torch.Tensor | None, red: Any, timeout_ms: int) -> Any:
        """The check of an all-reduce (``view``: the CPU view of its one tensor, or None for several). Returns
        ``"done"`` when the data rode in the exchange (``view`` holds the result), gloo's ``Work`` when the
        predicted all-reduce was this one (it may still be running), None when the caller runs gloo's
        all-reduce itself."""
        plan = self.plan
        best = self.plan_for(head, view, red)
        if plan.head:  # speculate: the frame and the predicted all-reduce at once
            hit = view is not None and head == plan.head
            spec = self._post_speculative(view if hit else None, timeout_ms)
            self._exchange_then(group, head, spec)
            self.learn(head, best)
            if hit:  # every rank agreed with this rank, whose call was the prediction: the real all-reduce
                return spec
            spec.wait()
            return None
        if view is not None and not best.head and view.numel() * view.element_size() <= plan.slot:
            self.exchange(group, head, view, red)
            self.learn(head, best)
            return "done"
        self.exchange(group, head)
        self.learn(head, best)
        return None


class _Frame:
    """The buffers of one frame size: this rank's frame, every rank's gathered, and views the hot loop reuses
    (numpy and memoryview windows; the gathered payload rows viewed as the last payload's dtype and shape)."""

    __slots__ = ("mine", "every", "mine_np", "mine_ptr", "every_mv", "vals")

    def __init__(self, f: int, ranks: int) -> None:
        self.mine = torch.empty(f, dtype=torch.uint8)
        self.every = torch.empty(ranks * f, dtype=torch.uint8)
        self.mine_np = self.mine.numpy()
        self.mine_ptr = self.mine.data_ptr()
        self.every_mv = self.every.numpy().data
        self.vals: tuple[Any, ...] = ()  # (dtype, shape, the rows' payloads as flat chunks or whole views)


def _reduce_rows(fr: _Frame, out: torch.Tensor, red: Any) -> None:
    """Reduce every rank's payload (in rank order) into ``out``, the calling rank's CPU view."""
    n = out.numel()
    if n == 0:
        return
    if fr.vals[:2] != (out.dtype, out.shape):
        rows = fr.every.view(-1, fr.mine.numel())
        flat = rows[:, DESC_BYTES:DESC_BYTES + n * out.element_size()].view(out.dtype)
        fr.vals = (out.dtype, out.shape, [flat[i].view(out.shape) for i in range(rows.shape[0])])
    vals = fr.vals[2]
    fn = INLINE_OPS[red]
    if n > _CHUNK and out.is_contiguous():
        flat_out, flat_vals = out.view(-1), [v.view(-1) for v in vals]
        for i in range(0, n, _CHUNK):
            _reduce_into([v[i:i + _CHUNK] for v in flat_vals], flat_out[i:i + _CHUNK], fn)
        return
    _reduce_into(vals, out, fn)


def _reduce_into(vals: list[torch.Tensor], out: torch.Tensor, fn: Any) -> None:
    """``out = vals[0] op vals[1] op ...`` in rank order."""
    if len(vals) == 2:
        fn(vals[0], vals[1], out=out)
        return
    acc = vals[0]
    for v in vals[1:]:
        acc = fn(acc, v)
    out.copy_(acc)
