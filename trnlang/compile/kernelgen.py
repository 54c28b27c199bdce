"""From a fusion :class:`~trnlang.compile.fuse.Group` to trnlang source, a ``@trn.kernel`` and its launcher.

The generated kernel sees every tensor as 2-D: full values ``[R, C]``, row values ``[R, 1]``, col
inputs ``[1, C]``, scalars ``[1, 1]``. It walks the rows in tiles of ``P`` partitions (``P`` from the
width ``C``, so a tile stays near 64 KiB), masks the ragged last tile with ``rows < n`` (``n`` is the
runtime size ``R``), and reduces on the free axis. The launch grid is ``(1,)``: the row-tile loop is an
``affine_range``, which the runtime splits into one contiguous block of tiles per host thread when the
launch is long enough to pay for it (``trnlang/runtime/split.py``, on its native worker threads). Nothing
in the source depends on ``R`` or on the thread count, so a new ``R`` reuses the compiled code.

Example:
    >>> from trnlang.compile.kernelgen import rows_per_tile
    >>> rows_per_tile(512), rows_per_tile(64), rows_per_tile(50000)
    (32, 128, 1)
"""

from __future__ import annotations

import hashlib
import linecache
import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from trnlang import config as _config
from trnlang.compile.fuse import COL, FULL, ROW, SCALAR, Group, operand_role, same_size
from trnlang.compile.ops import POINTWISE, REDUCTIONS, extra_kwargs, literal

#: elements per tile the row count is chosen for (64 KiB of fp32).
TILE_ELEMS = 16384

_KERNELS: dict[str, Any] = {}  # source text -> KernelFn, shared by every graph of the process
_NAMES: dict[str, str] = {}  # source text -> kernel name
_LAUNCHERS: list[Any] = []  # every FusedKernel made in this process, oldest first


def rows_per_tile(cols: int) -> int:
    """Partitions per tile for rows of ``cols`` elements: a power of two in 1..128."""
    p = 128
    while p > 1 and p * cols > TILE_ELEMS:
        p //= 2
    return p



@dataclass
class Spec:
    """A kernel parameter: what it is (role), its graph node and, for outputs, dtype and kept dims."""

    node: fx.Node
    role: str
    dtype: torch.dtype
    keep_rank: int


def _short(node: fx.Node) -> str:
    t = node.target
    name = getattr(t, "__name__", str(t))
    return name.split(".")[0].lstrip("_")


def _ext_role(a: fx.Node, user: fx.Node, g: Group) -> str:
    v = a.meta["val"]
    if user.target in REDUCTIONS:
        return FULL
    r = operand_role(tuple(v.shape), g.roles[user], g.shape)
    assert r is not None
    return r


class _Emitter:
    def __init__(self, g: Group, users_outside: set[fx.Node]) -> None:
        self.g = g
        self.names: dict[fx.Node, str] = {}
        self.inputs: list[Spec] = []
        self.outputs: list[Spec] = []
        self.body: list[str] = []
        self.loads: list[str] = []
        self.outside = users_outside

    def operand(self, a: Any, user: fx.Node) -> str:
        if not isinstance(a, fx.Node):
            text = literal(a)
            assert text is not None
            return text
        if a in self.names:
            return self.names[a]
        role = _ext_role(a, user, self.g)
        v = a.meta["val"]
        k = len(self.inputs)
        self.inputs.append(Spec(a, role, v.dtype, v.dim()))
        index = {FULL: "[rows, cols]", ROW: "[rows, one]", COL: "[zero, cols]", SCALAR: "[zero, one]"}[role]
        mask = ", mask=m" if role in (FULL, ROW) else ""
        self.loads.append(f"        a{k} = tl.load(in{k}{index}{mask})")
        self.names[a] = f"a{k}"
        return f"a{k}"

    def node(self, n: fx.Node) -> None:
        if n.target in REDUCTIONS:
            x = self.operand(n.args[0], n)
            expr = f"tl.{REDUCTIONS[n.target]}({x}, axis=1, keepdims=True)"
        else:
            rule = POINTWISE[n.target]
            ops = [self.operand(n.args[i] if i < len(n.args) else None, n) for i in rule.operands]
            expr = rule.emit(ops, extra_kwargs(n))
        v = f"v{len(self.names)}"
        self.body.append(f"        {v} = {expr}  # {_short(n)}")
        self.names[n] = v
        if n in self.outside:
            role = self.g.roles[n]
            val = n.meta["val"]
            k = len(self.outputs)
            self.outputs.append(Spec(n, role, val.dtype, val.dim()))
            index = "[rows, cols]" if role == FULL else "[rows, one]"
            if role == FULL:
                self.body.append(f"        tl.store(out{k}{index}, tl.broadcast_to({v}, (p, c)), mask=m)")
            else:
                self.body.append(f"        tl.store(out{k}{index}, tl.broadcast_to({v}, (p, 1)), mask=m)")


