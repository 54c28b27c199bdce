"""Rewrite an ATen FX graph: each fusion group becomes one call of its generated kernel.

The nodes that are not fused stay as they are: ATen ops that run as the ``trn`` device's lowerings
(matmul, convolution, attention, embedding, indexing, views) - extern calls, in Inductor's words. The
new graph is put in an order where every group runs after its inputs and before its users.

The fusion decisions of a graph (which nodes form each kernel, with their roles) are kept on disk, so a
second process compiling the same model skips the search (:func:`plan_key`). Entries go through the
JIT's cache directory checks and are authenticated like compiled kernels (``runtime.diskcache.Store``).

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

import functools
import hashlib
import heapq
import json
import logging
import operator
import os
from typing import Any

import torch
import torch.fx as fx

from trnlang.compile import kernelgen
from trnlang.compile.fuse import FULL, ROLES, Group, find_groups

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


@functools.cache
def _sources_digest() -> str:
    """Hash of the sources that decide a plan: a change in the fusion rules or the code generator invalidates."""
    h = hashlib.sha256()
    root = os.path.dirname(os.path.abspath(__file__))
    for name in ("fuse.py", "ops.py", "kernelgen.py", "graph.py", "backend.py"):
        with open(os.path.join(root, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def _meta_text(val: Any) -> str:
    """A node's ``meta['val']`` as text: tensors by dtype, sizes, strides and device; symbolic sizes by name."""
    if isinstance(val, torch.Tensor):
        return f"{val.dtype}{list(val.shape)}{list(val.stride())}{val.device.type}"
    if isinstance(val, (list, tuple)):
        return "(" + ",".join(_meta_text(v) for v in val) + ")"
    return str(val) if isinstance(val, (int, float, bool, torch.SymInt, torch.SymFloat)) else type(val).__name__


def plan_key(gm: fx.GraphModule, device_type: str = "trn") -> str:
    """The disk-cache name of ``gm``'s fusion plan: sha256 of the graph's code, every node's metadata (dtype,
    shape, strides, device; symbolic sizes by name), the trnlang, torch and compile-package versions, the
    host key (CPU, ISA path, LLVM) and the launch grid the generated kernels are written for.

    Example:
        >>> import torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> a = make_fx(lambda x: torch.exp(x) + 1)(torch.randn(4, 8))
        >>> b = make_fx(lambda x: torch.exp(x) + 1)(torch.randn(4, 9))
        >>> plan_key(a) == plan_key(a), plan_key(a) == plan_key(b)
        (True, False)
    """
    from codegen import llvm
    from trnlang._version import __version__

    parts = ["trnlang-compile-plan", __version__, torch.__version__, _sources_digest(), llvm.host_cpu_key(),
             device_type, gm.code]
    parts += [f"{n.name}:{n.op}:{_meta_text(n.meta.get('val'))}" for n in gm.graph.nodes]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


_plan_stores: dict[str, Any] = {}


def _plan_store() -> Any:
    """This user's plan store under ``$TRN_CACHE_DIR`` (None when the disk cache is off or refused)."""
    from trnlang import config
    from trnlang.runtime import diskcache

    if not config.current.disk_cache:
        return None
    base = diskcache.cache_base()
    st = _plan_stores.get(base)
    if st is None:
        from trnlang._version import __version__

        st = _plan_stores[base] = diskcache.Store(base, f"compile-{os.getuid()}",
                                                  context=f"trnlang-compile-plan\0{__version__}".encode())
    return st if st.usable else None


def load_plan(graph: fx.Graph, key: str) -> list[Group] | None:
    """The groups stored under ``key`` rebuilt on ``graph``'s nodes (None: no entry, or it does not fit)."""
    st = _plan_store()
    data = st.read(f"{key}.json") if st is not None else None
    if data is None:
        return None
    try:
        plan = json.loads(data)
        by_name = {n.name: n for n in graph.nodes}
        groups = []
        for i, (names, roles) in enumerate(plan["groups"]):
            nodes = [by_name[n] for n in names]
            if len(nodes) != len(roles) or any(r not in ROLES for r in roles):
                return None
            g = Group(i, (), nodes, dict(zip(nodes, roles)))
            g.shape = _frame(g)
            groups.append(g)
        return groups
    except (KeyError, TypeError, ValueError):  # an entry of another format: search again
        return None


def _frame(g: Group) -> tuple[Any, ...]:
    """A group's frame: the shape of its first full value, or of its first reduction's input."""
    for n in g.nodes:
        if g.roles[n] == FULL:
            return tuple(n.meta["val"].shape)
    return tuple(g.nodes[0].args[0].meta["val"].shape)  # type: ignore[union-attr]


def save_plan(key: str, groups: list[Group]) -> None:
    """Store the fusion plan ``groups`` under ``key`` (nothing when the disk cache is off)."""
    st = _plan_store()
    if st is not None:
        plan = {"groups": [[[n.name for n in g.nodes], [g.roles[n] for n in g.nodes]] for g in groups]}
        st.write(f"{key}.json", json.dumps(plan).encode())


def fuse_graph(gm: fx.GraphModule, device_type: str = "trn", cache: bool = False,
               stats: dict[str, Any] | None = None) -> tuple[fx.GraphModule, list[tuple[str, list[str]]]]:
    """A new GraphModule with the fusible parts of ``gm`` replaced by generated kernels.

    Returns it and a report: (kernel name, names of the fused nodes) per generated kernel. ``cache``: read
    and write the fusion plan on disk (:func:`plan_key`); ``stats`` counts ``graph_cache_hits``/``_misses``.
    """
    graph = gm.graph
    key = plan_key(gm, device_type) if cache else None
    groups = load_plan(graph, key) if key is not None else None
    if stats is not None and key is not None:
        which = "graph_cache_misses" if groups is None else "graph_cache_hits"
        stats[which] = stats.get(which, 0) + 1
    hit = groups is not None
    if groups is None:
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
    if key is not None and not hit:
        save_plan(key, kept)
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
