"""Seeded random trnlang kernels, written as Python source (``generate(seed)``).

Unlike ``tests/codegen/random_kernels.py`` (which builds IR directly), these kernels go through the
whole user-facing path: ``@trn.kernel`` source using ``tl.*`` is traced, checked, compiled. The source
text is the repro: ``Case.source`` can be pasted into a file and run.

Two templates:

- ``rows``: a loop over 128-row (or smaller) tiles (``tl.affine_range``, ``tl.sequential_range`` or one
  program per tile on a grid), optionally a nested loop over column blocks with ragged masks on both axes;
  masked loads (with and without ``other``), ``[1, d]`` row inputs broadcast along partitions, a random
  chain of elementwise ops (unary, binary with tiles / ``[P, 1]`` columns / ``[1, W]`` rows / Python
  scalars, comparisons, ``where``, casts), free-axis reductions (``keepdims``), ``cumsum``, ``broadcast_to``,
  stores with extra mask conditions, flipped column reads.
- ``matmul``: ``out[M, N] = a @ b`` (``a`` given ``[M, K]`` or transposed ``[K, M]``), K tiled by 128 and
  accumulated in PSUM, ragged masks on every axis, an optional elementwise epilogue.

Each value carries flags the harness uses to compare honestly: ``exact`` (no transcendental function,
float reduction or matmul on its path: the JIT must reproduce the interpreter bit for bit), ``mm`` (a
matmul on its path: fp32 accumulation in the JIT, float64 in the interpreter). Discontinuous operations
(floor/ceil/round/trunc/sign, comparisons, fmod, float -> int casts, argmax) only ever see exact values,
so a last-ulp difference upstream cannot turn into a different integer downstream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

SIZES_N = [1, 2, 3, 127, 128, 129, 255, 256, 257]
SIZES_D = [1, 2, 3, 5, 127, 128, 129]
ARG_DTYPES = ["float32", "float32", "bfloat16", "int32"]

# float unary functions: (name, exact on the JIT's default path)
UNARY_F = [("exp", False), ("log", False), ("log1p", False), ("expm1", False), ("sqrt", True),
           ("rsqrt", False), ("reciprocal", True), ("abs", True), ("negative", True), ("square", True),
           ("tanh", False), ("sigmoid", False), ("relu", True), ("gelu", False), ("gelu_tanh", False),
           ("silu", False), ("softplus", False), ("erf", False), ("sin", False), ("cos", False),
           ("tan", False), ("atan", False), ("sinh", False), ("cosh", False), ("asinh", False),
           ("log2", False), ("exp2", False), ("erfc", False), ("asin", False), ("acos", False),
           ("atanh", False), ("acosh", False), ("log10", False)]
UNARY_DISCRETE = ["floor", "ceil", "trunc", "round", "sign"]
UNARY_I = ["abs", "negative"]
ARITH = ["+", "-", "*", "maximum", "minimum"]
COMPARE = ["<", "<=", ">", ">=", "==", "!="]
F_SCALARS = ["0.5", "-2.0", "3.0", "1e-3", "7.0", "-0.25", "2"]
I_SCALARS = ["1", "-3", "7", "2", "0"]


@dataclass
class Val:
    """One kernel-side value: a tile ``[P, W]``, a column ``[P, 1]`` or a row ``[1, W]``."""

    name: str
    kind: str  # "f" float, "i" int32, "b" bool
    shape: str  # "tile", "col", "row"
    exact: bool = True
    mm: bool = False
    bf16: bool = False


@dataclass
class Arg:
    """One kernel argument: its logical shape and dtype (the harness lays it out in a framed buffer)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    out: bool = False
    exact: bool = True  # outputs: every value stored here is exact
    mm: bool = False
    bf16: bool = False
    scale: float = 1.0  # inputs: value scale
    int_range: int = 1000


@dataclass
class Case:
    """A generated kernel: source, argument specs, launch grid."""

    seed: int
    template: str
    source: str
    args: list[Arg]
    grid: tuple[int, ...] = (1,)
    notes: list[str] = field(default_factory=list)

    @property
    def fn_name(self) -> str:
        return f"fuzz_{self.seed}"