def kernel_name(nodes: list[fx.Node], limit: int = 64) -> str:
    """``trn_fused_`` and the ops of the fused nodes in graph order, each op once, cut after whole op names.

    This is the name ``trn profile``, ``TRN_DUMP=compile`` and ``trnlang.compile_stats()`` show; the
    kernel's docstring lists the op of every fused node, the launcher's ``nodes`` their graph names.
    """
    parts: list[str] = []
    for op in dict.fromkeys(_short(n) for n in nodes):
        if parts and sum(len(p) + 1 for p in parts) + len(op) > limit:
            parts.append("etc")
            break
        parts.append(op)
    return "trn_fused_" + "_".join(parts)


def generate(g: Group, users_outside: set[fx.Node]) -> tuple[str, str, list[Spec], list[Spec]]:
    """(kernel name, source, input specs, output specs) of group ``g``.

    The source names no graph node, so groups that compute the same thing (the same block in every layer
    of a model) get the same text, hence one ``@trn.kernel``: one trace and one compilation per process.
    """
    em = _Emitter(g, users_outside)
    for n in g.nodes:
        em.node(n)
    params = [f"in{k}" for k in range(len(em.inputs))] + [f"out{k}" for k in range(len(em.outputs))]
    full = [p for p, s in zip(params, em.inputs + em.outputs) if s.role == FULL]
    rows_src = [p for p, s in zip(params, em.inputs + em.outputs) if s.role in (FULL, ROW)]
    name = kernel_name(g.nodes)
    width = f"{full[0]}.shape[1]" if full else "1"
    lines = [
        "@trn.kernel",
        f"def {name}({', '.join(params)}):",
        f'    """Fused: {", ".join(_short(n) for n in g.nodes)}."""',  # ops, not node names: one text per layer
        f"    n = {rows_src[0]}.shape[0]",
        f"    c = {width}",
        "    p = rows_per_tile(c)",
        "    cols = tl.arange(c)[None, :]",
        "    one = tl.arange(1)[None, :]",
        "    zero = tl.arange(1)[:, None]",
        "    for j in tl.affine_range(tl.cdiv(n, p)):",
        "        rows = j * p + tl.arange(p)[:, None]",
        "        m = rows < n",
        *em.loads,
        *em.body,
    ]
    src = "\n".join(lines) + "\n"
    return name, src, em.inputs, em.outputs


def load_kernel(name: str, src: str) -> Any:
    """The ``@trn.kernel`` defined by ``src`` (one per distinct source text in the process)."""
    hit = _KERNELS.get(src)
    if hit is not None:
        return hit
    digest = hashlib.sha256(src.encode()).hexdigest()[:12]
    filename = f"<trn-compile {name} {digest}>"
    header = "import trnlang as trn\nimport trnlang.language as tl\n\n\n"
    text = header + src
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    scope: dict[str, Any] = {"rows_per_tile": rows_per_tile, "__name__": f"trnlang.compile.generated.{name}"}
    exec(compile(text, filename, "exec"), scope)  # noqa: S102 - our own generated source
    kern = scope[name]
    _KERNELS[src] = kern
    _NAMES[src] = name
    if _config.current.dump & {"compile", "all"}:
        print(f"# trnlang.compile: kernel {name}\n{src}", file=sys.stderr)
    return kern


def kernels() -> list[Any]:
    """Every generated kernel of this process (for :func:`trnlang.compile.compile_stats`)."""
    return list(_KERNELS.values())


def launchers() -> list[Any]:
    """Every :class:`FusedKernel` (the launcher in a compiled graph) made in this process, oldest first."""
    return list(_LAUNCHERS)


