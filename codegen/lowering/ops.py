"""Lowering of the data-movement and elementwise instructions (dma_copy, activation, tensor_tensor,
tensor_scalar, tensor_reduce, tensor_copy, select, iota, memset, affine_select, alloc).

Each handler builds the instruction's ``Val`` tree and hands it to the driver's
loop-nest writers (``KernelLowering.write`` / ``store_access``); the other ops
are in ``lower_compute.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from codegen.lowering import irange as irange
from codegen.lowering.alu import Reducer
from codegen.lowering.ctx import CT, ci64
from codegen.lowering.types import convert_storage, from_compute
from codegen.lowering.vals import (
    AccessEval,
    Bcast,
    Binary,
    Imm,
    Iota,
    Pred,
    RegionRead,
    Reshape,
    ToF32,
    Unary,
    Val,
    Where,
    bcast,
)
from trnlang.frontend.errors import ShapeError
from trnlang.ir.nodes import Access, Instr, Region
from trnlang.ir.ops import Alu

if TYPE_CHECKING:
    from codegen.lowering.kernel import KernelLowering


# ---------------------------------------------------------------------------------------- dma


def dma_copy(L: KernelLowering, ins: Instr) -> None:
    dst, src = ins.outs[0], ins.ins[0]
    if isinstance(dst, Region) and isinstance(src, Access):
        _load(L, ins, dst, src)
    elif isinstance(dst, Access) and isinstance(src, Region):
        L.check_access(ins, dst)
        v = bcast(L.val(src, ins), tuple(int(s) for s in dst.shape), "stored tile")
        L.store_access(ins, dst, v, ins.attrs.get("accumulate"))
    elif isinstance(dst, Region) and isinstance(src, Region):
        L.write(ins, dst, bcast(L.val(src, ins), dst.shape, "output"))
    elif isinstance(dst, Access) and isinstance(src, Access):
        _hbm_to_hbm(L, ins, dst, src)
    else:
        raise TypeError(f"dma_copy from {type(src).__name__} to {type(dst).__name__}")


def access_eval(L: KernelLowering, ins: Instr, acc: Access) -> AccessEval:
    return AccessEval(acc, [L.val(g, ins) for g in acc.gathers])


def _load(L: KernelLowering, ins: Instr, dst: Region, src: Access) -> None:
    L.check_access(ins, src)
    ev = access_eval(L, ins, src)
    other = ins.attrs.get("other")
    v = irange.checked_load(ev, lambda cx: L.targs(src.tensor), dst.dtype, other, irange.load_fail(L, ins))
    shape = tuple(dst.shape)
    if ev.acc.mask is None or ev.acc.mask is True or other is not None or _mask_true(ev.acc.mask):
        L.write(ins, dst, bcast(v, shape, "loaded tile"))
        return
    # masked load without ``other``: masked-off elements keep the tile's contents
    vb = bcast(v, shape, "loaded tile")
    guard_map = vb.map if isinstance(vb, Bcast) else list(range(len(shape)))

    def guard(idx: list[ir.Value]) -> ir.Value:
        aidx = [ci64(0) if k is None else idx[k] for k in guard_map]
        env = ev.local(L.cx, aidx)
        m = ev.mask(L.cx, env)
        assert m is not None
        return m

    L.write(ins, dst, vb, guard=guard)


def _mask_true(mask: Any) -> bool:
    import sympy

    return mask is sympy.true


def _hbm_to_hbm(L: KernelLowering, ins: Instr, dst: Access, src: Access) -> None:
    """HBM -> HBM: load the whole source (in its dtype) into scratch, then store where both masks allow."""
    L.check_access(ins, src)
    L.check_access(ins, dst)
    cx, b = L.cx, L.cx.b
    sshape = tuple(int(s) for s in src.shape)
    dshape = tuple(int(s) for s in dst.shape)
    sev, dev = access_eval(L, ins, src), access_eval(L, ins, dst)
    tmp = L.temp_view(sshape, src.tensor.dtype)
    sev.prepare(cx)
    dev.prepare(cx)
    tmp.prepare(cx)
    st = L.targs(src.tensor)
    with L.foreach(sshape) as idx:
        env = sev.local(cx, idx)
        m = sev.mask(cx, env)
        if m is None:
            tmp.store(cx, idx, st.load(cx, sev.index(cx, env)))
        else:
            with b.if_then(m):
                tmp.store(cx, idx, st.load(cx, sev.index(cx, env)))
    from codegen.lowering.vals import bcast_map

    smap = bcast_map(sshape, dshape, "loaded values")
    dt = L.targs(dst.tensor)
    with L.foreach(dshape) as idx:
        sidx = [ci64(0) if k is None else idx[k] for k in smap]
        senv = sev.local(cx, sidx)
        denv = dev.local(cx, idx)
        conds = [c for c in (sev.mask(cx, senv), dev.mask(cx, denv)) if c is not None]
        cond = None
        for c in conds:
            cond = c if cond is None else b.and_(cond, c)

        def body(sidx: list[ir.Value] = sidx, denv: dict[Any, ir.Value] = denv) -> None:
            raw = tmp.load(cx, sidx)
            dt.store(cx, dev.index(cx, denv), convert_storage(cx, raw, src.tensor.dtype, dst.tensor.dtype))

        if cond is None:
            body()
        else:
            with b.if_then(cond):
                body()


# ---------------------------------------------------------------------------------------- elementwise


def activation_val(L: KernelLowering, ins: Instr) -> Val:
    """``func(data * scale + bias)`` in fp32 over the first output's shape."""
    shape = tuple(ins.outs[0].shape)
    x: Val = ToF32(bcast(L.val(ins.ins[0], ins), shape))
    scale = ins.attrs.get("scale", 1.0)
    if isinstance(scale, Region):
        x = Binary(Alu.multiply, x, ToF32(bcast(L.val(scale, ins), shape)))
    elif hasattr(scale, "value") and not isinstance(scale, float | int):
        x = Binary(Alu.multiply, x, ToF32(Imm(scale.value)))
    elif scale is not None and float(scale) != 1.0:
        x = Binary(Alu.multiply, x, Imm(float(scale)))
    if len(ins.ins) > 2:  # a per-partition scale tile
        x = Binary(Alu.multiply, x, ToF32(bcast(L.val(ins.ins[2], ins), shape)))
    if len(ins.ins) > 1 and ins.ins[1] is not None:
        x = Binary(Alu.add, x, ToF32(bcast(L.val(ins.ins[1], ins), shape)))
    return ToF32(Unary(ins.attrs.get("func", Alu.copy), x))