class _Gen:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.lines: list[str] = []
        self.args: list[Arg] = []
        self.nv = 0
        self.notes: list[str] = []

    # ------------------------------------------------------------------ helpers
    def pick(self, xs: list[Any]) -> Any:
        return xs[int(self.rng.integers(0, len(xs)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def size(self, choices: list[int], hi: int) -> int:
        return int(self.pick(choices)) if self.chance(0.7) else int(self.rng.integers(1, hi + 1))

    def emit(self, ind: int, text: str) -> None:
        self.lines.append("    " * ind + text)

    def new(self, ind: int, expr: str, kind: str, shape: str, exact: bool, mm: bool, bf16: bool) -> Val:
        v = Val(f"v{self.nv}", kind, shape, exact, mm, bf16)
        self.nv += 1
        self.emit(ind, f"{v.name} = {expr}")
        return v

    def arg(self, shape: tuple[int, ...], dtype: str | None = None, out: bool = False) -> Arg:
        k = sum(a.out == out for a in self.args)
        a = Arg(("out" if out else "x") + str(k), shape, dtype or self.pick(ARG_DTYPES), out)
        if not out:
            a.scale = float(self.pick([1.0, 1.0, 3.0, 0.1, 30.0]))
            a.int_range = int(self.pick([1000, 1000, 50, 2**31 - 1]))
        self.args.append(a)
        return a

    @staticmethod
    def kind_of(dtype: str) -> str:
        return "i" if dtype == "int32" else "f"

    # ------------------------------------------------------------------ the rows template
    def rows_kernel(self) -> Case:
        n = self.size(SIZES_N, 300)
        col_tiled = self.chance(0.3)
        d = self.size(SIZES_D + ([300, 513, 600] if col_tiled else []), 600 if col_tiled else 260)
        p = int(self.pick([128, 128, 128, 64, 32, 100]))
        cblk = int(self.pick([128, 256, 512])) if col_tiled else d
        loop = self.pick(["affine", "affine", "sequential", "grid"])
        self.notes += [f"n={n} d={d} P={p} loop={loop}" + (f" C={cblk}" if col_tiled else "")]
        x0 = self.arg((n, d))
        ins = [x0] + [self.arg((n, d)) for _ in range(int(self.rng.integers(0, 3)))]
        rows_in = [self.arg((1, d)) for _ in range(int(self.rng.integers(0, 3)))]
        self.emit(1, f"n, d = {x0.name}.shape")
        ind = 1
        grid: tuple[int, ...] = (1,)
        if loop == "grid":
            grid = (-(-n // p),)
            self.emit(ind, "i = tl.program_id(0)")
        else:
            rng_fn = "tl.affine_range" if loop == "affine" else "tl.sequential_range"
            self.emit(ind, f"for i in {rng_fn}(tl.cdiv(n, {p})):")
            ind += 1
        self.emit(ind, f"rows = i * {p} + tl.arange({p})[:, None]")
        if col_tiled:
            self.emit(ind, f"for j in tl.affine_range(tl.cdiv(d, {cblk})):")
            ind += 1
            self.emit(ind, f"cols = j * {cblk} + tl.arange({cblk})[None, :]")
            self.emit(ind, "m = (rows < n) & (cols < d)")
            self.emit(ind, "cm = cols < d")
        else:
            self.emit(ind, f"cols = tl.arange({d})[None, :]")
            self.emit(ind, "m = rows < n")
            self.emit(ind, "cm = None")
        pool: list[Val] = []
        for a in rows_in:  # [1, W] rows, broadcast along partitions
            pool.append(self.new(ind, f"tl.load({a.name}[tl.arange(1)[:, None] * 0, cols], mask=cm)",
                                 self.kind_of(a.dtype), "row", True, False, a.dtype == "bfloat16"))
        for a in ins:
            pool.append(self.load(ind, a))
        for _ in range(int(self.rng.integers(2, 10))):
            v = self.step(ind, pool, ins)
            if v is not None:
                pool.append(v)
        ncb = -(-d // cblk)
        stored = 0
        picks = [len(pool) - 1] + [int(v) for v in self.rng.permutation(len(pool))[: int(self.rng.integers(0, 3))]]
        for pi in dict.fromkeys(picks):  # the last value (the end of the chain) and up to two others
            if pool[pi].shape != "row":
                stored += self.store(ind, pool[pi], n, d, ncb, col_tiled)
        if not stored:
            self.store(ind, pool[len(rows_in)], n, d, ncb, col_tiled)
        return self.case("rows", grid)

    def load(self, ind: int, a: Arg) -> Val:
        other = "" if self.chance(0.6) else f", other={self.pick(['1.5', '-3', '0', '7'])}"
        cols = "cols"
        if self.chance(0.15):  # read the columns mirrored
            cols = "(d - 1) - cols"
            self.notes.append(f"{a.name} mirrored")
        return self.new(ind, f"tl.load({a.name}[rows, {cols}], mask=m{other})", self.kind_of(a.dtype), "tile",
                        True, False, a.dtype == "bfloat16")

    def store(self, ind: int, v: Val, n: int, d: int, ncb: int, col_tiled: bool) -> int:
        if v.kind == "b":
            dt = self.pick(["int32", "float32", "bfloat16"])
        elif v.kind == "i":
            dt = self.pick(["int32", "int32", "float32"])
        elif v.exact:
            dt = self.pick(["float32", "float32", "bfloat16", "int32"])
        else:
            dt = self.pick(["float32", "float32", "bfloat16"])  # inexact floats never go through a float->int cut
        extra = ""
        if self.chance(0.3):
            extra = " & " + self.pick(["(rows % 3 != 1)", "(rows < n - 1)", "(rows >= 1)"] +
                                      (["(cols % 2 == 0)", "(cols < d - 2)"] if v.shape == "tile" else []))
        if v.shape == "tile":
            o = self.arg((n, d), dt, out=True)
            self.emit(ind, f"tl.store({o.name}[rows, cols], {v.name}, mask=m{extra})")
        else:  # a [P, 1] column: one column per column block
            o = self.arg((n, ncb), dt, out=True)
            jcol = "j + tl.arange(1)[None, :]" if col_tiled else "tl.arange(1)[None, :]"
            self.emit(ind, f"tl.store({o.name}[rows, {jcol}], {v.name}, mask=(rows < n){extra})")
        o.exact, o.mm, o.bf16 = v.exact, v.mm, v.bf16 or dt == "bfloat16"
        return 1

    # ------------------------------------------------------------------ one random op
    def step(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        """One random op on ``pool`` (``ins``: the inputs a load may read); None when the drawn op does not apply."""
        kind = self.pick(["unary", "unary", "binary", "binary", "binary", "scalar", "compare", "where", "cast",
                          "reduce", "reduce", "discrete", "cumsum", "bcast", "power", "intop", "load"])
        self.notes.append(kind)
        return _Gen._OPS[kind](self, ind, pool, ins)

    def _op_load(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        return self.load(ind, self.pick(ins))

    def _op_unary(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        fl = [v for v in pool if v.kind == "f"]
        if not fl:
            return None
        x = self.pick(fl)
        fn, exact = self.pick(UNARY_F)
        return self.new(ind, f"tl.{fn}({x.name})", "f", x.shape, x.exact and exact, x.mm, x.bf16)

    def _op_discrete(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        ex = [v for v in pool if v.exact]
        cands = [v for v in ex if v.kind == "f"]
        if cands:
            x = self.pick(cands)
            return self.new(ind, f"tl.{self.pick(UNARY_DISCRETE)}({x.name})", "f", x.shape, True, False, x.bf16)
        return None

    def _op_binary(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        a, b = self.pick(pool), self.pick(pool)
        if "b" in (a.kind, b.kind):
            if a.kind == b.kind == "b":
                op = self.pick(["&", "|", "^"])
                return self.new(ind, f"{a.name} {op} {b.name}", "b", _bshape(a, b), True, False, False)
            return None
        op = self.pick(ARITH + ["/"])
        expr = f"tl.{op}({a.name}, {b.name})" if op in ("maximum", "minimum") else f"{a.name} {op} {b.name}"
        kind_r = "f" if op == "/" or "f" in (a.kind, b.kind) else "i"
        return self.new(ind, expr, kind_r, _bshape(a, b), a.exact and b.exact, a.mm or b.mm, a.bf16 or b.bf16)

    def _op_scalar(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        a = self.pick([v for v in pool if v.kind != "b"] or pool)
        if a.kind == "b":
            return None
        s = self.pick(F_SCALARS if a.kind == "f" or self.chance(0.3) else I_SCALARS)
        op = self.pick(["+", "-", "*", "/", "r-", "r/"])
        expr = f"{s} {op[1]} {a.name}" if op.startswith("r") else f"{a.name} {op} {s}"
        kind_r = "f" if "/" in op or "." in s or "e" in s or a.kind == "f" else "i"
        return self.new(ind, expr, kind_r, a.shape, a.exact, a.mm, a.bf16)

    def _op_compare(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        ex = [v for v in pool if v.exact]
        cands = [v for v in ex if v.kind != "b"]
        if not cands:
            return None
        a = self.pick(cands)
        if self.chance(0.6):
            b = self.pick(cands)
            rhs, shape = b.name, _bshape(a, b)
        else:
            rhs, shape = self.pick(F_SCALARS if a.kind == "f" else I_SCALARS), a.shape
        return self.new(ind, f"{a.name} {self.pick(COMPARE)} {rhs}", "b", shape, True, False, False)

    def _op_where(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        conds = [v for v in pool if v.kind == "b"]
        if not conds:
            return None
        c = self.pick(conds)
        a = self.pick([v for v in pool if v.kind != "b"] or [c])
        if a.kind == "b":
            return None
        b = self.pick([v for v in pool if v.kind == a.kind] + [None])
        bexpr = b.name if b is not None else self.pick(F_SCALARS if a.kind == "f" else I_SCALARS)
        shape = _bshape(_bshape_v(c, a), b) if b is not None else _bshape(c, a)
        return self.new(ind, f"tl.where({c.name}, {a.name}, {bexpr})", a.kind, shape,
                        a.exact and (b is None or b.exact), a.mm or bool(b and b.mm),
                        a.bf16 or bool(b and b.bf16))

    def _op_cast(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        x = self.pick(pool)
        to = self.pick(["tl.float32", "tl.bfloat16"] + (["tl.int32"] if x.exact else []))
        kind_r = "i" if to == "tl.int32" else "f"
        return self.new(ind, f"tl.copy({x.name}, dtype={to})", kind_r, x.shape, x.exact, x.mm,
                        x.bf16 or to == "tl.bfloat16")

    def _op_reduce(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        tiles = [v for v in pool if v.shape == "tile"]
        if not tiles:
            return None
        x = self.pick(tiles)
        if x.kind == "b":
            fn = self.pick(["all", "any"])
            return self.new(ind, f"tl.{fn}({x.name}, axis=1, keepdims=True)", "b", "col", True, False, False)
        fns = ["sum", "max", "min", "mean"] + (["var", "prod"] if x.kind == "f" else []) + \
            (["argmax", "argmin"] if x.exact else [])
        fn = self.pick(fns)
        kind_r = "i" if fn in ("argmax", "argmin") else ("f" if fn in ("mean", "var") else x.kind)
        exact = x.exact and (fn in ("max", "min", "argmax", "argmin") or x.kind == "i" and fn == "sum")
        axis = "axis=1" if fn in ("argmax", "argmin") or self.chance(0.7) else "axis=-1"
        return self.new(ind, f"tl.{fn}({x.name}, {axis}, keepdims=True)", kind_r, "col", exact, x.mm, x.bf16)

    def _op_cumsum(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        tiles = [v for v in pool if v.shape == "tile" and v.kind == "f"]
        if not tiles:
            return None
        x = self.pick(tiles)
        return self.new(ind, f"tl.cumsum({x.name}, axis=-1)", "f", "tile", False, x.mm, x.bf16)

    def _op_bcast(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        cols = [v for v in pool if v.shape == "col"]
        tiles = [v for v in pool if v.shape == "tile"]
        if not cols or not tiles:
            return None
        c = self.pick(cols)
        return self.new(ind, f"tl.broadcast_to({c.name}, {self.pick(tiles).name}.shape)", c.kind, "tile",
                        c.exact, c.mm, c.bf16)

    def _op_power(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        fl = [v for v in pool if v.kind == "f"]
        if not fl:
            return None
        x = self.pick(fl)
        e = self.pick(["2.0", "0.5", "3.0", "-1.0", "1.5"])
        return self.new(ind, f"tl.power({x.name}, {e})", "f", x.shape, False, x.mm, x.bf16)

    def _op_intop(self, ind: int, pool: list[Val], ins: list[Arg]) -> Val | None:
        ints = [v for v in pool if v.kind == "i"]
        if not ints:
            return None
        a = self.pick(ints)
        if self.chance(0.4):
            return self.new(ind, f"tl.{self.pick(UNARY_I)}({a.name})", "i", a.shape, True, False, False)
        b = self.pick(ints)
        op = self.pick(["&", "|", "^", "+", "*", "-"])
        rhs = b.name if self.chance(0.7) else self.pick(I_SCALARS)
        shape = _bshape(a, b) if rhs == b.name else a.shape
        return self.new(ind, f"{a.name} {op} {rhs}", "i", shape, a.exact, False, False)

    _OPS: dict[str, Callable[[_Gen, int, list[Val], list[Arg]], Val | None]] = {
        "load": _op_load,
        "unary": _op_unary,
        "discrete": _op_discrete,
        "binary": _op_binary,
        "scalar": _op_scalar,
        "compare": _op_compare,
        "where": _op_where,
        "cast": _op_cast,
        "reduce": _op_reduce,
        "cumsum": _op_cumsum,
        "bcast": _op_bcast,
        "power": _op_power,
        "intop": _op_intop,
    }

    # ------------------------------------------------------------------ the matmul template
    def matmul_kernel(self) -> Case:
        m = self.size([1, 3, 127, 128, 129, 200], 260)
        k = self.size([1, 2, 127, 128, 129, 256, 300], 300)
        nn = self.size([1, 5, 128, 511, 512, 513], 600)
        trans = self.chance(0.5)
        dt = self.pick(["float32", "bfloat16"])
        nb = int(self.pick([512, 512, 256, 128]))
        self.notes.append(f"M={m} K={k} N={nn} transpose_x={trans} N-block={nb}")
        a = self.arg((k, m) if trans else (m, k), dt)
        b = self.arg((k, nn), self.pick([dt, "float32", "bfloat16"]))
        a.scale = b.scale = 1.0
        bias = self.arg((1, nn), "float32") if self.chance(0.4) else None
        out = self.arg((m, nn), self.pick(["float32", "float32", "bfloat16"]), out=True)
        out.exact, out.mm, out.bf16 = False, True, "bfloat16" in (dt, b.dtype, out.dtype)
        e = self.emit
        e(1, f"M, N = {out.name}.shape")
        e(1, f"K = {b.name}.shape[0]")
        e(1, "for mi in tl.affine_range(tl.cdiv(M, 128)):")
        e(2, f"for ni in tl.affine_range(tl.cdiv(N, {nb})):")
        e(3, f"acc = tl.zeros((128, {nb}), tl.float32, buffer=tl.psum)")
        e(3, f"jn = ni * {nb} + tl.arange({nb})[None, :]")
        e(3, "om = mi * 128 + tl.arange(128)[:, None]")
        e(3, "for ki in tl.affine_range(tl.cdiv(K, 128)):")
        e(4, "ik = ki * 128 + tl.arange(128)[:, None]")
        if trans:
            e(4, "im = mi * 128 + tl.arange(128)[None, :]")
            e(4, f"at = tl.load({a.name}[ik, im], mask=(ik < K) & (im < M))")
            e(4, f"bt = tl.load({b.name}[ik, jn], mask=(ik < K) & (jn < N))")
            e(4, "acc += tl.matmul(at, bt, transpose_x=True)")
        else:
            e(4, "kk = ki * 128 + tl.arange(128)[None, :]")
            e(4, f"at = tl.load({a.name}[om, kk], mask=(om < M) & (kk < K))")
            e(4, f"bt = tl.load({b.name}[ik, jn], mask=(ik < K) & (jn < N))")
            e(4, "acc += tl.matmul(at, bt)")
        res = "acc"
        epi = self.pick(["", "", "relu", "bias", "scale", "tanh"]) if bias is None else "bias"
        if epi == "relu":
            e(3, "r = tl.relu(acc)")
            res = "r"
        elif epi == "scale":
            e(3, "r = acc * 0.5 - 1.0")
            res = "r"
        elif epi == "tanh":
            e(3, "r = tl.tanh(acc)")
            res = "r"
        elif epi == "bias" and bias is not None:
            e(3, f"bb = tl.load({bias.name}[tl.arange(1)[:, None] * 0, jn], mask=jn < N)")
            e(3, "r = acc + bb")
            res = "r"
        self.notes.append(f"epilogue={epi or 'none'}")
        e(3, f"tl.store({out.name}[om, jn], {res}, mask=(om < M) & (jn < N))")
        return self.case("matmul", (1,))

    def case(self, template: str, grid: tuple[int, ...]) -> Case:
        params = ", ".join(a.name for a in self.args)
        src = "\n".join([f"def fuzz_{self.seed}({params}):", *self.lines]) + "\n"
        return Case(self.seed, template, src, self.args, grid, self.notes)


def _bshape(a: Val, b: Val | None) -> str:
    """Broadcast result shape of two values (tile wins; a column and a row make a tile)."""
    if b is None:
        return a.shape
    s = {a.shape, b.shape}
    if "tile" in s or s == {"col", "row"}:
        return "tile"
    return a.shape


def _bshape_v(a: Val, b: Val) -> Val:
    return Val("_", a.kind, _bshape(a, b))


def generate(seed: int) -> Case:
    """The random kernel of ``seed`` (deterministic)."""
    g = _Gen(seed)
    if g.chance(0.15):
        return g.matmul_kernel()
    return g.rows_kernel()
