"""Random numbers on ``trn`` from a counter-based generator computed in trnlang kernels.

Every element draws from a hash of ``(key, element index)``: the index ``i`` (``base + row * d + col``) is
keyed with a 64-bit key ``(k0, k1)`` as ``((i ^ k1) * 0x9e3779b1 + k0)`` (a bijection of the counter) and mixed
by MurmurHash3's 32-bit finaliser (``fmix32``) on the Vector engine's integer ALU (int32 multiplies wrap;
xor/and are bitwise). The language has no shift instruction, so the finaliser's
logical right shift ``h >> s`` is computed exactly as ``((h & -2^s) * 2^-s) & (2^(32-s) - 1)`` through fp32
(the masked value has at most ``32 - s <= 24`` significant bits, so the float round trip is exact).
The low 24 bits of the hash give a uniform ``u = k / 2^24`` in ``[0, 1)``; normals use Box-Muller with a
second hash of the same counter.

The key (two int32 words) is drawn on the host from the device generator (``torch.trn.default_generator()``,
seeded by ``torch.manual_seed`` / ``torch.trn.manual_seed``) or from the ``generator=`` argument: the same seed
gives the same numbers, and each call advances the generator, so successive calls draw different streams.
Keys travel as a ``[1, 2]`` device tensor (a runtime operand: a new key never recompiles). A result depends
on the element's logical index only, so a non-contiguous ``self`` gets the same values as a contiguous one
(generated contiguously, then copied into the view). The numbers differ from the CPU generator's (as CUDA's
do); tests compare distributions.

Lowered: ``uniform_``, ``normal_`` (and ``normal`` with tensor mean/std), ``bernoulli_`` (float and tensor
``p``), ``random_`` (``from``/``to``, ranges up to 2^24; float64 outputs get the exact bit patterns of the
int32 draws, see :func:`int_to_f64_words`: integers need no float64 arithmetic), ``exponential_``,
``log_normal_``, ``geometric_``, ``cauchy_``, ``randperm`` (as an argsort of random keys), ``native_dropout``
(mask and scaled output in one kernel), ``native_dropout_backward``, ``rrelu_with_noise`` (noise and output in
one kernel; its backward decomposes), ``multinomial`` (Gumbel top-k without replacement, inverse-CDF counts
with replacement) and, in :mod:`stdlib_kernels.nn.random_pool`, ``fractional_max_pool2d/3d`` (+ backward).

Example:
    >>> import torch
    >>> torch.manual_seed(0)                                                  # doctest: +SKIP
    >>> x = torch.rand(1000, device="trn")                                    # doctest: +SKIP
    >>> y = torch.nn.functional.dropout(torch.ones(8, device="trn"), 0.5)     # doctest: +SKIP
"""

from __future__ import annotations

import enum
import math
from typing import Any, Callable

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.pointwise import flat_kernel, flat_tiles
from stdlib_kernels.tensor.creation import flat_views, tiles_2d
from trnlang.device import decline, lowering

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_F = 512
_INV24 = 1.0 / (1 << 24)


def _srl(h: Any, s: int) -> Any:
    """Logical ``h >> s`` of an int32 tile, exact via fp32 (``s >= 8``)."""
    hi = (h & -(1 << s)).astype(tl.float32) * (1.0 / (1 << s))
    return hi.astype(tl.int32) & ((1 << (32 - s)) - 1)


def _fmix(h: Any) -> Any:
    """MurmurHash3 ``fmix32`` (constants as signed int32)."""
    h = h ^ _srl(h, 16)
    h = h * -2048144789  # 0x85ebca6b
    h = h ^ _srl(h, 13)
    h = h * -1028477387  # 0xc2b2ae35
    return h ^ _srl(h, 16)


def _u24(h: Any) -> Any:
    """Uniform in ``[0, 1)`` from the low 24 bits."""
    return (h & 0xFFFFFF).astype(tl.float32) * _INV24


def _u_open(h: Any) -> Any:
    """Uniform in ``(0, 1)``: never 0 nor 1."""
    return ((h & 0xFFFFFF).astype(tl.float32) + 0.5) * _INV24


def _box_muller(h: Any) -> tuple[Any, Any]:
    """Box-Muller's two uniforms: ``u1`` in ``(0, 1]`` from the hash, ``u2`` from a second hash of the counter."""
    return ((h & 0xFFFFFF) + 1).astype(tl.float32) * _INV24, _u24(_fmix(h ^ 1540483477))


def _normal(h: Any, a: Any, b: Any) -> Any:
    u1, u2 = _box_muller(h)
    z = tl.sqrt(tl.log(u1) * -2.0) * tl.cos(u2 * (2.0 * math.pi) - math.pi)
    return a + b * z


def _log_normal(h: Any, a: Any, b: Any) -> Any:
    u1, u2 = _box_muller(h)
    return tl.exp(a + b * tl.sqrt(tl.log(u1) * -2.0) * tl.cos(u2 * (2.0 * math.pi) - math.pi))


