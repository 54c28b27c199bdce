"""Elementwise map kernels over fp32 arrays: the test harness of ``vecmath``.

``build_map_module`` emits, per function, ``void <prefix><name>(float *out,
const float *a[, const float *b], int64 n)`` looping over ``n`` elements eight
at a time with ``<8 x float>`` code and a scalar tail using the same emitter.
``MapKernels`` compiles such a module and applies the functions to numpy
arrays.
"""

from __future__ import annotations

import ctypes
from typing import Callable, Sequence

import numpy as np
from llvmlite import ir

from codegen import llvm
from codegen.irutil import F32, I64, PTR, VOID
from codegen.mathlib import vecmath

Emitter = Callable[..., ir.Value]


def _counted_loop(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: int, name: str,
                  body: Callable[[ir.IRBuilder, ir.Value], None]) -> ir.Value:
    """``for (i = start; i + step <= stop; i += step) body(i)``; returns the final ``i``."""
    fn = b.block.function
    pre = b.block
    head = fn.append_basic_block(f"{name}.head")
    loop = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=f"{name}.i")
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<=", b.add(i, I64(step)), stop), loop, done)
    b.position_at_end(loop)
    body(b, i)
    i.add_incoming(b.add(i, I64(step)), b.block)
    b.branch(head)
    b.position_at_end(done)
    return i


def add_map_function(module: ir.Module, name: str, emit: Emitter, arity: int, width: int = 8) -> ir.Function:
    """Add ``void name(float *out, const float *in0, ..., int64 n)`` computing ``emit`` elementwise."""
    fnty = ir.FunctionType(VOID, [PTR] * (1 + arity) + [I64])
    fn = ir.Function(module, fnty, name)
    for a in fn.args[:-1]:
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    out, ins, n = fn.args[0], fn.args[1:-1], fn.args[-1]
    vty = ir.VectorType(F32, width)

    def step(ty: ir.Type, align: int) -> Callable[[ir.IRBuilder, ir.Value], None]:
        def body(bb: ir.IRBuilder, i: ir.Value) -> None:
            args = [bb.load(bb.gep(p, [i], source_etype=F32), typ=ty, align=align) for p in ins]
            res = emit(bb, *args)
            st = bb.store(res, bb.gep(out, [i], source_etype=F32))
            st.align = align
        return body

    i_end = _counted_loop(b, I64(0), n, width, "vec", step(vty, 4))
    _counted_loop(b, i_end, n, 1, "tail", step(F32, 4))
    b.ret_void()
    return fn


def build_map_module(ops: dict[str, tuple[Emitter, int]], prefix: str = "vm_") -> ir.Module:
    """A module with one map function per ``name -> (emitter, arity)``."""
    module = ir.Module(name="vecmath_map")
    for name, (emit, arity) in ops.items():
        add_map_function(module, prefix + name, emit, arity)
    return module


def all_vecmath_ops() -> dict[str, tuple[Emitter, int]]:
    """Every emitter of ``vecmath.UNARY`` / ``VARIANTS`` / ``BINARY`` with its arity."""
    ops: dict[str, tuple[Emitter, int]] = {k: (v, 1) for k, v in {**vecmath.UNARY, **vecmath.VARIANTS}.items()}
    ops.update({k: (v, 2) for k, v in vecmath.BINARY.items()})
    return ops


class MapKernels:
    """Compiled map kernels callable on numpy arrays."""

    def __init__(self, ops: dict[str, tuple[Emitter, int]] | None = None, prefix: str = "vm_") -> None:
        self.ops = ops if ops is not None else all_vecmath_ops()
        self.module = build_map_module(self.ops, prefix)
        self.obj = llvm.compile_ir(self.module)
        self.lib = llvm.load_object(self.obj)
        self._fns = {}
        for name, (_, arity) in self.ops.items():
            argtypes = [ctypes.c_void_p] * (1 + arity) + [ctypes.c_int64]
            self._fns[name] = self.lib.cfunc(prefix + name, None, argtypes)

    def __call__(self, name: str, *arrays: np.ndarray) -> np.ndarray:
        """Apply function ``name`` elementwise to fp32 arrays of one shape."""
        ins: Sequence[np.ndarray] = [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]
        out = np.empty_like(ins[0])
        self._fns[name](out.ctypes.data, *[a.ctypes.data for a in ins], out.size)
        return out

