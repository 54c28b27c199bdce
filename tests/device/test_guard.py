"""``TRN_GUARD=1``: device blocks end right before a PROT_NONE page, so an overflow dies with SIGSEGV.

The faulting cases run in a subprocess (the fault kills it: returncode -SIGSEGV).
"""

from __future__ import annotations

import ctypes
import functools
import signal
import textwrap

from tests.device.conftest import run_py
from trnlang.device.guard import PAGE, GuardedRegion, env_enabled

GUARD = {"TRN_GUARD": "1", "TRN_FALLBACK": "error"}


def test_region_ends_at_a_page_boundary_and_is_usable() -> None:
    for n in (0, 1, 4, 7, PAGE - 4, PAGE, PAGE + 12, 3 * PAGE + 100):
        r = GuardedRegion(n)
        assert (r.ptr + n) % PAGE == 0  # the end is aligned to the guard page
        assert r.data_ptr() == r.ptr
        view = r.np_bytes()
        assert view.shape == (n,) and view.ctypes.data == r.ptr
        view[:] = 0xAB
        assert bytes(view[-1:]) == (b"\xab" if n else b"")
        ctypes.memmove(r.ptr, b"\x01" * n, n)  # every usable byte is writable
        assert int(view.sum()) == n


def test_np_bytes_keeps_the_region_alive() -> None:
    view = GuardedRegion(64).np_bytes()  # the region object itself is dropped here
    view[:] = 7
    assert int(view.sum()) == 7 * 64


def _run(body: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    code = "import ctypes, torch, trnlang.device\ntrnlang.device.register()\n" + textwrap.dedent(body)
    p = run_py(code, {**GUARD, **(env or {})})
    return p.returncode, p.stdout, p.stderr


_OPS_UNDER_GUARD = """
    import trnlang.device.memory as mem
    assert mem.GUARD
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(257, 129, generator=g), torch.randn(257, 129, generator=g)
    a, b = torch.randn(65, 129, generator=g), torch.randn(129, 31, generator=g)
    idx = torch.tensor([5, 0, 256, 3, 3])
    X, Y, A, B = (t.to("trn") for t in (x, y, a, b))
    for got, want in [(X + Y, x + y), (A @ B, a @ b), (X.sum(), x.sum()), (X.sum(1), x.sum(1)),
                      (X.index_select(0, idx.to("trn")), x.index_select(0, idx)),
                      (X[:, 1::2].exp(), x[:, 1::2].exp()), (X.t().contiguous(), x.t().contiguous())]:
        assert got.device.type == "trn"
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    for _ in range(50):                      # allocate and free: every block is a fresh mapping
        (X * 2).sum()
    assert mem.CACHE.bytes == 0, mem.CACHE.bytes
    t = torch.empty(1000, device="trn")
    assert (t.data_ptr() + 4000) % mem._guard.PAGE == 0
    print("ops ok", flush=True)
"""

_WRITE_PAST_THE_END = """
    t = torch.zeros(1000, device="trn")
    nbytes = t.untyped_storage().nbytes()
    assert nbytes == 4000, nbytes
    ctypes.memmove(t.data_ptr(), b"\\0" * nbytes, nbytes)  # the whole storage is writable
    print("in bounds ok", flush=True)
    ctypes.memmove(t.data_ptr() + nbytes, b"\\0" * 4, 4)   # one float past the end
    print("not reached", flush=True)
"""


@functools.cache
def _guarded_child() -> tuple[int, str, str]:
    """One guarded child (TRN_GUARD=1) for two tests: the ops check runs first and prints "ops ok" once all its
    assertions held, then the one-past-the-end write, which kills the child (a fault ends a process, so the other
    faulting case below needs its own)."""
    return _run(_OPS_UNDER_GUARD + _WRITE_PAST_THE_END)


def test_write_one_element_past_the_end_faults() -> None:
    rc, out, err = _guarded_child()
    assert "in bounds ok" in out, err[-3000:]
    assert "not reached" not in out
    assert rc == -signal.SIGSEGV, (rc, err[-2000:])


def test_freed_block_is_unmapped_and_faults_on_use() -> None:
    rc, out, err = _run("""
        t = torch.ones(64, device="trn")
        p = t.data_ptr()
        del t                                   # guard mode bypasses the cache: the pages are unmapped
        print("freed", flush=True)
        ctypes.memmove(p, b"\\0" * 4, 4)
        print("not reached", flush=True)
    """)
    assert "freed" in out, err
    assert "not reached" not in out
    assert rc == -signal.SIGSEGV, (rc, err[-2000:])


@functools.cache
def _unguarded_child() -> tuple[int, str, str]:
    """One child with TRN_GUARD unset (off by default) for two tests, each printing its own line."""
    return _run("""
        import trnlang.device.memory as mem
        assert not mem.GUARD
        t = mem.empty((1000,), torch.float32)
        p = t.data_ptr()
        del t
        assert mem.CACHE.bytes > 0
        assert mem.empty((1000,), torch.float32).data_ptr() == p  # the cached block is reused
        print("cache ok", flush=True)
        t = torch.zeros(1000, device="trn")
        ctypes.memmove(t.data_ptr() + t.untyped_storage().nbytes(), b"\\0" * 4, 4)  # into cache slack
        print("survived", flush=True)
    """, {"TRN_GUARD": ""})


def test_without_guard_the_same_overflow_goes_unnoticed(monkeypatch) -> None:
    rc, out, err = _unguarded_child()
    assert rc == 0 and "survived" in out, err[-2000:]
    monkeypatch.setenv("TRN_GUARD", "0")  # "0" switches it off like unset (trnlang.device.memory reads this at import)
    assert not env_enabled()


def test_ops_are_correct_under_guard() -> None:
    rc, out, err = _guarded_child()
    assert "ops ok" in out, err[-3000:]


def test_guard_off_by_default_uses_the_cache() -> None:
    rc, out, err = _unguarded_child()
    assert "cache ok" in out, err[-2000:]


def test_guarded_numpy_views_fault_past_the_end() -> None:
    code = textwrap.dedent("""
        import ctypes, numpy as np
        from trnlang.device.guard import GuardedRegion
        r = GuardedRegion(40)
        a = r.np_bytes().view(np.float32)
        a[:] = 1.0
        print("ok", a.sum(), flush=True)
        ctypes.memmove(a.ctypes.data + 40, b"\\0", 1)  # a single byte past the end
        print("not reached", flush=True)
    """)
    p = run_py(code)
    assert "ok 10.0" in p.stdout, p.stderr
    assert "not reached" not in p.stdout
    assert p.returncode == -signal.SIGSEGV
