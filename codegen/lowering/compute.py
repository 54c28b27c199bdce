"""Lowering of tensor_tensor_scan, nc_matmul, nc_transpose, bn_stats, bn_aggr and device_print."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llvmlite import ir

from codegen.lowering import alu as alu
from codegen.lowering.ctx import CT, F32, F64, I8P, I64, VOID, Ctx, cf32, cf64, ci64
from codegen.lowering.types import from_compute, to_compute, to_f32
from codegen.lowering.vals import FlatMap, RegionRead, RegionView, ToF32, Val, bcast, bcast_map
from trnlang.frontend.errors import ShapeError
from trnlang.ir.nodes import Imm as ImmNode
from trnlang.ir.nodes import Instr, Region
from trnlang.ir.types import DType

if TYPE_CHECKING:
    from codegen.lowering.kernel import KernelLowering


def scan(L: KernelLowering, ins: Instr) -> None:
    """Along the last axis: ``acc = f32(f32(acc op0 a[j]) op1 b[j])``; ``out[..., j] = acc``."""
    out = ins.outs[0]
    shape = tuple(out.shape)
    a = ToF32(bcast(L.val(ins.ins[0], ins), shape))
    c = ToF32(bcast(L.val(ins.ins[1], ins), shape))
    ini = ToF32(L.val(ins.ins[2], ins))
    ishape = tuple(ini.shape)
    if len(ishape) >= 2 and len(shape) > 2 and ishape[1:] == (1,) * (len(ishape) - 1):
        ishape_eff = (ishape[0],) + (1,) * (len(shape) - 1)  # a [P, 1] initial is per partition
    else:
        ishape_eff = ishape
    lead = shape[:-1]
    imap = bcast_map(ishape_eff, lead + (1,), "scan initial")
    op0, op1 = ins.attrs["op0"], ins.attrs["op1"]
    cx, b = L.cx, L.cx.b
    L.resolve_hazards(ins, [a, c, ini], elementwise=True)
    view = L.view(out)
    for v in (a, c, ini):
        v.prepare(cx)
    view.prepare(cx)
    n = shape[-1]
    with L.foreach(lead) as lidx:
        full = [*lidx, ci64(0)]
        eidx = [ci64(0) if k is None else full[k] for k in imap]
        if len(eidx) != len(ishape):  # undo the [P, 1] -> [P, 1, ..., 1] reshape
            eidx = eidx[:1] + [ci64(0)] * (len(ishape) - 1)
        init = ini.emit(cx, eidx)
        acc_ptr = cx.alloca_entry(F32)
        b.store(init, acc_ptr)
        with L.foreach((n,)) as (j,):
            idx = [*lidx, j]
            acc = b.load(acc_ptr)
            acc = to_f32(cx, *alu.binary(cx, op0, acc, CT.F32, a.emit(cx, idx), CT.F32))
            acc = to_f32(cx, *alu.binary(cx, op1, acc, CT.F32, c.emit(cx, idx), CT.F32))
            b.store(acc, acc_ptr)
            view.store(cx, idx, from_compute(cx, acc, CT.F32, out.dtype))


def matmul(L: KernelLowering, ins: Instr) -> None:
    """``out = (out if accumulate else 0) + f32(stationary.T @ moving)``; the product accumulates in fp32."""
    out = ins.outs[0]
    st, mv = (ToF32(L.val(x, ins)) for x in ins.ins)
    if len(st.shape) != 2 or len(mv.shape) != 2 or st.shape[0] != mv.shape[0] or \
            tuple(out.shape) != (st.shape[1], mv.shape[1]):
        raise ShapeError(f"nc_matmul shapes: stationary {tuple(st.shape)}, moving {tuple(mv.shape)}, "
                         f"out {tuple(out.shape)}", loc=ins.loc)
    k_dim, m_dim = st.shape
    n_dim = mv.shape[1]
    cx, b = L.cx, L.cx.b
    from codegen.lowering.mmfuse import resolve

    src = resolve(L, ins)  # operands read where they come from (HBM, the transpose's source): plan_matmul_operands
    a_nn = src is not None and src.a is not None
    st_direct = src.s if src is not None else None  # the stationary [K, M] read in place
    L.resolve_hazards(ins, [x for x, direct in ((st, a_nn or st_direct is not None),
                                                (mv, src is not None and src.v is not None)) if not direct],
                      elementwise=False)
    accumulate = bool(ins.attrs.get("accumulate"))
    view = L.view(out)
    from codegen.lowering.gemm import gemm
    from codegen.lowering.gemm_bf16 import gemm_bf16, native_bf16

    bf16 = native_bf16(ins)  # both operands bf16 and a bf16 dot-product unit: no widening
    operand = DType.bfloat16 if bf16 else DType.float32
    if src is not None and src.a is not None:
        st_f = src.a
    else:
        st_f = st_direct if st_direct is not None else _dense_view(L, st, operand)
    mv_f = src.v if src is not None and src.v is not None else _dense_view(L, mv, operand)
    view.prepare(cx)
    if bf16:
        gemm = gemm_bf16

    if out.dtype is DType.float32 and (len(view.view_strides) < 2 or view.view_strides[-1] == 1):
        gemm(L, st_f, mv_f, view, k_dim, m_dim, n_dim, accumulate, a_nn)
        return
    acc = L.temp_view((m_dim, n_dim), DType.float32)
    acc.prepare(cx)
    gemm(L, st_f, mv_f, acc, k_dim, m_dim, n_dim, False, a_nn)
    with L.foreach((m_dim, n_dim)) as idx:
        p = acc.load(cx, idx)
        if accumulate:
            cur = to_f32(cx, *_read_compute(cx, view, idx, out.dtype))
            p = b.fadd(cur, p)
        view.store(cx, idx, from_compute(cx, p, CT.F32, out.dtype))


def _read_compute(cx: Ctx, view: RegionView, idx: list[ir.Value], dt: DType) -> tuple[ir.Value, CT]:
    return to_compute(cx, view.load(cx, idx), dt)


def _dense_view(L: KernelLowering, v: Val, dtype: DType = DType.float32) -> RegionView:
    """A ``dtype`` (fp32 or bf16) [R, C] view with unit column stride holding ``v``: the region itself when it
    already is one, else a temporary filled from ``v``'s fp32 values (bf16 values through fp32 and back: exact)."""
    cx = L.cx
    inner = v.x if isinstance(v, ToF32) else v
    if isinstance(inner, RegionRead) and inner.view.dtype is dtype and inner.view.view_strides[-1:] == [1]:
        inner.view.prepare(cx)
        return inner.view
    tmp = L.temp_view(tuple(v.shape), dtype)
    v.prepare(cx)
    tmp.prepare(cx)
    with L.foreach(tuple(v.shape)) as idx:
        val = v.emit(cx, idx)
        tmp.store(cx, idx, val if dtype is DType.float32 else from_compute(cx, val, CT.F32, dtype))
    return tmp


