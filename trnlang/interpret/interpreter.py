"""The numpy reference interpreter: executes a ``Kernel`` literally, as docs/ir.md specifies.

``run_kernel(kernel, arrays, grid)`` runs every program instance of the grid
sequentially (row-major over the grid), mutating ``arrays`` (one numpy array
per ``kernel.tensors``, any strides) in place. Each program instance has its own
on-chip buffers; every execution of an ``ALLOC`` gives a fresh, poisoned buffer
(NaN / int minimum / True), so reads of unwritten memory show.

Dispatch is a table keyed by ``Op`` (``_HANDLERS``), one function per op. The
numeric rules (compute types, casts, ALU functions) live in ``alu.py``; sympy
expression evaluation in ``symeval.py``.

Choices where docs/ir.md is silent:
- a ``dma_copy`` load with a mask and no ``other`` leaves masked-out elements of
  the destination unchanged;
- a store whose access maps several tile elements to one tensor element writes
  the last of them in row-major tile order;
- ``activation`` computes ``data * scale`` then ``+ bias`` (two fp32 roundings,
  no FMA); an absent bias adds nothing (so -0.0 stays -0.0);
- ``iota`` values are wrapped to int32 (the int compute type) before the cast;
- immediates: Python floats become fp32, ints int32 (wrapping), bools bool;
- a region that reaches outside its buffer is a run-time ``BoundsError`` too;
- a buffer used before any ``ALLOC`` executed is created poisoned.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy

from trnlang.frontend.errors import BoundsError, DTypeError, LaunchError, ShapeError
from trnlang.interpret import alu
from trnlang.interpret.index_check import check_index_range
from trnlang.interpret.symeval import evaluate_int, evaluate_on_tile
from trnlang.ir.index_range import index_producers
from trnlang.ir.nodes import Access, Buf, Imm, Instr, Kernel, Loop, Region, Stmt, gather_sym, instrs, pid_sym
from trnlang.ir.ops import Alu, Op

_N_PID_AXES = 3


class _Ctx:
    """State of one program instance: on-chip buffers, symbol values, the launch arrays."""

    def __init__(self, kernel: Kernel, arrays: Sequence[np.ndarray], env: dict[sympy.Symbol, int]) -> None:
        self.kernel = kernel
        self.arrays = {id(t): a for t, a in zip(kernel.tensors, arrays)}
        self.env = env
        self.loop_vars: list[sympy.Symbol] = []
        self.bufs: dict[Buf, np.ndarray] = {}
        self.instr: Instr | None = None
        self.index_producers = index_producers(kernel)  # checked for int32 wrapping (index_check.py)

    # ----------------------------------------------------------------- helpers

    def where(self) -> str:
        """The program id and loop indices, for messages."""
        pids = ", ".join(str(self.env[pid_sym(a)]) for a in range(_N_PID_AXES))
        loops = "".join(f" {v}={self.env[v]}" for v in self.loop_vars)
        return f"pid=({pids}){loops}"

    def bounds_error(self, msg: str) -> BoundsError:
        loc = self.instr.loc if self.instr is not None else None
        op = self.instr.op.value if self.instr is not None else "?"
        return BoundsError(f"{op}: {msg} (at {self.where()})", loc=loc)

    def buf_array(self, buf: Buf) -> np.ndarray:
        arr = self.bufs.get(buf)
        if arr is None:
            arr = self.bufs[buf] = _poisoned(buf)
        return arr

    def region_index(self, r: Region) -> Any:
        """The numpy index selecting a region of its buffer (bounds-checked); for a strided / permuted view
        (``r.ap``) an index array into the flattened buffer."""
        if r.ap is not None:
            shape = tuple(int(d) for d in r.buf.shape)
            base = 0
            for d, start in enumerate(r.starts):
                base += evaluate_int(start, self.env) * int(np.prod(shape[d + 1:], dtype=np.int64))
            flat = np.full(tuple(n for _, n in r.ap), base, np.int64)
            for k, (st, n) in enumerate(r.ap):
                flat += (np.arange(n, dtype=np.int64) * st).reshape((1,) * k + (n,) + (1,) * (len(r.ap) - k - 1))
            if flat.size and (flat.min() < 0 or flat.max() >= int(np.prod(shape))):
                raise self.bounds_error(f"strided view of buffer {r.buf.name} of shape {shape} leaves the buffer")
            return flat
        idx: list[Any] = []
        for d, (start, size, keep) in enumerate(zip(r.starts, r.sizes, r.keep)):
            s = evaluate_int(start, self.env)
            dim = r.buf.shape[d]
            if s < 0 or s + (size if keep else 1) > dim:
                raise self.bounds_error(
                    f"region [{s}:{s + size}] of dimension {d} is outside buffer {r.buf.name} of shape "
                    f"{tuple(r.buf.shape)}")
            idx.append(slice(s, s + size) if keep else s)
        return tuple(idx)

    def read(self, r: Region) -> np.ndarray:
        """A copy of the region's contents (storage dtype)."""
        if r.ap is not None:
            return np.array(self.buf_array(r.buf).reshape(-1)[self.region_index(r)])
        return np.array(self.buf_array(r.buf)[self.region_index(r)])

    def write(self, r: Region, value: np.ndarray) -> None:
        """Broadcast ``value`` to the region's shape, cast it to the buffer dtype and store it."""
        v = self.bcast(value, r.shape, "output")
        if r.ap is not None:
            arr = self.buf_array(r.buf)
            flat = arr.reshape(-1)
            assert np.shares_memory(flat, arr)
            flat[self.region_index(r)] = alu.cast(v, r.buf.dtype.np)
            return
        self.buf_array(r.buf)[self.region_index(r)] = alu.cast(v, r.buf.dtype.np)

    def value(self, x: Any) -> np.ndarray:
        """An operand's value: a Region's contents or an immediate's 0-d array."""
        if isinstance(x, Region):
            return self.read(x)
        if isinstance(x, Imm):
            return alu.imm_array(x.value)
        if isinstance(x, bool | int | float):
            return alu.imm_array(x)
        if isinstance(x, np.number):
            return alu.imm_array(x.item())
        raise TypeError(f"unsupported operand {x!r}")

    def bcast(self, v: np.ndarray, shape: Sequence[int], what: str = "operand") -> np.ndarray:
        try:
            return np.broadcast_to(v, tuple(shape))
        except ValueError:
            loc = self.instr.loc if self.instr is not None else None
            raise ShapeError(f"{what} of shape {np.shape(v)} does not broadcast to {tuple(shape)}", loc=loc) from None

    def operand(self, x: Any, shape: Sequence[int]) -> np.ndarray:
        """An operand's value broadcast to ``shape``."""
        return self.bcast(self.value(x), shape)

    # ----------------------------------------------------------------- HBM access patterns

    def resolve(self, acc: Access) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """(tensor array, mask of accessed elements, index arrays) of an access, bounds-checked."""
        arr = self.arrays.get(id(acc.tensor))
        if arr is None:
            raise LaunchError(f"tensor {acc.tensor.name} is not a tensor of kernel {self.kernel.name}",
                              loc=self.instr.loc if self.instr else None)
        shape = tuple(int(s) for s in acc.shape)
        gathers = {}
        for k, g in enumerate(acc.gathers):
            gv = self.read(g)
            gv = alu.cast(gv, alu.I32) if alu.is_float(gv.dtype) else gv
            gathers[gather_sym(k)] = self.bcast(gv.astype(np.int64), shape, f"gather {k}")
        if acc.mask is None or acc.mask is True or acc.mask is sympy.true:
            mask = np.ones(shape, dtype=bool)
        else:
            mask = evaluate_on_tile(acc.mask, shape, self.env, gathers).astype(bool)
        if len(acc.index) != arr.ndim:
            raise ShapeError(f"access on {acc.tensor.name} has {len(acc.index)} indices for a {arr.ndim}-d tensor",
                             loc=self.instr.loc if self.instr else None)
        idxs = tuple(evaluate_on_tile(e, shape, self.env, gathers).astype(np.int64, copy=False) for e in acc.index)
        bad = np.zeros(shape, dtype=bool)
        for ix, dim in zip(idxs, arr.shape):
            bad |= (ix < 0) | (ix >= dim)
        bad &= mask
        if bad.any():
            pos = tuple(int(p) for p in np.argwhere(bad)[0])
            at = tuple(int(ix[pos]) for ix in idxs)
            raise self.bounds_error(
                f"index {list(at)} is out of bounds for tensor {acc.tensor.name} of shape {tuple(arr.shape)} "
                f"(tile element {list(pos)} of {list(shape)}; {int(bad.sum())} element(s) out of bounds)")
        return arr, mask, idxs

    def load(self, acc: Access) -> tuple[np.ndarray, np.ndarray]:
        """(values in the tensor dtype, mask) of an access; masked-out values are arbitrary (never read)."""
        arr, mask, idxs = self.resolve(acc)
        shape = mask.shape
        out = np.zeros(shape, dtype=arr.dtype)
        if arr.ndim == 0:
            out[mask] = arr[()]
        elif mask.all():
            out[...] = arr[idxs]
        else:
            out[mask] = arr[tuple(ix[mask] for ix in idxs)]
        return out, mask

    def store(self, acc: Access, values: np.ndarray, extra_mask: np.ndarray | None = None) -> None:
        """Write ``values`` (broadcast to the access shape) where the mask is true, cast to the tensor dtype."""
        arr, mask, idxs = self.resolve(acc)
        if extra_mask is not None:
            mask = mask & self.bcast(extra_mask, mask.shape)
        vals = alu.cast(self.bcast(values, mask.shape, "stored tile"), arr.dtype)
        if arr.ndim == 0:
            if mask.any():
                arr[()] = vals[mask][-1]
            return
        arr[tuple(ix[mask] for ix in idxs)] = vals[mask]

    def store_accumulate(self, acc: Access, values: np.ndarray, op: Alu) -> None:
        """Accumulating store: ``t[i] = cast(op(to_compute(t[i]), v))`` per element, in row-major tile order
        (repeated indices all accumulate, each step rounded to the tensor dtype)."""
        arr, mask, idxs = self.resolve(acc)
        vals = alu.to_compute(self.bcast(values, mask.shape, "stored tile"))
        if arr.ndim == 0:
            for v in vals[mask]:
                arr[()] = alu.cast(alu.binary(op, alu.to_compute(arr[()][None]), v[None]), arr.dtype)[0]
            return
        sel = tuple(ix[mask] for ix in idxs)
        vs = vals[mask]
        ufunc = {Alu.add: np.add, Alu.multiply: np.multiply, Alu.maximum: None, Alu.minimum: None}[op]
        if ufunc is not None and alu.to_compute(arr[:0]).dtype == arr.dtype and vs.dtype == arr.dtype:
            ufunc.at(arr, sel, vs)  # compute dtype == storage dtype: numpy's unbuffered in-order update
            return
        flat = np.ravel_multi_index(sel, arr.shape)
        view = arr.reshape(-1)
        for k, v in zip(flat.tolist(), vs):
            view[k] = alu.cast(alu.binary(op, alu.to_compute(view[k:k + 1]), np.asarray(v)[None]), arr.dtype)[0]