def generated() -> list[tuple[str, str, Any]]:
    """(name, source, ``KernelFn``) of every generated kernel of this process, oldest first."""
    return [(_NAMES[src], src, k) for src, k in _KERNELS.items()]


def _shape_recipe(g: Group, inputs: list[Spec]) -> list[tuple[int, int]] | None:
    """How to read each size of the frame from the inputs at run time: (input index, dim) or (-1, int)."""
    recipe = []
    for d, size in enumerate(g.shape):
        if isinstance(size, int):
            recipe.append((-1, size))
            continue
        found = None
        for k, s in enumerate(inputs):
            shape = tuple(s.node.meta["val"].shape)
            off = len(shape) - len(g.shape)
            if s.role == FULL or (s.role == ROW and d < len(g.shape) - 1) or (s.role == COL and d == len(g.shape) - 1):
                dd = d + off
                if 0 <= dd < len(shape) and same_size(shape[dd], size):
                    found = (k, dd)
                    break
        if found is None:
            return None
        recipe.append(found)
    return recipe


class FusedKernel:
    """The launcher of one generated kernel: views the inputs as 2-D, allocates outputs, launches.

    Called with the group's inputs in order; returns the outputs as a tuple.
    """

    def __init__(self, kern: Any, name: str, source: str, inputs: list[Spec], outputs: list[Spec],
                 recipe: list[tuple[int, int]], nodes: tuple[str, ...] = ()) -> None:
        self.kern, self.name, self.source = kern, name, source
        self.nodes = nodes  # the graph names of the fused nodes (the kernel itself may serve several groups)
        self.roles = [s.role for s in inputs]
        self.outputs = [(s.role, s.dtype, s.keep_rank) for s in outputs]
        self.recipe = recipe
        self.launch = kern[(1,)]
        self.__name__ = name
        _LAUNCHERS.append(self)

    def profile(self, *ins: torch.Tensor) -> Any:
        """The simulated NeuronCore profile (``trn.Profile``) of this kernel on CPU inputs ``ins``."""
        views, _ = self._prepare(ins)
        return self.kern.profile(*views, grid=(1,))

    def __call__(self, *ins: torch.Tensor) -> tuple[torch.Tensor, ...]:
        views, outs = self._prepare(ins)
        if views:
            self.launch(*views)
        return outs

    def _prepare(self, ins: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], tuple[torch.Tensor, ...]]:
        """(2-D views of inputs and new outputs, the outputs); no views when there is nothing to compute."""
        frame = [ins[k].shape[d] if k >= 0 else d for k, d in self.recipe]
        c = frame[-1]
        r = 1
        for s in frame[:-1]:
            r *= s
        device = next(t.device for t, role in zip(ins, self.roles) if role in (FULL, ROW, COL))
        outs = []
        for role, dtype, rank in self.outputs:
            if role == FULL:
                shape = frame
            else:
                shape = frame[:-1] + [1] if rank == len(frame) else frame[:-1]
            outs.append(torch.empty(shape, dtype=dtype, device=device))
        if r == 0 or c == 0:
            return [], tuple(outs)
        views = []
        for t, role in zip(ins, self.roles):
            if t.device != device:
                t = t.to(device)
            t = t.contiguous()
            views.append(t.view(r, c) if role == FULL else t.view(r, 1) if role == ROW
                         else t.view(1, c) if role == COL else t.view(1, 1))
        views += [o.view(r, c) if role == FULL else o.view(r, 1) for o, (role, _, _) in zip(outs, self.outputs)]
        return views, tuple(outs)


def build(g: Group, users_outside: set[fx.Node]) -> tuple[FusedKernel, list[fx.Node]] | None:
    """A launcher for ``g`` and the graph nodes it takes (None: its frame is not readable from its inputs)."""
    name, src, inputs, outputs = generate(g, users_outside)
    if not outputs or not any(s.role in (FULL, ROW) for s in inputs + outputs):
        return None
    recipe = _shape_recipe(g, inputs)
    if recipe is None:
        return None
    kern = load_kernel(name, src)
    nodes = tuple(n.name for n in g.nodes)
    return FusedKernel(kern, name, src, inputs, outputs, recipe, nodes), [s.node for s in inputs]
