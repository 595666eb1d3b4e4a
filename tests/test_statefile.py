"""The state file: one writer (a lock naming the holder's pid), symbolic links written
through, dangling links and foreign files refused, credentials kept private."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.statefile import StateFile, StateFileError

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_a_second_writer_is_refused_naming_the_holder_s_pid(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    first = StateFile(path, exclusive=True)
    with pytest.raises(StateFileError, match=f"in use by another proxy \\(pid {os.getpid()}"):
        StateFile(path, exclusive=True)
    assert StateFile(path).get("routes") is None  # readers (report) take no lock
    first.close()
    StateFile(path, exclusive=True).close()  # released: the next proxy may start


def test_a_second_proxy_on_the_same_file_exits_3(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    holder = StateFile(path, exclusive=True)
    holder.put("routes", {"version": 1, "primary": "http://127.0.0.1:9", "shadow": None,
                          "baseline": None})
    argv = [sys.executable, "-m", "proxy", "proxy", "--port", "0", "--admin-port", "0",
            "--primary", "http://127.0.0.1:9", "--state-file", path]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    holder.close()
    assert done.returncode == 3, done.stderr
    assert f"pid {os.getpid()}" in done.stderr and "Traceback" not in done.stderr
    assert json.loads(Path(path).read_text())["routes"]["version"] == 1  # untouched


def test_a_symbolic_link_is_written_through_to_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text(json.dumps({"routes": {"version": 1}}))
    target.chmod(0o600)
    link = tmp_path / "state.json"
    link.symlink_to(target)
    state = StateFile(str(link), exclusive=True)
    state.put("cutover", {"id": "x"})
    state.close()
    assert link.is_symlink() and json.loads(target.read_text())["cutover"] == {"id": "x"}


@pytest.mark.parametrize("kind", ["dangling", "directory", "fifo", "foreign"])
def test_what_is_not_our_file_is_an_error_never_a_fresh_start(tmp_path: Path,
                                                               kind: str) -> None:
    path = tmp_path / "state.json"
    if kind == "dangling":
        path.symlink_to(tmp_path / "gone.json")
        expected = "does not exist"
    elif kind == "directory":
        path.mkdir()
        expected = "not a regular file"
    elif kind == "fifo":
        os.mkfifo(path)
        expected = "not a regular file"
    else:
        path.write_text(json.dumps({"name": "my-app", "version": "1.0"}))
        expected = "not a vllm-cutover state file"
    with pytest.raises(StateFileError, match=expected):
        StateFile(str(path), exclusive=True)


def test_credentials_in_a_file_others_can_read_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"routes": {"version": 1, "primary": "http://u:pw@h:1"}}))
    path.chmod(0o644)
    with pytest.raises(StateFileError, match="readable by others \\(mode 0644\\)"):
        StateFile(str(path))
    path.chmod(0o600)
    assert StateFile(str(path)).get("routes")["version"] == 1
    if os.geteuid() == 0:  # only root can give a file away
        os.chown(path, 4242, 4242)
        with pytest.raises(StateFileError, match="owned by uid 4242"):
            StateFile(str(path))
    path.write_text(json.dumps({"routes": {"version": 1, "primary": "http://h:1"}}))
    path.chmod(0o644)
    StateFile(str(path))  # no credentials: nothing to protect


def test_a_failed_write_leaves_the_section_as_the_file_has_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = StateFile(str(tmp_path / "state.json"))
    state.put("routes", {"version": 1})

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("proxy.statefile.write_text_atomic", disk_full)
    with pytest.raises(OSError, match="No space"):
        state.put("routes", {"version": 2})
    assert state.get("routes") == {"version": 1}


def _cutover_section() -> dict[str, Any]:
    from proxy.cutover.model import Phase
    from tests.cutover.states import started

    state = started().moved(Phase.STARTING_NEW, "test", 1_000_001.0, deadline_unix=1_000_900.0)
    return state.to_json()


HUGE = 10**400


@pytest.mark.parametrize(("path", "value", "named"), [
    (("deadline_unix",), HUGE, "cutover.deadline_unix"),
    (("history", 0, "at_unix"), HUGE, "cutover.history[0].at_unix"),
    (("samples",), HUGE, "cutover.samples"),
    (("backup_bytes",), 2**64, "cutover.backup_bytes"),
    (("gate_failures",), "3", "cutover.gate_failures"),
    (("spec", "warmup_timeout_s"), HUGE, "warmup_timeout_s"),
    (("spec", "min_samples"), -HUGE, "min_samples"),
])
def test_a_field_of_the_wrong_size_or_type_is_named(path: tuple[Any, ...], value: Any,
                                                    named: str) -> None:
    from proxy.cutover.model import CutoverState, StateError

    data = _cutover_section()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(StateError, match=re.escape(named)):
        CutoverState.from_json(data)


@pytest.mark.parametrize("field", ["deadline_unix", "warmup_timeout_s"])
def test_a_400_digit_number_in_the_state_file_exits_3_naming_it(tmp_path: Path,
                                                                field: str) -> None:
    section = _cutover_section()
    (section["spec"] if field in section["spec"] else section)[field] = HUGE
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"cutover": section}))
    path.chmod(0o600)
    argv = [sys.executable, "-m", "proxy", "proxy", "--port", "0", "--admin-port", "0",
            "--primary", "http://127.0.0.1:9", "--state-file", str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 3, done.stderr
    assert field in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "401 digits" in done.stderr and str(HUGE) not in done.stderr
