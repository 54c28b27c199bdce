"""Native helpers of the runtime, built with llvmlite like every kernel: the launch trampoline and the worker loop.

Both are small LLVM modules made with ``llvmlite.ir`` and compiled through the one door to LLVM
(``codegen.llvm``); the runtime wraps their addresses in ctypes prototypes.

- :func:`trampoline_module` ``(n)``: ``i32 tramp(ptr ctx, ptr p0, ..., ptr p{n-1})`` stores the ``n``
  argument pointers in a stack array and calls the kernel entry ``ctx[0]`` with the entry ABI
  (pointer array, meta block ``ctx[1]``, program ids ``0..1`` of a ``1 x 1 x 1`` grid, arena ``ctx[2]``,
  error record ``ctx[3]``, no print callback). One ctypes call then runs a bound launch on new addresses.
- :func:`runner_module`: ``i32 trn_run(ptr words)`` calls the entry ``words[0]`` with the nine ABI words
  ``words[1..9]``: a bound launch whose every word is fixed runs as a one-argument ctypes call.
- :func:`worker_module`: ``trn_worker(job, spin_cycles)`` waits on a 128-byte job slot (spinning with
  ``pause`` for ``spin_cycles`` time-stamp counter ticks, then sleeping on a Linux futex), runs the posted
  kernel entry and marks the slot done; ``trn_post(job)`` posts a written slot (waking a sleeping worker),
  ``trn_wait(job)`` waits for it and returns the entry's result code, ``trn_quit(job)`` stops the worker.
  Slot words: :data:`STATE` (:data:`IDLE`, :data:`POSTED`, :data:`DONE`, :data:`QUIT`), :data:`SLEEPING`,
  :data:`FN` (entry address), :data:`ARGS` (the nine ABI words), :data:`RC` (result code). Linux x86-64 only.

Example:
    >>> import ctypes, numpy as np
    >>> lib = load(trampoline_module(1))
    >>> tramp = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)(lib.address(TRAMPOLINE))
    >>> callable(tramp)
    True
"""

from __future__ import annotations

from llvmlite import ir

from codegen import llvm

__all__ = ["TRAMPOLINE", "RUNNER", "WORKER", "POST", "WAIT", "QUIT_FN", "WORDS", "STATE", "SLEEPING", "FN", "ARGS",
           "RC", "IDLE", "POSTED", "DONE", "QUIT", "trampoline_module", "runner_module", "worker_module", "load"]

TRAMPOLINE = "tramp"
RUNNER = "trn_run"
WORKER, POST, WAIT, QUIT_FN = "trn_worker", "trn_post", "trn_wait", "trn_quit"
#: job slot words (128 bytes: two slots never share a cache line pair)
WORDS = 16
STATE, SLEEPING, FN, ARGS, RC = 0, 1, 2, 3, 12
IDLE, POSTED, DONE, QUIT = 0, 1, 2, -1
_SYS_FUTEX, _FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 202, 128, 129
#: spins of ``trn_wait`` before it starts yielding the CPU between polls
_WAIT_SPINS = 20000

_I32, _I64, _PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()
#: the kernel entry ABI (codegen/lowering/kernel.py): ptrs, meta, pid lo, pid hi, grid y, grid z, arena, err, print cb
ENTRY_TYPE = ir.FunctionType(_I32, [_PTR, _PTR, _I64, _I64, _I64, _I64, _PTR, _PTR, _PTR])


def trampoline_module(n: int) -> ir.Module:
    """The module of ``i32 tramp(ptr ctx, ptr p0, ..., ptr p{n-1})`` (see the module docstring)."""
    m = ir.Module(f"trn_tramp{n}")
    f = ir.Function(m, ir.FunctionType(_I32, [_PTR] * (n + 1)), TRAMPOLINE)
    b = ir.IRBuilder(f.append_basic_block("entry"))
    arr = b.alloca(_PTR, size=_I64(max(n, 1)), name="ptrs")
    for i in range(n):
        b.store(f.args[i + 1], b.gep(arr, [_I64(i)], inbounds=True, source_etype=_PTR), align=8)
    ctx = f.args[0]

    def word(k: int, typ: ir.Type) -> ir.Value:
        return b.load(b.gep(ctx, [_I64(k)], inbounds=True, source_etype=_I64), typ=typ, align=8)

    entry = word(0, ENTRY_TYPE.as_pointer())
    one = _I64(1)
    rc = b.call(entry, [arr, word(1, _PTR), _I64(0), one, one, one, word(2, _PTR), word(3, _PTR),
                        ir.Constant(_PTR, None)])
    b.ret(rc)
    return m


