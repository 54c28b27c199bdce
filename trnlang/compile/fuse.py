"""Fusion decisions: which nodes of an ATen FX graph become one generated kernel.

A :class:`Group` is a set of pointwise nodes and last-dimension reductions that share one *frame*: the
shape ``S = (..., C)`` of its widest values, seen as ``[R, C]`` rows (``R`` = the product of the leading
sizes). Every value in a group is either *full* (shape ``S``, a ``[rows, C]`` tile in the kernel) or
*row* (shape ``S[:-1] + (1,)`` or ``S[:-1]``, a ``[rows, 1]`` tile: a reduction's result and what is
computed from it). Inputs from outside may also be *col* (broadcast along rows: a bias ``[C]``) or
*scalar*. Nodes join the group of one of their producers in graph order, unless that would make the
group depend on itself through an op outside it.

Example:
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from trnlang.compile.backend import decompositions
    >>> from trnlang.compile.fuse import find_groups
    >>> g = make_fx(lambda x: torch.softmax(x, -1) * 2, decomposition_table=decompositions())(torch.randn(4, 8)).graph
    >>> [[n.name for n in gr.nodes] for gr in find_groups(g, device_type="cpu")]
    [['amax', 'sub', 'exp', 'sum_1', 'div', 'mul']]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch._prims_common import is_contiguous_or_false
from torch.fx.experimental.symbolic_shapes import statically_known_true

from trnlang.compile.ops import FUSED_DTYPES, POINTWISE, REDUCTIONS, literal

#: widest row a generated kernel keeps whole on chip (elements; the Vector engine's free-size limit is 65536).
MAX_COLS = 32768

FULL, ROW, COL, SCALAR = "full", "row", "col", "scalar"
ROLES = (FULL, ROW, COL, SCALAR)

#: dtypes a generated kernel can load as an operand (int64 loads as int32 tiles).
LOADABLE = FUSED_DTYPES | {torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8}


@dataclass
class Group:
    """One future kernel: member nodes in graph order, the frame shape, each member's role."""

    index: int
    shape: tuple[Any, ...]
    nodes: list[fx.Node] = field(default_factory=list)
    roles: dict[fx.Node, str] = field(default_factory=dict)

    @property
    def row_shapes(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return (*self.shape[:-1], 1), tuple(self.shape[:-1])


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def same_size(a: Any, b: Any) -> bool:
    """Sizes known equal without adding a guard (ints or SymInts)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        return bool(statically_known_true(a == b))
    except Exception:  # noqa: BLE001 - an unrelated symbolic expression: not known equal
        return False


def same_shape(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(same_size(x, y) for x, y in zip(a, b))


def _is_one(s: Any) -> bool:
    return isinstance(s, int) and s == 1


def operand_role(op_shape: tuple[Any, ...], out_role: str, frame: tuple[Any, ...]) -> str | None:
    """The role of an operand of shape ``op_shape`` in an op of role ``out_role`` (None: not expressible)."""
    if all(_is_one(s) for s in op_shape):
        return SCALAR
    if out_role == FULL:
        pad = (1,) * (len(frame) - len(op_shape)) + tuple(op_shape)
        if len(pad) != len(frame):
            return None
        if same_shape(pad, frame):
            return FULL
        if same_size(pad[-1], frame[-1]) and all(_is_one(s) for s in pad[:-1]):
            return COL
        if _is_one(pad[-1]) and same_shape(pad[:-1], frame[:-1]):
            return ROW
        return None
    keep, flat = (*frame[:-1], 1), tuple(frame[:-1])
    for target in (keep, flat):
        pad = (1,) * (len(target) - len(op_shape)) + tuple(op_shape)
        if len(pad) == len(target) and same_shape(pad, target):
            return ROW
    return None


def _last_dim_only(node: fx.Node, rank: int) -> bool:
    dims: Any = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None or not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return False
    return int(dims[0]) % max(rank, 1) == rank - 1


def _kind(node: fx.Node, device_type: str) -> str | None:
    """'pointwise', 'reduction' or None (extern) for one graph node."""
    if node.op != "call_function":
        return None
    val = _val(node)
    if not isinstance(val, torch.Tensor) or val.dtype not in FUSED_DTYPES or val.device.type != device_type:
        return None
    if not is_contiguous_or_false(val):
        return None  # the graph may view it with its strides; a generated kernel writes contiguous rows
    rule = POINTWISE.get(node.target)
    if rule is not None:
        if rule.accepts is not None and not rule.accepts(node.args, dict(node.kwargs)):
            return None
        if node.target is torch.ops.aten._to_copy.default and "device" in node.kwargs:
            dev: Any = node.kwargs["device"]
            if dev is not None and torch.device(dev).type != device_type:
                return None
        return "pointwise"
    if node.target in REDUCTIONS:
        x = _val(node.args[0])
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or not _last_dim_only(node, x.dim()):
            return None
        if node.kwargs.get("dtype") not in (None, val.dtype):
            return None
        if node.target is torch.ops.aten.sum.dim_IntList and val.dtype == torch.bool:
            return None
        return "reduction"
    return None


def _cols_ok(shape: tuple[Any, ...]) -> bool:
    if not shape:
        return False
    c = shape[-1]
    hint = c if isinstance(c, int) else getattr(c.node, "hint", None)
    return hint is not None and 1 <= int(hint) <= MAX_COLS


class _Grouper:
    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.groups: list[Group] = []
        self.group_of: dict[fx.Node, Group] = {}
        self.deps: dict[fx.Node, frozenset[int]] = {}  # groups a node depends on (transitively)
        self.parent: list[int] = []  # merged groups: index -> the group it was merged into
        self.pos: dict[fx.Node, int] = {}

    def _find(self, i: int) -> int:
        while self.parent[i] != i:
            i = self.parent[i]
        return i

    def _reach(self, n: fx.Node) -> set[int]:
        own = self.group_of.get(n)
        found = {self._find(i) for i in self.deps.get(n, ())}
        if own is not None:
            found.add(own.index)
        return found

    def _outside_path(self, src: Group, dst: Group) -> bool:
        """True when ``dst`` uses a value computed outside both groups from ``src``."""
        for m in dst.nodes:
            for a in m.all_input_nodes:
                if a not in dst.roles and a not in src.roles and src.index in self._reach(a):
                    return True
        return False

    def _mergeable(self, node: fx.Node, g: Group) -> list[Group]:
        """The other groups ``node`` reads that can merge with ``g`` (same frame, no path through outside ops)."""
        found: list[Group] = []
        for a in node.all_input_nodes:
            h = self.group_of.get(a)
            if h is None or h is g or h in found or not same_shape(h.shape, g.shape):
                continue
            if not self._outside_path(g, h) and not self._outside_path(h, g):
                found.append(h)
        return found

    def _merge(self, g: Group, others: list[Group]) -> None:
        for h in others:
            for m in h.nodes:
                g.roles[m] = h.roles[m]
                self.group_of[m] = g
            g.nodes = sorted(g.nodes + h.nodes, key=self.pos.__getitem__)
            h.nodes = []
            h.roles = {}
            self.parent[h.index] = g.index

    def _operands(self, node: fx.Node) -> list[Any]:
        rule = POINTWISE.get(node.target)
        if rule is not None:
            return [node.args[i] if i < len(node.args) else None for i in rule.operands]
        return [node.args[0]]

    def _fits(self, node: fx.Node, kind: str, g: Group, extra: list[Group] | None = None) -> str | None:
        """The role ``node`` would take in ``g`` merged with ``extra`` (None: it cannot join)."""
        shape = tuple(_val(node).shape)
        roles = dict(g.roles)
        for h in extra or ():
            roles.update(h.roles)
        owners = {g.index} | {h.index for h in extra or ()}
        if kind == "reduction":
            x: Any = node.args[0]
            if roles.get(x) != FULL and not (x not in roles and same_shape(tuple(_val(x).shape), g.shape)):
                return None
            role = ROW
        elif same_shape(shape, g.shape):
            role = FULL
        elif same_shape(shape, g.row_shapes[0]) or same_shape(shape, g.row_shapes[1]):
            role = ROW
        else:
            return None
        for a in self._operands(node):
            if isinstance(a, fx.Node):
                v = _val(a)
                if not isinstance(v, torch.Tensor) or v.device.type != self.device_type and v.dim() > 0:
                    return None
                if v.dtype not in LOADABLE:
                    return None  # float64 constants, complex: no tile dtype
                if kind == "pointwise":
                    r = operand_role(tuple(v.shape), role, g.shape)
                    if r is None or (a in roles and roles[a] != r):
                        return None
                if a not in roles and owners & self._reach(a):
                    return None  # g -> ... -> a -> node: joining would make a cycle
            elif a is not None and literal(a) is None:
                return None
        return role

    def visit(self, node: fx.Node) -> None:
        self.pos[node] = len(self.pos)
        deps: set[int] = set()
        for a in node.all_input_nodes:
            deps |= self._reach(a)
        self.deps[node] = frozenset(deps)
        kind = _kind(node, self.device_type)
        if kind is None:
            return
        for a in node.all_input_nodes:
            g = self.group_of.get(a)
            if g is not None:
                extra = self._mergeable(node, g)
                role = self._fits(node, kind, g, extra)
                if role is None and extra:
                    extra = []
                    role = self._fits(node, kind, g)
                if role is not None:
                    self._merge(g, extra)
                    self._join(node, g, role)
                    return
        shape = tuple(_val(node.args[0]).shape) if kind == "reduction" else tuple(_val(node).shape)
        if not _cols_ok(shape):
            return
        g = Group(len(self.groups), shape)
        role = self._fits(node, kind, g)
        if role is not None:
            self.groups.append(g)
            self.parent.append(g.index)
            self._join(node, g, role)

    def _join(self, node: fx.Node, g: Group, role: str) -> None:
        g.nodes.append(node)
        g.roles[node] = role
        self.group_of[node] = g


def find_groups(graph: fx.Graph, device_type: str = "trn", min_nodes: int = 2) -> list[Group]:
    """The groups of ``graph`` worth a generated kernel (at least ``min_nodes`` members), in graph order."""
    grouper = _Grouper(device_type)
    for node in graph.nodes:
        grouper.visit(node)
    return [g for g in grouper.groups if len(g.nodes) >= min_nodes]