class Draw(enum.Enum):
    """What :func:`rng` draws: the distribution (its parameters ``a``, ``b``) and what it reads and writes besides
    ``out``. A compile-time constant of the kernel: one variant per member, as the strings it replaces."""

    UNIFORM = "uniform"          #: ``a + (b - a) * u``
    EXP_OPEN = "exp_open"        #: ``-log(u) / a`` with ``u`` in ``(0, 1)``: never 0 (multinomial's Gumbel keys)
    UOPEN = "uopen"              #: ``u`` in ``(0, 1)``: never 0 nor 1
    NORMAL = "normal"            #: ``a + b * z`` (Box-Muller)
    LOG_NORMAL = "log_normal"    #: ``exp(a + b * z)``
    GEOMETRIC = "geometric"      #: ``max(1, ceil(log(u) / a))``, ``a = log(1 - p)``, ``u`` in ``(0, 1)``
    CAUCHY = "cauchy"            #: ``a + b * tan(pi * (u - 1/2))``, ``u`` in ``(0, 1)``
    EXPONENTIAL = "exponential"  #: ``-log(1 - u) / a``
    BERNOULLI = "bernoulli"      #: ``u < a``
    BERNOULLI_T = "bernoulli_t"  #: ``u < p[i]`` (``x``: the ``p`` tensor)
    RANDINT = "randint"          #: ``a + floor(u * b)``, ``b``: the range (int32 out)
    RRELU = "rrelu"              #: ``noise = u(a, b)`` where ``x <= 0`` else 1 (into ``out2``), ``out = x * noise``
    DROPOUT = "dropout"          #: keep with probability ``1 - a`` (mask into ``out2``), scale by ``b``


#: A draw's trace-time body: ``(hash tile, a, b, load x, (p, f)) -> (out tile, out2 tile or None)``.
DrawFn = Callable[[Any, Any, Any, Callable[[], Any], tuple[int, int]], tuple[Any, Any]]


def _bernoulli(u: Any, p: Any, shape: tuple[int, int]) -> Any:
    return tl.where(u < p, tl.ones(shape, tl.float32), tl.zeros(shape, tl.float32))


def _bernoulli_t(h: Any, load_p: Callable[[], Any], shape: tuple[int, int]) -> Any:
    p = load_p()
    return _bernoulli(_u24(h), p, shape)


def _randint(h: Any, a: Any, b: Any) -> Any:
    return tl.minimum(tl.floor(_u24(h) * b), b - 1.0).astype(tl.int32) + a.astype(tl.int32)


def _draw_rrelu(h: Any, a: Any, b: Any, load_x: Callable[[], Any]) -> tuple[Any, Any]:
    xt = load_x()
    noise = tl.where(xt <= 0.0, a + (b - a) * _u24(h), 1.0)
    return xt * noise, noise


def _draw_dropout(h: Any, a: Any, b: Any, load_x: Callable[[], Any], shape: tuple[int, int]) -> tuple[Any, Any]:
    keep = _u24(h) >= a
    return tl.where(keep, load_x() * b, tl.zeros(shape, tl.float32)), keep


#: The draw table: the kernel body of each :class:`Draw`.
DRAWS: dict[Draw, DrawFn] = {
    Draw.UNIFORM: lambda h, a, b, x, sh: (a + (b - a) * _u24(h), None),
    Draw.EXP_OPEN: lambda h, a, b, x, sh: (-tl.log(_u_open(h)) / a, None),
    Draw.UOPEN: lambda h, a, b, x, sh: (_u_open(h), None),
    Draw.NORMAL: lambda h, a, b, x, sh: (_normal(h, a, b), None),
    Draw.LOG_NORMAL: lambda h, a, b, x, sh: (_log_normal(h, a, b), None),
    Draw.GEOMETRIC: lambda h, a, b, x, sh: (tl.maximum(tl.ceil(tl.log(_u_open(h)) / a), 1.0), None),
    Draw.CAUCHY: lambda h, a, b, x, sh: (a + b * tl.tan((_u_open(h) - 0.5) * math.pi), None),
    Draw.EXPONENTIAL: lambda h, a, b, x, sh: (-tl.log(1.0 - _u24(h)) / a, None),
    Draw.BERNOULLI: lambda h, a, b, x, sh: (_bernoulli(_u24(h), a, sh), None),
    Draw.BERNOULLI_T: lambda h, a, b, x, sh: (_bernoulli_t(h, x, sh), None),
    Draw.RANDINT: lambda h, a, b, x, sh: (_randint(h, a, b), None),
    Draw.RRELU: lambda h, a, b, x, sh: _draw_rrelu(h, a, b, x),
    Draw.DROPOUT: lambda h, a, b, x, sh: _draw_dropout(h, a, b, x, sh),
}


def _draw_at(idx: Any, k0: Any, k1: Any, a: Any, b: Any, draw: DrawFn, load_x: Callable[[], Any],
             shape: tuple[int, int]) -> tuple[Any, Any]:
    h = _fmix((idx ^ k1) * -1640531535 + k0)  # 0x9e3779b1: a keyed bijection of the counter, mixed
    return draw(h, a, b, load_x, shape)


@trn.kernel
def rng(out, keys, params, x, out2, kind, base, flat=False):
    """Fill the 2-D view ``out [n, d]`` (element index ``base + r * d + c``) with draws of ``kind`` (a
    :class:`Draw`; its body is the :data:`DRAWS` entry). ``flat``: ``out`` (and ``x``, ``out2``) are contiguous 1-D
    pieces and the element index is the position (through :data:`rng_flat`: one variant for every length).

    ``params [1, 2]`` fp32: (a, b) of the distribution; ``x``: the ``p`` tensor (bernoulli) or the input
    (dropout, rrelu) as a view shaped like ``out``; ``out2``: the dropout mask (bool) or rrelu's noise.
    """
    k0 = tl.load(keys[0:1, 0:1])
    k1 = tl.load(keys[0:1, 1:2])
    a = tl.load(params[0:1, 0:1])
    b = tl.load(params[0:1, 1:2])
    draw = DRAWS[kind]
    if flat:
        for fidx, fm in flat_tiles(out.shape[0]):
            res, res2 = _draw_at(tl.copy(fidx, dtype=tl.int32), k0, k1, a, b, draw,
                                 lambda: tl.load(x[fidx], mask=fm).astype(tl.float32), (fidx.shape[0], fidx.shape[1]))
            if res2 is not None:
                tl.store(out2[fidx], res2, mask=fm)
            tl.store(out[fidx], res, mask=fm)
        return
    n, d = out.shape
    for rows, cols, m in tiles_2d(n, d, _F):
        res, res2 = _draw_at(tl.copy(base + rows * d + cols, dtype=tl.int32), k0, k1, a, b, draw,
                             lambda: tl.load(x[rows, cols], mask=m).astype(tl.float32), (rows.shape[0], cols.shape[1]))
        if res2 is not None:
            tl.store(out2[rows, cols], res2, mask=m)
        tl.store(out[rows, cols], res, mask=m)