def _poisoned(buf: Buf) -> np.ndarray:
    dt = buf.dtype.np
    return np.full(tuple(buf.shape), alu.poison_value(dt), dtype=dt)


# --------------------------------------------------------------------------- op handlers


def _alloc(c: _Ctx, ins: Instr) -> None:
    buf = ins.outs[0]
    c.bufs[buf] = _poisoned(buf)


def _dma_copy(c: _Ctx, ins: Instr) -> None:
    dst, src = ins.outs[0], ins.ins[0]
    if isinstance(dst, Region) and isinstance(src, Access):
        vals, mask = c.load(src)
        dt = dst.buf.dtype.np
        tile = alu.cast(alu.to_compute(vals), dt)  # via the compute type: an int64 tensor wraps to int32
        other = ins.attrs.get("other")
        mask_o = c.bcast(mask, dst.shape, "loaded tile")
        tile_o = c.bcast(tile, dst.shape, "loaded tile")
        if mask.all():
            c.write(dst, tile_o)
        elif other is not None:
            c.write(dst, np.where(mask_o, tile_o, alu.cast(alu.imm_array(other), dt)))
        else:
            cur = c.read(dst)
            cur[mask_o] = tile_o[mask_o]
            c.write(dst, cur)
    elif isinstance(dst, Access) and isinstance(src, Region):
        if ins.attrs.get("accumulate") is not None:
            c.store_accumulate(dst, c.read(src), ins.attrs["accumulate"])
        else:
            c.store(dst, c.read(src))
    elif isinstance(dst, Region) and isinstance(src, Region):
        c.write(dst, c.read(src))
    elif isinstance(dst, Access) and isinstance(src, Access):
        vals, mask = c.load(src)
        c.store(dst, vals, extra_mask=mask)
    else:
        raise TypeError(f"dma_copy from {type(src).__name__} to {type(dst).__name__}")


