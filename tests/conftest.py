"""Shared pytest setup: make the repository root importable (``import trnlang``) from any cwd."""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _trn_config_follows_monkeypatch(monkeypatch: pytest.MonkeyPatch):
    """The runtime reads ``TRN_*`` once into ``trnlang.config.current``; a test that changes them with
    ``monkeypatch.setenv`` / ``delenv`` sees the change at once (the snapshot is re-read after each), and
    the settings are read again after the test has put the environment back."""
    import trnlang.config as config

    setenv, delenv = monkeypatch.setenv, monkeypatch.delenv

    def _setenv(name: str, value: str, prepend: str | None = None) -> None:
        setenv(name, value, prepend)
        config.refresh()

    def _delenv(name: str, raising: bool = True) -> None:
        delenv(name, raising)
        config.refresh()

    monkeypatch.setenv = _setenv  # type: ignore[method-assign]
    monkeypatch.delenv = _delenv  # type: ignore[method-assign]
    yield
    monkeypatch.undo()
    config.refresh()