#: :func:`rng` for flat launches: contiguous draws of any length share one compiled variant per kind.
rng_flat = flat_kernel(rng)


@trn.kernel
def dropout_bwd(g, mask, scale, out):
    """``out = g * mask * scale`` over 2-D views (``scale``: a ``[1, 1]`` fp32 tensor)."""
    s = tl.load(scale[0:1, 0:1])
    for rows, cols, m in tiles_2d(*out.shape):
        gt = tl.load(g[rows, cols], mask=m).astype(tl.float32)
        mt = tl.load(mask[rows, cols], mask=m)
        tl.store(out[rows, cols], tl.where(mt, gt * s, tl.zeros_like(gt)), mask=m)


def _keys(generator: Any) -> torch.Tensor | None:
    """Two int32 key words drawn from the generator (advancing it), as a ``[1, 2]`` device tensor."""
    if generator is None:
        from trnlang.device import module

        generator = module.default_generator()
    elif not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        return None
    k = torch.randint(-2**31, 2**31 - 1, (1, 2), generator=generator, dtype=torch.int32)
    return k.to("trn")


def _params(a: float, b: float) -> torch.Tensor:
    return torch.tensor([[float(a), float(b)]], dtype=torch.float32).to("trn")


def _run(self: torch.Tensor, kind: Draw, a: float, b: float, generator: Any, x: torch.Tensor | None = None,
         out2: torch.Tensor | None = None) -> Any:
    """Fill ``self`` (any layout) with ``kind`` draws; returns ``self`` or NotImplemented."""
    if not U.is_trn(self):
        return decline("a tensor not on trn")
    keys = _keys(generator)
    if keys is None:
        return decline("a generator that is not a CPU torch.Generator")
    if self.numel() == 0:
        return self
    dst = self if self.is_contiguous() else torch.empty(self.shape, dtype=self.dtype, device="trn")
    params = _params(a, b)
    if all(t is None or (t.is_contiguous() and t.numel() == dst.numel()) for t in (x, out2)):
        # one flat launch: the same element indices (so the same draws) as the 2-D views, no compile per size
        n = dst.numel()
        x1, m1 = (U.piece(t, (n,), (1,), t.storage_offset()) if t is not None else None for t in (x, out2))
        rng_flat(U.piece(dst, (n,), (1,), dst.storage_offset()), keys, params, x1, m1, kind, 0, True)
        if dst is not self:
            self.copy_(dst)
        return self
    xs = flat_views(x) if x is not None else None
    ms = flat_views(out2) if out2 is not None else None
    for k, (v, base) in enumerate(flat_views(dst)):
        rng(v, keys, params, xs[k][0] if xs else None, ms[k][0] if ms else None, kind, base)
    if dst is not self:
        self.copy_(dst)
    return self


def _planes(self: torch.Tensor) -> torch.Tensor | None:
    """The ``[..., 2]`` real/imaginary planes (float32; float16 for complex32) of a complex64/complex32 ``trn``
    tensor (None: not one)."""
    if self.dtype not in (torch.complex64, torch.complex32) or self.is_conj() or self.is_neg():
        return None
    return torch.view_as_real(self)


@lowering("aten::uniform_", dtypes=(*FLOATS, torch.complex64, torch.complex32))
def uniform_(self: torch.Tensor, from_: float = 0.0, to: float = 1.0, *, generator: Any = None) -> Any:
    """``self.uniform_(from, to)``: ``from + (to - from) * u``, ``u`` in ``[0, 1)`` with 24 random bits
    (complex64: both planes, as torch)."""
    if self.is_complex():
        planes = _planes(self)
        if planes is None:
            return decline("a complex tensor other than complex64/complex32 (or a conj/neg bit)")
        if uniform_(planes, from_, to, generator=generator) is NotImplemented:
            return NotImplemented  # the planes' call recorded why
        return self
    if not (math.isfinite(from_) and math.isfinite(to)) or from_ > to or to - from_ > torch.finfo(self.dtype).max:
        return decline("invalid from/to (or to - from beyond the dtype's range): torch raises")
    return _run(self, Draw.UNIFORM, from_, to, generator)