def _activation(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    shape = out.shape
    x = alu.to_f32(c.operand(ins.ins[0], shape))
    scale = ins.attrs.get("scale", 1.0)
    if isinstance(scale, Region | Imm):
        x = alu.binary(Alu.multiply, x, alu.to_f32(c.operand(scale, shape)))
    elif scale is not None and float(scale) != 1.0:
        x = alu.binary(Alu.multiply, x, alu.imm_array(float(scale)))
    if len(ins.ins) > 2:  # a per-partition scale tile
        x = alu.binary(Alu.multiply, x, alu.to_f32(c.operand(ins.ins[2], shape)))
    if len(ins.ins) > 1 and ins.ins[1] is not None:
        x = alu.binary(Alu.add, x, alu.to_f32(c.operand(ins.ins[1], shape)))
    func = ins.attrs.get("func", Alu.copy)
    y = alu.to_f32(alu.unary(func, x))
    _reduction_outs(c, ins, y)
    c.write(out, y)


def _reduction_outs(c: _Ctx, ins: Instr, y: np.ndarray) -> None:
    """The outputs after the first of an activation / tensor_scalar: the free-axis ``reduce_op`` reduction
    of ``y`` and, for an activation's ``reduce_cmd`` (ir/ops.py REDUCE_CMDS), the registers' new value."""
    reduce_op: Alu | None = ins.attrs.get("reduce_op")
    cmd = ins.attrs.get("reduce_cmd")
    if reduce_op is None and cmd in (None, "reset_reduce", "reduce"):
        return
    if len(ins.outs) < 2:
        raise ShapeError(f"{ins.op.value} with reduce_op needs a second output", loc=ins.loc)
    p = y.shape[0] if y.ndim else 1
    if cmd == "reset":
        r = np.zeros((p, 1), np.float32)
    elif cmd == "idle":
        r = alu.to_f32(c.operand(ins.ins[3], (p, 1)))
    elif reduce_op is not None:
        r = alu.reduce(reduce_op, y.reshape(p, -1), (1,), keepdims=True)
        if cmd == "reduce":
            r = alu.to_f32(alu.binary(reduce_op, alu.to_f32(c.operand(ins.ins[3], (p, 1))), r))
    else:
        raise ShapeError(f"{ins.op.value} reduce_cmd={cmd} needs reduce_op", loc=ins.loc)
    for red in ins.outs[1:]:
        c.write(red, r.reshape((p,) + (1,) * (len(red.shape) - 1)) if red.shape else r.reshape(()))


def _tensor_tensor(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    a, b = (c.operand(x, out.shape) for x in ins.ins)
    c.write(out, alu.binary(ins.attrs["op"], a, b))


def _tensor_scalar(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    shape = out.shape
    t = c.operand(ins.ins[0], shape)
    reverse = tuple(ins.attrs.get("reverse") or (False, False))
    for k, key in enumerate(("op0", "op1")):
        op = ins.attrs.get(key)
        if op is None:
            continue
        if len(ins.ins) <= k + 1:
            raise ShapeError(f"tensor_scalar {key}={op.name} has no scalar operand s{k}", loc=ins.loc)
        s = c.operand(ins.ins[k + 1], shape)
        t = alu.binary(op, s, t) if reverse[k] else alu.binary(op, t, s)
    _reduction_outs(c, ins, np.asarray(t))
    c.write(out, t)


def _tensor_reduce(c: _Ctx, ins: Instr) -> None:
    data = c.value(ins.ins[0])
    r = alu.reduce(ins.attrs["op"], data, tuple(ins.attrs["axes"]), bool(ins.attrs.get("keepdims", False)))
    c.write(ins.outs[0], r)


def _tensor_copy(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    src = c.value(ins.ins[0])
    if ins.attrs.get("reshape"):
        shape = tuple(out.shape)
        if src.ndim == 0 or len(shape) == 0 or src.shape[0] != shape[0] or src.size != int(np.prod(shape)):
            raise ShapeError(f"tensor_copy reshape of {src.shape} to {shape}: partition count or element count "
                             "differ", loc=ins.loc)
        src = src.reshape(shape)
    c.write(out, src)


def _select(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    cond, a, b = (c.operand(x, out.shape) for x in ins.ins)
    c.write(out, _where(cond != 0, a, b))


def _where(m: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """where() in the common compute type of a and b (fp32 if either is a float, else int32)."""
    if alu.is_float(a.dtype) or alu.is_float(b.dtype):
        return np.where(m, alu.to_f32(a), alu.to_f32(b))
    return np.where(m, a.astype(alu.I32), b.astype(alu.I32))


def _iota(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    v = np.asarray(evaluate_on_tile(ins.attrs["expr"], out.shape, c.env))
    v = alu.to_f32(v) if alu.is_float(v.dtype) else alu.cast(v.astype(np.int64), alu.I32)
    c.write(out, v)


def _memset(c: _Ctx, ins: Instr) -> None:
    c.write(ins.outs[0], alu.imm_array(ins.attrs["value"]))


def _affine_select(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    pred = evaluate_on_tile(ins.attrs["pred"], out.shape, c.env).astype(bool)
    a, b = (c.operand(x, out.shape) for x in ins.ins)
    c.write(out, _where(pred, a, b))


def _scan(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    shape = tuple(out.shape)
    a, b = (alu.to_f32(c.operand(x, shape)) for x in ins.ins[:2])
    ini = alu.to_f32(c.value(ins.ins[2]))
    if ini.ndim >= 2 and len(shape) > 2 and ini.shape[1:] == (1,) * (ini.ndim - 1):
        ini = ini.reshape((ini.shape[0],) + (1,) * (len(shape) - 1))  # a [P,1] initial is per partition
    acc = np.array(c.bcast(ini, shape[:-1] + (1,), "scan initial")[..., 0])
    res = np.empty(shape, dtype=alu.F32)
    op0, op1 = ins.attrs["op0"], ins.attrs["op1"]
    for j in range(shape[-1]):
        acc = alu.to_f32(alu.binary(op0, acc, a[..., j]))
        acc = alu.to_f32(alu.binary(op1, acc, b[..., j]))
        res[..., j] = acc
    c.write(out, res)


def _matmul(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    st, mv = (alu.to_f32(c.value(x)).astype(np.float64) for x in ins.ins)
    if st.ndim != 2 or mv.ndim != 2 or st.shape[0] != mv.shape[0] or tuple(out.shape) != (st.shape[1], mv.shape[1]):
        raise ShapeError(f"nc_matmul shapes: stationary {st.shape}, moving {mv.shape}, out {tuple(out.shape)}",
                         loc=ins.loc)
    prod = (st.T @ mv).astype(alu.F32)
    if ins.attrs.get("accumulate"):
        prod = alu.to_f32(c.read(out)) + prod
    c.write(out, prod)


def _transpose(c: _Ctx, ins: Instr) -> None:
    out = ins.outs[0]
    x = c.value(ins.ins[0])
    x2 = x.reshape(x.shape[0], -1) if x.ndim != 2 else x
    t = x2.T
    if t.shape != tuple(out.shape) and t.size == int(np.prod(out.shape)):
        t = t.reshape(out.shape)
    c.write(out, t)


def _bn_stats(c: _Ctx, ins: Instr) -> None:
    x = alu.to_f32(c.value(ins.ins[0])).astype(np.float64)
    x = x.reshape(x.shape[0], -1)
    n = x.shape[1]
    mean = x.mean(axis=1)
    m2 = ((x - mean[:, None]) ** 2).sum(axis=1)
    c.write(ins.outs[0], np.stack([np.full_like(mean, n), mean, m2], axis=1).astype(alu.F32))


def _bn_aggr(c: _Ctx, ins: Instr) -> None:
    s = alu.to_f32(c.value(ins.ins[0])).astype(np.float64)
    s = s.reshape(s.shape[0], -1, 3)
    cnt, mean, m2 = s[..., 0], s[..., 1], s[..., 2]
    total = cnt.sum(axis=1)
    mu = (cnt * mean).sum(axis=1) / total
    m2_all = m2.sum(axis=1) + (cnt * (mean - mu[:, None]) ** 2).sum(axis=1)
    c.write(ins.outs[0], np.stack([mu, m2_all / total], axis=1).astype(alu.F32))


def _print(c: _Ctx, ins: Instr) -> None:
    r = ins.ins[0]
    tile = c.value(r)
    label = ins.attrs.get("label", "")
    dt = r.dtype.short if isinstance(r, Region) else str(tile.dtype)
    with np.printoptions(threshold=1 << 16, linewidth=120):
        print(f"[{c.kernel.name} {c.where()}] {label}: {dt}{list(tile.shape)}\n{np.array2string(tile)}", flush=True)


_HANDLERS: dict[Op, Callable[[_Ctx, Instr], None]] = {
    Op.ALLOC: _alloc,
    Op.DMA_COPY: _dma_copy,
    Op.ACTIVATION: _activation,
    Op.TENSOR_TENSOR: _tensor_tensor,
    Op.TENSOR_SCALAR: _tensor_scalar,
    Op.TENSOR_REDUCE: _tensor_reduce,
    Op.TENSOR_COPY: _tensor_copy,
    Op.SELECT: _select,
    Op.IOTA: _iota,
    Op.MEMSET: _memset,
    Op.AFFINE_SELECT: _affine_select,
    Op.SCAN: _scan,
    Op.MATMUL: _matmul,
    Op.TRANSPOSE: _transpose,
    Op.BN_STATS: _bn_stats,
    Op.BN_AGGR: _bn_aggr,
    Op.PRINT: _print,
}
assert set(_HANDLERS) == set(Op), "every Op needs an interpreter handler"


# --------------------------------------------------------------------------- driver


def _exec(c: _Ctx, body: Sequence[Stmt]) -> None:
    for s in body:
        if isinstance(s, Loop):
            start, stop, step = (evaluate_int(e, c.env) for e in (s.start, s.stop, s.step))
            if step == 0:
                raise ValueError(f"loop {s.var} has step 0")
            saved = c.env.get(s.var)
            c.loop_vars.append(s.var)
            for v in range(start, stop, step):
                c.env[s.var] = v
                _exec(c, s.body)
            c.loop_vars.pop()
            if saved is None:
                c.env.pop(s.var, None)
            else:
                c.env[s.var] = saved
        else:
            c.instr = s
            try:
                if id(s) in c.index_producers:
                    check_index_range(c, s)
                _HANDLERS[s.op](c, s)
            except alu.AluTypeError as e:
                raise DTypeError(str(e), loc=s.loc) from None


def check_launch(k: Kernel, arrays: Sequence[np.ndarray], env: dict[sympy.Symbol, int]) -> None:
    """Raise ``LaunchError`` / ``DTypeError`` naming the argument when ``arrays`` do not fit ``k``'s tensors.

    ``env`` binds size symbols already known (it is extended with those the arrays fix).
    """
    tensors = k.tensors
    if len(arrays) != len(tensors):
        raise LaunchError(f"kernel {k.name} takes {len(tensors)} arrays ({', '.join(t.name for t in tensors)}), "
                          f"got {len(arrays)}", loc=k.loc)
    for t, a in zip(tensors, arrays):
        if not isinstance(a, np.ndarray):
            raise LaunchError(f"argument {t.name} must be a numpy array, got {type(a).__name__}", loc=k.loc)
        if a.dtype != t.dtype.np:
            raise LaunchError(f"argument {t.name} has dtype {a.dtype}, expected {t.dtype.np}", loc=k.loc)
        if a.ndim != len(t.shape):
            raise LaunchError(f"argument {t.name} has {a.ndim} dims, expected {len(t.shape)}", loc=k.loc)
        for d, (want, got) in enumerate(zip(t.shape, a.shape)):
            if isinstance(want, sympy.Symbol):
                if env.setdefault(want, got) != got:
                    raise LaunchError(f"argument {t.name} dim {d}: {want}={got} conflicts with {env[want]}", loc=k.loc)
            elif isinstance(want, int | sympy.Integer) and int(want) != got:
                raise LaunchError(f"argument {t.name} has shape {a.shape}, expected {tuple(t.shape)}", loc=k.loc)


def written_mask(k: Kernel) -> tuple[bool, ...]:
    """Per ``k.tensors``: whether the kernel stores to it (the output ``Access`` of a DMA store)."""
    stored = {id(x.tensor) for i in instrs(k.body) for x in i.outs if isinstance(x, Access)}
    return tuple(id(t) in stored for t in k.tensors)


def raise_read_only(k: Kernel, index: int) -> None:
    """The ``LaunchError`` for a read-only launch array ``index`` that kernel ``k`` writes."""
    name = k.tensors[index].name
    raise LaunchError(f"argument {name!r} is read-only (numpy flags.writeable is False: a bytes buffer, a read-only "
                      f"mmap or a view marked read-only) but kernel {k.name} writes it; pass a writable array, "
                      "e.g. a copy")


def check_writable(k: Kernel, arrays: Sequence[np.ndarray], written: Sequence[bool]) -> None:
    """Raise ``LaunchError`` before anything runs when an array the kernel writes is read-only."""
    for i, (a, w) in enumerate(zip(arrays, written)):
        if w and not a.flags.writeable:
            raise_read_only(k, i)


def run_kernel(k: Kernel, arrays: list[np.ndarray], grid: tuple[int, ...] | None = None) -> None:
    """Run every program instance of ``grid`` (default ``k.grid``) of kernel ``k`` on ``arrays``, in place.

    ``arrays`` holds one numpy array per ``k.tensors`` (params, outputs, scratch),
    with exactly the tensors' numpy dtypes; they may be non-contiguous views.
    Raises ``BoundsError`` (naming the instruction's source line) on an
    out-of-bounds access, before touching memory.
    """
    grid = tuple(int(g) for g in (k.grid if grid is None else grid))
    if len(grid) > _N_PID_AXES or any(g < 0 for g in grid):
        raise LaunchError(f"bad grid {grid}", loc=k.loc)
    base: dict[sympy.Symbol, int] = {pid_sym(a): 0 for a in range(_N_PID_AXES)}
    check_launch(k, arrays, base)
    check_writable(k, arrays, written_mask(k))
    with np.errstate(all="ignore"):
        for pids in itertools.product(*(range(g) for g in grid)):
            env = dict(base)
            env.update({pid_sym(a): p for a, p in enumerate(pids)})
            _exec(_Ctx(k, arrays, env), k.body)
