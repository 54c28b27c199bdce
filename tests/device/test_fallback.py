"""The CPU fallback: counted, warned once per op, forbidden with TRN_FALLBACK=error, silent on demand."""

import warnings

import pytest
import torch

import trnlang
import trnlang.device as td
from tests.device.conftest import UNLOWERED, unlowered


# Ops used here fall back on purpose: conftest's UNLOWERED custom op has only a CPU kernel; nothing lowers the
# general (non-symmetric) eigenvalue problem, _linalg_eigvals, and torch has no decomposition for it.
def _eigvals(device):
    return torch.linalg.eigvals(torch.tensor([[2.0, -1.0, 0.5], [1.0, 3.0, 0.0], [0.0, 4.0, 1.0]], device=device))


def test_counted_and_zero_copy():
    x = torch.linspace(-1, 1, 7, device="trn")
    before = td.fallback_stats().get(UNLOWERED, 0)
    y = unlowered(x, x * 0.5 + 2)
    assert td.fallback_stats()[UNLOWERED] == before + 1
    xc = torch.linspace(-1, 1, 7)
    torch.testing.assert_close(y.cpu(), torch.logaddexp(xc, xc * 0.5 + 2))
    before = td.fallback_stats().get("aten::_linalg_eigvals", 0)
    torch.testing.assert_close(_eigvals("trn").cpu(), _eigvals("cpu"))
    assert td.fallback_stats()["aten::_linalg_eigvals"] == before + 1
    # a view computed by the CPU op comes back as a device alias of its input, not a copy
    from trnlang.device import fallback

    v = fallback.run_on_cpu(torch.ops.aten.as_strided.default, (x, (2,), (2,), 1), {}, count=False)
    assert v.device.type == "trn" and v.data_ptr() == x.data_ptr() + 4 and v.storage_offset() == 1
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    v.mul_(0)
    assert x.cpu()[1].item() == 0 and x.cpu()[3].item() == 0
    # an in-place fallback writes straight into device memory, through views
    x2 = torch.arange(6.0, device="trn")
    x2[::2].exp_()
    assert torch.allclose(x2.cpu(), torch.tensor([1.0, 1.0, 7.389056, 3.0, 54.59815, 5.0]))


def test_conjugate_and_negative_views():
    z = torch.randn(3, dtype=torch.complex64)
    t = z.to("trn")
    assert t.conj().is_conj() and torch.equal(t.conj().cpu(), z.conj())
    assert torch.equal(t.conj().clone().cpu(), z.conj()) and torch.equal((t.conj() * 2).cpu(), z.conj() * 2)
    assert torch.equal(torch._neg_view(t).clone().cpu(), -z)
    assert torch.equal(torch.view_as_real(t).cpu(), torch.view_as_real(z))


def test_warns_once_per_op(monkeypatch):
    """One FallbackWarning per op name (a fresh set of warned ops, as in a new process), pointing at the user's line."""
    from trnlang.device import fallback

    monkeypatch.setenv("TRN_FALLBACK", "warn")
    monkeypatch.setattr(fallback, "_warned", set())
    td.reset_fallback_stats()
    x = torch.ones(3, device="trn")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.ops.trnfbtest.lae(x, x * 0.5)  # called here: the warning must point at this line's file
        torch.linalg.eigvals(torch.eye(3, device="trn") + 1)
    fb = [m for m in w if issubclass(m.category, td.FallbackWarning)]
    assert [str(m.message).split()[1] for m in fb] == [UNLOWERED, "aten::_linalg_eigvals"]
    assert td.fallback_stats()[UNLOWERED] == 3
    assert {m.filename for m in fb} == {__file__}  # the warning points at the user's line, not torch or trnlang


