"""Generate ``docs/language_reference.md`` from the code.

Everything on the generated page is read from the library at generation time:

- the public names of ``trnlang.language`` (``tl``) and ``trnlang.isa`` (signatures via ``inspect``,
  first docstring paragraph);
- the IR instruction each builtin lowers to, and the engines that may run it, from
  ``trnlang.ir.ops.OP_SPECS`` / ``ALU_SPECS`` (plus the default-engine rule of ``language.semantic``);
- the limits from ``trnlang.sim.targets`` (the default target);
- the cost formulas from the table in ``trnlang.sim.cost``'s module docstring (the same table the
  cost model's ``CYCLES`` implements).

Run it from the repository root::

    .venv/bin/python docs/gen_reference.py           # writes docs/language_reference.md
    .venv/bin/python docs/gen_reference.py -o -      # prints it instead

The generator only reads; a builtin without a docstring or without a known lowering still gets a row.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import trnlang.isa as isa  # noqa: E402
import trnlang.language as tl  # noqa: E402
from trnlang.ir.ops import ALU_SPECS, OP_SPECS, Alu, AluKind, Op  # noqa: E402
from trnlang.sim import cost as cost_mod  # noqa: E402
from trnlang.sim import targets as targets_mod  # noqa: E402

try:  # the default-engine rule of tl's unary ops (Vector for "simple" ones, Scalar otherwise)
    from trnlang.language.semantic import _SIMPLE_UNARY as SIMPLE_UNARY  # noqa: E402
except Exception:  # pragma: no cover - fall back to the ALU table's transcendental flag
    SIMPLE_UNARY = {a for a, s in ALU_SPECS.items() if s.kind is AluKind.UNARY and not s.transcendental}

# --------------------------------------------------------------------------------------------------------------
# Groups (LANGUAGE.md section 5). Names not listed here land in "other" so nothing public is lost.
# --------------------------------------------------------------------------------------------------------------
TL_GROUPS: list[tuple[str, list[str]]] = [
    ("Index values and grid", ["program_id", "num_programs", "arange", "mgrid", "ds", "cdiv"]),
    ("Loops", ["affine_range", "sequential_range", "static_range"]),
    ("Load / store", ["load", "store", "load_transpose2d"]),
    ("Create", ["ndarray", "zeros", "ones", "full", "zeros_like"]),
    ("Elementwise binary", [a.value for a, s in ALU_SPECS.items() if s.kind is AluKind.BINARY]),
    ("Elementwise unary", [a.value for a, s in ALU_SPECS.items() if s.kind is AluKind.UNARY and a is not Alu.copy]),
    ("Select / cast / shape", ["where", "copy", "broadcast_to", "expand_dims", "reshape"]),
    ("Reductions (free axes only; axis 0 is an error)",
     ["sum", "max", "min", "mean", "prod", "argmax", "argmin", "all", "any", "var", "cumsum"]),
    ("Matrix", ["matmul", "transpose"]),
    ("Debug", ["device_print"]),
]

# Prose after a group's table (what the tables cannot say).
REDUCTION_ORDER = (
    "**Reduction order: interpreter vs JIT.** Both executors accumulate float `add` / `multiply` reductions "
    "(`tl.sum`, `tl.mean`, `tl.prod`, `activation(reduce_op=)`) in float64 and round once to float32; int ones "
    "wrap to int32 (the same result either way). They add in different orders. The interpreter "
    "(`trnlang/interpret/alu.py`, `reduce`) calls `np.sum` / `np.prod` on a float64 copy, so it uses numpy's "
    "pairwise summation along the innermost reduced axis: eight running partial sums over each block of up to "
    "128 elements, blocks combined pairwise, fewer than eight elements added left to right. The JIT "
    "(`codegen/lowering/alu.py`, `Reducer`) emits one row-major loop over the reduced axes whose float64 adds are "
    "marked reassociable, so LLVM vectorises and unrolls it: several partial sums over interleaved elements, "
    "combined at the end, grouped as the host CPU's vector width and LLVM's unrolling decide (the same on every "
    "run on one host). While no float64 partial sum rounds anything away the two agree bit for bit; they "
    "differ when partial sums cancel catastrophically, because a one added to a partial sum holding `±3e38` is "
    "lost: the row of 16 `[3e38, -3e38, 1, ..., 1]` sums to the exact 14 in the JIT (on an AVX-512 host) but to "
    "12 in the interpreter (its partial sums `3e38 + 1` and `-3e38 + 1`), and with `-3e38` at position 8 "
    "instead the interpreter gives 14 and the JIT 7. Products can differ in kind, not only in the last bits: "
    "`tl.prod` over a row that holds a zero (a masked lane loaded as 0, say) and factors whose float64 partial "
    "products overflow gives NaN in an order that reaches `inf` before the zero (`inf * 0`) and 0 in one that "
    "reaches the zero first; the fuzzer (`tests/fuzz/harness.py`) classifies such a difference as `order` only "
    "when the interpreter with its reductions reversed reproduces the JIT. `max`, "
    "`min`, `argmax`, `argmin`, `all` and `any` do not depend on the order (NaN propagates, the first extreme "
    "wins). `nc_matmul` accumulates in fp32 in the JIT and in float64 in the interpreter. The differential tests "
    "(`tests/codegen/test_differential.py`) use data without such cancellation and compare bit for bit the test "
    "kernels without transcendental functions or matmul, and random kernels on the libm path "
    "(`TRN_JIT_LIBM=1`); other floats within `rtol=3e-5, atol=1e-5` (the vecmath functions are a few ulp off the "
    "float64 oracle), random kernels' matmul and `bn_stats` / `bn_aggr` outputs within `rtol=1e-4, atol=1e-3`, "
    "and the matmul and attention test kernels within each case's own `atol` / `rtol`."
)
TL_GROUP_NOTES: dict[str, str] = {"Reductions (free axes only; axis 0 is an error)": REDUCTION_ORDER}

# How the non-ALU tl builtins lower: (IR ops in emission order, note). ALU builtins are derived from ALU_SPECS.
TL_LOWERING: dict[str, tuple[list[Op], str]] = {
    "program_id": ([], "index value (symbol `pid<axis>`); no instruction"),
    "num_programs": ([], "Python int at trace time"),
    "arange": ([], "index value; becomes `iota` (GpSimd) when used as a tile"),
    "mgrid": ([], "index values; become `iota` (GpSimd) when used as tiles"),
    "ds": ([], "dynamic slice for indexing"),
    "cdiv": ([], "Python int or symbolic index"),
    "affine_range": ([], "IR `Loop(kind=affine)`; never unrolled; bodies may be multi-buffered"),
    "sequential_range": ([], "IR `Loop(kind=sequential)`; never unrolled"),
    "static_range": ([], "unrolled at trace time"),
    "load": ([Op.DMA_COPY], "HBM -> SBUF; masked elements are not read"),
    "store": ([Op.DMA_COPY], "SBUF -> HBM; a PSUM tile is first evicted with `tensor_copy`; `accumulate=` "
              "(add/multiply/max/min) makes it an accumulating read-modify-write DMA (scatter-add with gathered rows)"),
    "load_transpose2d": ([Op.DMA_COPY], "element-strided DMA (every element its own descriptor: slow)"),
    "ndarray": ([Op.ALLOC], "declares a buffer; HBM tensors become kernel scratch"),
    "zeros": ([Op.ALLOC, Op.MEMSET], ""),
    "ones": ([Op.ALLOC, Op.MEMSET], ""),
    "full": ([Op.ALLOC, Op.MEMSET], ""),
    "zeros_like": ([Op.ALLOC, Op.MEMSET], ""),
    "where": ([Op.SELECT, Op.AFFINE_SELECT], "`select` (Vector) for a bool tile; `affine_select` (GpSimd) for an "
              "index predicate"),
    "copy": ([Op.TENSOR_COPY], "cast; evicts PSUM to SBUF"),
    "broadcast_to": ([Op.TENSOR_COPY], ""),
    "expand_dims": ([], "view (no instruction)"),
    "reshape": ([Op.TENSOR_COPY], "`reshape=True`: free elements reinterpreted row-major"),
    "sum": ([Op.TENSOR_REDUCE], "op `add`"),
    "max": ([Op.TENSOR_REDUCE], "op `maximum`"),
    "min": ([Op.TENSOR_REDUCE], "op `minimum`"),
    "prod": ([Op.TENSOR_REDUCE], "op `multiply`"),
    "argmax": ([Op.TENSOR_REDUCE], "op `argmax`, int32 result"),
    "argmin": ([Op.TENSOR_REDUCE], "op `argmin`, int32 result"),
    "all": ([Op.TENSOR_REDUCE], "op `logical_and`"),
    "any": ([Op.TENSOR_REDUCE], "op `logical_or`"),
    "mean": ([Op.TENSOR_REDUCE, Op.TENSOR_SCALAR], "sum, then scale"),
    "var": ([Op.BN_STATS, Op.BN_AGGR], "or reductions; population variance"),
    "cumsum": ([Op.SCAN], ""),
    "matmul": ([Op.MATMUL], "`transpose_x=False` first transposes x (`nc_transpose`, Tensor)"),
    "transpose": ([Op.TRANSPOSE], "Tensor engine (result in PSUM)"),
    "device_print": ([Op.PRINT], "host"),
}

ISA_LOWERING: dict[str, tuple[list[Op], str]] = {
    "nc_matmul": ([Op.MATMUL], ""),
    "nc_transpose": ([Op.TRANSPOSE], ""),
    "activation": ([Op.ACTIVATION], ""),
    "tensor_tensor": ([Op.TENSOR_TENSOR], ""),
    "tensor_scalar": ([Op.TENSOR_SCALAR], ""),
    "tensor_scalar_reduce": ([Op.TENSOR_SCALAR], "the `reduce_op` reduction rides on the same pass"),
    "tensor_reduce": ([Op.TENSOR_REDUCE], ""),
    "tensor_tensor_scan": ([Op.SCAN], ""),
    "tensor_copy": ([Op.TENSOR_COPY], ""),
    "iota": ([Op.IOTA], ""),
    "memset": ([Op.MEMSET], ""),
    "affine_select": ([Op.AFFINE_SELECT], ""),
    "bn_stats": ([Op.BN_STATS], ""),
    "bn_aggr": ([Op.BN_AGGR], ""),
    "dma_copy": ([Op.DMA_COPY], ""),
}


# --------------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------------
def first_paragraph(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring on one line ('' when there is none)."""
    try:
        doc = inspect.getdoc(obj) or ""
    except Exception:
        doc = ""
    para = doc.strip().split("\n\n")[0] if doc.strip() else ""
    text = " ".join(line.strip() for line in para.splitlines())
    return text.replace("``", "`").replace("|", "\\|")