def activation(L: KernelLowering, ins: Instr) -> None:
    write_reducing(L, ins, activation_val(L, ins))


def write_reducing(L: KernelLowering, ins: Instr, y: Val) -> None:
    """Write ``y`` to the first output and, to every later one, the free-axis ``reduce_op`` reduction of
    ``y`` per partition (computed in the same pass) or, for an activation's ``reduce_cmd``, the Scalar
    engine registers' new value (ir/ops.py REDUCE_CMDS; the fourth input is their old value)."""
    reduce_op, cmd = ins.attrs.get("reduce_op"), ins.attrs.get("reduce_cmd")
    out = ins.outs[0]
    if len(ins.outs) == 1:
        L.write(ins, out, y)
        return
    shape = tuple(out.shape)
    rshape = tuple(ins.outs[1].shape)
    p = shape[0] if shape else 1
    if reduce_op is None or cmd in ("reset", "idle"):
        L.write(ins, out, y)
        regs: Val = Imm(0.0) if cmd == "reset" else ToF32(bcast(L.val(ins.ins[3], ins), rshape))
        for red in ins.outs[1:]:
            L.write(ins, red, bcast(regs, tuple(red.shape), "output"), hazards=False)
        return
    cx = L.cx
    r = Reducer(reduce_op, y.ct)
    L.resolve_hazards(ins, [y], elementwise=True)
    oview = L.view(out)
    tmp = L.temp_view((p,) + (1,) * max(0, len(rshape) - 1), _ct_dtype(r.result_ct))
    y.prepare(cx)
    oview.prepare(cx)
    tmp.prepare(cx)
    with L.foreach((p,)) as (pi,):
        acc = L.reduce_loops(shape[1:], r.init(), lambda idx, acc: _act_step(L, y, oview, out, r, pi, idx, acc))
        res = r.final(cx, acc)
        tmp.store(cx, [pi] + [ci64(0)] * (len(rshape) - 1), res)
    total: Val = RegionRead(tmp)
    if cmd == "reduce":  # accumulate onto the registers' old value
        total = Binary(reduce_op, ToF32(bcast(L.val(ins.ins[3], ins), rshape)), ToF32(bcast(total, rshape)))
    for red in reversed(ins.outs[1:]):  # the registers (outs[1]) last: ``total`` reads their old value
        L.write(ins, red, bcast(total, tuple(red.shape), "output"), hazards=False)


