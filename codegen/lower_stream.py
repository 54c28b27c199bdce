"""Streaming HBM stores: large outputs are written with non-temporal stores, row by row.

A kernel that writes a tensor much larger than the host caches (a 16 MiB activation, say) gains
nothing from keeping the written lines in cache, and an ordinary store first reads every line it
writes (read for ownership): a third of the memory traffic of a copy-like kernel. Streaming stores
skip both, as glibc's ``memcpy`` does above a few MiB.

An HBM store qualifies when, at compile time, the destination tensor is contiguous (constant
strides), holds at least :data:`NT_MIN_BYTES`, and each row of the tile (its last axis) is a run of
consecutive elements of at least :data:`NT_MIN_ROW_BYTES`, not split by the mask; no gathers, no
accumulation; x86-64 hosts only. Each row is then evaluated into a small scratch row (cache-resident,
the usual vectorised loop) and copied out with 64-byte aligned non-temporal vector stores (head and
tail bytes with ordinary copies), and an ``sfence`` after the instruction orders them before
anything later (other instructions, other threads after the launch). Values and the order of
element writes within a row are unchanged.
"""

from __future__ import annotations

import contextlib
import platform
from typing import TYPE_CHECKING, Any

import sympy
from llvmlite import ir

from codegen.lower_ctx import I8P, I32, I64, VOID, Ctx, ci64, const_int_value
from codegen.lower_types import from_compute
from codegen.lower_vals import AccessEval, Val
from trnlang.ir.nodes import Access, Instr, axis_sym

if TYPE_CHECKING:
    from codegen.lower import KernelLowering

#: Smallest destination tensor (bytes) written with streaming stores. Measured on a 2-core host with a
#: 32 MiB L3: an 8 MiB output read by the next op is ~10% slower streamed (it would still be cached),
#: a 16 MiB one ~15% faster (and a layer norm of it ~2x).
NT_MIN_BYTES = 16 << 20
#: Smallest tile row (bytes) worth a streamed copy.
NT_MIN_ROW_BYTES = 256
_X86 = platform.machine().lower() in ("x86_64", "amd64")
_VEC = ir.VectorType(I32, 16)  # 64 bytes: one cache line


def row_length(L: KernelLowering, acc: Access, accumulate: Any) -> int | None:
    """Elements per streamed row if this HBM store should stream (see the module docstring), else None."""
    if not _X86 or accumulate is not None or acc.gathers or not acc.shape:
        return None
    t = L.targs(acc.tensor)
    strides = [const_int_value(s) for s in t.strides]
    if any(s is None for s in strides) or not strides:
        return None
    try:
        total = 1
        for d in acc.tensor.shape:
            total *= int(d)
    except TypeError:
        return None
    item = acc.tensor.dtype.itemsize
    row = int(acc.shape[-1])
    if total * item < NT_MIN_BYTES or row * item < NT_MIN_ROW_BYTES:
        return None
    inner = axis_sym(len(acc.shape) - 1)
    off = sum((sympy.sympify(e) * s for e, s in zip(acc.index, strides)), sympy.Integer(0))
    if sympy.diff(off, inner) != 1:  # consecutive elements along the row (affine, unit step)
        return None
    mask = acc.mask
    if isinstance(mask, sympy.Basic) and inner in mask.free_symbols:
        return None
    return row


def store_rows(L: KernelLowering, ins: Instr, acc: Access, val: Val, row: int) -> None:
    """``tensor[index(a)] = cast(val[a])`` row by row through a scratch row and streaming stores."""
    cx, b = L.cx, L.cx.b
    ev = AccessEval(acc, [])
    t = L.targs(acc.tensor)
    dt = acc.tensor.dtype
    scratch = L.temp_view((row,), dt)
    ev.prepare(cx)
    val.prepare(cx)
    scratch.prepare(cx)
    copy = _nt_copy(cx)
    with L.foreach(tuple(int(s) for s in acc.shape[:-1])) as oidx:
        env = ev.local(cx, [*oidx, ci64(0)])
        m = ev.mask(cx, env)
        with b.if_then(m) if m is not None else contextlib.nullcontext():
            with L.foreach((row,)) as (j,):
                scratch.store(cx, [j], from_compute(cx, val.emit(cx, [*oidx, j]), val.ct, dt))
            dst = b.bitcast(t.addr(cx, ev.index(cx, env)), I8P)
            src = b.bitcast(scratch.addr(cx, [ci64(0)]), I8P)
            b.call(copy, [dst, src, ci64(row * dt.itemsize)])
    b.call(cx.module.declare_intrinsic("llvm.x86.sse.sfence", fnty=ir.FunctionType(VOID, [])), [])


def _nt_copy(cx: Ctx) -> ir.Function:
    """``trn.nt_copy(dst, src, n)``: copy n bytes; whole aligned 64-byte lines of dst with non-temporal stores."""
    fn = cx.helper("trn.nt_copy")
    if fn is not None:
        return fn
    fn, bb = cx.add_helper("trn.nt_copy", ir.FunctionType(VOID, [I8P, I8P, I64]))
    dst, src, n = fn.args
    memcpy = cx.module.declare_intrinsic("llvm.memcpy", [I8P, I8P, I64])
    no = ir.Constant(ir.IntType(1), 0)
    head = bb.and_(bb.sub(ci64(0), bb.ptrtoint(dst, I64)), ci64(63))
    head = bb.select(bb.icmp_unsigned("<", n, head), n, head)
    bb.call(memcpy, [dst, src, head, no])
    entry = bb.block
    loop = fn.append_basic_block("lines")
    body = fn.append_basic_block("line")
    done = fn.append_basic_block("tail")
    bb.branch(loop)
    bb.position_at_end(loop)
    off = bb.phi(I64)
    off.add_incoming(head, entry)
    bb.cbranch(bb.icmp_unsigned("<=", bb.add(off, ci64(64)), n), body, done)
    bb.position_at_end(body)
    v = bb.load(bb.bitcast(bb.gep(src, [off], inbounds=True), _VEC.as_pointer()), align=1)
    st = bb.store(v, bb.bitcast(bb.gep(dst, [off], inbounds=True), _VEC.as_pointer()), align=64)
    st.set_metadata("nontemporal", cx.module.add_metadata([ir.Constant(I32, 1)]))
    off.add_incoming(bb.add(off, ci64(64)), body)
    bb.branch(loop)
    bb.position_at_end(done)
    bb.call(memcpy, [bb.gep(dst, [off], inbounds=True), bb.gep(src, [off], inbounds=True), bb.sub(n, off), no])
    bb.ret_void()
    return fn