def signature(name: str, obj: Any) -> str:
    """``name(params)`` from inspect, or just the name when there is no signature."""
    try:
        return name + re.sub(r"'([^']*)'", r"\1", str(inspect.signature(obj)))
    except (TypeError, ValueError):
        return name


def engines_of(op: Op) -> tuple[str, ...]:
    spec = OP_SPECS.get(op)
    return tuple(e.value for e in spec.engines) if spec else ()


def engine_names(op: Op, default: str | None = None) -> str:
    engs = list(engines_of(op))
    if not engs:
        return "-"
    d = default or engs[0]
    rest = [e for e in engs if e != d]
    return f"**{d}**" + (f" (also {', '.join(rest)})" if rest else "")


def cost_table() -> dict[str, str]:
    """Op value -> cycles formula, parsed from the markdown table in ``trnlang.sim.cost``'s docstring."""
    out: dict[str, str] = {}
    doc = cost_mod.__doc__ or ""
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] == "op" or set(cells[0]) <= {"-"}:
            continue
        head, formula = cells[0].replace("``", "`"), cells[1].replace("``", "`")
        names = re.findall(r"`([a-z_]+)`", head)
        # what the row's first cell says besides the op names (e.g. "on Tensor, input `[P, F]`")
        rest = re.sub(r"`[a-z_]+`", "", head).strip(" ,")
        if "reciprocal" in head:
            out["reciprocal"] = formula
            continue
        if "Vector transpose" in rest:
            out["nc_transpose (Vector)"] = formula
            rest = rest.replace("Vector transpose", "").strip(" ,")
        for op in Op:
            if op.value in names:
                out.setdefault(op.value, f"{rest}: {formula}" if rest else formula)
    # ops in the cost model's CYCLES table that the docstring does not mention
    for op, fn in getattr(cost_mod, "CYCLES", {}).items():
        if op.value not in out:
            name = getattr(fn, "__name__", "?")
            out[op.value] = "0 (not an engine instruction)" if name == "_zero" else f"see `cost.{name}`"
    out.setdefault("dma_copy", "latency + bytes / engine bandwidth x efficiency (see the DMA note under Cost model)")
    return out


