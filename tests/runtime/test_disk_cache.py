"""The compiled-kernel cache cannot be poisoned (docs/cache_security.md).

Each test plants what an attacker (or a broken disk) could leave in the cache and checks that it is never
loaded: the kernel still computes its own result, a ``CacheWarning`` names what was refused, and nothing
outside the cache is touched. Tests that need a file owned by another user run only as root.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import stat
import threading

import numpy as np
import pytest

from tests.interpret.kbuild import Op, acc, alloc, hbm, instr, kernel, load, sbuf, store, whole
from trnlang.ir.ops import Alu
from trnlang.runtime import autotune, diskcache, jit
from trnlang.runtime.jit import JitExecutor

OTHER_UID = 65534  # nobody
as_root = pytest.mark.skipif(os.getuid() != 0, reason="planting a file owned by another user needs root")


def _kernel(func: Alu, name: str = "k"):
    xt, o = hbm("x", (4, 8)), hbm("out", (4, 8), kind="out")
    t = sbuf("t", (4, 8))
    k = kernel([xt], [o], [alloc(t), load(whole(t), acc(xt, (4, 8))),
                           instr(Op.ACTIVATION, (whole(t),), (whole(t),), func=func, scale=1.0, reduce_op=None),
                           store(acc(o, (4, 8)), whole(t))])
    k.name = name
    return k


SQUARE = (Alu.square, lambda x: x * x)
NEG = (Alu.negative, lambda x: -x)


def _run(k, ref) -> dict[str, float]:
    """Run ``k`` in a fresh executor (so the disk is consulted), check it computed ``ref``, return its stats."""
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.zeros_like(x)
    ex = JitExecutor(k)
    ex.run([x, out], (1,))
    np.testing.assert_array_equal(out, ref(x))
    return ex.last_compile


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache base and config dir; returns the base. Stores opened by earlier tests are forgotten."""
    base = tmp_path / "cache"
    monkeypatch.setenv("TRN_CACHE_DIR", str(base))
    monkeypatch.setenv("TRN_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("TRN_JIT_NO_DISK_CACHE", raising=False)
    monkeypatch.setattr(jit, "_stores", {})
    monkeypatch.setattr(autotune, "_stores", {})
    return base


def _entries(d) -> list[str]:
    return sorted(f for f in os.listdir(d) if f.endswith(".bin"))


def _only_entry(k, ref) -> str:
    assert "llvm_s" in _run(k, ref)
    d = jit.cache_dir()
    (name,) = _entries(d)
    assert "source" in _run(k, ref)  # a good entry loads
    return os.path.join(d, name)


def test_secret_is_private_and_outside_the_cache(cache, tmp_path):
    _only_entry(_kernel(*SQUARE[:1]), SQUARE[1])
    key = tmp_path / "config" / "cache-key"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and os.path.getsize(key) == 32
    assert stat.S_IMODE(os.stat(tmp_path / "config").st_mode) == 0o700
    assert not any("cache-key" in f for _, _, fs in os.walk(cache) for f in fs)


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_corrupt_entries_are_rebuilt_and_replaced(cache, damage):
    k = _kernel(Alu.square)
    path = _only_entry(k, SQUARE[1])
    data = bytearray(open(path, "rb").read())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data = bytearray()
    open(path, "wb").write(bytes(data))
    with pytest.warns(diskcache.CacheWarning, match="not loaded"):
        again = _run(k, SQUARE[1])
    assert "llvm_s" in again and "source" not in again
    assert "source" in _run(k, SQUARE[1])  # the rewritten entry is good


def _forge(path: str, payload: bytes, secret: bytes) -> None:
    """What an attacker without this user's secret can write: the right format, a MAC under another key."""
    name = os.path.basename(path)
    st = diskcache.Store.__new__(diskcache.Store)
    st._key, st.context = secret, jit._store().context
    with open(path, "wb") as f:
        f.write(b"TRNMAC01" + st._mac(name, payload) + payload)


def _payload_for(path_of_other: str, key: str) -> bytes:
    """Another kernel's compiled object under ``key``: loading it would compute the other kernel."""
    st = jit._store()
    payload = st.read(os.path.basename(path_of_other))
    n = int.from_bytes(payload[:4], "little")
    header = json.loads(payload[4:4 + n])
    header["key"] = key
    h = json.dumps(header, sort_keys=True).encode()
    return len(h).to_bytes(4, "little") + h + payload[4 + n:]


def test_forged_entry_with_another_kernels_code_never_runs(cache):
    victim = _kernel(Alu.square, "victim")
    path = _only_entry(victim, SQUARE[1])
    other = _kernel(Alu.negative, "evil")
    _run(other, NEG[1])
    evil = next(os.path.join(jit.cache_dir(), n) for n in _entries(jit.cache_dir())
                if os.path.join(jit.cache_dir(), n) != path)
    key = os.path.basename(path)[:-4]
    payload = _payload_for(evil, key)
    # 1. the old format (magic + unkeyed sha256): anyone could compute it
    with open(path, "wb") as f:
        f.write(b"TRNJIT01" + hashlib.sha256(payload).digest() + payload)
    with pytest.warns(diskcache.CacheWarning, match="not loaded"):
        assert "source" not in _run(victim, SQUARE[1])
    # 2. the new format under a guessed secret
    _forge(path, payload, b"\0" * 32)
    with pytest.warns(diskcache.CacheWarning, match="failed authentication"):
        assert "source" not in _run(victim, SQUARE[1])
    # 3. the other kernel's genuine entry copied under the victim's name: the MAC binds the name
    with open(evil, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    with pytest.warns(diskcache.CacheWarning, match="failed authentication"):
        assert "source" not in _run(victim, SQUARE[1])


def test_entry_made_under_the_real_secret_but_another_toolchain_is_refused(cache):
    k = _kernel(Alu.square)
    path = _only_entry(k, SQUARE[1])
    st = jit._store()
    payload = st.read(os.path.basename(path))
    secret = diskcache.user_secret()
    m = hmac.new(secret, digestmod=hashlib.sha256)
    for part in (b"trnlang-cache-v1", os.path.basename(path).encode(), b"trnlang-jit\0old-version"):
        m.update(len(part).to_bytes(8, "little") + part)
    m.update(payload)
    open(path, "wb").write(b"TRNMAC01" + m.digest() + payload)
    with pytest.warns(diskcache.CacheWarning, match="failed authentication"):
        assert "source" not in _run(k, SQUARE[1])


@as_root
def test_valid_entry_owned_by_another_user_is_not_loaded(cache):
    k = _kernel(Alu.square)
    path = _only_entry(k, SQUARE[1])
    os.chown(path, OTHER_UID, OTHER_UID)
    with pytest.warns(diskcache.CacheWarning, match=f"owned by uid {OTHER_UID}"):
        assert "source" not in _run(k, SQUARE[1])
    assert os.stat(path).st_uid == OTHER_UID  # left for inspection, not replaced


def test_group_writable_entry_is_not_loaded(cache):
    k = _kernel(Alu.square)
    path = _only_entry(k, SQUARE[1])
    os.chmod(path, 0o664)
    with pytest.warns(diskcache.CacheWarning, match="writable by group or others"):
        assert "source" not in _run(k, SQUARE[1])


@pytest.mark.parametrize("kind", ["symlink-dev-zero", "symlink-to-valid", "fifo", "directory"])
def test_special_files_as_entries_are_refused_without_hanging(cache, kind):
    k = _kernel(Alu.square)
    path = _only_entry(k, SQUARE[1])
    good = open(path, "rb").read()
    os.unlink(path)
    if kind == "symlink-dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "symlink-to-valid":
        elsewhere = os.path.join(os.path.dirname(jit.cache_dir()), "elsewhere.bin")
        open(elsewhere, "wb").write(good)
        os.symlink(elsewhere, path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        os.mkdir(path)
    result: list[object] = []

    def go() -> None:
        with pytest.warns(diskcache.CacheWarning, match="not loaded"):
            result.append(_run(k, SQUARE[1]))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "opening the planted entry hung"
    assert result and "source" not in result[0]
    assert os.path.lexists(path) and not os.path.isfile(path) or os.path.islink(path)  # not replaced


def test_world_writable_cache_directory_is_disabled_not_repaired(cache):
    d = cache / f"jit-{os.getuid()}"
    d.mkdir(parents=True)
    os.chmod(d, 0o777)
    with pytest.warns(diskcache.CacheWarning, match="writable by group or others.*disabled"):
        assert jit.cache_dir() is None
    assert "llvm_s" in _run(_kernel(Alu.square), SQUARE[1])  # runs, from memory
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o777 and not os.listdir(d)


def test_private_cache_directory_with_read_bits_is_used(cache):
    d = cache / f"jit-{os.getuid()}"
    d.mkdir(parents=True)
    os.chmod(d, 0o755)
    assert jit.cache_dir() == str(d)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o755  # never chmod-ed


def test_symlinked_cache_directory_is_not_followed(cache, tmp_path):
    target = tmp_path / "victim-dir"
    target.mkdir(mode=0o755)
    cache.mkdir()
    (cache / f"jit-{os.getuid()}").symlink_to(target)
    with pytest.warns(diskcache.CacheWarning, match="symlink"):
        assert jit.cache_dir() is None
    _run(_kernel(Alu.square), SQUARE[1])
    assert not os.listdir(target) and stat.S_IMODE(os.stat(target).st_mode) == 0o755


@as_root
def test_cache_directory_owned_by_another_user_is_disabled(cache):
    d = cache / f"jit-{os.getuid()}"
    d.mkdir(parents=True)
    os.chmod(d, 0o700)
    os.chown(d, OTHER_UID, OTHER_UID)
    with pytest.warns(diskcache.CacheWarning, match=f"owned by uid {OTHER_UID}"):
        assert jit.cache_dir() is None
    _run(_kernel(Alu.square), SQUARE[1])
    assert not os.listdir(d) and os.stat(d).st_uid == OTHER_UID


@pytest.mark.parametrize("problem", ["group-readable", "symlink"])
def test_unsafe_secret_disables_the_disk_cache(cache, tmp_path, problem):
    cfg = tmp_path / "config"
    cfg.mkdir(mode=0o700)
    if problem == "group-readable":
        (cfg / "cache-key").write_bytes(os.urandom(32))
        os.chmod(cfg / "cache-key", 0o640)
    else:
        (tmp_path / "known").write_bytes(b"k" * 32)
        (cfg / "cache-key").symlink_to(tmp_path / "known")
    with pytest.warns(diskcache.CacheWarning, match="no usable cache key"):
        assert jit.cache_dir() is None
    assert "llvm_s" in _run(_kernel(Alu.square), SQUARE[1])


def test_read_only_cache_storage_degrades_to_memory_with_one_warning(cache, monkeypatch):
    k1, k2 = _kernel(Alu.square, "a"), _kernel(Alu.negative, "b")
    assert jit.cache_dir() is not None
    real_open = os.open

    def read_only_fs(path, flags, *args, **kw):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(diskcache.os, "open", read_only_fs)
    with pytest.warns(diskcache.CacheWarning) as caught:
        assert "llvm_s" in _run(k1, SQUARE[1])
        assert "llvm_s" in _run(k2, NEG[1])
    msgs = [str(w.message) for w in caught if issubclass(w.category, diskcache.CacheWarning)]
    assert len(msgs) == 1 and "cannot be written" in msgs[0] and "memory" in msgs[0]
    assert not [f for f in os.listdir(jit.cache_dir()) if f.startswith(".tmp-")]


def test_full_disk_leaves_no_temp_files(cache, monkeypatch):
    assert jit.cache_dir() is not None
    real_write = os.write

    def full(fd, data):
        real_write(fd, bytes(data)[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(diskcache.os, "write", full)
    with pytest.warns(diskcache.CacheWarning, match="cannot be written"):
        _run(_kernel(Alu.square), SQUARE[1])
    assert [n for n in os.listdir(jit.cache_dir()) if n != "build.lock"] == []  # the lock file is not an entry


def test_autotune_directory_gets_the_same_checks(cache):
    d = cache / "autotune"
    d.mkdir(parents=True)
    os.chmod(d, 0o777)
    with pytest.warns(diskcache.CacheWarning, match="disabled"):
        assert autotune._store() is None


def test_code_fingerprint_covers_every_source_that_decides_machine_code(tmp_path, monkeypatch):
    """codegen/ with its sub-packages, trnlang/ir and trnlang/passes: editing any of them invalidates cached objects."""
    import codegen
    import trnlang.ir
    import trnlang.passes
    from trnlang.runtime import jit

    names = {n for n, _ in jit.fingerprint_sources()}
    for pkg in (codegen, trnlang.ir, trnlang.passes):
        root = os.path.dirname(pkg.__file__)
        for dirpath, _, files in os.walk(root):
            for f in files:
                if f.endswith(".py") and "__pycache__" not in dirpath:
                    rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
                    assert f"{pkg.__name__}/{rel}" in names
    assert "codegen/llvm.py" in names and any(n.startswith("trnlang.passes/") for n in names)
    # a one-byte change of one hashed file (a copy of the tree is edited) changes the fingerprint
    real = jit.fingerprint_sources()
    copies = []
    for i, (name, path) in enumerate(real):
        dst = tmp_path / f"{i}.py"
        dst.write_bytes(open(path, "rb").read() + (b"#" if i == len(real) // 2 else b""))
        copies.append((name, str(dst)))
    before = jit._codegen_fingerprint()
    monkeypatch.setattr(jit, "fingerprint_sources", lambda: copies)
    jit._codegen_fingerprint.cache_clear()
    try:
        assert jit._codegen_fingerprint() != before
    finally:
        monkeypatch.undo()
        jit._codegen_fingerprint.cache_clear()
    assert jit._codegen_fingerprint() == before
