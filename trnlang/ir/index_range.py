"""Index-range analysis: the instructions that compute gather (indirect) index tiles, checked for wrapping.

Integer tiles compute in int32 and wrap, and an int64 HBM tensor loads into an
int32 tile by dropping its high word. A gather index that wraps can land on a
valid row (``2**32 + 3`` reads row 3, ``i * 4 + 1`` with ``i = 2**30`` reads
row 1), which no bounds check on the indirect access can see. So the
instructions whose results flow into a gather tile (``Access.gathers``, loads
and stores alike) are *index producers*, and both executors (the interpreter
and the JIT) check them as they run:

- a ``dma_copy`` load from an **int64** tensor raises ``BoundsError`` when a
  loaded (unmasked) value does not fit int32;
- an integer ``add`` / ``subtract`` / ``multiply`` (``tensor_tensor``
  ``op``, ``tensor_scalar`` ``op0`` / ``op1``; both operands integers) raises
  ``BoundsError`` when its exact result does not fit int32.

Every index of a valid row is below ``2**31``, so a value that does not fit
int32 could never address one: raising where it is made (the user's line of
that load or arithmetic) loses nothing but the row count.

The producers are found backwards from the gather tiles, buffer by buffer
(every instruction writing a buffer that holds index values is a producer):
through SBUF copies (``tensor_copy``, region-to-region ``dma_copy``), the value
operands of ``select`` / ``affine_select``, and ``tensor_tensor`` /
``tensor_scalar`` whose ops all keep magnitudes (``add``, ``subtract``,
``multiply``, ``maximum``, ``minimum``, ``divide``: a clamp of a wrapped value
is still the wrong row). The walk stops at HBM loads (the chain's start), and
at everything else: ``fmod`` and the bitwise ops (hashing / masking idioms
that wrap on purpose), comparisons, ``iota``, ``memset``, reductions, scans,
``activation`` (fp32), ``matmul``.
"""

from __future__ import annotations

from trnlang.ir.nodes import Access, Instr, Kernel, Region, instrs
from trnlang.ir.ops import Alu, Op
from trnlang.ir.types import DType

#: Ops an index value may pass through on its way to a gather (magnitude-keeping).
PASS_OPS = frozenset({Alu.add, Alu.subtract, Alu.multiply, Alu.maximum, Alu.minimum, Alu.divide})
#: Integer ops checked for int32 overflow in an index producer.
CHECKED_OPS = frozenset({Alu.add, Alu.subtract, Alu.multiply})

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def _alu_ops(ins: Instr) -> list[Alu]:
    keys = ("op",) if ins.op is Op.TENSOR_TENSOR else ("op0", "op1")
    return [ins.attrs[k] for k in keys if ins.attrs.get(k) is not None]


def _passes(ins: Instr) -> list[Region] | None:
    """The on-chip operands an index value written by ``ins`` comes from, or None if the walk stops at ``ins``."""
    op = ins.op
    if op in (Op.TENSOR_TENSOR, Op.TENSOR_SCALAR):
        if all(a in PASS_OPS for a in _alu_ops(ins)):
            return [x for x in ins.ins if isinstance(x, Region)]
        return None
    if op is Op.TENSOR_COPY or (op is Op.DMA_COPY and isinstance(ins.ins[0], Region)):
        return [x for x in ins.ins[:1] if isinstance(x, Region)]
    if op is Op.SELECT:
        return [x for x in ins.ins[1:] if isinstance(x, Region)]
    if op is Op.AFFINE_SELECT:
        return [x for x in ins.ins if isinstance(x, Region)]
    return None


def narrowing_load(ins: Instr) -> bool:
    """``ins`` loads an int64 tensor into an integer tile (the high words are dropped)."""
    if ins.op is not Op.DMA_COPY or not ins.outs or not isinstance(ins.outs[0], Region):
        return False
    src = ins.ins[0] if ins.ins else None
    return isinstance(src, Access) and src.tensor.dtype is DType.int64 and ins.outs[0].dtype.is_int


def checked_ops(ins: Instr) -> frozenset[Alu]:
    """The ALU ops of ``ins`` an index producer checks for int32 overflow (when both operands are integers)."""
    if ins.op not in (Op.TENSOR_TENSOR, Op.TENSOR_SCALAR):
        return frozenset()
    return frozenset(a for a in _alu_ops(ins) if a in CHECKED_OPS)


def index_producers(kernel: Kernel) -> frozenset[int]:
    """``id()`` of every instruction of ``kernel`` that needs an index-range check (see the module docstring)."""
    body = instrs(kernel.body)
    writers: dict[int, list[Instr]] = {}
    todo: list[int] = []
    for ins in body:
        for o in ins.outs:
            if isinstance(o, Region):
                writers.setdefault(id(o.buf), []).append(ins)
        for x in (*ins.outs, *ins.ins):
            if isinstance(x, Access):
                todo.extend(id(g.buf) for g in x.gathers)
    seen: set[int] = set()
    out: set[int] = set()
    while todo:
        b = todo.pop()
        if b in seen:
            continue
        seen.add(b)
        for w in writers.get(b, ()):
            if narrowing_load(w) or checked_ops(w):
                out.add(id(w))
            srcs = _passes(w)
            if srcs:
                todo.extend(id(r.buf) for r in srcs)
    return frozenset(out)


def narrowing_message(ins: Instr) -> str:
    """The error (no op prefix) of an int64 value outside int32 loaded into an index tile."""
    src = ins.ins[0]
    name = src.tensor.name if isinstance(src, Access) else "?"
    return (f"gather index out of bounds: a value loaded from int64 tensor {name} does not fit int32 (it would wrap "
            "to another row)")


def overflow_message(ins: Instr) -> str:
    """The error (without the op prefix) of integer arithmetic on an index tile that overflows int32."""
    ops = "/".join(sorted(a.name for a in checked_ops(ins)))
    return (f"gather index out of bounds: integer {ops} overflows int32 (the wrapped value would address another "
            "row)")