COST = cost_table()


def cost_of(ops: list[Op]) -> str:
    parts = []
    for op in ops:
        if op is Op.ALLOC:
            continue
        c = COST.get(op.value)
        if c:
            parts.append(f"`{op.value}`: {c}" if len(ops) > 1 else c)
    return "; ".join(parts) or "-"


def alu_row(name: str, fn: Any) -> tuple[str, str, str, str]:
    """(instruction, engines, cost, notes) for a tl ALU builtin."""
    alu: Alu = getattr(fn, "_alu", None) or Alu[name]
    spec = ALU_SPECS[alu]
    notes = []
    if spec.compare:
        notes.append("bool result")
    if spec.int_only:
        notes.append("integer/bool operands only")
    if spec.kind is AluKind.BINARY:
        ins = "`tensor_tensor` (two tiles) / `tensor_scalar` (tile and number or `[P,1]` tile)"
        eng = f"{engine_names(Op.TENSOR_TENSOR, 'vector')}"
        cst = f"tensor_tensor: {COST.get('tensor_tensor', '-')}; tensor_scalar: {COST.get('tensor_scalar', '-')}"
        if spec.transcendental:
            notes.append("transcendental")
        return ins, eng, cst, ", ".join(notes)
    default = "vector" if alu in SIMPLE_UNARY else "scalar"
    ins = f"`activation` func=`{alu.value}`"
    eng = engine_names(Op.ACTIVATION, default)
    cst = COST.get("activation", "-")
    if alu is Alu.reciprocal:
        cst += f"; on Vector: {COST.get('reciprocal', '8N')}"
    if spec.transcendental:
        notes.append("transcendental (Scalar engine function tables)")
    return ins, eng, cst, ", ".join(notes)