def runner_module() -> ir.Module:
    """The module of ``i32 trn_run(ptr words)``: ``words[0](words[1], ..., words[9])`` (see the module docstring)."""
    m = ir.Module("trn_runner")
    f = ir.Function(m, ir.FunctionType(_I32, [_PTR]), RUNNER)
    b = ir.IRBuilder(f.append_basic_block("entry"))
    w = f.args[0]
    words = [b.load(b.gep(w, [_I64(k)], inbounds=True, source_etype=_I64), typ=_I64, align=8) for k in range(10)]
    args = [b.inttoptr(x, _PTR) if t == _PTR else x for x, t in zip(words[1:], ENTRY_TYPE.args)]
    b.ret(b.call(b.inttoptr(words[0], ENTRY_TYPE.as_pointer()), args))
    return m


class _Slots:
    """Atomic (sequentially consistent) reads and writes of one job slot's words."""

    def __init__(self, b: ir.IRBuilder, job: ir.Value) -> None:
        self.b, self.job = b, job

    def _at(self, k: int) -> ir.Value:
        return self.b.gep(self.job, [_I64(k)], inbounds=True, source_etype=_I64)

    def get(self, k: int) -> ir.Value:
        return self.b.load_atomic(self._at(k), "seq_cst", 8, typ=_I64)

    def put(self, k: int, v: ir.Value | int) -> None:
        # a sequentially consistent store is an exchange on x86 (what LLVM emits for ``store atomic seq_cst``);
        # llvmlite's store_atomic needs typed pointers, atomicrmw does not
        self.b.atomic_rmw("xchg", self._at(k), _I64(v) if isinstance(v, int) else v, "seq_cst")