def test_strict_mode_raises_naming_the_op(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")  # read at each fallback
    x = torch.ones(3, device="trn")
    assert torch.equal(((x + x) * 2).cpu(), torch.full((3,), 4.0))  # native: fine
    with pytest.raises(td.FallbackError, match=UNLOWERED) as e:
        unlowered(x, x * 0.5)
    assert isinstance(e.value, trnlang.TrnError) and isinstance(e.value, NotImplementedError)


def test_silent_mode(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    td.reset_fallback_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        x = torch.tensor([0.0, -float("inf")], device="trn")
        y = unlowered(x, torch.full((2,), -float("inf"), device="trn"))
    assert y.cpu().tolist() == [0.0, -float("inf")]
    assert td.fallback_stats() == {UNLOWERED: 1}


def test_registry_lowering_for_a_custom_op():
    """``@lowering`` on a user op: the trn implementation runs; dtypes outside the list fall back."""
    lib = torch.library.Library("trntest", "DEF")
    lib.define("scale(Tensor x, float s) -> Tensor")
    lib.impl("scale", lambda x, s: x * s, "CPU")
    calls = []

    @td.lowering("trntest::scale", dtypes=(torch.float32,))
    def scale(x, s):
        calls.append(x.dtype)
        return x * s

    assert td.REGISTRY["trntest::scale"].kind == "kernel"
    assert td.registry_table()["trntest::scale"]["dtypes"] == ["float32"]
    x = torch.arange(3.0, device="trn")
    assert torch.ops.trntest.scale(x, 2.0).cpu().tolist() == [0.0, 2.0, 4.0] and calls == [torch.float32]
    before = td.fallback_stats().get("trntest::scale", 0)
    xi = torch.arange(3, device="trn", dtype=torch.float64)
    assert torch.ops.trntest.scale(xi, 2.0).cpu().tolist() == [0.0, 2.0, 4.0]
    assert td.fallback_stats()["trntest::scale"] == before + 1 and calls == [torch.float32]
    lib._destroy()


def test_registry_routes_inplace_and_out_variants():
    from trnlang.device import backend

    backend.ensure_lowerings()  # the stdlib registers at the first device tensor: do not depend on test order
    reg = td.REGISTRY
    assert reg["aten::add.out"].routed_from == "aten::add.Tensor"
    assert reg["aten::add_.Tensor"].routed_from == "aten::add.Tensor"
    assert reg["aten::mm.out"].routed_from == "aten::mm"
    assert reg["aten::_softmax"].kind == "kernel" and reg["aten::empty.memory_format"].kind == "plumbing"
    assert all(e.kind in ("kernel", "decomposition", "plumbing", "cpu") for e in reg.values())


def test_ops_with_a_torch_decomposition_run_it_on_trn():
    """An op without a lowering but with a decomposition in torch runs it (its pieces native), not the CPU."""
    from trnlang.device import fallback

    x = torch.rand(5, 7).to("trn")
    cands = [("aten::special_entr.out", torch.special.entr), ("aten::trace", torch.trace),
             ("aten::heaviside.out", lambda t: torch.heaviside(t - 0.5, t))]
    name, fn = next((n, f) for n, f in cands if n not in td.REGISTRY)
    before, dec = td.fallback_stats(), fallback.decomposition_stats()
    y = fn(x)
    assert fallback.decomposition_stats().get(name, 0) == dec.get(name, 0) + 1, fallback.decomposition_stats()
    assert td.fallback_stats() == before
    torch.testing.assert_close(y.cpu(), fn(x.cpu()))


def test_stdlib_exclude_leaves_an_op_to_the_cpu(tmp_path):
    """``TRN_STDLIB_EXCLUDE=aten::logaddexp`` (tutorial 06; bisecting a lowering): the standard library's lowering
    and its routed variants are not registered, and the op runs through the CPU fallback, not a decomposition."""
    import os
    import subprocess
    import sys

    code = (
        "import torch, trnlang, trnlang.device as td\n"
        "from trnlang.device import fallback\n"
        "x = torch.linspace(-3, 3, 9, device='trn')\n"
        "y = torch.logaddexp(x, x * 2)\n"
        "torch.testing.assert_close(y.cpu(), torch.logaddexp(x.cpu(), x.cpu() * 2))\n"
        "assert 'aten::logaddexp' not in td.REGISTRY and 'aten::logaddexp.out' not in td.REGISTRY\n"
        "assert td.fallback_stats() == {'aten::logaddexp.out': 1}, td.fallback_stats()\n"
        "assert not fallback.decomposition_stats(), fallback.decomposition_stats()\n"
        "assert 'aten::hypot' in td.REGISTRY\n"
        "print('ok')\n")
    env = dict(os.environ, TRN_STDLIB_EXCLUDE="aten::logaddexp", TRN_FALLBACK="silent")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:] + r.stderr[-3000:]


def test_a_declining_lowering_says_why(monkeypatch):
    """``trn.decline(reason)``: the CPU runs the call, and the reason is counted, warned and raised."""
    from trnlang.device import fallback

    lib = torch.library.Library("trndecl", "DEF")
    try:
        lib.define("halve(Tensor x) -> Tensor")
        lib.impl("halve", lambda x: x / 2, "CPU")

        @td.lowering("trndecl::halve", dtypes=(torch.float32, torch.float16))
        def halve(x):
            if x.numel() > 4:
                return trnlang.decline("more than 4 elements")
            if x.dtype == torch.float16:
                return NotImplemented
            return x * 0.5

        monkeypatch.setenv("TRN_FALLBACK", "warn")
        monkeypatch.setattr(fallback, "_warned", set())  # no op warned yet, as in a new process
        td.reset_fallback_stats()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            small, big = torch.ones(3, device="trn"), torch.ones(6, device="trn")
            for _ in range(2):
                torch.ops.trndecl.halve(small), torch.ops.trndecl.halve(big)
            torch.ops.trndecl.halve(torch.ones(2, device="trn", dtype=torch.float16))
            out = torch.ops.trndecl.halve(torch.ones(2, device="trn", dtype=torch.int64))
        assert out.cpu().tolist() == [0.5, 0.5]  # the int64 call ran the CPU kernel (x / 2), not the lowering
        assert td.fallback_reasons()["trndecl::halve"] == {"more than 4 elements": 2, "declined (no reason given)": 1,
                                                           "dtype int64 not among the lowering's dtypes": 1}
        fb = [str(m.message) for m in w if issubclass(m.category, td.FallbackWarning)]
        assert len(fb) == 1 and "trndecl::halve was declined by its trn lowering (more than 4 elements)" in fb[0]
        monkeypatch.setenv("TRN_FALLBACK", "error")
        with pytest.raises(td.FallbackError) as e:
            torch.ops.trndecl.halve(torch.ones(9, device="trn"))
        assert "declined by its trn lowering (more than 4 elements) and TRN_FALLBACK=error" in str(e.value)
    finally:
        lib._destroy()


def test_coverage_reports_decline_reasons():
    from trnlang.device import coverage

    before = {"aten::a": {"no trn lowering": 1}}
    after = {"aten::a": {"no trn lowering": 1, "int64 beyond 2^31": 2}, "aten::b": {"no trn lowering": 1}}
    assert coverage._reason_diff(before, after) == {"aten::a": {"int64 beyond 2^31"},
                                                    "aten::b": {"no trn lowering"}}
    det = {"status": "fallback_pass", "reason": "", "error": "", "fallback_ops": ["aten::a", "aten::b"],
           "fallback_reasons": {"aten::a": ["int64 beyond 2^31"], "aten::b": ["no trn lowering"]}}
    report = {"ops": {"x": {"float32": det}, "y": {"float32": dict(det, fallback_ops=["aten::a"])}}}
    assert coverage._reason_counts(report, "float32")[0] == (("aten::a", "int64 beyond 2^31"), 2)
    assert coverage._fallback_note(det) == "`aten::a` (int64 beyond 2^31), `aten::b`"


@pytest.mark.parametrize("shapes", [((1,), (1,)), ((0,), (1,)), ((1,), (0,)), ((6,), (1,)), ((1,), (18,)),
                                    ((2, 3), (2, 3, 3)), ((40,), (1,))])
def test_fallback_out_resize_warnings_count_like_the_cpu(monkeypatch, shapes):
    """A CPU-fallback op with several outs to grow warns once per resized non-empty out, as the CPU op does (the
    first attempt on device memory stops at the first out that must grow; the warnings after it were lost:
    upstream test_eig_errors_and_warnings)."""
    import warnings

    monkeypatch.setenv("TRN_FALLBACK", "silent")

    def count(dev):
        out0 = torch.empty(shapes[0], device=dev, dtype=torch.complex64)
        out1 = torch.empty(shapes[1], device=dev, dtype=torch.complex64)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            torch.linalg.eig(torch.ones(2, 3, 3, device=dev), out=(out0, out1))
        return len(w), out0.shape, out1.shape

    assert count("trn") == count("cpu")