def transpose(L: KernelLowering, ins: Instr) -> None:
    out = ins.outs[0]
    x = L.val(ins.ins[0], ins)
    xs = tuple(x.shape) if x.shape else (1,)
    f = 1
    for s in xs[1:]:
        f *= s
    n = 1
    for s in out.shape:
        n *= s
    if n == xs[0] * f:
        v: Val = FlatMap(x, tuple(out.shape))
    else:
        v = bcast(FlatMap(x, (f, xs[0])), tuple(out.shape), "output")
    L.write(ins, out, v, elementwise=False)


def bn_stats(L: KernelLowering, ins: Instr) -> None:
    """Per partition over all free elements: (count, mean, M2) -> fp32 [P, 3], in one pass.

    Like the engine (and torch's CPU moments), the pass accumulates in fp32: shifted sums
    ``s1 = sum(d)``, ``s2 = sum(d * d)`` of ``d = x - k`` with ``k`` the partition's first element
    (0 if it is not finite), many partial sums wide (reassociated, vectorised); then, in f64,
    ``mean = k + s1 / n`` and ``M2 = s2 - s1 * s1 / n`` (clamped at 0). The shift keeps the
    cancellation in ``M2`` to ``(mean - k)^2 / var``, O(1) for real data. The input may be an inlined
    producer (an HBM load, say), evaluated once per element. The interpreter's reference is a
    two-pass f64 computation; results agree to a few fp32 ulps of the data's scale (bn_stats is
    compared with a tolerance).
    """
    x = ToF32(L.val(ins.ins[0], ins))
    xs = tuple(x.shape) if x.shape else (1,)
    p, free = xs[0], xs[1:]
    cnt = 1
    for s in free:
        cnt *= s
    cx, b = L.cx, L.cx.b
    L.resolve_hazards(ins, [x], elementwise=False)
    tmp = L.temp_view((p, 3), DType.float32)
    x.prepare(cx)
    tmp.prepare(cx)
    with L.foreach((p,)) as (pi,):
        k0 = x.emit(cx, [pi] + [ci64(0)] * len(free))
        finite = b.fcmp_ordered("<", cx.call_intrinsic("llvm.fabs", [k0]), cf32(math.inf))
        k = b.select(finite, k0, cf32(0.0))

        def step(idx: list[ir.Value], acc: list[ir.Value], pi: ir.Value = pi, k: ir.Value = k) -> list[ir.Value]:
            d = b.fsub(x.emit(cx, [pi, *idx]), k)
            return [b.fadd(acc[0], d, flags=("reassoc",)),
                    b.fadd(acc[1], b.fmul(d, d, flags=("reassoc", "contract")), flags=("reassoc", "contract"))]

        s1, s2 = (b.fpext(v, F64) for v in L.reduce_loops(free, [cf32(-0.0), cf32(-0.0)], step))
        q = b.fdiv(s1, cf64(float(cnt)))
        m2 = b.fsub(s2, b.fmul(s1, q))
        m2 = b.select(b.fcmp_ordered("<", m2, cf64(0.0)), cf64(0.0), m2)
        tmp.store(cx, [pi, ci64(0)], cf32(float(cnt)))
        tmp.store(cx, [pi, ci64(1)], b.fptrunc(b.fadd(b.fpext(k, F64), q), F32))
        tmp.store(cx, [pi, ci64(2)], b.fptrunc(m2, F32))
    L.write(ins, ins.outs[0], bcast(RegionRead(tmp), tuple(ins.outs[0].shape), "output"), hazards=False)