def _act_step(L: KernelLowering, y: Val, oview: Any, out: Region, r: Reducer, pi: ir.Value,
              idx: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
    cx = L.cx
    v = y.emit(cx, [pi, *idx])
    oview.store(cx, [pi, *idx], from_compute(cx, v, y.ct, out.dtype))
    from codegen.lowering.vals import flatten

    pos = flatten(cx, idx, tuple(out.shape)[1:]) if r.op in (Alu.argmax, Alu.argmin) else None
    return r.step(cx, acc, v, pos)


def tensor_tensor(L: KernelLowering, ins: Instr) -> None:
    out = ins.outs[0]
    L.write(ins, out, tensor_tensor_val(L, ins))


def tensor_tensor_val(L: KernelLowering, ins: Instr) -> Val:
    a, c = (L.val(x, ins) for x in ins.ins)
    return irange.binary(L, ins, ins.attrs["op"], a, c, tuple(ins.outs[0].shape))


def tensor_scalar_val(L: KernelLowering, ins: Instr) -> Val:
    shape = tuple(ins.outs[0].shape)
    t = bcast(L.val(ins.ins[0], ins), shape)
    reverse = tuple(ins.attrs.get("reverse") or (False, False))
    for k, key in enumerate(("op0", "op1")):
        op = ins.attrs.get(key)
        if op is None:
            continue
        if len(ins.ins) <= k + 1:
            raise ShapeError(f"tensor_scalar {key}={op.name} has no scalar operand s{k}", loc=ins.loc)
        s = bcast(L.val(ins.ins[k + 1], ins), shape)
        t = irange.binary(L, ins, op, s, t, shape) if reverse[k] else irange.binary(L, ins, op, t, s, shape)
    return t


def tensor_scalar(L: KernelLowering, ins: Instr) -> None:
    write_reducing(L, ins, tensor_scalar_val(L, ins))


def copy_val(L: KernelLowering, ins: Instr) -> Val:
    out = ins.outs[0]
    src = L.val(ins.ins[0], ins)
    if ins.attrs.get("reshape"):
        return Reshape(src, tuple(out.shape))
    return bcast(src, tuple(out.shape), "output")


def tensor_copy(L: KernelLowering, ins: Instr) -> None:
    L.write(ins, ins.outs[0], copy_val(L, ins))


def select_val(L: KernelLowering, ins: Instr) -> Val:
    shape = tuple(ins.outs[0].shape)
    cond, a, c = (L.val(x, ins) for x in ins.ins)
    return Where(cond, a, c, shape)


def select(L: KernelLowering, ins: Instr) -> None:
    L.write(ins, ins.outs[0], select_val(L, ins))


def iota(L: KernelLowering, ins: Instr) -> None:
    L.write(ins, ins.outs[0], Iota(ins.attrs["expr"], tuple(ins.outs[0].shape)))


def memset(L: KernelLowering, ins: Instr) -> None:
    L.write(ins, ins.outs[0], Imm(ins.attrs["value"]))


def affine_select_val(L: KernelLowering, ins: Instr) -> Val:
    shape = tuple(ins.outs[0].shape)
    a, c = (L.val(x, ins) for x in ins.ins)
    return Where(Pred(ins.attrs["pred"], shape), a, c, shape)


def affine_select(L: KernelLowering, ins: Instr) -> None:
    L.write(ins, ins.outs[0], affine_select_val(L, ins))


def load_val(L: KernelLowering, ins: Instr) -> Val:
    dst, src = ins.outs[0], ins.ins[0]
    if isinstance(src, Access):
        ev = access_eval(L, ins, src)
        return bcast(irange.checked_load(ev, lambda cx: L.targs(src.tensor), dst.dtype, ins.attrs.get("other"),
                                         irange.load_fail(L, ins)), tuple(dst.shape), "loaded tile")
    return bcast(L.val(src, ins), tuple(dst.shape), "output")


# ---------------------------------------------------------------------------------------- reductions


def tensor_reduce(L: KernelLowering, ins: Instr) -> None:
    out = ins.outs[0]
    data = L.val(ins.ins[0], ins)
    dshape = tuple(data.shape)
    nd = len(dshape)
    op = ins.attrs["op"]
    axes = sorted({int(a) % nd if nd else int(a) for a in ins.attrs["axes"]})
    keepdims = bool(ins.attrs.get("keepdims", False))
    if op in (Alu.argmax, Alu.argmin) and len(axes) != 1:
        from trnlang.frontend.errors import DTypeError

        raise DTypeError(f"{op.name} reduces exactly one axis, got axes={tuple(ins.attrs['axes'])}", loc=ins.loc)
    r = Reducer(op, data.ct)
    kept = [d for d in range(nd) if d not in axes]
    rshape = tuple(1 if d in axes else dshape[d] for d in range(nd)) if keepdims else tuple(dshape[d] for d in kept)
    cx = L.cx
    L.resolve_hazards(ins, [data], elementwise=False)
    target = out
    direct = tuple(out.shape) == rshape
    tview = L.view(out) if direct else L.temp_view(rshape, _ct_dtype(r.result_ct))
    data.prepare(cx)
    tview.prepare(cx)
    rdims = tuple(dshape[d] for d in axes)
    with L.foreach(tuple(dshape[d] for d in kept), out=True) as kidx:
        def full(ridx: list[ir.Value], kidx: list[ir.Value] = kidx) -> list[ir.Value]:
            full_idx: list[ir.Value] = [ci64(0)] * nd
            for d, v in zip(kept, kidx):
                full_idx[d] = v
            for d, v in zip(axes, ridx):
                full_idx[d] = v
            return full_idx

        def step(ridx: list[ir.Value], acc: list[ir.Value], full: Any = full) -> list[ir.Value]:
            return r.step(cx, acc, data.emit(cx, full(ridx)), ridx[0] if ridx else ci64(0))

        acc = L.reduce_loops(rdims, r.init(), step)
        res = r.final(cx, acc)
        if keepdims:
            oidx: list[ir.Value] = [ci64(0)] * nd
            for d, v in zip(kept, kidx):
                oidx[d] = v
        else:
            oidx = list(kidx)
        tdt = target.dtype if direct else _ct_dtype(r.result_ct)
        tview.store(cx, oidx, from_compute(cx, res, r.result_ct, tdt))
    if not direct:
        L.write(ins, out, bcast(RegionRead(tview), tuple(out.shape), "output"), hazards=False)


def _ct_dtype(ct: CT) -> Any:
    from trnlang.ir.types import DType

    return DType.float32 if ct is CT.F32 else DType.int32


def alloc(L: KernelLowering, ins: Instr) -> None:
    """Debug mode: fill the fresh buffer with the poison value (normal mode: nothing to do)."""
    buf = ins.outs[0]
    if not L.debug or L.plan.fused_buf(buf):
        return
    L.poison(buf)


__all__ = ["dma_copy", "activation", "tensor_tensor", "tensor_scalar", "tensor_reduce", "tensor_copy", "select",
           "iota", "memset", "affine_select", "alloc", "activation_val", "tensor_scalar_val", "copy_val",
           "select_val", "affine_select_val", "load_val", "tensor_tensor_val"]
