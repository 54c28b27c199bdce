"""``nki.typing`` (``nt``): annotations only (``t: nt.tensor[128, 512] = ...``); nothing is checked."""

from __future__ import annotations

from typing import Any


class _Subscriptable:
    """``tensor[128, 512]`` and ``tensor[dtype, (128, 512)]`` evaluate to themselves."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getitem__(self, _: Any) -> _Subscriptable:
        return self

    def __repr__(self) -> str:
        return f"nki.typing.{self._name}"


tensor = _Subscriptable("tensor")
mutable_tensor = _Subscriptable("mutable_tensor")
scalar = _Subscriptable("scalar")

__all__ = ["tensor", "mutable_tensor", "scalar"]
