"""Simulated cost of collectives on a Trainium interconnect (NeuronLink), and a recorder of the calls made.

The transport of trnlang's ``trn`` backend is gloo over the host (loopback or the network), so the wall
time of a collective says nothing about a Trainium machine. This module gives each collective the time it
would take on the target's device-to-device links, with the classic alpha-beta model: a collective is a
sequence of *steps*; a step costs a fixed latency ``alpha`` plus the bytes it moves over the link bandwidth.

For ``n`` ranks and a buffer of ``S`` bytes (``S`` is the whole buffer: the all-reduced tensor, the gathered
output, the reduce-scattered input, an all-to-all's input; see :func:`payload_bytes`):

================  ==================================  =========================================
collective        ring (default)                      tree
================  ==================================  =========================================
all_reduce        2(n-1) steps of S/n                 2 ceil(log2 n) steps of S
all_gather        n-1 steps of S/n                    same as ring
reduce_scatter    n-1 steps of S/n                    same as ring
all_to_all        n-1 steps of S/n                    same as ring
broadcast/reduce  n-1 latencies + S/B (pipelined)     ceil(log2 n) steps of S
gather/scatter    n-1 steps of S/n                    same as ring
send/recv         1 step of S                         same
barrier           2 ceil(log2 n) latencies            same
================  ==================================  =========================================

``algorithm="auto"`` takes the cheaper of ring and tree for each call (small messages favour the tree's
fewer latencies, large ones the ring's bandwidth). One group of ``n`` ranks is assumed to be ``n``
devices, each driving its links at the published per-device NeuronLink bandwidth (concurrent rings over a
device's links, as the collective engines do): an upper bound for ranks that share a device.

Targets (:data:`INTERCONNECTS`; bandwidth per device as published by AWS, latency assumed):

- trn1: NeuronLink-v2, 384 GiB/s per device (Trn1.32xlarge; Trn1n: 768), AWS Neuron "Trn1/Trn1n
  Architecture" instance table.
- trn2: NeuronLink-v3, 1.28 TB/s per device, AWS Neuron "Trainium2 Architecture".
- trn3: NeuronLink-v4, 2.56 TB/s per device, AWS Neuron "Trainium3 Architecture".
- ``alpha`` = 2 us per step on all three: not published; an assumption of the order of one DMA transfer's
  fixed cost (~1.3 us, ``docs`` DEVICE.md) plus a semaphore hand-off between devices.

Recording: inside ``with record() as log:`` every collective on ``trn`` tensors (the ``trn`` backend's
kernels) is noted with its op, bytes, group size and simulated time; ``log.summary()`` prints a table,
``log.trace_events()`` gives Chrome-trace events. ``trn profile`` records this way and prints the
collectives next to the kernels.

Example:
    >>> t = collective_time_s("all_reduce", 2**20, 2, target="trn2")
    >>> round(t * 1e6, 3)  # 2 steps of (2 us + 512 KiB / 1.28 TB/s)
    4.819
    >>> collective_time_s("all_reduce", 2**20, 1)
    0.0
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from trnlang import config as _config

__all__ = ["Interconnect", "INTERCONNECTS", "interconnect", "collective_time_s", "payload_bytes", "KIND",
           "CollectiveRecord", "CollectiveLog", "record", "trace_path"]


@dataclass(frozen=True)
class Interconnect:
    """A target's device-to-device links, as the cost model sees them.

    Example:
        >>> link = INTERCONNECTS["trn2"]
        >>> link.name, link.bandwidth_bytes_per_s / 1e12, link.latency_s * 1e6
        ('NeuronLink-v3', 1.28, 2.0)
    """

    name: str
    bandwidth_bytes_per_s: float  # per device, as published
    latency_s: float  # per step (assumed)
    source: str


INTERCONNECTS: dict[str, Interconnect] = {
    "trn1": Interconnect("NeuronLink-v2", 384 * 2**30, 2e-6,
                         "AWS Neuron docs, Trn1/Trn1n Architecture: 384 GiB/s/device on Trn1.32xlarge"),
    "trn2": Interconnect("NeuronLink-v3", 1.28e12, 2e-6,
                         "AWS Neuron docs, Trainium2 Architecture: 1.28 TB/s per device"),
    "trn3": Interconnect("NeuronLink-v4", 2.56e12, 2e-6,
                         "AWS Neuron docs, Trainium3 Architecture: 2.56 TB/s per device"),
}

#: ``c10d`` op -> the collective it is, for the cost model.
KIND: dict[str, str] = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "broadcast_": "broadcast",
    "reduce_": "reduce", "allgather_": "all_gather", "_allgather_base_": "all_gather",
    "allgather_coalesced_": "all_gather", "allgather_into_tensor_coalesced_": "all_gather",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter", "alltoall_": "all_to_all", "alltoall_base_": "all_to_all",
    "gather_": "gather", "scatter_": "scatter", "send": "send", "recv_": "recv", "recv_any_source_": "recv",
    "barrier": "barrier",
}

#: ``c10d`` op -> (argument holding the whole buffer, multiply by the group size): see :func:`payload_bytes`.
_PAYLOAD_ARG: dict[str, tuple[int, bool]] = {
    "allreduce_": (0, False), "allreduce_coalesced_": (0, False), "broadcast_": (0, False), "reduce_": (0, False),
    "allgather_": (1, True), "_allgather_base_": (0, False), "allgather_coalesced_": (1, True),
    "allgather_into_tensor_coalesced_": (0, False), "reduce_scatter_": (0, True), "_reduce_scatter_base_": (1, False),
    "reduce_scatter_tensor_coalesced_": (1, False), "alltoall_": (1, False), "alltoall_base_": (1, False),
    "gather_": (1, True), "scatter_": (0, True), "send": (0, False), "recv_": (0, False),
    "recv_any_source_": (0, False), "barrier": (-1, False),
}


def interconnect(target: str | None = None) -> Interconnect:
    """The interconnect of ``target`` (``trn1``/``trn2``/``trn3``; default ``$TRN_TARGET``, else ``trn2``).

    Example:
        >>> interconnect("trn1").name
        'NeuronLink-v2'
    """
    name = target or (_config.current.target or "").strip() or "trn2"
    try:
        return INTERCONNECTS[name]
    except KeyError:
        raise ValueError(f"no interconnect for target {name!r}; known: {', '.join(INTERCONNECTS)}") from None


def _steps(kind: str, nbytes: float, n: int, algorithm: str) -> tuple[float, float]:
    """(latency steps, bytes over one link) of ``kind`` on ``n`` ranks with ``algorithm``."""
    log_n = math.ceil(math.log2(n))
    if kind == "all_reduce":
        return (2 * (n - 1), 2 * (n - 1) * nbytes / n) if algorithm == "ring" else (2 * log_n, 2 * log_n * nbytes)
    if kind in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return n - 1, (n - 1) * nbytes / n
    if kind in ("broadcast", "reduce"):
        return (n - 1, nbytes) if algorithm == "ring" else (log_n, log_n * nbytes)
    if kind in ("send", "recv"):
        return 1, nbytes
    if kind == "barrier":
        return 2 * log_n, 0.0
    raise ValueError(f"unknown collective {kind!r}; known: {', '.join(sorted(set(KIND.values())))}")


def collective_time_s(kind: str, nbytes: float, ranks: int, *, target: str | None = None,
                      algorithm: str = "ring", link: Interconnect | None = None) -> float:
    """Simulated seconds of one collective on ``ranks`` devices of ``target``.

    Args:
        kind: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``broadcast``, ``reduce``,
            ``gather``, ``scatter``, ``send``, ``recv`` or ``barrier``.
        nbytes: the whole buffer (see the module docstring).
        ranks: the group size; a group of 1 moves nothing (0 s).
        target: ``trn1``/``trn2``/``trn3`` (default ``$TRN_TARGET``, else ``trn2``).
        algorithm: ``ring``, ``tree`` or ``auto`` (the cheaper of the two).
        link: an :class:`Interconnect` to use instead of the target's (e.g. a slower network).

    Example:
        >>> ring = collective_time_s("all_reduce", 1024, 8, target="trn2")
        >>> tree = collective_time_s("all_reduce", 1024, 8, target="trn2", algorithm="tree")
        >>> tree < ring == collective_time_s("all_reduce", 1024, 8, target="trn2", algorithm="ring")
        True
    """
    if algorithm not in ("ring", "tree", "auto"):
        raise ValueError(f"algorithm must be 'ring', 'tree' or 'auto', got {algorithm!r}")
    if ranks <= 1 and kind not in ("send", "recv"):
        return 0.0
    lk = link or interconnect(target)
    algos = ("ring", "tree") if algorithm == "auto" else (algorithm,)
    best = math.inf
    for a in algos:
        steps, moved = _steps(kind, float(nbytes), max(ranks, 2), a)
        best = min(best, steps * lk.latency_s + moved / lk.bandwidth_bytes_per_s)
    return best


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(e) for e in x)
    return 0


def payload_bytes(op: str, args: tuple[Any, ...] | list[Any], ranks: int) -> int:
    """The whole buffer of a ``c10d`` op call, in bytes (the ``S`` of the cost formulas).

    Example:
        >>> payload_bytes("allreduce_", ([torch.ones(4)],), 2)
        16
        >>> payload_bytes("_allgather_base_", (torch.empty(8), torch.ones(4)), 2)
        32
    """
    index, times_ranks = _PAYLOAD_ARG[op]
    if index < 0:
        return 0
    # the inputs of a gather, the outputs of a scatter: one rank's part, n times
    return _nbytes(args[index]) * (ranks if times_ranks else 1)


@dataclass
class CollectiveRecord:
    """One collective on ``trn`` tensors: what was called and what it would cost on the target."""

    op: str  # the c10d op, e.g. "allreduce_"
    kind: str  # the collective, e.g. "all_reduce"
    nbytes: int
    ranks: int
    group: str
    sim_s: float


@dataclass
class CollectiveLog:
    """The collectives recorded by :func:`record`, with their simulated cost on one interconnect.

    Example:
        >>> log = CollectiveLog(target="trn2")
        >>> log.note("allreduce_", ([torch.ones(256)],), 2, "0")
        >>> len(log.records), round(log.total_s * 1e6, 3)
        (1, 4.001)
    """

    target: str | None = None
    algorithm: str = "ring"
    records: list[CollectiveRecord] = field(default_factory=list)

    @property
    def link(self) -> Interconnect:
        return interconnect(self.target)

    @property
    def total_s(self) -> float:
        """Simulated seconds of all recorded collectives, one after the other."""
        return sum(r.sim_s for r in self.records)

    def note(self, op: str, args: tuple[Any, ...] | list[Any], ranks: int, group: str) -> None:
        """Record one call of ``c10d::<op>`` (the ``trn`` backend calls this while recording)."""
        kind = KIND[op]
        nbytes = payload_bytes(op, args, ranks)
        sim = collective_time_s(kind, nbytes, ranks, link=self.link, algorithm=self.algorithm)
        self.records.append(CollectiveRecord(op, kind, nbytes, ranks, group, sim))

    def by_kind(self) -> list[tuple[str, int, int, float]]:
        """(collective, calls, bytes, simulated seconds) per collective kind, costliest first."""
        agg: dict[str, list[float]] = {}
        for r in self.records:
            a = agg.setdefault(r.kind, [0, 0, 0.0])
            a[0] += 1
            a[1] += r.nbytes
            a[2] += r.sim_s
        return sorted(((k, int(c), int(b), s) for k, (c, b, s) in agg.items()), key=lambda row: -row[3])

    def summary(self) -> str:
        """A table: per collective kind, calls, bytes and simulated time on the interconnect.

        Example:
            >>> log = CollectiveLog(target="trn1")
            >>> log.note("broadcast_", ([torch.ones(4)],), 2, "0")
            >>> print(log.summary().splitlines()[0])
            collectives on NeuronLink-v2 (trn1, 384 GiB/s per device, 2.0 us per step, ring): 1 call, 2.00 us simulated
        """
        lk = self.link
        bw = (f"{lk.bandwidth_bytes_per_s / 2**30:.0f} GiB/s" if lk.bandwidth_bytes_per_s % 2**30 == 0
              else f"{lk.bandwidth_bytes_per_s / 1e12:.2f} TB/s")
        n = len(self.records)
        lines = [f"collectives on {lk.name} ({self.target or _config.current.target or 'trn2'}, {bw} per "
                 f"device, {lk.latency_s * 1e6:.1f} us per step, {self.algorithm}): {n} call{'s' * (n != 1)}, "
                 f"{self.total_s * 1e6:.2f} us simulated"]
        if n:
            width = max(len("collective"), *(len(k) for k, *_ in self.by_kind()))
            lines.append(f"{'collective':<{width}}  {'calls':>6}  {'bytes':>12}  {'sim us':>10}  {'us/call':>9}")
            for kind, calls, nbytes, sim in self.by_kind():
                lines.append(f"{kind:<{width}}  {calls:>6}  {nbytes:>12,}  {sim * 1e6:>10.2f}  "
                             f"{sim * 1e6 / calls:>9.2f}")
        return "\n".join(lines)

    def trace_events(self, pid: int = 0) -> list[dict[str, Any]]:
        """Chrome-trace events: the collectives one after another on one track, in simulated time."""
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "ts": 0, "dur": 0, "pid": pid, "tid": 0,
             "args": {"name": f"collectives on {self.link.name} (simulated)"}},
            {"name": "thread_name", "ph": "M", "ts": 0, "dur": 0, "pid": pid, "tid": 1, "args": {"name": "links"}}]
        t = 0.0
        for r in self.records:
            events.append({"name": r.kind, "cat": "collective", "ph": "X", "ts": t * 1e6, "dur": r.sim_s * 1e6,
                           "pid": pid, "tid": 1, "args": {"op": f"c10d::{r.op}", "bytes": r.nbytes,
                                                          "ranks": r.ranks, "group": r.group}})
            t += r.sim_s
        return events


#: the logs currently recording (the ``trn`` backend's kernels note each call in every one of them)
ACTIVE: list[CollectiveLog] = []


@contextlib.contextmanager
def record(target: str | None = None, algorithm: str = "ring") -> Iterator[CollectiveLog]:
    """Record every collective on ``trn`` tensors made inside the block, with its simulated cost.

    Args:
        target: the interconnect's target (default ``$TRN_TARGET``, else ``trn2``).
        algorithm: ``ring``, ``tree`` or ``auto``.

    Example:
        >>> with record("trn2") as log:
        ...     pass  # e.g. a DDP training step on trn tensors
        >>> log.records
        []
    """
    interconnect(target)  # fail early on an unknown target
    log = CollectiveLog(target=target, algorithm=algorithm)
    ACTIVE.append(log)
    try:
        yield log
    finally:
        ACTIVE.remove(log)


def trace_path(path: str) -> str:
    """``path`` with ``.rank<r>`` before its extension when this process is one rank of several (``RANK`` and
    ``WORLD_SIZE`` set, as under torchrun), so that the ranks' traces do not overwrite each other.

    Example:
        >>> import os; os.environ.pop("WORLD_SIZE", None) and None; trace_path("t.json")
        't.json'
    """
    world, rank = os.environ.get("WORLD_SIZE", ""), os.environ.get("RANK", "")
    if not (world.isdigit() and int(world) > 1 and rank.isdigit()):
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext}"
