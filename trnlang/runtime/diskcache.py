"""On-disk caches that a planted file cannot turn into code execution.

A compiled-kernel cache entry is machine code that trnlang loads and runs, so
whoever can write an entry that is accepted can run code as the user. This
module is the only code that reads or writes trnlang's cache directories. The
threat model and the guarantees are in ``docs/cache_security.md``; in short:

* **Every entry is authenticated** with HMAC-SHA256 under a per-user secret
  (32 random bytes, created 0600 on first use in ``$TRN_CONFIG_DIR``, default
  ``$XDG_CONFIG_HOME/trnlang`` or ``~/.config/trnlang``: outside the cache
  directory, so a copied, shared or planted cache never carries it). The MAC
  binds the entry's name, a caller-given context (toolchain versions) and the
  payload. Only a process that holds the secret can make an entry that loads.
* **Nothing is followed or trusted by path.** The cache directory is opened
  once with ``O_NOFOLLOW | O_DIRECTORY`` and checked through its descriptor
  (owned by this user, not writable by group or others); entries are opened
  relative to that descriptor (``openat``) with ``O_NOFOLLOW | O_NONBLOCK``
  and must be regular files owned by this user and not group/other writable.
  A directory that fails is disabled with one warning, never repaired with
  ``chmod``; an entry that fails is never loaded: a ``CacheWarning`` names it
  and the caller rebuilds in memory (the file is left for inspection).
* **Storage failures degrade to memory-only**: a read-only or full file system
  makes the store stop writing after one warning; nothing raises.

Example::

    >>> import tempfile, os
    >>> import trnlang.config
    >>> os.environ["TRN_CONFIG_DIR"] = tempfile.mkdtemp(); _ = trnlang.config.refresh()
    >>> s = Store(tempfile.mkdtemp(), "demo", context=b"v1")
    >>> s.write("entry.bin", b"payload")
    >>> s.read("entry.bin")
    b'payload'
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import os
import secrets
import stat
import threading
import time
import warnings
from collections.abc import Iterator

from trnlang import config as _config

__all__ = ["CacheWarning", "Store", "cache_base", "config_dir", "user_secret"]

_MAGIC = b"TRNMAC01"
_MAC_LEN = 32
_SECRET_LEN = 32
_MAX_ENTRY = 1 << 30  # an entry larger than this is not one of ours
_BUILD_LOCK = "build.lock"
_BUILD_WAIT_S = 300.0  # longest wait for another process's build of the same entry
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_lock = threading.Lock()
_secret: dict[str, bytes | None] = {}


def _after_fork() -> None:  # a lock held by another thread at fork time would never be released in the child
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


class CacheWarning(UserWarning):
    """A cache directory or entry was refused (and what trnlang did instead)."""


def _warn(msg: str) -> None:
    warnings.warn(f"trnlang: {msg}", CacheWarning, stacklevel=3)


def cache_base() -> str:
    """``$TRN_CACHE_DIR``, default ``~/.cache/trnlang`` (not created here; ``trnlang.config``)."""
    return _config.current.cache_dir


def config_dir() -> str:
    """Where the per-user cache secret lives: ``$TRN_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/trnlang``."""
    d = _config.current.config_dir
    if d:
        return d
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(xdg, "trnlang")


def _trust_problem(st: os.stat_result, is_dir: bool) -> str | None:
    """Why a directory (``is_dir``) or file, by its fstat, cannot be trusted, or None."""
    if not (stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)):
        return "is not a directory" if is_dir else "is not a regular file"
    if st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not by this user ({os.getuid()})"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    if not is_dir and st.st_size > _MAX_ENTRY:
        return f"is too large ({st.st_size} bytes)"
    return None


def _open_private_dir(parent: str, name: str) -> tuple[int | None, str | None]:
    """(fd, None) of ``parent/name`` created 0700 if missing and checked, or (None, reason)."""
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
        pfd = os.open(parent, _DIR_FLAGS)
    except OSError as e:
        return None, f"cannot open {parent} ({e.strerror})"
    try:
        try:
            os.mkdir(name, 0o700, dir_fd=pfd)
        except FileExistsError:
            pass
        try:
            fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=pfd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                return None, "is a symlink or not a directory; not followed"
            return None, f"cannot be opened ({e.strerror})"
        why = _trust_problem(os.fstat(fd), is_dir=True)
        if why:
            os.close(fd)
            return None, why
        return fd, None
    except OSError as e:
        return None, f"cannot be created ({e.strerror})"
    finally:
        os.close(pfd)


def _read_file(dfd: int, name: str, limit: int) -> tuple[bytes | None, str | None]:
    """(contents, None); (None, None) when missing; (None, reason) when refused."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None, "is a symlink; not followed"
        return None, f"cannot be opened ({e.strerror})"
    try:
        st = os.fstat(fd)
        why = _trust_problem(st, is_dir=False)
        if why is None and st.st_size > limit:
            why = f"is too large ({st.st_size} bytes)"
        if why:
            return None, why
        chunks, left = [], st.st_size + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 24))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks), None
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    finally:
        os.close(fd)