@lowering("aten::normal_", dtypes=(*FLOATS, torch.complex64, torch.complex32))
def normal_(self: torch.Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Any:
    """``self.normal_(mean, std)`` by Box-Muller (complex64: both planes with ``std / sqrt(2)``, as torch)."""
    if self.is_complex():
        planes = _planes(self)
        if planes is None:
            return decline("a complex tensor other than complex64/complex32 (or a conj/neg bit)")
        if normal_(planes, mean, std / math.sqrt(2.0), generator=generator) is NotImplemented:
            return NotImplemented  # the planes' call recorded why
        return self
    if std < 0 or not math.isfinite(std):
        return decline("invalid std: torch raises")
    return _run(self, Draw.NORMAL, mean, std, generator)


@lowering("aten::exponential_", dtypes=FLOATS)
def exponential_(self: torch.Tensor, lambd: float = 1.0, *, generator: Any = None) -> Any:
    """``self.exponential_(lambd)``: ``-log(1 - u) / lambd``."""
    if not lambd > 0:
        return decline("invalid lambd: torch raises")
    return _run(self, Draw.EXPONENTIAL, lambd, 0.0, generator)


@lowering("aten::log_normal_", dtypes=FLOATS)
def log_normal_(self: torch.Tensor, mean: float = 1.0, std: float = 2.0, *, generator: Any = None) -> Any:
    """``self.log_normal_(mean, std)``: ``exp(mean + std * z)``."""
    if not std > 0 or not math.isfinite(std):
        return decline("invalid std: torch raises")
    return _run(self, Draw.LOG_NORMAL, mean, std, generator)


_GEOMETRIC_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@lowering("aten::geometric_", dtypes=FLOATS + _GEOMETRIC_INTS)
def geometric_(self: torch.Tensor, p: float, *, generator: Any = None) -> Any:
    """``self.geometric_(p)``: trials to the first success, ``ceil(log(u) / log(1 - p))`` (integer tensors: drawn in
    fp32, whose integers are exact up to 2^24, and converted as torch converts its double draws).

    >>> torch.empty(4, dtype=torch.int64, device="trn").geometric_(1.0).cpu()
    tensor([1, 1, 1, 1])
    """
    if not 0.0 < p <= 1.0:
        return decline("invalid p: torch raises")
    a = math.log1p(-p) if p < 1.0 else -math.inf
    if self.dtype in _GEOMETRIC_INTS:
        tmp = torch.empty(self.shape, dtype=torch.float32, device="trn")
        r = _run(tmp, Draw.GEOMETRIC, a, 0.0, generator)
        return r if r is NotImplemented else self.copy_(tmp)
    return _run(self, Draw.GEOMETRIC, a, 0.0, generator)


@lowering("aten::cauchy_", dtypes=FLOATS)
def cauchy_(self: torch.Tensor, median: float = 0.0, sigma: float = 1.0, *, generator: Any = None) -> Any:
    """``self.cauchy_(median, sigma)``: ``median + sigma * tan(pi * (u - 1/2))``."""
    if not sigma > 0:
        return decline("invalid sigma: torch raises")
    return _run(self, Draw.CAUCHY, median, sigma, generator)


_BERN_DTYPES = FLOATS + (torch.int32, torch.bool, torch.int64, torch.uint8, torch.int8, torch.int16)


@lowering("aten::bernoulli_.float", dtypes=_BERN_DTYPES)
def bernoulli_float(self: torch.Tensor, p: float = 0.5, *, generator: Any = None) -> Any:
    """``self.bernoulli_(p)``: 1 where ``u < p`` (stored in ``self``'s dtype)."""
    if not 0.0 <= p <= 1.0:
        return decline("invalid p: torch raises")
    return _run(self, Draw.BERNOULLI, p, 0.0, generator)


@lowering("aten::bernoulli_.Tensor", dtypes=_BERN_DTYPES)
def bernoulli_tensor(self: torch.Tensor, p: torch.Tensor, *, generator: Any = None) -> Any:
    """``self.bernoulli_(p)`` with a (broadcast) probability tensor on ``trn``."""
    if not U.is_trn(p) or p.dtype not in FLOATS:
        return decline("p not a floating trn tensor")
    try:
        pe = p.expand(self.shape)
    except RuntimeError:
        return decline("p does not broadcast: torch raises")
    pc = pe.contiguous()
    return _run(self, Draw.BERNOULLI_T, 0.0, 0.0, generator, x=pc)


_INT_LIMITS = {torch.int32: (-2**31, 2**31), torch.int64: (-2**63, 2**63), torch.int16: (-2**15, 2**15),
               torch.int8: (-128, 128), torch.uint8: (0, 256), torch.float32: (-2**24, 2**24 + 1),
               torch.float64: (-2**53, 2**53 + 1), torch.bfloat16: (-2**8, 2**8 + 1),
               torch.float16: (-2**11, 2**11 + 1)}
#: The unsigned dtypes torch draws ``random_(from, to)`` for, and the default ``to`` (uint64 has none: torch raises).
_UINT_TOPS: dict[torch.dtype, int | None] = {torch.uint16: 2**16, torch.uint32: 2**32, torch.uint64: None}


@trn.kernel
def int_to_f64_words(x, lo, hi):
    """The float64 bit patterns of int32 values ``|v| < 2^24`` (exact; integer ALU work, no float64 arithmetic).

    ``v = (-1)^s 2^e (1 + m / 2^e)``: ``e`` counts the powers of two ``<= |v|``, the 52-bit mantissa field is
    ``m * 2^(52 - e)``, split into its high 20 bits (``hi`` word, below the exponent ``1023 + e``) and low 32 bits
    (``lo``, nonzero only for ``e > 20``; int32 multiplies wrap, giving the unsigned bits). All divisions are by
    powers of two, so the fp32 steps are exact. ``x``, ``lo``, ``hi``: 2-D views of the same shape.
    """
    for rows, cols, m in tiles_2d(*x.shape):
        shape = (rows.shape[0], cols.shape[1])
        v = tl.load(x[rows, cols], mask=m)
        neg = v < 0
        a = tl.where(neg, -v, v)
        e = tl.zeros(shape, tl.int32)
        p2 = tl.ones(shape, tl.int32)
        for k in tl.static_range(1, 24):
            ge = (a >= (1 << k)).astype(tl.int32)
            e = e + ge
            p2 = p2 + ge * (1 << (k - 1))
        mf = (a - p2).astype(tl.float32)
        pf = p2.astype(tl.float32)
        hm = tl.floor(mf * float(1 << 20) / pf)
        rem = mf - hm * (pf * (1.0 / (1 << 20)))
        k2 = tl.minimum(float(2**51) / pf, float(1 << 30)).astype(tl.int32)
        lo_w = (rem.astype(tl.int32) * k2) * 2
        hi_w = (e + 1023) * (1 << 20) + hm.astype(tl.int32)
        hi_w = tl.where(neg, hi_w | -2147483648, hi_w)
        zero = a == 0
        tl.store(lo[rows, cols], tl.where(zero, 0, lo_w), mask=m)
        tl.store(hi[rows, cols], tl.where(zero, 0, hi_w), mask=m)


def _random_f64(self: torch.Tensor, from_: int, span: int, generator: Any) -> Any:
    """Integer draws into a float64 tensor: int32 draws, then their exact float64 bit patterns (the tensor seen
    as int32 word pairs). No float64 arithmetic is involved: every value is an integer below 2^24."""
    tmp = torch.empty(self.shape, dtype=torch.int32, device="trn")
    if _run(tmp, Draw.RANDINT, from_, span, generator) is NotImplemented:
        return NotImplemented
    if self.numel() == 0:
        return self
    dst = self if self.is_contiguous() else torch.empty(self.shape, dtype=torch.float64, device="trn")
    words = U.view(dst, (dst.numel(),), (1,), dst.storage_offset()).view(torch.int32)
    for v, base in flat_views(tmp):
        r, c = v.shape
        rs = v.stride(0) * 2
        off = words.storage_offset() + 2 * base
        int_to_f64_words(v, U.view(words, (r, c), (rs, 2), off), U.view(words, (r, c), (rs, 2), off + 1))
    if dst is not self:
        self.copy_(dst)
    return self


def _random_uint(self: torch.Tensor, from_: int, to: int | None, generator: Any) -> Any:
    """uint16/32/64 draws in ``[from, to)``: made as int32 (uint16) or int64, then converted (every value fits)."""
    top = _UINT_TOPS[self.dtype]
    if to is None and top is None:
        return decline("uint64 random_ without an upper bound: torch raises")
    to = top if to is None else to
    if not (0 <= from_ < to <= (top or 2**63)) or not U.is_trn(self):
        return decline("bounds outside the dtype: torch raises")
    tmp = torch.empty(self.shape, dtype=torch.int32 if self.dtype == torch.uint16 else torch.int64, device="trn")
    r = random_from(tmp, from_, to, generator=generator)
    return r if r is NotImplemented else self.copy_(tmp)


@lowering("aten::random_.from", dtypes=(*_INT_LIMITS, *_UINT_TOPS, torch.bool))
def random_from(self: torch.Tensor, from_: int, to: int | None = None, *, generator: Any = None) -> Any:
    """``self.random_(from, to)``: integers uniform in ``[from, to)`` (``to`` None: up to the dtype's maximum, or
    2^mantissa_bits for floating dtypes, inclusive, as torch). Ranges wider than 2^24 values go through 16-bit
    limbs (int32, float32 within +-2^24, int64 inside int32's range or the full one)."""
    if self.dtype in _UINT_TOPS:
        return _random_uint(self, from_, to, generator)
    if to is None:
        to = 2 if self.dtype == torch.bool else _INT_LIMITS[self.dtype][1]
        if from_ >= to:
            return decline("from at or past the dtype's maximum: torch raises")
    if self.dtype == torch.bool:  # draws of 0/1 made as uint8, then converted (make_tensor builds bools so)
        if not (0 <= from_ < to <= 2) or not U.is_trn(self):
            return decline("bool draws outside [0, 2) or a tensor not on trn")
        tmp = torch.empty(self.shape, dtype=torch.uint8, device="trn")
        if random_from(tmp, from_, to, generator=generator) is NotImplemented:
            return NotImplemented
        return self.copy_(tmp)
    lo, hi = _INT_LIMITS[self.dtype]
    if lo <= from_ < to <= hi and (to - from_ > 1 << 24 or abs(from_) > 1 << 24) \
            and self.dtype in (torch.int32, torch.int64):
        from stdlib_kernels.tensor.random_wide import random_wide

        return random_wide(self, from_, to, generator)
    if lo <= from_ < to <= hi and to - from_ > 1 << 24 and self.dtype == torch.float32 and U.is_trn(self):
        ints = torch.empty(self.shape, dtype=torch.int32, device="trn")  # every value within +-2^24: exact in fp32
        from stdlib_kernels.tensor.random_wide import random_wide

        r = random_wide(ints, from_, to, generator)
        return r if r is NotImplemented else self.copy_(ints)
    if self.dtype in FLOATS and from_ < to and not (lo <= from_ and to <= hi) and U.is_trn(self) \
            and torch.finfo(self.dtype).min <= from_ and to - 1 <= torch.finfo(self.dtype).max:  # past exact ints
        from stdlib_kernels.tensor.random_wide import random_huge_float

        return random_huge_float(self, from_, to, generator)
    if not (lo <= from_ < to <= hi) or to - from_ > 1 << 24 or abs(from_) > 1 << 24:
        return decline("range beyond the dtype or wider than 2^24")
    if self.dtype == torch.float64:
        if max(abs(from_), abs(to - 1)) >= 1 << 24 or not U.is_trn(self):
            return decline("float64 draws of magnitude 2^24 or more")
        return _random_f64(self, from_, to - from_, generator)
    return _run(self, Draw.RANDINT, from_, to - from_, generator)


@lowering("aten::random_.to", dtypes=(*_INT_LIMITS, *_UINT_TOPS, torch.bool))
def random_to(self: torch.Tensor, to: int, *, generator: Any = None) -> Any:
    """``self.random_(to)``: integers uniform in ``[0, to)``."""
    return random_from(self, 0, to, generator=generator)


@lowering("aten::random_", dtypes=(*_INT_LIMITS, torch.bool))
def random_default(self: torch.Tensor, *, generator: Any = None) -> Any:
    """``self.random_()``: integers uniform over torch's default range, ``[0, 2^mantissa_bits]`` for floating
    dtypes and ``[0, max]`` for integer ones (bool: 0 or 1). Ranges wider than the draw kernel's 2^24 values
    (int32, int64, float32) come from 16-bit limbs (:mod:`stdlib_kernels.tensor.random_wide`); float64 declines."""
    if self.dtype == torch.bool:
        return random_from(self, 0, 2, generator=generator)
    hi = _INT_LIMITS[self.dtype][1]
    return random_from(self, 0, hi, generator=generator)  # [0, hi): hi is max + 1 (2^m + 1 for floats)


@lowering("aten::native_dropout", dtypes=FLOATS)
def native_dropout(input: torch.Tensor, p: float, train: bool | None = None) -> Any:
    """``(output, mask)``: ``mask = u >= p`` (bool), ``output = input * mask / (1 - p)`` in one kernel."""
    if not U.is_trn(input) or not 0.0 <= p <= 1.0:
        return decline("input not on trn or invalid p")
    if train is False:
        return input.clone(), torch.ones(input.shape, dtype=torch.bool, device="trn")
    x = input if input.is_contiguous() else input.contiguous()
    out = torch.empty(input.shape, dtype=input.dtype, device="trn")
    mask = torch.empty(input.shape, dtype=torch.bool, device="trn")
    scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0
    r = _run(out, Draw.DROPOUT, p, scale, None, x=x, out2=mask)
    if r is NotImplemented:
        return r
    return out, mask


_INT_GRADS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@lowering("aten::native_dropout_backward", dtypes=FLOATS + _INT_GRADS + (torch.bool,))
def native_dropout_backward(grad_output: torch.Tensor, mask: torch.Tensor, scale: float) -> Any:
    """``grad_output * mask * scale`` (an integer gradient: the same two native products, float32 as torch's)."""
    if U.is_trn(grad_output) and U.is_trn(mask) and grad_output.dtype in _INT_GRADS and mask.dtype == torch.bool \
            and mask.shape == grad_output.shape:
        return torch.mul(torch.mul(grad_output, mask), scale)
    if not (U.is_trn(grad_output) and U.is_trn(mask)) or mask.dtype != torch.bool \
            or grad_output.dtype not in FLOATS or mask.shape != grad_output.shape:
        return decline("mask or grad of another dtype, shape or device")
    g = grad_output if grad_output.is_contiguous() else grad_output.contiguous()
    mk = mask if mask.is_contiguous() else mask.contiguous()
    out = torch.empty(g.shape, dtype=g.dtype, device="trn")
    if out.numel() == 0:
        return out
    s = U.scalar_tensor(float(scale), torch.float32)
    for (gv, _), (mv, _), (ov, _) in zip(flat_views(g), flat_views(mk), flat_views(out)):
        dropout_bwd(gv, mv, s, ov)
    return out


def _normal_tensor(mean: Any, std: Any, generator: Any, out: torch.Tensor | None) -> Any:
    """``mean + std * z`` with tensor mean and/or std: standard normals, then the pointwise kernels."""
    ts = [t for t in (mean, std) if isinstance(t, torch.Tensor)]
    if not all(U.is_trn(t) and t.dtype in FLOATS for t in ts):
        return decline("mean/std not floating trn tensors")
    if isinstance(std, torch.Tensor):
        if std.numel() and float(std.amin()) < 0:
            return decline("negative std: torch raises")
    elif std < 0:
        return decline("negative std: torch raises")
    shape = torch.broadcast_shapes(*[t.shape for t in ts])
    dtype = mean.dtype if isinstance(mean, torch.Tensor) else std.dtype
    if out is None:
        out = torch.empty(shape, dtype=dtype, device="trn")
    elif not (U.is_trn(out) and out.dtype == dtype and tuple(out.shape) == tuple(shape)):
        return decline("out= of another device, dtype or shape")
    if _run(out, Draw.NORMAL, 0.0, 1.0, generator) is NotImplemented:
        return NotImplemented
    if out.numel():
        out.mul_(std).add_(mean)
    return out


@lowering("aten::normal.Tensor_float", dtypes=FLOATS)
def normal_tensor_float(mean: torch.Tensor, std: float = 1.0, *, generator: Any = None,
                        out: torch.Tensor | None = None) -> Any:
    """``torch.normal(mean_tensor, std)``."""
    return _normal_tensor(mean, std, generator, out)


@lowering("aten::normal.float_Tensor", dtypes=FLOATS)
def normal_float_tensor(mean: float, std: torch.Tensor, *, generator: Any = None,
                        out: torch.Tensor | None = None) -> Any:
    """``torch.normal(mean, std_tensor)``."""
    return _normal_tensor(mean, std, generator, out)


@lowering("aten::normal.Tensor_Tensor", dtypes=FLOATS)
def normal_tensor_tensor(mean: torch.Tensor, std: torch.Tensor, *, generator: Any = None,
                         out: torch.Tensor | None = None) -> Any:
    """``torch.normal(mean_tensor, std_tensor)`` (broadcast)."""
    return _normal_tensor(mean, std, generator, out)


#: randperm's out dtypes and the largest ``n`` each holds exactly (torch's own limits).
_PERM_MAX = {torch.int64: 2**63, torch.int32: 2**31, torch.int16: 2**15, torch.int8: 2**7, torch.uint8: 2**8,
             torch.float32: 2**24 + 1, torch.float16: 2**11 + 1, torch.bfloat16: 2**8 + 1}


@lowering("aten::randperm.generator_out", dtypes=tuple(_PERM_MAX))
def randperm_out(n: int, *, generator: Any = None, out: torch.Tensor) -> Any:
    """``torch.randperm(n)``: argsort of random keys, in any dtype holding ``n`` exactly.

    Up to the sort kernel's row (:data:`~stdlib_kernels.reduction.sort.MAX_SORT`) the keys are uniform 24-bit
    floats sorted on chip; longer permutations sort full-range int32 keys (the sort family's merge and radix
    passes). A stable sort keeps tied keys in index order: a bias of order ``n / 2^24`` (``n / 2^32``).
    """
    from stdlib_kernels.reduction import sort
    from stdlib_kernels.tensor import movement

    if not U.is_trn(out) or out.dtype not in _PERM_MAX or not 0 <= n <= _PERM_MAX[out.dtype]:
        return decline("more elements than the out dtype holds (torch raises), or out= not on trn")
    if tuple(out.shape) != (n,):
        out.resize_((n,))
    if n == 0:
        return out
    if n <= sort.MAX_SORT:
        keys = torch.empty((n,), dtype=torch.float32, device="trn")
        if _run(keys, Draw.UNIFORM, 0.0, 1.0, generator) is NotImplemented:
            return NotImplemented
    else:
        keys = torch.empty((n,), dtype=torch.int32, device="trn").random_(-2**31, 2**31, generator=generator)
    _, idx = torch.sort(keys, stable=True)
    if out.dtype == torch.int64:
        movement.move(out, idx)
    else:
        out.copy_(idx)  # exact: every position below the dtype's limit
    return out


# --- rrelu ---------------------------------------------------------------------------------------------------
def _rrelu(self: Any, noise: Any, lower: Any, upper: Any, training: bool, generator: Any,
           out: torch.Tensor | None) -> Any:
    """``rrelu_with_noise`` into ``out`` (a new tensor for None): training draws ``noise`` (``U(lower, upper)``
    where ``self <= 0``, else 1) and returns ``self * noise`` in one kernel; eval is ``leaky_relu`` with the
    mean slope (``noise`` untouched), as torch's CPU kernel."""
    lo, hi = U.scalar_value(lower), U.scalar_value(upper)
    if not (U.is_trn(self) and U.is_trn(noise)) or self.dtype not in FLOATS or noise.dtype != self.dtype \
            or not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)) \
            or tuple(noise.shape) != tuple(self.shape):
        return decline("invalid arguments: torch raises")
    lo, hi = float(lo), float(hi)
    if out is not None and (not U.is_trn(out) or out.dtype != self.dtype):
        return decline("out= of another device or dtype")
    if not training:
        slope = (lo + hi) / 2
        if out is None:
            return torch.nn.functional.leaky_relu(self, slope)
        return torch.ops.aten.leaky_relu.out(self, slope, out=out)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi) or not noise.is_contiguous() \
            or U.overlaps(noise, self) or (out is not None and U.overlaps(noise, out)):
        return decline("non-finite bounds, non-contiguous noise or overlapping tensors")
    if out is None:
        out = torch.empty(self.shape, dtype=self.dtype, device="trn")
    elif tuple(out.shape) != tuple(self.shape):
        out.resize_(self.shape)
    if out is not self and U.overlaps(out, self):
        x = self.clone()  # a partly aliased out= must not be read after it is written
    else:
        x = self.contiguous()  # in place on a contiguous self: each element is read before it is written
    return _run(out, Draw.RRELU, lo, hi, generator, x=x, out2=noise)


