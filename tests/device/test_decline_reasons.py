"""Every lowering decline says why (issue 14 item 3).

A lowering that cannot run a call returns ``decline("reason")``; the CPU fallback then records the reason
(``fallback_reasons()``, the warning, ``TRN_FALLBACK=error``, ``trn coverage``). A bare ``return NotImplemented``
is allowed only where a lowering passes on a nested helper's decline (directly under an ``is NotImplemented``
check): the helper's own ``decline`` already recorded the reason.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
import torch

import trnlang.device as td

ROOT = pathlib.Path(__file__).resolve().parents[2] / "stdlib_kernels"

#: Families still allowed bare ``return NotImplemented`` (ratchet: other helpers are editing these files this
#: session; they are next to convert, then leave this list). Nothing may be added to it.
STILL_BARE = frozenset({
    "nn/norm.py", "elementwise/pointwise.py", "elementwise/unary.py", "indexing/gather_scatter.py", "linalg/matmul.py",
})


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


@pytest.mark.parametrize("case", ["cumsum_int64", "qr_tall", "index_4d"])
def test_real_ops_decline_with_their_reason(case: str):
    """Three families declining real calls on trn: the CPU computes the result, the reason is recorded."""
    g = torch.Generator().manual_seed(0)
    if case == "cumsum_int64":  # scans: int64 prefix sums past 2^24 are not exact in the fp32 scan
        op, why = "aten::cumsum", "int64 values whose prefix sums may reach 2^24 (the fp32 scan would not be exact)"
        x = torch.randint(-2**40, 2**40, (5, 7), generator=g)
        fn = lambda t: torch.cumsum(t, 1)  # noqa: E731
    elif case == "qr_tall":  # linalg_qr: Householder panels of at most 128 rows
        op, why = "aten::linalg_qr", "more than 128 rows or more than 512 columns"
        x = torch.randn(200, 3, generator=g)
        fn = lambda t: torch.linalg.qr(t).R  # noqa: E731
    else:  # advanced_index: at most three index tensors
        op, why = "aten::index.Tensor", "no index tensor, or more than 3 indexed dims"
        x = torch.randn(2, 3, 4, 5, generator=g)
        i = [torch.tensor([1, 0]), torch.tensor([2, 1]), torch.tensor([3, 0]), torch.tensor([4, 2])]
        fn = lambda t: t[tuple(j.to(t.device) for j in i)]  # noqa: E731
    before = _reasons(op).get(why, 0)
    got = fn(x.to("trn"))
    assert got.device.type == "trn"
    torch.testing.assert_close(got.cpu(), fn(x), rtol=1e-5, atol=1e-5)
    assert _reasons(op).get(why, 0) == before + 1, td.fallback_reasons()