def user_secret() -> bytes | None:
    """This user's cache key (created on first use), or None when it cannot be kept safely."""
    d = config_dir()
    with _lock:
        if d in _secret:
            return _secret[d]
        key, why = _load_or_create_secret(d)
        if key is None:
            _warn(f"no usable cache key in {d} ({why}); compiled kernels are kept in memory only")
        _secret[d] = key
        return key


def _load_or_create_secret(d: str) -> tuple[bytes | None, str]:
    parent, name = os.path.split(os.path.abspath(d))
    dfd, why = _open_private_dir(parent, name)
    if dfd is None:
        return None, f"directory {why}"
    try:
        for _ in range(2):
            data, why = _read_file(dfd, "cache-key", _SECRET_LEN)
            if why:
                return None, f"cache-key {why}"
            if data is not None:
                try:
                    mode = os.stat("cache-key", dir_fd=dfd, follow_symlinks=False).st_mode
                except OSError as e:
                    return None, f"cache-key: {e.strerror}"
                if mode & 0o077:
                    return None, f"cache-key is readable by group or others (mode {stat.S_IMODE(mode):o})"
                if len(data) != _SECRET_LEN:
                    return None, "cache-key has the wrong length"
                return data, ""
            key, why = _publish_secret(dfd)
            if why:
                return None, why
            if key is not None:
                return key, ""
            # another process published its key first: read theirs
        return None, "cache-key keeps changing"
    finally:
        os.close(dfd)


def _publish_secret(dfd: int) -> tuple[bytes | None, str]:
    """Write a new secret to a private temporary file, then link it as ``cache-key`` in one step: a process reading
    the key never sees it half written (several processes starting on an empty configuration directory used to:
    one read an empty file, lost its secret, and compiled without the cache). ``(None, "")``: another process
    published first."""
    key = secrets.token_bytes(_SECRET_LEN)
    tmp = f".cache-key-{secrets.token_hex(8)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    except OSError as e:
        return None, f"cache-key cannot be created ({e.strerror})"
    try:
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, "cache-key", src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            return None, ""
        except OSError as e:
            return None, f"cache-key cannot be created ({e.strerror})"
        return key, ""
    finally:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass


class Store:
    """A private cache directory ``base/name`` of authenticated entries.

    Args:
        base: the parent directory (created 0700 when missing; may be a symlink the user chose).
        name: the store's own directory inside ``base``: opened without following symlinks and refused
            unless owned by this user and not writable by group or others.
        context: bytes bound into every entry's MAC (e.g. toolchain versions): an entry made under
            another context never loads.
        authenticate: False stores plain bytes (for data that cannot run, e.g. autotune choices); the
            directory and file checks still apply.

    ``read`` returns None for a missing or refused entry (refusals warn once per entry); ``write`` is
    atomic (a temp file in the directory, then rename) and never raises.
    """

    def __init__(self, base: str, name: str, context: bytes = b"", authenticate: bool = True) -> None:
        self.path = os.path.join(base, name)
        self.context = context
        self.authenticate = authenticate
        self.refused: set[str] = set()
        self._keep: set[str] = set()  # refused for what the file is (foreign, symlink...): never replaced
        self.writable = True
        self._key: bytes | None = None
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._why: str | None = None
        if authenticate:
            self._key = user_secret()
            if self._key is None:
                self._why = "no cache key"
                return
        self._fd, why = _open_private_dir(base, name)
        if why:
            self._why = why
            _warn(f"cache directory {self.path} {why}; disk cache disabled (compiled kernels are kept in "
                  "memory; set TRN_CACHE_DIR to a private directory)")

    @property
    def usable(self) -> bool:
        """Whether the directory passed its checks (and a key exists when entries are authenticated)."""
        return self._fd is not None

    def _mac(self, name: str, payload: bytes) -> bytes:
        assert self._key is not None
        m = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (b"trnlang-cache-v1", name.encode(), self.context):
            m.update(len(part).to_bytes(8, "little") + part)
        m.update(payload)
        return m.digest()

    def read(self, name: str) -> bytes | None:
        """The payload of entry ``name``, or None (missing, refused, corrupt, forged)."""
        if self._fd is None:
            return None
        data, why = _read_file(self._fd, name, _MAX_ENTRY)
        if why:
            self._keep.add(name)
        elif data is not None and self.authenticate:
            head = len(_MAGIC) + _MAC_LEN
            if len(data) < head or not data.startswith(_MAGIC):
                why = "is not a trnlang cache entry (truncated or another format)"
            elif not hmac.compare_digest(data[len(_MAGIC):head], self._mac(name, data[head:])):
                why = "failed authentication (corrupt, or not written by trnlang for this user)"
            else:
                data = data[head:]
        if why:
            self._refuse(name, why)
            return None
        return data

    def _refuse(self, name: str, why: str) -> None:
        self.refused.add(name)
        _warn(f"cache entry {os.path.join(self.path, name)} {why}; not loaded, rebuilt in memory")

    def write(self, name: str, payload: bytes) -> None:
        """Store ``payload`` as entry ``name`` (atomic); a storage failure turns writing off with one warning."""
        if self._fd is None or not self.writable or name in self._keep:
            return
        data = _MAGIC + self._mac(name, payload) + payload if self.authenticate else payload
        tmp = f".tmp-{secrets.token_hex(8)}"
        created = False
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=self._fd)
            created = True
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
            created = False
        except OSError as e:
            self.writable = False
            _warn(f"cache directory {self.path} cannot be written ({e.strerror}); new kernels are kept in "
                  "memory for the rest of this process")
        finally:
            if created:
                try:
                    os.unlink(tmp, dir_fd=self._fd)
                except OSError:
                    pass

    def _lock_file(self) -> int | None:
        """The descriptor of the directory's ``build.lock`` (a private regular file; None if it cannot be)."""
        if self._lock_fd is None and self._fd is not None:
            try:
                fd = os.open(_BUILD_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             0o600, dir_fd=self._fd)
            except OSError:
                return None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or _trust_problem(st, False):
                os.close(fd)
                return None
            self._lock_fd = fd
        return self._lock_fd

    @contextlib.contextmanager
    def building(self, name: str, timeout: float = _BUILD_WAIT_S) -> Iterator[bool]:
        """Hold the cross-process build lock of entry ``name`` while it is made.

        Processes sharing the directory (the ranks of a distributed job, test workers) that miss the same
        entry at the same time would each compile it; inside this block only one does, and the others, once
        it is written, read it (re-check with :meth:`read` inside the block). The lock is a one-byte
        ``fcntl`` record lock in ``build.lock`` chosen by the name's hash: the kernel drops it when its
        process dies, so a crashed compiler never blocks anyone. Waiting gives up after ``timeout`` seconds
        (the caller then builds without the lock). Yields whether the lock is held.

        Example::

            >>> import tempfile
            >>> s = Store(tempfile.mkdtemp(), "demo", context=b"v1")
            >>> with s.building("entry.bin") as held:
            ...     if s.read("entry.bin") is None:
            ...         s.write("entry.bin", b"made once")
            >>> held, s.read("entry.bin")
            (True, b'made once')
        """
        fd = self._lock_file()
        if fd is None:
            yield False
            return
        offset = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
        deadline = time.monotonic() + timeout
        held = False
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
                held = True
                break
            except OSError as e:
                if e.errno not in (errno.EACCES, errno.EAGAIN) or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
        try:
            yield held
        finally:
            if held:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)

    def close(self) -> None:
        """Release the directory and lock-file descriptors."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