def worker_module() -> ir.Module:
    """The module of ``trn_worker``, ``trn_post``, ``trn_wait`` and ``trn_quit`` (see the module docstring)."""
    m = ir.Module("trn_workers")
    syscall = ir.Function(m, ir.FunctionType(_I64, [_I64], var_arg=True), "syscall")
    sched_yield = ir.Function(m, ir.FunctionType(_I32, []), "sched_yield")
    pause = ir.Function(m, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
    rdtsc = ir.Function(m, ir.FunctionType(_I64, []), "llvm.readcyclecounter")
    null = ir.Constant(_PTR, None)

    def futex(b: ir.IRBuilder, job: ir.Value, op: int, val: ir.Value) -> None:
        b.call(syscall, [_I64(_SYS_FUTEX), job, _I64(op), val, null, null, _I64(0)])

    # the worker: wait for a posted job, run it, mark it done; return on QUIT
    f = ir.Function(m, ir.FunctionType(ir.VoidType(), [_PTR, _I64]), WORKER)
    job, spin_cycles = f.args
    blocks = {n: f.append_basic_block(n) for n in
              ("entry", "idle", "spin", "notposted", "pause", "sleep", "wait", "awake", "run", "exit")}
    b = ir.IRBuilder(blocks["entry"])
    s = _Slots(b, job)
    b.branch(blocks["idle"])
    b.position_at_end(blocks["idle"])
    t0 = b.call(rdtsc, [])
    b.branch(blocks["spin"])
    b.position_at_end(blocks["spin"])
    st = s.get(STATE)
    b.cbranch(b.icmp_signed("==", st, _I64(POSTED)), blocks["run"], blocks["notposted"])
    b.position_at_end(blocks["notposted"])
    b.cbranch(b.icmp_signed("==", st, _I64(QUIT)), blocks["exit"], blocks["pause"])
    b.position_at_end(blocks["pause"])
    b.call(pause, [])
    elapsed = b.sub(b.call(rdtsc, []), t0)
    b.cbranch(b.icmp_unsigned("<", elapsed, spin_cycles), blocks["spin"], blocks["sleep"])
    b.position_at_end(blocks["sleep"])  # announce the sleep, then re-check: a post in between is not lost
    s.put(SLEEPING, 1)
    st2 = s.get(STATE)
    go = b.or_(b.icmp_signed("==", st2, _I64(POSTED)), b.icmp_signed("==", st2, _I64(QUIT)))
    b.cbranch(go, blocks["awake"], blocks["wait"])
    b.position_at_end(blocks["wait"])
    futex(b, job, _FUTEX_WAIT_PRIVATE, b.and_(st2, _I64(0xFFFFFFFF)))  # sleeps while the state word is st2
    b.branch(blocks["awake"])
    b.position_at_end(blocks["awake"])
    s.put(SLEEPING, 0)
    b.branch(blocks["idle"])
    b.position_at_end(blocks["run"])
    entry = b.inttoptr(s.get(FN), ENTRY_TYPE.as_pointer())
    a = [s.get(ARGS + i) for i in range(9)]
    args = [b.inttoptr(w, _PTR) if ENTRY_TYPE.args[i] == _PTR else w for i, w in enumerate(a)]
    rc = b.call(entry, args)
    s.put(RC, b.sext(rc, _I64))
    s.put(STATE, DONE)
    b.branch(blocks["idle"])
    b.position_at_end(blocks["exit"])
    b.ret_void()

    # post the job written in the slot; wake the worker if it sleeps
    f = ir.Function(m, ir.FunctionType(ir.VoidType(), [_PTR]), POST)
    entry_b, wake_b, done_b = f.append_basic_block("entry"), f.append_basic_block("wake"), f.append_basic_block("done")
    b = ir.IRBuilder(entry_b)
    s = _Slots(b, f.args[0])
    s.put(STATE, POSTED)
    b.cbranch(b.icmp_signed("!=", s.get(SLEEPING), _I64(0)), wake_b, done_b)
    b.position_at_end(wake_b)
    futex(b, f.args[0], _FUTEX_WAKE_PRIVATE, _I64(1))
    b.branch(done_b)
    b.position_at_end(done_b)
    b.ret_void()

    # wait until the posted job is done; return its result code and free the slot
    f = ir.Function(m, ir.FunctionType(_I64, [_PTR]), WAIT)
    bb = {n: f.append_basic_block(n) for n in ("entry", "loop", "next0", "yield", "pause", "next", "finish")}
    b = ir.IRBuilder(bb["entry"])
    s = _Slots(b, f.args[0])
    b.branch(bb["loop"])
    b.position_at_end(bb["loop"])
    n = b.phi(_I64)
    n.add_incoming(_I64(0), bb["entry"])
    b.cbranch(b.icmp_signed("==", s.get(STATE), _I64(DONE)), bb["finish"], bb["next0"])
    b.position_at_end(bb["next0"])
    b.cbranch(b.icmp_unsigned(">", n, _I64(_WAIT_SPINS)), bb["yield"], bb["pause"])
    b.position_at_end(bb["yield"])
    b.call(sched_yield, [])
    b.branch(bb["next"])
    b.position_at_end(bb["pause"])
    b.call(pause, [])
    b.branch(bb["next"])
    b.position_at_end(bb["next"])
    n1 = b.add(n, _I64(1))
    n.add_incoming(n1, bb["next"])
    b.branch(bb["loop"])
    b.position_at_end(bb["finish"])
    rc = s.get(RC)
    s.put(STATE, IDLE)
    b.ret(rc)

    # stop a worker (it returns from trn_worker)
    f = ir.Function(m, ir.FunctionType(ir.VoidType(), [_PTR]), QUIT_FN)
    b = ir.IRBuilder(f.append_basic_block("entry"))
    _Slots(b, f.args[0]).put(STATE, QUIT)
    futex(b, f.args[0], _FUTEX_WAKE_PRIVATE, _I64(1))
    b.ret_void()
    return m


def load(module: ir.Module) -> llvm.LoadedModule:
    """Compile (O3, for the host CPU) and load one helper module; it stays loaded while referenced."""
    return llvm.load_object(llvm.compile_ir(module))