@lowering("aten::rrelu_with_noise", dtypes=FLOATS)
def rrelu_with_noise(self: torch.Tensor, noise: torch.Tensor, lower: Any = 0.125, upper: Any = 1.0 / 3.0,
                     training: bool = False, generator: Any = None) -> Any:
    """``F.rrelu(x, lower, upper, training)``: randomized leaky ReLU (writes ``noise`` for the backward)."""
    return _rrelu(self, noise, lower, upper, training, generator, None)


@lowering("aten::rrelu_with_noise_", dtypes=FLOATS)
def rrelu_with_noise_(self: torch.Tensor, noise: torch.Tensor, lower: Any = 0.125, upper: Any = 1.0 / 3.0,
                      training: bool = False, generator: Any = None) -> Any:
    """``F.rrelu(x, ..., inplace=True)``."""
    return _rrelu(self, noise, lower, upper, training, generator, self)


@lowering("aten::rrelu_with_noise.out", dtypes=FLOATS)
def rrelu_with_noise_out(self: torch.Tensor, noise: torch.Tensor, lower: Any = 0.125, upper: Any = 1.0 / 3.0,
                         training: bool = False, generator: Any = None, *, out: torch.Tensor) -> Any:
    """``rrelu_with_noise(..., out=out)``."""
    return _rrelu(self, noise, lower, upper, training, generator, out)