def lowering_row(name: str, table: dict[str, tuple[list[Op], str]]) -> tuple[str, str, str, str]:
    ops, note = table.get(name, ([], ""))
    if not ops:
        return "-", "-", "-", note
    ins = ", ".join(f"`{o.value}`" for o in ops if o is not Op.ALLOC) or "`alloc`"
    engs = "; ".join(f"{engine_names(o)}" for o in ops if o is not Op.ALLOC and engines_of(o)) or "-"
    return ins, engs, cost_of(ops), note


def public_names(mod: Any) -> list[str]:
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    return [n for n in names if not n.startswith("_")]


def row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("\n", " ") for c in cells) + " |"


# --------------------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------------------
def limits_section(t: Any) -> list[str]:
    return [
        "## Limits (checked at compile time, reported at your source line)",
        "",
        f"Read from `trnlang.sim.targets` (target `{t.name}`, {t.core}; the limits are the same on every target).",
        "",
        "| limit | value | error |",
        "|---|---|---|",
        row("partition dimension of any tile (`tl.tile_size.pmax`)", f"<= {t.pmax}", "`ShapeError`"),
        row("matmul contraction K (partitions of both operands)", f"<= {t.matmul_k_max}", "`ShapeError`"),
        row("matmul stationary free size M", f"<= {t.matmul_m_max}", "`ShapeError`"),
        row("matmul moving free size N (one 2 KiB fp32 PSUM bank)", f"<= {t.matmul_n_max}", "`ShapeError`"),
        row("Vector/Scalar instruction free size, operands in SBUF", f"<= {t.free_max_sbuf} elements",
            "`ShapeError`"),
        row("... with an operand in PSUM", f"<= {t.free_max_psum} elements", "`ShapeError`"),
        row("tile start partition", "span > 64: 0; 33-64: 0 or 64; <= 32: 0, 32, 64, 96", "`VerifyError`"),
        row("live SBUF per partition", f"<= {t.sbuf_bytes_per_partition // 1024} KiB ({t.name})",
            "`SbufOverflowError`"),
        row("live PSUM", f"<= {t.psum_banks} banks of {t.psum_bank_bytes // 1024} KiB per partition",
            "`SbufOverflowError`"),
        row("reductions", "free axes only (axis 0 is an error)", "`ShapeError`"),
        "",
    ]


