"""The op table: every IR instruction kind and every ALU function, with their specs.

Two enums (``Op`` for instruction kinds, ``Alu`` for the arithmetic functions
they apply) and one spec table each. Everything that needs to know about an op
(the tracer, verifier, interpreter, scheduler, codegen, the docs) reads these
tables; nothing else lists ops.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from trnlang.ir.types import Engine

E = Engine


class Op(enum.Enum):
    """IR instruction kinds. One instruction = one engine instruction (ISA level)."""

    ALLOC = "alloc"                  # outs: (buffer,)  -- declares an SBUF/PSUM buffer
    DMA_COPY = "dma_copy"            # HBM <-> SBUF, optional gather / mask / cast
    ACTIVATION = "activation"        # out = func(in * scale + bias) [, reduce along free axes; reduce_cmd:
    #                                  the Scalar engine's accumulation registers, see REDUCE_CMDS]
    TENSOR_TENSOR = "tensor_tensor"  # out = a <op> b (numpy broadcasting)
    TENSOR_SCALAR = "tensor_scalar"  # out = (a op0 s0) op1 s1; s = immediate or [P,1] tile [, reduce along
    #                                  free axes into a second output: NKI's tensor_scalar_reduce]
    TENSOR_REDUCE = "tensor_reduce"  # out = reduce(op, in, axes) along free axes
    TENSOR_COPY = "tensor_copy"      # out = cast/broadcast/reshape(in); PSUM eviction
    SELECT = "select"                # out = where(cond, a, b)
    IOTA = "iota"                    # out = integer expression of axis indices / loop variables
    MEMSET = "memset"                # out = value
    AFFINE_SELECT = "affine_select"  # out = where(pred(axes, loop vars), a, b)
    SCAN = "tensor_tensor_scan"      # out[j] = (out[j-1] op0 a[j]) op1 b[j], along the last axis
    MATMUL = "nc_matmul"             # psum (+)= stationary.T @ moving
    TRANSPOSE = "nc_transpose"       # out = in.T (partition <-> free)
    BN_STATS = "bn_stats"            # per-partition (count, mean, M2) of the free elements
    BN_AGGR = "bn_aggr"              # combine bn_stats groups -> (mean, var)
    PRINT = "device_print"           # print a tile at run time


@dataclass(frozen=True)
class OpSpec:
    """What every pass may know about an instruction kind."""

    n_outs: int
    n_ins: int | None            # None: variable
    engines: tuple[Engine, ...]  # engines that may run it, default first
    attrs: tuple[str, ...] = ()  # attribute names, in print order


OP_SPECS: dict[Op, OpSpec] = {
    Op.ALLOC: OpSpec(1, 0, ()),
    Op.DMA_COPY: OpSpec(1, 1, (E.DMA,), ("other", "accumulate")),
    Op.ACTIVATION: OpSpec(1, None, (E.SCALAR, E.VECTOR, E.GPSIMD), ("func", "scale", "reduce_op", "reduce_cmd")),
    Op.TENSOR_TENSOR: OpSpec(1, 2, (E.VECTOR, E.GPSIMD), ("op",)),
    Op.TENSOR_SCALAR: OpSpec(1, None, (E.VECTOR, E.SCALAR, E.GPSIMD), ("op0", "op1", "reverse", "reduce_op")),
    Op.TENSOR_REDUCE: OpSpec(1, 1, (E.VECTOR, E.GPSIMD), ("op", "axes", "keepdims")),
    Op.TENSOR_COPY: OpSpec(1, 1, (E.VECTOR, E.SCALAR, E.GPSIMD), ("reshape",)),
    Op.SELECT: OpSpec(1, 3, (E.VECTOR, E.GPSIMD)),
    Op.IOTA: OpSpec(1, 0, (E.GPSIMD,), ("expr",)),
    Op.MEMSET: OpSpec(1, 0, (E.VECTOR, E.GPSIMD), ("value",)),
    Op.AFFINE_SELECT: OpSpec(1, 2, (E.GPSIMD,), ("pred",)),
    Op.SCAN: OpSpec(1, 3, (E.VECTOR,), ("op0", "op1")),
    Op.MATMUL: OpSpec(1, 2, (E.TENSOR,), ("accumulate",)),
    Op.TRANSPOSE: OpSpec(1, 1, (E.TENSOR, E.VECTOR)),
    Op.BN_STATS: OpSpec(1, 1, (E.VECTOR,)),
    Op.BN_AGGR: OpSpec(1, 1, (E.VECTOR,)),
    Op.PRINT: OpSpec(0, 1, (E.HOST,), ("label",)),
}


#: ``activation``'s ``reduce_cmd`` (NKI's accumulation-register commands). The registers are an SBUF
#: region the instruction writes as its second output; every output after the first receives the
#: registers' new value (the last ones: NKI's ``reduce_res`` read-out). A fourth input is the registers'
#: old value, read by ``reduce`` and ``idle``.
#:   reset_reduce (or absent): regs = reduce(out);  reduce: regs = regs (reduce_op) reduce(out);
#:   reset: regs = 0;  idle: regs unchanged (read out into the other outputs).
REDUCE_CMDS = ("reset_reduce", "reduce", "reset", "idle")


class AluKind(enum.Enum):
    UNARY = 1
    BINARY = 2
    REDUCE = 3


class Alu(enum.Enum):
    """Arithmetic functions applied by ACTIVATION / TENSOR_* / SCAN / TENSOR_REDUCE."""

    # binary
    add = "add"
    subtract = "subtract"
    multiply = "multiply"
    divide = "divide"
    maximum = "maximum"
    minimum = "minimum"
    power = "power"
    fmod = "fmod"
    equal = "equal"
    not_equal = "not_equal"
    less = "less"
    less_equal = "less_equal"
    greater = "greater"
    greater_equal = "greater_equal"
    logical_and = "logical_and"
    logical_or = "logical_or"
    logical_xor = "logical_xor"
    bitwise_and = "bitwise_and"
    bitwise_or = "bitwise_or"
    bitwise_xor = "bitwise_xor"
    atan2 = "atan2"
    # unary
    copy = "copy"
    exp = "exp"
    log = "log"
    log1p = "log1p"
    expm1 = "expm1"
    sqrt = "sqrt"
    rsqrt = "rsqrt"
    reciprocal = "reciprocal"
    abs = "abs"
    negative = "negative"
    sign = "sign"
    floor = "floor"
    ceil = "ceil"
    square = "square"
    tanh = "tanh"
    sigmoid = "sigmoid"
    relu = "relu"
    gelu = "gelu"
    gelu_tanh = "gelu_tanh"
    silu = "silu"
    softplus = "softplus"
    erf = "erf"
    sin = "sin"
    cos = "cos"
    logical_not = "logical_not"
    bitwise_not = "bitwise_not"
    trunc = "trunc"
    round = "round"  # noqa: A003 - half to even, as torch.round
    tan = "tan"
    asin = "asin"
    acos = "acos"
    atan = "atan"
    sinh = "sinh"
    cosh = "cosh"
    asinh = "asinh"
    acosh = "acosh"
    atanh = "atanh"
    log2 = "log2"
    log10 = "log10"
    exp2 = "exp2"
    erfc = "erfc"
    erfinv = "erfinv"
    lgamma = "lgamma"
    digamma = "digamma"
    # reduce-only
    argmax = "argmax"
    argmin = "argmin"


@dataclass(frozen=True)
class AluSpec:
    kind: AluKind
    transcendental: bool = False   # needs the Scalar engine's function tables (in tl lowering)
    compare: bool = False          # result is bool
    int_only: bool = False         # operands must be integers (or bool)
    reducible: bool = False        # may be a TENSOR_REDUCE / activation reduce op


_U, _B, _R = AluKind.UNARY, AluKind.BINARY, AluKind.REDUCE

ALU_SPECS: dict[Alu, AluSpec] = {
    Alu.add: AluSpec(_B, reducible=True),
    Alu.subtract: AluSpec(_B),
    Alu.multiply: AluSpec(_B, reducible=True),
    Alu.divide: AluSpec(_B),
    Alu.maximum: AluSpec(_B, reducible=True),
    Alu.minimum: AluSpec(_B, reducible=True),
    Alu.power: AluSpec(_B, transcendental=True),
    Alu.fmod: AluSpec(_B),
    Alu.equal: AluSpec(_B, compare=True),
    Alu.not_equal: AluSpec(_B, compare=True),
    Alu.less: AluSpec(_B, compare=True),
    Alu.less_equal: AluSpec(_B, compare=True),
    Alu.greater: AluSpec(_B, compare=True),
    Alu.greater_equal: AluSpec(_B, compare=True),
    Alu.logical_and: AluSpec(_B, compare=True, reducible=True),
    Alu.logical_or: AluSpec(_B, compare=True, reducible=True),
    Alu.logical_xor: AluSpec(_B, compare=True),
    Alu.bitwise_and: AluSpec(_B, int_only=True),
    Alu.bitwise_or: AluSpec(_B, int_only=True),
    Alu.bitwise_xor: AluSpec(_B, int_only=True),
    Alu.atan2: AluSpec(_B, transcendental=True),
    Alu.copy: AluSpec(_U),
    Alu.exp: AluSpec(_U, transcendental=True),
    Alu.log: AluSpec(_U, transcendental=True),
    Alu.log1p: AluSpec(_U, transcendental=True),
    Alu.expm1: AluSpec(_U, transcendental=True),
    Alu.sqrt: AluSpec(_U, transcendental=True),
    Alu.rsqrt: AluSpec(_U, transcendental=True),
    Alu.reciprocal: AluSpec(_U),
    Alu.abs: AluSpec(_U),
    Alu.negative: AluSpec(_U),
    Alu.sign: AluSpec(_U),
    Alu.floor: AluSpec(_U),
    Alu.ceil: AluSpec(_U),
    Alu.square: AluSpec(_U),
    Alu.tanh: AluSpec(_U, transcendental=True),
    Alu.sigmoid: AluSpec(_U, transcendental=True),
    Alu.relu: AluSpec(_U),
    Alu.gelu: AluSpec(_U, transcendental=True),
    Alu.gelu_tanh: AluSpec(_U, transcendental=True),
    Alu.silu: AluSpec(_U, transcendental=True),
    Alu.softplus: AluSpec(_U, transcendental=True),
    Alu.erf: AluSpec(_U, transcendental=True),
    Alu.sin: AluSpec(_U, transcendental=True),
    Alu.cos: AluSpec(_U, transcendental=True),
    Alu.logical_not: AluSpec(_U, compare=True),
    Alu.bitwise_not: AluSpec(_U, int_only=True),
    Alu.trunc: AluSpec(_U),
    Alu.round: AluSpec(_U),
    Alu.tan: AluSpec(_U, transcendental=True),
    Alu.asin: AluSpec(_U, transcendental=True),
    Alu.acos: AluSpec(_U, transcendental=True),
    Alu.atan: AluSpec(_U, transcendental=True),
    Alu.sinh: AluSpec(_U, transcendental=True),
    Alu.cosh: AluSpec(_U, transcendental=True),
    Alu.asinh: AluSpec(_U, transcendental=True),
    Alu.acosh: AluSpec(_U, transcendental=True),
    Alu.atanh: AluSpec(_U, transcendental=True),
    Alu.log2: AluSpec(_U, transcendental=True),
    Alu.log10: AluSpec(_U, transcendental=True),
    Alu.exp2: AluSpec(_U, transcendental=True),
    Alu.erfc: AluSpec(_U, transcendental=True),
    Alu.erfinv: AluSpec(_U, transcendental=True),
    Alu.lgamma: AluSpec(_U, transcendental=True),
    Alu.digamma: AluSpec(_U, transcendental=True),
    Alu.argmax: AluSpec(_R, reducible=True),
    Alu.argmin: AluSpec(_R, reducible=True),
}


def unary_alus() -> list[Alu]:
    return [a for a, s in ALU_SPECS.items() if s.kind is AluKind.UNARY]


def binary_alus() -> list[Alu]:
    return [a for a, s in ALU_SPECS.items() if s.kind is AluKind.BINARY]
