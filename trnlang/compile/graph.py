"""Rewrite an ATen FX graph: each fusion group becomes one call of its generated kernel.

The nodes that are not fused stay as they are: ATen ops that run as the ``trn`` device's lowerings
(matmul, convolution, attention, embedding, indexing, views) - extern calls, in Inductor's words. The
new graph is put in an order where every group runs after its inputs and before its users.

Example:
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from trnlang.compile.graph import fuse_graph
    >>> gm = make_fx(lambda x: torch.exp(x) * 2 + 1)(torch.randn(4, 8))
    >>> gm2, report = fuse_graph(gm, device_type="cpu")
    >>> report[0][0]
    'trn_fused_exp_mul_add'
"""

from __future__ import annotations

import heapq
import logging
import operator
from typing import Any

import torch.fx as fx

from trnlang.compile import kernelgen
from trnlang.compile.fuse import Group, find_groups

log = logging.getLogger(__name__)


def _order(graph: fx.Graph, groups: list[Group]) -> list[Any]:
    """Units (a node, or a group) in a dependency-respecting order close to the original one."""
    group_of = {n: g for g in groups for n in g.nodes}
    pos = {n: i for i, n in enumerate(graph.nodes)}
    units: list[Any] = []
    unit_of: dict[fx.Node, int] = {}
    for n in graph.nodes:
        g = group_of.get(n)
        if g is None:
            unit_of[n] = len(units)
            units.append(n)
        elif n is g.nodes[0]:
            for m in g.nodes:
                unit_of[m] = len(units)
            units.append(g)
    preds: list[set[int]] = [set() for _ in units]
    succs: list[set[int]] = [set() for _ in units]
    for n in graph.nodes:
        u = unit_of[n]
        for a in n.all_input_nodes:
            v = unit_of[a]
            if v != u:
                preds[u].add(v)
                succs[v].add(u)
    first = [pos[u] if isinstance(u, fx.Node) else pos[u.nodes[0]] for u in units]
    waiting = [len(p) for p in preds]
    ready = [(first[i], i) for i in range(len(units)) if waiting[i] == 0]
    heapq.heapify(ready)
    out: list[Any] = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(units[i])
        for j in succs[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, (first[j], j))
    if len(out) != len(units):
        raise RuntimeError("trnlang.compile: fusion made a cycle (a bug; set TRN_COMPILE_FUSE=0 to avoid it)")
    return out


def fuse_graph(gm: fx.GraphModule, device_type: str = "trn") -> tuple[fx.GraphModule, list[tuple[str, list[str]]]]:
    """A new GraphModule with the fusible parts of ``gm`` replaced by generated kernels.

    Returns it and a report: (kernel name, names of the fused nodes) per generated kernel.
    """
    graph = gm.graph
    groups = find_groups(graph, device_type)
    launchers: dict[int, tuple[kernelgen.FusedKernel, list[fx.Node], list[fx.Node]]] = {}
    kept = []
    for g in groups:
        members = set(g.nodes)
        outside = {n for n in g.nodes if any(u not in members for u in n.users)}
        built = kernelgen.build(g, outside)
        if built is None:
            continue
        outs = [n for n in g.nodes if n in outside]
        launchers[g.index] = (built[0], built[1], outs)
        kept.append(g)
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    report = []
    for unit in _order(graph, kept):
        if isinstance(unit, fx.Node):
            env[unit] = new.node_copy(unit, lambda a: env[a])
            continue
        fk, inputs, outs = launchers[unit.index]
        ins = [env[s] for s in inputs]
        call = new.call_function(fk, tuple(ins))
        for k, o in enumerate(outs):
            item = new.call_function(operator.getitem, (call, k))
            item.meta = dict(o.meta)
            env[o] = item
        report.append((fk.name, [n.name for n in unit.nodes]))
    new.lint()
    out = fx.GraphModule(gm, new)
    return out, report