def cost_section(t: Any) -> list[str]:
    lines = [
        "## Cost model",
        "",
        "Cycles of the engine's own clock (`trnlang.sim.cost`). `N` = free elements per partition of the "
        "instruction's data (output for elementwise ops, input for reductions and transposes). "
        f"`MIN_II` = {t.min_ii_cycles} cycles; a dependent back-to-back instruction on one engine waits "
        f"+{t.dependent_stall_cycles} cycles; fp32 matmul inputs are x{t.matmul_fp32_slowdown}.",
        "",
        "| instruction | cycles |",
        "|---|---|",
    ]
    for op in Op:
        if op.value in COST:
            lines.append(row(f"`{op.value}`", COST[op.value]))
    for k in ("reciprocal", "nc_transpose (Vector)"):
        if k in COST:
            lines.append(row(f"`{k}`" if " " not in k else k, COST[k]))
    lines += [
        "",
        f"**DMA** (`dma_copy`): a transfer is split over the DMA engines of its tile's partitions "
        f"({t.dma_partitions_per_engine} partitions per engine, {t.dma_engines} engines); after "
        f"~{t.dma_fixed_cost_s * 1e6:g} us of latency each engine moves its packet in "
        f"`{t.dma_packet_setup_s * 1e6:g} us + bytes / (rate x run / (run + {t.dma_descriptor_overhead_bytes} B))`, "
        f"rate = min({t.dma_engine_bandwidth_bytes_per_s / 1e9:g} GB/s, {t.dma_bandwidth_bytes_per_s / 1e9:g} GB/s "
        f"/ engines used) on {t.name}, run = contiguous HBM bytes per descriptor, so element-strided transfers "
        "(transposing loads, column gathers) are slow. Details: device_model.md, \"DMA model\".",
        "",
    ]
    return lines


def builtin_table(mod: Any, prefix: str, names: list[str], table: dict[str, tuple[list[Op], str]]) -> list[str]:
    lines = ["| builtin | instruction | engine (default in bold) | cycles | notes |", "|---|---|---|---|---|"]
    for name in names:
        fn = getattr(mod, name, None)
        if fn is None:
            continue
        if getattr(fn, "_alu", None) is not None and name not in table:
            ins, eng, cst, note = alu_row(name, fn)
        else:
            ins, eng, cst, note = lowering_row(name, table)
        lines.append(row(f"`{prefix}.{name}`", ins, eng, cst, note))
    lines.append("")
    for name in names:
        fn = getattr(mod, name, None)
        if fn is None:
            continue
        lines.append(f"- `{prefix}.{signature(name, fn)}`: {first_paragraph(fn) or '(no docstring)'}")
    lines.append("")
    return lines