# --- multinomial ---------------------------------------------------------------------------------------------
@trn.kernel
def multinomial_rep(cdf, u, out, by_cat):
    """Inverse-CDF draws with replacement: ``out[r, s] = #{j < C - 1 : cdf[r, j] < u[r, s] * cdf[r, C - 1]}``.

    ``cdf [R, C]``: running sums of the probabilities (fp32, ``C >= 2``); ``u [R, S]``: uniforms in (0, 1);
    ``out [R, S]`` int64 (stored from int32 tiles). The last bucket is never counted, so the result is at most
    ``C - 1`` (torch forces the last normalised running sum to 1), and a zero-probability category (an equal
    running sum) is never drawn. ``by_cat``: samples on the free axis, one compare per category (few
    categories); else categories on the free axis, one masked count per sample (few samples).
    """
    r_dim, c_dim = cdf.shape
    s_dim = u.shape[1]
    p = min(128, r_dim)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        rm = rows < r_dim
        total = tl.load(cdf[rows, one + (c_dim - 1)], mask=rm)
        if by_cat:
            f = min(s_dim, 512)
            for j in tl.affine_range(tl.cdiv(s_dim, f)):
                cols = j * f + tl.arange(f)[None, :]
                m = rm & (cols < s_dim)
                ut = tl.load(u[rows, cols], mask=m) * total
                cnt = tl.zeros((p, f), tl.float32)
                for k in tl.sequential_range(c_dim - 1):
                    ck = tl.load(cdf[rows, one + k], mask=rm)
                    cnt[...] = cnt + (ck < ut).astype(tl.float32)
                tl.store(out[rows, cols], cnt.astype(tl.int32), mask=m)
        else:
            f = min(c_dim - 1, U.FREE_CHUNK)
            for s in tl.sequential_range(s_dim):
                ut = tl.load(u[rows, one + s], mask=rm) * total
                cnt = tl.zeros((p, 1), tl.float32)
                for j in tl.sequential_range(tl.cdiv(c_dim - 1, f)):
                    cols = j * f + tl.arange(f)[None, :]
                    t = tl.load(cdf[rows, cols], mask=rm & (cols < c_dim - 1), other=math.inf)
                    cnt[...] = cnt + tl.sum((t < ut).astype(tl.float32), axis=1, keepdims=True)
                tl.store(out[rows, one + s], cnt.astype(tl.int32), mask=rm)


