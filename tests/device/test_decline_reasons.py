"""Every lowering decline says why (issue 14 item 3).

A lowering that cannot run a call returns ``decline("reason")``; the CPU fallback then records the reason
(``fallback_reasons()``, the warning, ``TRN_FALLBACK=error``, ``trn coverage``). A bare ``return NotImplemented``
is allowed only where a lowering passes on a nested helper's decline (directly under an ``is NotImplemented``
check): the helper's own ``decline`` already recorded the reason.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Any, Callable

import pytest
import torch

import trnlang.device as td

ROOT = pathlib.Path(__file__).resolve().parents[2] / "stdlib_kernels"

#: Families still allowed bare ``return NotImplemented`` (ratchet: other helpers are editing these files this
#: session; they are next to convert, then leave this list). Nothing may be added to it.
STILL_BARE: frozenset[str] = frozenset()


def _rel(p: pathlib.Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _is_ni(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Name) and node.id == "NotImplemented"


def _checks_ni(test: ast.AST) -> bool:
    """``test`` is only ``x is NotImplemented`` checks (one, or several joined by ``or``)."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
    return all(isinstance(p, ast.Compare) and len(p.ops) == 1 and isinstance(p.ops[0], ast.Is)
               and _is_ni(p.comparators[0]) for p in parts)


def bare_declines(src: str) -> list[int]:
    """Lines of ``return NotImplemented`` (or a conditional expression yielding it) that are not pass-through
    sites directly after an ``is NotImplemented`` check."""
    tree = ast.parse(src)
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _checks_ni(node.test):
            allowed.update(id(s) for s in node.body if isinstance(s, ast.Return) and _is_ni(s.value))
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        v = node.value
        if _is_ni(v):
            if id(node) not in allowed:
                bad.append(node.lineno)
        elif isinstance(v, ast.IfExp) and (_is_ni(v.body) or _is_ni(v.orelse)):
            if not (_is_ni(v.body) and _checks_ni(v.test)):
                bad.append(node.lineno)
    return sorted(bad)


def test_the_scanner_tells_declines_from_pass_through_sites():
    src = '''
def f(x, helper):
    if x is None:
        return NotImplemented
    r = helper(x)
    if r is NotImplemented:
        return NotImplemented
    if r is NotImplemented or x.dim() > 3:
        return NotImplemented
    if x.numel() == 0:
        return decline("empty")
    return NotImplemented if r is NotImplemented else r

def g(x):
    return x if x.numel() else NotImplemented

def h(x):
    return NotImplemented if x is None else x
'''
    # pass-through sites (lines 7 and 12) are allowed; a test mixing in another condition (line 9) is not
    assert bare_declines(src) == [4, 9, 15, 18]


def test_stdlib_families_have_no_bare_declines():
    files = sorted(p for p in ROOT.rglob("*.py") if _rel(p) not in STILL_BARE)  # sub-packages too
    assert len(files) > 30, files
    bad = {_rel(p): lines for p in files if (lines := bare_declines(p.read_text()))}
    assert not bad, f"bare `return NotImplemented` (use decline(\"why\")): {bad}"


def test_the_ratchet_list_only_holds_files_that_still_need_it():
    """A file whose last bare decline is gone leaves the list (so it cannot regress unnoticed)."""
    clean = sorted(_rel(p) for p in ROOT.rglob("*.py") if _rel(p) in STILL_BARE and not bare_declines(p.read_text()))
    assert not clean, f"remove from STILL_BARE: {clean}"


def test_the_ratchet_list_names_real_files():
    """A stale entry (a file renamed or moved into a sub-package) would silently exempt nothing: list real ones."""
    names = {_rel(p) for p in ROOT.rglob("*.py")}
    assert STILL_BARE <= names, sorted(STILL_BARE - names)


def _reasons(op: str) -> dict[str, int]:
    return dict(td.fallback_reasons().get(op, {}))