def tl_section() -> list[str]:
    names = [n for n in public_names(tl) if callable(getattr(tl, n, None)) or n == "mgrid"]
    skip = {"tile_size"}
    seen: set[str] = set()
    lines = ["## `tl`: tile-level builtins (`import trnlang.language as tl`)", "",
             "Binary ops accept tiles, Python numbers and `[P, 1]` tiles with numpy broadcasting (also along "
             "partitions); the operators `+ - * / ** % == != < <= > >= & | ^ ~` on tiles map to the same builtins. "
             "One exception to plain numpy rules: the `[P]` result of a free-axis reduction without `keepdims` (one "
             "value per partition, and values computed from it elementwise or by a cast) is refused against a 2-D "
             "tile (in an operator, `where`, a store, an assignment or an in-place update) with a `ShapeError`, "
             "because numpy would align it with the free axis; write `keepdims=True` or `v[:, None]` for a "
             "per-partition `[P, 1]`, or `tl.broadcast_to(v, shape)` for the free-axis meaning (a store of it into "
             "a `[1, P]` row is not a broadcast and stays legal). Non-tensor kernel arguments are compile-time "
             "constants; `BLOCK: tl.constexpr` (Triton's spelling) only documents that.",
             ""]
    for title, group in TL_GROUPS:
        present = [n for n in group if n in names]
        if not present:
            continue
        seen.update(present)
        lines += [f"### {title}", ""] + builtin_table(tl, "tl", present, TL_LOWERING)
        if title in TL_GROUP_NOTES:
            lines += [TL_GROUP_NOTES[title], ""]
    other = [n for n in names if n not in seen and n not in skip and not isinstance(getattr(tl, n), type)]
    other = [n for n in other if not hasattr(getattr(tl, n), "value")]  # dtypes / buffers are enum members
    if other:
        lines += ["### Other", ""] + builtin_table(tl, "tl", other, TL_LOWERING)
    ts = getattr(tl, "tile_size", None)
    if ts is not None:
        attrs = [f"`{a} = {getattr(ts, a)}`" for a in dir(ts) if not a.startswith("_")]
        lines += ["### `tl.tile_size`", "", first_paragraph(ts) + " " + ", ".join(attrs) + ".", ""]
    bufs = [n for n in ("sbuf", "psum", "hbm", "shared_hbm") if hasattr(tl, n)]
    lines += ["### Buffers", "", ", ".join(f"`tl.{n}`" for n in bufs) +
              ": the `buffer=` of `tl.ndarray` / `tl.zeros` / ... (SBUF and PSUM are on-chip tiles; HBM ones are "
              "kernel scratch tensors).", ""]
    return lines


def isa_section() -> list[str]:
    names = [n for n in public_names(isa) if callable(getattr(isa, n, None)) and not isinstance(getattr(isa, n), type)]
    names = [n for n in names if not hasattr(getattr(isa, n), "value")]
    lines = ["## `isa`: one call, one engine instruction (`import trnlang.isa as isa`)", "",
             "`engine=` chooses among the engines that can run the instruction (the set comes from `OP_SPECS`; "
             "anything else is a `TraceError`). Engine constants: " +
             ", ".join(f"`isa.{n}`" for n in public_names(isa) if n.endswith("_engine")) + ".", ""]
    lines += builtin_table(isa, "isa", names, ISA_LOWERING)
    return lines


