"""Atomic writes: readers see the old or the new file, with the permissions asked for."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.atomic import write_text_atomic
from proxy.statefile import StateFile


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_report_gets_open_s_permissions_not_mkstemp_s(tmp_path: Path, umask_022: None) -> None:
    report = tmp_path / "report.html"
    write_text_atomic(str(report), "<html></html>")
    assert report.read_text() == "<html></html>" and _mode(report) == 0o644
    write_text_atomic(str(report), "again", mode=0o600)
    assert report.read_text() == "again" and _mode(report) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left


def test_the_state_file_stays_private(tmp_path: Path, umask_022: None) -> None:
    path = tmp_path / "state.json"
    StateFile(str(path)).put("routes", {"primary": "http://u:pw@h:1"})
    assert _mode(path) == 0o600
