"""Streams and events of ``torch.trn``: the device runs every op to completion when it is issued.

Code written for CUDA streams (FSDP2's all-gather / reduce-scatter streams, overlap of copies with compute)
asks the device module for ``Stream``, ``Event``, ``current_stream()`` and ``stream(s)``. On ``trn`` a kernel
launch returns after the kernel ran, so there is one in-order queue and nothing is ever pending: every
stream is a name for that queue, waits return at once and events are complete when recorded. (torch.cpu's
streams mean the same thing.)

Example:
    >>> from trnlang.device.streams import Stream, current_stream, stream
    >>> s = Stream(priority=-1)
    >>> with stream(s):
    ...     current_stream() is s
    True
    >>> s.record_event().query()
    True
"""

from __future__ import annotations

import threading
from typing import Any

import torch

__all__ = ["Stream", "Event", "StreamContext", "stream", "current_stream", "default_stream"]


class Stream:
    """A ``trn`` stream: work issued on it is already finished (see the module docstring).

    Example:
        >>> s = Stream(); s.wait_stream(Stream()); s.query()
        True
    """

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.priority = int(priority)

    @property
    def device(self) -> torch.device:
        """``trn:0`` (made on use: this module loads before ``trn`` is a device name)."""
        return torch.device("trn", 0)

    def query(self) -> bool:
        """True: all work issued on the stream has completed."""
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""

    def wait_stream(self, stream: Stream) -> None:
        """Nothing to wait for: ``stream``'s work has completed."""

    def wait_event(self, event: Event | None) -> None:
        """Nothing to wait for: recorded events are complete."""

    def record_event(self, event: Event | None = None) -> Event:
        """Record (and return) an event, complete at once."""
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<torch.trn.Stream priority={self.priority} (synchronous)>"


class Event:
    """A ``trn`` event: complete as soon as it is recorded.

    Example:
        >>> e = Event(); e.record(); e.query()
        True
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.recorded = False

    def record(self, stream: Stream | None = None) -> None:
        """Mark the event (the work before it is done)."""
        self.recorded = True

    def query(self) -> bool:
        """True: the work before the event has completed."""
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""

    def wait(self, stream: Stream | None = None) -> None:
        """Nothing to wait for."""


_DEFAULT = Stream()
_local = threading.local()


def default_stream(device: Any = None) -> Stream:
    """The device's default stream."""
    return _DEFAULT


def current_stream(device: Any = None) -> Stream:
    """The stream selected with :func:`stream` in this thread, else the default stream."""
    return getattr(_local, "stream", None) or _DEFAULT


class StreamContext:
    """``with stream(s):`` makes ``s`` the current stream of this thread for the block."""

    def __init__(self, s: Stream | None) -> None:
        self.stream, self.prev = s, None

    def __enter__(self) -> Stream | None:
        self.prev = getattr(_local, "stream", None)
        if self.stream is not None:
            _local.stream = self.stream
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        _local.stream = self.prev


def stream(s: Stream | None) -> StreamContext:
    """Context manager selecting ``s`` as the current stream (``None``: leave it as it is)."""
    return StreamContext(s)