@pytest.mark.parametrize("case", ["cumsum_int64", "qr_tall", "mode_nan"])
def test_real_ops_decline_with_their_reason(case: str):
    """Three families declining real calls on trn: the CPU computes the result, the reason is recorded."""
    g = torch.Generator().manual_seed(0)
    if case == "cumsum_int64":  # scans: int64 prefix sums past 2^24 are not exact in the fp32 scan
        op, why = "aten::cumsum", ("integer values whose prefix sums may reach 2^24 or the output's range (the fp32 "
                                   "scan would not be exact)")
        x = torch.randint(-2**40, 2**40, (5, 7), generator=g)
        fn = lambda t: torch.cumsum(t, 1)  # noqa: E731
    elif case == "qr_tall":  # linalg_qr: Householder panels of at most 128 rows
        op, why = "aten::linalg_qr", "more than 128 rows or more than 512 columns"
        x = torch.randn(200, 3, generator=g)
        fn = lambda t: torch.linalg.qr(t).R  # noqa: E731
    else:  # selection: mode of a row holding NaN
        op, why = "aten::mode", "NaN in a row (the CPU's order of NaNs is its own)"
        x = torch.randint(0, 3, (4, 9), generator=g).float()
        x[1, 3] = float("nan")
        fn = lambda t: torch.mode(t, 1).values  # noqa: E731
    before = _reasons(op).get(why, 0)
    got = fn(x.to("trn"))
    assert got.device.type == "trn"
    torch.testing.assert_close(got.cpu(), fn(x), rtol=1e-5, atol=1e-5)
    assert _reasons(op).get(why, 0) == before + 1, td.fallback_reasons()


_GN_GROUPS = "groups that do not divide the channels, or N * C * HxW not the input's size: torch raises"


def _family_case(case: str) -> tuple[str, str, tuple[torch.Tensor, ...], Callable[..., Any]]:
    """(op, its decline reason, CPU inputs, the call) of representative declines of the converted files."""
    g = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    cases: dict[str, tuple[str, str, tuple[torch.Tensor, ...], Callable[..., Any]]] = {
        # linalg/matmul.py: hand checks, and a declared rule (accepts=)
        "mm_out_overlaps": ("aten::mm.out", "out= overlapping an operand", (r(4, 4), r(4, 4)),
                            lambda a, b: torch.mm(a, b, out=a)),
        "addmm_bool_alpha": ("aten::addmm", "alpha or beta not a real number", (r(2, 2), r(2, 4), r(4, 2)),
                             lambda s, a, b: torch.addmm(s, a, b, alpha=True)),
        "addbmm_mixed_dtypes": ("aten::addbmm", "tensor arguments of different dtypes",
                                (r(2, 2), r(3, 2, 4), r(3, 4, 2)), lambda s, a, b: torch.addbmm(s.bfloat16(), a, b)),
        # nn/norm.py (torch's own errors, from the CPU)
        "layer_norm_fp16_weight": ("aten::native_layer_norm",
                                   "weight or bias neither in the input's dtype nor float32: torch raises",
                                   (r(4, 8), r(8)), lambda x, w: torch.nn.functional.layer_norm(x, (8,), w.half())),
        "layer_norm_weight_shape": ("aten::native_layer_norm", "weight or bias not of normalized_shape: torch raises",
                                    (r(4, 8), r(4)), lambda x, w: torch.ops.aten.native_layer_norm(x, (8,), w, None,
                                                                                                  1e-5)),
        "group_norm_groups": ("aten::native_group_norm", _GN_GROUPS, (r(2, 4, 3),),
                              lambda x: torch.ops.aten.native_group_norm(x, None, None, 2, 4, 3, 3, 1e-5)),
        # indexing/gather_scatter.py: the bounds-checked DMA fires (both devices raise), an integer accumulation,
        # and a declined norm of embedding(max_norm=)
        "gather_out_of_range": ("aten::gather",
                                "an index out of range (the bounds-checked DMA fired): the CPU raises torch's error",
                                (r(3, 5), torch.tensor([[0, 7], [1, 2], [4, 0]])),
                                lambda x, i: torch.gather(x, 1, i)),
        "scatter_reduce_int": ("aten::scatter_reduce.two",
                               ("integer results that may reach 2^24 or the dtype's range (inexact in fp32, or "
                                "wrapping)"),
                               (torch.full((3, 4), 2**23, dtype=torch.int32), torch.tensor([[0, 1], [2, 2], [3, 0]]),
                                torch.full((3, 2), 2**23, dtype=torch.int32)),
                               lambda s, i, v: s.scatter_reduce(1, i, v, "sum")),
        "embedding_renorm_p3": ("aten::embedding_renorm_", "a norm_type other than 1 or 2",
                                (r(6, 4), torch.tensor([[1, 3], [3, 5]])),
                                lambda w, i: (torch.nn.functional.embedding(i, w, max_norm=0.5, norm_type=3.0), w)),
    }
    return cases[case]