def bn_aggr(L: KernelLowering, ins: Instr) -> None:
    """Combine k groups of (count, mean, M2) per partition into (mean, population variance)."""
    s = ToF32(L.val(ins.ins[0], ins))
    ss = tuple(s.shape) if s.shape else (1,)
    p = ss[0]
    tot = 1
    for d in ss[1:]:
        tot *= d
    if tot % 3:
        raise ShapeError(f"bn_aggr input of shape {ss}: the free size is not a multiple of 3", loc=ins.loc)
    k = tot // 3
    free = ss[1:]
    cx, b = L.cx, L.cx.b
    L.resolve_hazards(ins, [s], elementwise=False)
    tmp = L.temp_view((p, 2), DType.float32)
    s.prepare(cx)
    tmp.prepare(cx)
    from codegen.lowering.vals import unflatten

    def elem(pi: ir.Value, g: ir.Value, j: int) -> ir.Value:
        flat = b.add(b.mul(g, ci64(3)), ci64(j))
        return b.fpext(s.emit(cx, [pi, *unflatten(cx, flat, free)]), F64)

    with L.foreach((p,)) as (pi,):
        total, wsum = L.reduce_loops((k,), [cf64(-0.0), cf64(-0.0)], lambda idx, acc: [
            b.fadd(acc[0], elem(pi, idx[0], 0)),
            b.fadd(acc[1], b.fmul(elem(pi, idx[0], 0), elem(pi, idx[0], 1)))])
        mu = b.fdiv(wsum, total)
        m2s, dev = L.reduce_loops((k,), [cf64(-0.0), cf64(-0.0)], lambda idx, acc: [
            b.fadd(acc[0], elem(pi, idx[0], 2)),
            b.fadd(acc[1], b.fmul(elem(pi, idx[0], 0), _sq(b, b.fsub(elem(pi, idx[0], 1), mu))))])
        tmp.store(cx, [pi, ci64(0)], b.fptrunc(mu, F32))
        tmp.store(cx, [pi, ci64(1)], b.fptrunc(b.fdiv(b.fadd(m2s, dev), total), F32))
    L.write(ins, ins.outs[0], bcast(RegionRead(tmp), tuple(ins.outs[0].shape), "output"), hazards=False)


def _sq(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fmul(x, x)


def device_print(L: KernelLowering, ins: Instr) -> None:
    """Copy the tile (storage dtype, row-major) to scratch and call the host callback
    ``cb(instr_id, data, values)`` with ``values = [pid0, pid1, pid2, loop vars...]``."""
    r = ins.ins[0]
    cx, b = L.cx, L.cx.b
    if isinstance(r, Region):
        v = L.val(r, ins)
        dt = r.dtype
    elif isinstance(r, ImmNode):
        from codegen.lowering.vals import Imm

        v = Imm(r.value)
        dt = DType.float32 if v.ct is CT.F32 else DType.int32
    else:
        raise ShapeError(f"device_print of {type(r).__name__}", loc=ins.loc)
    shape = tuple(v.shape)
    tmp = L.temp_view(shape, dt)
    v.prepare(cx)
    tmp.prepare(cx)
    with L.foreach(shape) as idx:
        tmp.store(cx, idx, from_compute(cx, v.emit(cx, idx), v.ct, dt))
    info = L.plan.info(ins)
    vals = L.alloca_i64(3 + len(info.loops))
    from trnlang.ir.nodes import pid_sym

    for k in range(3):
        b.store(cx.env[pid_sym(k)], cx.gep(vals, ci64(k)))
    for k, lp in enumerate(info.loops):
        b.store(cx.env[lp.var], cx.gep(vals, ci64(3 + k)))
    fnty = ir.FunctionType(VOID, [I64, I8P, I64.as_pointer()])
    cb = L.cb
    with b.if_then(b.icmp_unsigned("!=", cb, ir.Constant(I8P, None))):
        fp = b.bitcast(cb, fnty.as_pointer())
        data = b.bitcast(tmp.addr(cx, [ci64(0)] * len(shape)), I8P)
        b.call(fp, [ci64(info.id), data, vals])
