"""Op coverage of the ``trn`` device: PyTorch's OpInfo samples run on ``trn`` and on the CPU, compared.

For every OpInfo of ``op_db`` (optionally filtered), each sample input runs forward (and backward,
for float32 ops that support autograd) once on the CPU and once on ``trn`` (a copy of the sample
with the same strides and storage offsets), with the same seed, and the results are compared.

An op is **native** when every comparison passed and no CPU fallback ran; **fallback** when every
comparison passed but some part ran through the CPU fallback; **fail** when any comparison failed
(or ``trn`` raised where the CPU did not); **skipped** when nothing could be compared (the reason
says why). ``float32`` decides the headline numbers; ``bfloat16`` is reported alongside.

Example:
    >>> from trnlang.device.coverage import run_coverage
    >>> report = run_coverage(ops=["add", "sin"], progress=False)   # doctest: +SKIP
    >>> report["compared"], report["fail"]                           # doctest: +SKIP
    (2, 0)
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

from trnlang import config as _config

__all__ = ["run_coverage", "op_names", "summary_table", "markdown_report", "TOLERANCES"]

#: (rtol, atol) per dtype. Native kernels and composite ops differ from the CPU's fused kernels by
#: rounding order (fp32 FMA, blocked matmul/sum accumulation); the CPU fallback is bit-identical.
#: torch's own ``test_compare_cpu`` allows 1e-3 for float32; this is 10x tighter.
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (1e-3, 1e-3),
              torch.float64: (1e-7, 1e-7)}

#: Sample arguments that torch requires on the CPU (positional index in ``sample.args``).
_CPU_ARGS = {"tensor_split": (0,)}

#: OpInfos whose outputs are uninitialised memory: compare metadata only.
_UNINITIALISED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}

#: OpInfos drawing from the trn device's own counter-based generator (stdlib_kernels/tensor/random.py), whose numbers
#: are not the CPU generator's: compare metadata only (tests/device/test_random.py tests the distributions).
_RANDOM = {"bernoulli", "uniform", "normal", "normal.in_place", "normal.number_mean", "exponential", "rand_like",
           "randn_like", "randint", "randint_like", "nn.functional.dropout", "nn.functional.dropout2d",
           "nn.functional.dropout3d", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
           "log_normal", "cauchy", "geometric", "randn", "rand", "multinomial", "svd_lowrank", "pca_lowrank",
           "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d", "nn.functional.rrelu"}

#: OpInfos that cannot be compared on a second device, with the reason.
_SKIP = {
    "to_sparse": "sparse layouts do not live on trn",
    "sparse.sampled_addmm": "sparse layouts do not live on trn",
    "sparse.mm": "sparse layouts do not live on trn",
    "pin_memory": "pinned host memory is a CUDA concept",
}

_SEED = 1234


class _Skip(Exception):
    """This sample cannot be compared (the reason is the message)."""


@dataclass
class _Result:
    name: str
    status: str = "skipped"
    reason: str = ""
    compared: int = 0
    failed: int = 0
    fallbacks: set[str] = field(default_factory=set)
    reasons: dict[str, set[str]] = field(default_factory=dict)  # fallback op -> why it left the device
    decomposed: set[str] = field(default_factory=set)
    error: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "samples_compared": self.compared,
                "samples_failed": self.failed, "fallback_ops": sorted(self.fallbacks),
                "fallback_reasons": {k: sorted(v) for k, v in sorted(self.reasons.items())},
                "decomposed_ops": sorted(self.decomposed), "error": self.error,
                "seconds": round(self.seconds, 3)}


def op_names(op: Any) -> str:
    """Display name of an OpInfo (``name.variant`` when it has a variant)."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _op_db() -> list[Any]:
    from trnlang.device import register

    register()  # before torch.testing._internal.common_utils computes its device lists
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def _clone_to_trn(x: torch.Tensor) -> torch.Tensor:
    """A ``trn`` copy of ``x`` with the same sizes, strides and storage offset (noncontiguous samples stay so)."""
    if x.layout != torch.strided:
        raise _Skip(f"{x.layout} sample tensor")
    if x.is_conj() or x.is_neg():
        x = x.resolve_conj().resolve_neg()
    x = x.detach()
    st = x.untyped_storage()
    nbytes = st.nbytes()
    item = x.element_size()
    if nbytes % item:
        return x.to("trn")
    src = torch.empty((0,), dtype=x.dtype).set_(st, 0, (nbytes // item,), (1,))
    base = src.to("trn")
    return torch.as_strided(base, x.shape, x.stride(), x.storage_offset()).detach()


def _to_trn(v: Any, memo: dict[int, Any], key: str | None = None) -> Any:
    if isinstance(v, torch.Tensor):
        hit = memo.get(id(v))
        if hit is None:
            hit = _clone_to_trn(v)
            if v.requires_grad:
                hit.requires_grad_(True)
            memo[id(v)] = hit
        return hit
    if key == "device" and (isinstance(v, torch.device) or isinstance(v, str)):
        return torch.device("trn") if torch.device(v).type == "cpu" else v
    if isinstance(v, list):
        return [_to_trn(x, memo) for x in v]
    if isinstance(v, tuple):
        return tuple(_to_trn(x, memo) for x in v)
    if isinstance(v, dict):
        return {k: _to_trn(x, memo, k) for k, x in v.items()}
    return v


def _flatten(v: Any, out: list[Any]) -> list[Any]:
    if isinstance(v, (list, tuple)):
        for x in v:
            _flatten(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            _flatten(x, out)
    else:
        out.append(v)
    return out


def _compare(actual: Any, expected: Any, dtype: torch.dtype, metadata_only: bool,
             tol: tuple[float, float] | None = None) -> None:
    a, e = _flatten(actual, []), _flatten(expected, [])
    if len(a) != len(e):
        raise AssertionError(f"{len(a)} outputs on trn, {len(e)} on the CPU")
    rtol, atol = tol or TOLERANCES.get(dtype, (1e-5, 1e-5))
    for x, y in zip(a, e):
        if isinstance(y, torch.Tensor):
            if not isinstance(x, torch.Tensor):
                raise AssertionError(f"trn returned {type(x).__name__}, the CPU a tensor")
            if x.device.type != y.device.type and not (x.device.type == "trn" and y.device.type == "cpu"):
                raise AssertionError(f"output on {x.device}, expected {y.device}")
            xc = x.detach().cpu() if x.device.type == "trn" else x.detach()
            if metadata_only:
                if xc.shape != y.shape or xc.dtype != y.dtype:
                    raise AssertionError(f"metadata {xc.shape}/{xc.dtype} vs {y.shape}/{y.dtype}")
                continue
            torch.testing.assert_close(xc, y.detach(), rtol=rtol, atol=atol, equal_nan=True, check_device=False,
                                       check_stride=False)
        elif isinstance(y, float) and isinstance(x, float):
            if not (x == y or abs(x - y) <= atol + rtol * abs(y) or (x != x and y != y)):
                raise AssertionError(f"{x} != {y}")
        elif x != y and not (isinstance(x, torch.dtype) or isinstance(x, torch.device)):
            raise AssertionError(f"{x!r} != {y!r}")


#: OpInfos whose index outputs are not unique when the input has ties (torch documents sort without
#: ``stable=True`` and topk as free to return any tied element): {name: (dim, stable, sorted) of a sample}.
#: torch's own tests accept any valid order (test_sort_and_select checks ``input.gather(dim, indices) ==
#: values``, not the indices); so does this harness: see :func:`_tie_order`.
_TIE_FREE: dict[str, Callable[[Any], tuple[int, bool, bool]]] = {
    "topk": lambda s: (_arg(s, 1, "dim", -1), False, bool(_arg(s, 3, "sorted", True))),
    "sort": lambda s: (_arg(s, 0, "dim", -1), bool(s.kwargs.get("stable", False)), True),
    "argsort": lambda s: (_arg(s, 0, "dim", -1), bool(s.kwargs.get("stable", False)), True),
}


def _arg(sample: Any, i: int, name: str, default: Any) -> Any:
    """Positional argument ``i`` (after the input) of a sample, else its keyword ``name``, else ``default``."""
    if i < len(sample.args):
        return sample.args[i]
    return sample.kwargs.get(name, default)


def _tie_order(op_name: str, sample: Any, actual: Any, expected: Any) -> Any:
    """``actual`` with its indices (and, for unsorted topk, its value order) replaced by the CPU's when they
    are another valid answer: the indices are distinct within each slice and select, from the input
    (``gather``), values that match the CPU's in order (sorted outputs) or as a multiset (unsorted topk).
    Returns ``actual`` unchanged otherwise (the usual comparison then reports the difference); a stable sort
    and inputs that require grad (whose gradients follow the indices) are never relaxed.
    """
    dim, stable, is_sorted = _TIE_FREE[op_name](sample)
    x = sample.input
    if stable or not isinstance(x, torch.Tensor) or x.requires_grad or x.dim() == 0:
        return actual

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.shape == b.shape and torch.equal(a.isnan(), b.isnan()) and bool((a == b)[~a.isnan()].all())

    try:
        pair = op_name != "argsort"
        idx_t = (actual[1] if pair else actual).detach().cpu()
        idx_c = expected[1] if pair else expected
        if idx_t.shape != idx_c.shape or idx_t.dtype != idx_c.dtype:
            return actual
        if idx_t.shape[dim] > 1 and bool((idx_t.sort(dim).values.diff(dim=dim) == 0).any()):
            return actual  # an index repeated within a slice
        val_t, val_c = x.gather(dim, idx_t), x.gather(dim, idx_c)
        if pair and not same(val_t, actual[0].detach().cpu()):
            return actual  # the indices do not point at the values returned
        if is_sorted and not same(val_t, val_c):
            return actual
        if not is_sorted and not same(val_t.sort(dim).values, val_c.sort(dim).values):
            return actual
        if not pair:
            return expected.to(actual.device)
        vals = actual[0] if is_sorted else expected[0].to(actual[0].device)
        return type(actual)((vals, idx_c.to(actual[1].device)))
    except (RuntimeError, IndexError, TypeError):
        return actual


def _mode_occurrence(sample: Any, actual: Any, expected: Any) -> Any:
    """``mode``'s indices replaced by the CPU's where they point at another occurrence of the CPU's mode values
    (torch promises "an index location of each mode value"; the CPU's depends on an unstable sort for rows longer
    than 16, CUDA's differs); the values must be the CPU's, and inputs that require grad are never relaxed."""
    x = sample.input
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.requires_grad:
        return actual
    dim, keepdim = _arg(sample, 0, "dim", -1), bool(_arg(sample, 1, "keepdim", False))
    try:
        vals, idx = actual[0].detach().cpu(), actual[1].detach().cpu()
        if not torch.equal(vals, expected[0]) or idx.shape != expected[1].shape:
            return actual
        ix, vx = (idx, vals) if keepdim else (idx.unsqueeze(dim), vals.unsqueeze(dim))
        if not torch.equal(x.gather(dim, ix), vx):
            return actual
        return type(actual)((actual[0], expected[1].to(actual[1].device)))
    except (RuntimeError, IndexError, TypeError):
        return actual


def _no_less_accurate(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, rtol: float, atol: float, what: str) -> None:
    """Element by element, trn's ``x`` is at most the CPU's ``y`` error from the float64 ``z`` plus the tolerance
    (or equal to ``y``, NaN included); ``AssertionError(what ...)`` otherwise."""
    xd, yd, zd = x.detach().cpu().double(), y.detach().double(), z.detach().double()
    ok = ((xd - zd).abs() <= (yd - zd).abs() + atol + rtol * zd.abs()) | (xd == yd) | (xd.isnan() & yd.isnan())
    if not bool(ok.all()):
        worst = float(((xd - zd).abs() - (yd - zd).abs()).nan_to_num(nan=float("inf")).max())
        raise AssertionError(f"{what} (by up to {worst:.3g})")


def _compare_reference(op: Any, c_args: Any, proc: Any, actual: Any, expected: Any, dtype: torch.dtype,
                       tol: tuple[float, float] | None = None) -> None:
    """A bf16/fp16/fp32 sample that differs from the CPU beyond tolerance still passes if, element by element,
    its error against a float64 CPU reference is at most the CPU's own error plus the tolerance.

    The CPU's bf16 kernels round some intermediates to bf16 (e.g. between the passes of a separable
    interpolation) where a trn kernel keeps fp32, and a float32 algorithm that amplifies rounding (matrix_exp's
    squarings) makes the CPU's own result differ from the exact one by more than the tolerance: a result as
    accurate as the CPU's is not a failure. Raises the ``AssertionError`` otherwise.
    """
    def up(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.dtype == dtype:
            return v.detach().double()
        if isinstance(v, (list, tuple)):
            return type(v)(up(x) for x in v)
        if isinstance(v, dict):
            return {k: up(x) for k, x in v.items()}
        return v

    rtol, atol = tol or TOLERANCES[dtype]
    try:
        ref = op(up(c_args[0]), *up(c_args[1]), **up(c_args[2]))
    except Exception:
        raise AssertionError("differs from the CPU beyond tolerance (no float64 reference)") from None
    a, e, r = _flatten(proc(actual), []), _flatten(proc(expected), []), _flatten(proc(ref), [])
    if not (len(a) == len(e) == len(r)):
        raise AssertionError("differs from the CPU beyond tolerance")
    for x, y, z in zip(a, e, r):
        if not isinstance(y, torch.Tensor) or not y.is_floating_point():
            continue
        _no_less_accurate(x, y, z, rtol, atol, "differs from the CPU beyond tolerance and is less accurate than "
                          "the CPU against a float64 reference")


#: The OpInfo tests whose declared tolerances are for the comparison this harness makes: another backend's kernels
#: (Inductor's generated code) against eager CPU results.
_DECLARED_TOL_TESTS = {("TestInductorOpInfo", "test_comprehensive")}


def _tolerance(op: Any, dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol): :data:`TOLERANCES`, widened to what the OpInfo itself declares (``toleranceOverride``) for
    comparing Inductor's kernels with eager CPU results in this dtype (e.g. a fused linear + cross-entropy in
    float16, whose chained half-precision roundings torch allows 1e-2/3e-2)."""
    rtol, atol = TOLERANCES.get(dtype, (1e-5, 1e-5))
    for info in getattr(op, "decorators", ()) or ():
        if (getattr(info, "cls_name", None), getattr(info, "test_name", None)) not in _DECLARED_TOL_TESTS \
                or getattr(info, "device_type", None) not in (None, "cpu") \
                or (getattr(info, "dtypes", None) and dtype not in info.dtypes):
            continue
        for dec in getattr(info, "decorators", ()):
            t = getattr(dec, "d", {}).get(dtype) if isinstance(getattr(dec, "d", None), dict) else None
            if t is not None:
                rtol, atol = max(rtol, float(t.rtol)), max(atol, float(t.atol))
    return rtol, atol


def _grad_inputs(sample_args: Any) -> list[torch.Tensor]:
    return [t for t in _flatten(sample_args, []) if isinstance(t, torch.Tensor) and t.requires_grad]


def _run_sample(op: Any, sample: Any, dtype: torch.dtype, backward: bool) -> tuple[str, dict[str, set[str]], str]:
    """Compare one sample: ('pass'|'fail'|'skip', fallback op names, message)."""
    from trnlang.device import fallback

    memo: dict[int, Any] = {}
    for i in _CPU_ARGS.get(op.name, ()):
        if i < len(sample.args) and isinstance(sample.args[i], torch.Tensor):
            memo[id(sample.args[i])] = sample.args[i]  # stays on the CPU
    try:
        t_args = _to_trn((sample.input, sample.args, sample.kwargs), memo)
    except _Skip as e:
        return "skip", {}, str(e)
    c_args = (sample.input, sample.args, sample.kwargs)
    tol = _tolerance(op, dtype)
    torch.manual_seed(_SEED)
    try:
        expected = op(c_args[0], *c_args[1], **c_args[2])
    except Exception as e:  # the CPU rejects the sample: nothing to compare
        return "skip", {}, f"CPU raised {type(e).__name__}"
    before = fallback.fallback_reasons()
    torch.manual_seed(_SEED)
    # random ops draw from the device's own generator (its stream is not the CPU's): compare metadata
    # only; so do samples of other ops that ask for dropout (scaled_dot_product_attention's dropout_p)
    meta_only = (op.name in _UNINITIALISED or op.name in _RANDOM
                 or float(sample.kwargs.get("dropout_p", 0.0) or 0.0) > 0.0
                 or (op.name == "nn.functional.multi_head_attention_forward" and sample.kwargs.get("training")
                     and len(sample.args) > 9 and float(sample.args[9] or 0.0) > 0.0))
    try:
        actual = op(t_args[0], *t_args[1], **t_args[2])
        proc = sample.output_process_fn_grad  # e.g. sign-normalises singular vectors, as torch's tests do
        if op.name in _TIE_FREE and not meta_only:
            actual = _tie_order(op.name, sample, actual, expected)
        elif op.name == "mode":
            actual = _mode_occurrence(sample, actual, expected)
        try:
            _compare(proc(actual), proc(expected), dtype, meta_only, tol)
        except AssertionError:
            if meta_only or dtype not in (torch.bfloat16, torch.float16, torch.float32):
                raise
            _compare_reference(op, c_args, proc, actual, expected, dtype, tol)
        if backward and not meta_only:
            _compare_backward(op, sample, c_args, t_args, expected, actual, dtype, tol)
    except _Skip as e:
        return "skip", {}, str(e)
    except Exception as e:
        return "fail", _reason_diff(before, fallback.fallback_reasons()), \
            f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return "pass", _reason_diff(before, fallback.fallback_reasons()), ""


def _compare_backward(op: Any, sample: Any, c_args: Any, t_args: Any, expected: Any, actual: Any,
                      dtype: torch.dtype, tol: tuple[float, float] | None = None) -> None:
    c_in, t_in = _grad_inputs(c_args), _grad_inputs(t_args)
    if not c_in:
        return
    proc = sample.output_process_fn_grad
    c_outs = [t for t in _flatten(proc(expected), []) if isinstance(t, torch.Tensor) and t.requires_grad
              and (t.is_floating_point() or t.is_complex())]
    t_outs = [t for t in _flatten(proc(actual), []) if isinstance(t, torch.Tensor) and t.requires_grad
              and (t.is_floating_point() or t.is_complex())]
    if not c_outs:
        return
    if len(c_outs) != len(t_outs):
        raise AssertionError(f"{len(t_outs)} differentiable outputs on trn, {len(c_outs)} on the CPU")
    g = torch.Generator().manual_seed(_SEED)
    grads = [torch.randn(t.shape, dtype=t.dtype, generator=g) for t in c_outs]
    try:
        c_grads = torch.autograd.grad(c_outs, c_in, grads, allow_unused=True)
    except Exception as e:
        raise _Skip(f"CPU backward raised {type(e).__name__}") from None
    t_grads = torch.autograd.grad(t_outs, t_in, [x.to(t.device) for x, t in zip(grads, t_outs)], allow_unused=True)
    for a, b in zip(t_grads, c_grads):
        if (a is None) != (b is None):
            raise AssertionError("a gradient is missing on one device")
    try:
        _compare([a for a in t_grads if a is not None], [b for b in c_grads if b is not None], dtype, False, tol)
    except AssertionError:
        if dtype not in (torch.bfloat16, torch.float16):
            raise
        _compare_grad_reference(op, c_args, proc, t_grads, c_grads, grads, dtype, tol)


def _compare_grad_reference(op: Any, c_args: Any, proc: Any, t_grads: Any, c_grads: Any, grads: list[torch.Tensor],
                            dtype: torch.dtype, tol: tuple[float, float] | None = None) -> None:
    """The backward twin of :func:`_compare_reference`: bf16/fp16 gradients that differ from the CPU's beyond
    tolerance pass if, element by element, they are at least as close to float64 gradients (the same sample and
    output gradients, computed in float64 on the CPU) as the CPU's are, plus the tolerance. The CPU's half
    precision backward kernels accumulate in the half type (avg pooling's input gradient, for one); ours in fp32.
    """
    memo: dict[int, torch.Tensor] = {}

    def up(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.dtype == dtype:
            if id(v) not in memo:
                memo[id(v)] = v.detach().double().requires_grad_(v.requires_grad)
            return memo[id(v)]
        if isinstance(v, (list, tuple)):
            return type(v)(up(x) for x in v)
        if isinstance(v, dict):
            return {k: up(x) for k, x in v.items()}
        return v

    try:
        r_args = up(c_args)
        outs = [t for t in _flatten(proc(op(r_args[0], *r_args[1], **r_args[2])), [])
                if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())]
        r_in = _grad_inputs(r_args)
        r_grads = torch.autograd.grad(outs, r_in, [g.double() for g in grads], allow_unused=True)
    except Exception:
        raise AssertionError("gradients differ from the CPU beyond tolerance (no float64 reference)") from None
    rtol, atol = tol or TOLERANCES[dtype]
    for x, y, z in zip(t_grads, c_grads, r_grads):
        if x is None or z is None:
            continue
        _no_less_accurate(x, y, z, rtol, atol, "gradients differ from the CPU beyond tolerance and are less "
                          "accurate than the CPU's against float64 gradients")


def _diff(before: dict[str, int], after: dict[str, int]) -> set[str]:
    return {k for k, v in after.items() if v > before.get(k, 0)}


def _reason_diff(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    """The ops that fell back between two :func:`fallback.fallback_reasons` snapshots, with their reasons."""
    out: dict[str, set[str]] = {}
    for name, why in after.items():
        old = before.get(name, {})
        new = {r for r, n in why.items() if n > old.get(r, 0)}
        if new:
            out[name] = new
    return out


def _run_op(op: Any, dtype: torch.dtype, backward: bool, max_samples: int | None) -> _Result:
    res = _Result(op_names(op))
    t0 = time.perf_counter()
    try:
        if res.name in _SKIP or op.name in _SKIP:
            res.reason = _SKIP.get(res.name) or _SKIP[op.name]
            return res
        if not op.supports_dtype(dtype, "cpu"):
            res.reason = f"{str(dtype).replace('torch.', '')} not supported on the CPU"
            return res
        do_bwd = backward and op.supports_autograd and dtype.is_floating_point
        try:
            samples = op.sample_inputs("cpu", dtype, requires_grad=do_bwd)
            samples = list(samples if max_samples is None else _take(samples, max_samples))
        except Exception as e:
            res.reason = f"sample generation raised {type(e).__name__}"
            return res
        reasons = set()
        from trnlang.device import fallback

        dec_before = fallback.decomposition_stats()
        for s in samples:
            status, fb, msg = _run_sample(op, s, dtype, do_bwd)
            if status == "skip":
                reasons.add(msg)
                continue
            res.compared += 1
            res.fallbacks |= set(fb)
            for k, v in fb.items():
                res.reasons.setdefault(k, set()).update(v)
            if status == "fail":
                res.failed += 1
                res.error = res.error or msg
        res.decomposed = _diff(dec_before, fallback.decomposition_stats())
        if res.compared == 0:
            res.reason = "; ".join(sorted(reasons))[:200] or "no sample inputs"
        elif res.failed:
            res.status = "fail"
        else:
            res.status = "fallback_pass" if res.fallbacks else "native_pass"
        return res
    finally:
        res.seconds = time.perf_counter() - t0


def _take(it: Iterable[Any], n: int) -> Iterable[Any]:
    for i, x in enumerate(it):
        if i >= n:
            return
        yield x


def _progress(items: list[Any], enabled: bool) -> Any:
    if not enabled:
        return items
    try:
        from tqdm import tqdm

        return tqdm(items, desc="trn coverage", unit="op", file=sys.stderr, dynamic_ncols=True)
    except ImportError:
        return _SimpleProgress(items)


class _SimpleProgress:
    """A progress line on stderr when tqdm is not installed."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Any:
        n = len(self.items)
        for i, x in enumerate(self.items):
            sys.stderr.write(f"\rtrn coverage: {i + 1}/{n} ops")
            sys.stderr.flush()
            yield x
        sys.stderr.write("\n")

    def set_postfix_str(self, s: str) -> None:
        """Ignored (tqdm API)."""


def _select(ops: list[str] | None, limit: int | None) -> list[Any]:
    db = _op_db()
    if ops:
        want = set(ops)
        db = [o for o in db if o.name in want or op_names(o) in want]
    if limit is not None:
        db = db[:limit]
    return db


def run_coverage(ops: list[str] | None = None, limit: int | None = None, dtypes: Iterable[torch.dtype] = (
        torch.float32, torch.bfloat16), backward: bool = True, max_samples: int | None = None,
        progress: bool = True, on_op: Callable[[str, dict[str, Any]], None] | None = None,
        shard: tuple[int, int] | None = None) -> dict[str, Any]:
    """Run OpInfo samples on ``trn`` and the CPU and compare them.

    Args:
        ops: OpInfo names (``add``, ``nn.functional.relu``, ``linalg.norm.subgradients_at_zero``) to
            run; None for all of ``op_db``.
        limit: run only the first ``limit`` selected OpInfos.
        dtypes: dtypes to run; the first one (float32) decides the summary counts.
        backward: also compare gradients (float dtypes, ops that support autograd).
        max_samples: compare at most this many samples per op and dtype (None: all).
        progress: show a progress bar on stderr.
        on_op: called with (name, detail) after each op.
        shard: ``(i, n)``: run only the selected OpInfos whose position is ``i`` modulo ``n`` (the
            ``trn coverage --jobs`` workers; :func:`merge_reports` joins their reports).

    Returns:
        ``{"compared", "native_pass", "fallback_pass", "fail", "skipped"}`` (ints, for the first dtype),
        ``"per_dtype"`` (the same counts for every dtype) and ``"ops"`` (name -> detail per dtype).
    """
    dtypes = list(dtypes)
    selected = _select(ops, limit)
    if shard is not None:
        selected = [op for k, op in enumerate(selected) if k % shard[1] == shard[0]]
    per_op: dict[str, dict[str, Any]] = {}
    bar = _progress(selected, progress)
    with _config.override(TRN_FALLBACK="silent"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in bar:
            name = op_names(op)
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(name)
            detail = {str(dt).replace("torch.", ""): _run_op(op, dt, backward and dt == dtypes[0],
                                                             max_samples).as_dict() for dt in dtypes}
            per_op[name] = detail
            if on_op is not None:
                on_op(name, detail)
    return _report(per_op, [str(dt).replace("torch.", "") for dt in dtypes], backward, max_samples)


def _report(per_op: dict[str, dict[str, Any]], keys: list[str], backward: bool,
            max_samples: int | None) -> dict[str, Any]:
    per_dtype = {}
    for key in keys:
        counts = {"native_pass": 0, "fallback_pass": 0, "fail": 0, "skipped": 0}
        for d in per_op.values():
            counts[d[key]["status"]] += 1
        counts["compared"] = counts["native_pass"] + counts["fallback_pass"] + counts["fail"]
        per_dtype[key] = counts
    from trnlang.device.registry import registry_table

    return {**per_dtype[keys[0]], "dtype": keys[0], "per_dtype": per_dtype, "ops": per_op,
            "registry": registry_table(), "torch": torch.__version__, "backward": backward,
            "max_samples": max_samples}


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report from the reports of disjoint shards (same dtypes and options)."""
    per_op: dict[str, dict[str, Any]] = {}
    for r in reports:
        per_op.update(r["ops"])
    first = reports[0]
    return _report(dict(sorted(per_op.items())), _dtype_keys(first), first["backward"], first["max_samples"])


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.1f}%" if d else "n/a"


def _dtype_keys(report: dict[str, Any]) -> list[str]:
    """The report's dtypes, the headline one first (JSON round trips may sort them)."""
    first = report.get("dtype")
    return ([first] if first in report["per_dtype"] else []) + [k for k in report["per_dtype"] if k != first]


def summary_table(report: dict[str, Any]) -> str:
    """The summary as a text table (one column per dtype)."""
    keys = _dtype_keys(report)
    rows = [("compared", "compared"), ("  passing natively", "native_pass"),
            ("  passing through fallback", "fallback_pass"), ("  failing", "fail"), ("skipped", "skipped")]
    w = max(len(r[0]) for r in rows + [("pass rate (any path)", "")])
    lines = [f"{'OpInfo ops':<{w}}  " + "  ".join(f"{k:>10}" for k in keys)]
    for label, k in rows:
        lines.append(f"{label:<{w}}  " + "  ".join(f"{report['per_dtype'][d][k]:>10}" for d in keys))
    rate = [_pct(report["per_dtype"][d]["native_pass"] + report["per_dtype"][d]["fallback_pass"],
                 report["per_dtype"][d]["compared"]) for d in keys]
    lines.append(f"{'pass rate (any path)':<{w}}  " + "  ".join(f"{r:>10}" for r in rate))
    skipped: dict[str, int] = {}
    for d in report["ops"].values():
        det = d[keys[0]]
        if det["status"] == "skipped":
            skipped[det["reason"]] = skipped.get(det["reason"], 0) + 1
    if skipped:
        lines.append("")
        lines.append(f"skipped ({keys[0]}), by reason:")
        for reason, n in sorted(skipped.items(), key=lambda kv: -kv[1])[:12]:
            lines.append(f"  {n:>4}  {reason}")
    declines = _reason_counts(report, keys[0])
    if declines:
        lines.append("")
        lines.append(f"CPU fallbacks ({keys[0]}), by op and reason (OpInfos affected):")
        for (op, why), n in declines[:15]:
            lines.append(f"  {n:>4}  {op}: {why}")
    fails = [(n, d[keys[0]]["error"]) for n, d in report["ops"].items() if d[keys[0]]["status"] == "fail"]
    if fails:
        lines.append("")
        lines.append(f"failing ({keys[0]}):")
        for n, err in fails:
            lines.append(f"  {n}: {err}")
    return "\n".join(lines)


def _reason_counts(report: dict[str, Any], key: str) -> list[tuple[tuple[str, str], int]]:
    """(ATen op, reason) -> number of OpInfos whose ``key`` run fell back that way, most frequent first."""
    counts: dict[tuple[str, str], int] = {}
    for d in report["ops"].values():
        for op, whys in d[key].get("fallback_reasons", {}).items():
            for why in whys:
                counts[(op, why)] = counts.get((op, why), 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _fallback_note(det: dict[str, Any]) -> str:
    """The OpInfo table's note: the fallback ops, each with its reason unless it simply has no lowering."""
    reasons = det.get("fallback_reasons", {})

    def one(f: str) -> str:
        why = [r for r in reasons.get(f, []) if r != "no trn lowering"]
        return f"`{f}`" + (f" ({'; '.join(why)})" if why else "")

    note = ", ".join(one(f) for f in det["fallback_ops"][:6])
    if len(det["fallback_ops"]) > 6:
        note += f" (+{len(det['fallback_ops']) - 6})"
    return note


def markdown_report(report: dict[str, Any]) -> str:
    """``docs/op_compatibility.md``: summary, the native lowerings, and every OpInfo's status."""
    keys = _dtype_keys(report)
    out = ["# trn op compatibility", "",
           "Generated by `trn coverage` (do not edit by hand): every OpInfo of PyTorch's `op_db` runs its sample",
           "inputs on the `trn` device and on the CPU, forward and (for float32) backward, and the results are",
           f"compared (torch {report['torch']}; rtol/atol: float32 1e-4, bfloat16 1.6e-2/1e-2). A bfloat16",
           "output beyond the tolerance still passes if, element by element, its error against a float64 CPU",
           "reference is at most the CPU's own error plus the tolerance (the CPU's bf16 kernels round some",
           "intermediates to bf16 where trn kernels keep fp32); so does a float16 output (rtol/atol 1e-3), a float32",
           "output (where the CPU's own float32 result is that far from the exact one, e.g. matrix_exp's squarings),",
           "and so do bfloat16/float16 gradients, against float64 gradients of the same sample. Where an OpInfo",
           "declares wider tolerances for Inductor's kernels against eager CPU (`TestInductorOpInfo`), those apply.",
           "The indices of `sort`/`argsort` (not stable) and `topk` pass in any valid tie order, as in torch's",
           "own tests: distinct within a slice, selecting the CPU's values from the input (in order; as a set for",
           "unsorted `topk`). `mode`'s index passes if it points at an occurrence of the CPU's mode value (the",
           "CPU's own choice follows an unstable sort for rows longer than 16).", "",
           "- **native**: every comparison passed and nothing ran through the CPU fallback;",
           "- **fallback**: every comparison passed, with some ATen ops run by the CPU fallback;",
           "- **fail**: a comparison failed or `trn` raised where the CPU did not;",
           "- **skipped**: nothing could be compared (the reason is given).", "",
           "## Summary", "", "| | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for label, k in (("compared", "compared"), ("passing natively", "native_pass"),
                     ("passing through fallback", "fallback_pass"), ("failing", "fail"), ("skipped", "skipped")):
        out.append(f"| {label} | " + " | ".join(str(report["per_dtype"][d][k]) for d in keys) + " |")
    rates = [_pct(report["per_dtype"][d]["native_pass"] + report["per_dtype"][d]["fallback_pass"],
                  report["per_dtype"][d]["compared"]) for d in keys]
    out.append("| pass rate (any path) | " + " | ".join(rates) + " |")
    out += ["", "## The lowering registry", "",
            "Kinds: `kernel` (trnlang kernels in `stdlib_kernels/`), `decomposition` (torch's decomposition into",
            "ops with kernels), `plumbing` (device-layer metadata and host<->device copies) - all native; `cpu`",
            "(routed to a CPU op explicitly, counted as a fallback). Other dtypes than those listed fall back.",
            "An op with no entry here but a decomposition in torch (`torch._decomp`) runs that decomposition on",
            "`trn` (functional and `out=` ops only; its pieces dispatch to `trn` again and count as fallbacks if",
            "they have no lowering): the OpInfo table lists such ops as `decomposed`.", "",
            "| ATen op | kind | dtypes | source |", "|---|---|---|---|"]
    for name, ent in report["registry"].items():
        dts = ", ".join(ent["dtypes"]) if ent["dtypes"] else "all"
        src = ent["source"] + (f" (via {ent['routed_from']})" if ent.get("routed_from") else "")
        out.append(f"| `{name}` | {ent['kind']} | {dts} | {src} |")
    declines = [(k, n) for k, n in _reason_counts(report, keys[0]) if k[1] != "no trn lowering"]
    if declines:
        out += ["", f"## Why lowerings declined ({keys[0]})", "",
                "Calls that reached a `trn` lowering and were sent to the CPU by it (`trn.decline(reason)`, a",
                "dtype outside its `dtypes`, or a bare `NotImplemented`), with the number of OpInfos affected.", "",
                "| ATen op | reason | OpInfos |", "|---|---|---:|"]
        out += [f"| `{op}` | {why.replace('|', '/')} | {n} |" for (op, why), n in declines]
    out += ["", "## OpInfo results", "", "| OpInfo | " + " | ".join(keys) + " | CPU-fallback ATen ops / note |",
            "|---|" + "---|" * len(keys) + "---|"]
    for name, det in sorted(report["ops"].items()):
        first = det[keys[0]]
        note = _fallback_note(first)
        if first.get("decomposed_ops") and not first["fallback_ops"]:
            note = "decomposed: " + ", ".join(f"`{f}`" for f in first["decomposed_ops"][:4])
        if first["status"] == "skipped":
            note = first["reason"]
        elif first["status"] == "fail":
            note = first["error"].replace("|", "\\|")
        out.append(f"| `{name}` | " + " | ".join(det[k]["status"].replace("_pass", "") for k in keys)
                   + f" | {note} |")
    return "\n".join(out) + "\n"