def _multinomial(self: Any, n: int, replacement: bool, generator: Any, out: torch.Tensor | None) -> Any:
    """``torch.multinomial`` as torch's CPU computes it: without replacement (or one draw) the Gumbel trick
    ``topk(p / q)``, ``q ~ Exp(1)`` (native exponential_, div, argmax/topk); with replacement inverse-CDF
    draws (native cumsum, then :func:`multinomial_rep`). Invalid arguments are declined (torch raises)."""
    if not U.is_trn(self) or self.dtype not in FLOATS or self.dim() not in (1, 2) or not isinstance(n, int):
        return decline("probabilities not a 1-D/2-D floating trn tensor")
    c = self.shape[-1]
    if n <= 0 or c == 0 or (not replacement and n > c) or c > 1 << 24:
        return decline("invalid sample count or more than 2^24 categories")
    if out is not None and (not U.is_trn(out) or out.dtype != torch.int64):
        return decline("out= not int64 on trn")
    if self.numel() and not bool(((self.amin() >= 0) & (self.amax() < math.inf)
                                  & (self.sum(-1) > 0).all()).item()):
        return decline("negative, inf or NaN probabilities or a zero row: torch raises")
    shape = (*self.shape[:-1], n)
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device="trn")
    elif tuple(out.shape) != shape:
        out.resize_(shape)
    if out.numel() == 0:
        return out
    if not replacement or n == 1:
        # q > 0 always (an open-interval uniform): a q of 0 would turn a zero probability into 0/0 = NaN, which
        # argmax/topk would pick (torch's CPU has that risk at 2^-53 per element; 24 random bits would make it real)
        q = torch.empty(self.shape, dtype=self.dtype, device="trn")
        if _run(q, Draw.EXP_OPEN, 1.0, 0.0, generator) is NotImplemented:
            return NotImplemented
        q = torch.div(self, q)
        res = q.argmax(-1, keepdim=True) if n == 1 else torch.topk(q, n).indices
        out.copy_(res)
        return out
    rows = self.numel() // c
    o2 = out if out.is_contiguous() else torch.empty(shape, dtype=torch.int64, device="trn")
    if c == 1:
        o2.zero_()
    else:
        cdf = torch.cumsum(self.reshape(rows, c), -1, dtype=torch.float32)
        u = torch.empty((rows, n), dtype=torch.float32, device="trn")
        if _run(u, Draw.UOPEN, 0.0, 1.0, generator) is NotImplemented:
            return NotImplemented
        multinomial_rep(cdf, u, o2.view(rows, n), c - 1 <= n)
    if o2 is not out:
        out.copy_(o2)
    return out


@lowering("aten::multinomial", dtypes=FLOATS + (torch.int64,))
def multinomial(self: torch.Tensor, num_samples: int, replacement: bool = False, *, generator: Any = None,
                out: torch.Tensor | None = None) -> Any:
    """``torch.multinomial(probs, num_samples, replacement)``: int64 category indices per row of ``probs``."""
    return _multinomial(self, num_samples, replacement, generator, out)


# RNG-driven pooling lives in its own module (this one stays short); importing it registers its lowerings.
from stdlib_kernels.nn import random_pool  # noqa: E402, F401
