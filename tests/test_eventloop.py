"""run_fast: an exception raised by the program carries no unrelated context."""

from __future__ import annotations

import sys

import pytest

from proxy.eventloop import run_fast


async def _fails() -> None:
    raise RuntimeError("the program's own failure")


@pytest.mark.parametrize("uvloop_installed", [False, True])
def test_an_exception_has_no_uvloop_import_error_as_its_context(
        monkeypatch: pytest.MonkeyPatch, uvloop_installed: bool) -> None:
    if not uvloop_installed:
        monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop: ImportError
    with pytest.raises(RuntimeError) as raised:
        run_fast(_fails())
    # Run inside `except ImportError`, every exception got "No module named 'uvloop'" as
    # its __context__ when uvloop is missing, and tracebacks in logs showed it.
    assert raised.value.__context__ is None