def ops_section() -> list[str]:
    lines = ["## IR instructions and engines (`trnlang.ir.ops.OP_SPECS`)", "",
             "| instruction | engines (default first) | attributes |", "|---|---|---|"]
    for op, spec in OP_SPECS.items():
        lines.append(row(f"`{op.value}`", ", ".join(e.value for e in spec.engines) or "-",
                         ", ".join(f"`{a}`" for a in spec.attrs) or "-"))
    lines += ["", "ALU functions (`ALU_SPECS`): unary ones marked T are transcendental (the Scalar engine's "
              "function tables; `tl` runs them on Scalar); the others default to Vector.", "",
              "| kind | functions |", "|---|---|"]
    for kind in AluKind:
        fs = []
        for a, s in ALU_SPECS.items():
            if s.kind is kind:
                marks = (("T", s.transcendental), ("R", s.reducible and kind is not AluKind.REDUCE),
                         ("I", s.int_only))
                flags = "".join(f for f, on in marks if on)
                fs.append(f"`{a.value}`" + (f" ({flags})" if flags else ""))
        lines.append(row(kind.name.lower(), ", ".join(fs)))
    lines += ["", "R: may be a reduction op (`tensor_reduce`, `activation(reduce_op=)`); I: integer operands only.",
              ""]
    return lines


def dtype_section() -> list[str]:
    lines = ["## Dtypes", "",
             "Arithmetic runs in fp32 (ints in int32); storing into a narrower float rounds to nearest even. "
             "torch / numpy dtype objects are accepted where a dtype is expected.", "",
             "| `tl` name | IR name | bytes | throughput class | notes |", "|---|---|---|---|---|"]
    for name in public_names(tl):
        v = getattr(tl, name, None)
        if type(v).__name__ != "DType":
            continue
        short = getattr(v, "short", getattr(v, "value", ""))
        size = ""
        for attr in ("itemsize", "nbytes", "size", "bytes"):
            x = getattr(v, attr, None)
            if isinstance(x, int):
                size = str(x)
                break
        try:
            cls = targets_mod.dtype_class(v)
        except Exception:
            cls = "-"
        note = ""
        if "float8" in name:
            note = "storage type"
        elif name == "int64":
            note = "HBM storage only; loads give int32 tiles"
        lines.append(row(f"`tl.{name}`", f"`{short}`", size, cls, note))
    lines += ["", "Throughput classes (`trnlang.sim.targets.dtype_class`): `half` (bf16/fp16) runs at the fast "
              "Vector rate and bf16 TensorE peak; `fp32` matmuls are 4x slower; `int` runs at the `other` rate.", ""]
    return lines


def generate() -> str:
    t = targets_mod.get_target(targets_mod.DEFAULT_TARGET)
    out = [
        "# trnlang language reference",
        "",
        "<!-- GENERATED by docs/gen_reference.py from the code; do not edit by hand. "
        "Regenerate: .venv/bin/python docs/gen_reference.py -->",
        "",
        "Kernel-side namespaces: `tl` (`trnlang.language`, tile level: the compiler picks engines) and `isa` "
        "(`trnlang.isa`, one call = one engine instruction). The IR each instruction means is specified in "
        "[ir.md](ir.md); the device is described in [device_model.md](device_model.md).",
        "",
        "Contents: [limits](#limits-checked-at-compile-time-reported-at-your-source-line), "
        "[tl](#tl-tile-level-builtins-import-trnlanglanguage-as-tl), "
        "[isa](#isa-one-call-one-engine-instruction-import-trnlangisa-as-isa), "
        "[IR instructions and engines](#ir-instructions-and-engines-trnlangiropsop_specs), "
        "[cost model](#cost-model), [dtypes](#dtypes).",
        "",
    ]
    out += limits_section(t)
    out += tl_section()
    out += isa_section()
    out += ops_section()
    out += cost_section(t)
    out += dtype_section()
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default=os.path.join(HERE, "language_reference.md"),
                   help="output path ('-' for stdout)")
    args = p.parse_args(argv)
    text = generate()
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"wrote {args.output} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