FAMILY_CASES = ["mm_out_overlaps", "addmm_bool_alpha", "addbmm_mixed_dtypes", "layer_norm_fp16_weight",
                "layer_norm_weight_shape", "group_norm_groups", "gather_out_of_range", "scatter_reduce_int",
                "embedding_renorm_p3"]


def _outcome(fn: Callable[..., Any], args: tuple[torch.Tensor, ...]) -> Any:
    try:
        return fn(*args)
    except (RuntimeError, IndexError) as e:
        return type(e)


@pytest.mark.parametrize("case", FAMILY_CASES)
def test_family_declines_report_their_reason(case: str):
    """matmul, norm and gather/scatter decline real calls with their reason: the CPU gives torch's answer (or its
    error), ``fallback_reasons()`` (what ``trn coverage`` reports per op) counts the reason once."""
    op, why, args, fn = _family_case(case)
    before = _reasons(op).get(why, 0)
    got = _outcome(fn, tuple(a.to("trn") for a in args))
    want = _outcome(fn, tuple(a.clone() for a in args))
    if isinstance(want, type):
        assert got is want  # torch's error, from the CPU
    else:
        torch.testing.assert_close(torch.utils._pytree.tree_map(lambda t: t.cpu(), got), want)
        assert all(t.device.type == "trn" for t in torch.utils._pytree.tree_leaves(got))
    assert _reasons(op).get(why, 0) == before + 1, (op, _reasons(op))


@pytest.mark.parametrize("case", ["mm_out_overlaps", "addmm_bool_alpha", "scatter_reduce_int"])
def test_family_declines_name_their_reason_under_fallback_error(case: str, monkeypatch: pytest.MonkeyPatch):
    """With ``TRN_FALLBACK=error`` the declined call raises, and the message says why it left the device."""
    op, why, args, fn = _family_case(case)
    monkeypatch.setenv("TRN_FALLBACK", "error")
    with pytest.raises(td.FallbackError) as e:
        fn(*(a.to("trn") for a in args))
    assert why in str(e.value) and op.split("::")[1].split(".")[0] in str(e.value), str(e.value)


@pytest.mark.parametrize("case", ["layer_norm_fp16_weight", "layer_norm_weight_shape", "gather_out_of_range"])
def test_declines_because_torch_raises_give_torchs_error_under_fallback_error(case: str,
                                                                             monkeypatch: pytest.MonkeyPatch):
    """A call declined because torch rejects it raises the CPU's own error under ``TRN_FALLBACK=error`` too."""
    op, why, args, fn = _family_case(case)
    with pytest.raises(Exception) as want:
        fn(*args)
    monkeypatch.setenv("TRN_FALLBACK", "error")
    with pytest.raises(type(want.value)) as e:
        fn(*(a.to("trn") for a in args))
    assert not isinstance(e.value, td.FallbackError) and str(e.value) == str(want.value)


def test_declared_accepts_of_these_families_show_in_the_registry():
    """The rules declared with ``accepts=`` are what ``trn coverage`` prints for the op."""
    table = td.registry_table()
    assert table["aten::addr"]["accepts"] == "self, vec1, vec2 trn tensors; no conj/neg bit"
    assert table["aten::addbmm"]["accepts"] == "self, batch1, batch2 trn tensors; one dtype; no conj/neg bit"
    assert table["aten::embedding_renorm_"]["accepts"] == "self, indices trn tensors; no conj/neg bit"
