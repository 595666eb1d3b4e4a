"""A small JSON state file the proxy restores at start: its routes and the cutover.

Each owner reads and writes its own section; a write replaces the whole file
atomically (temporary file, fsync, rename), so a crash leaves the old or the new
file, never half of one.

One writer per file: the proxy opens it with `exclusive=True`, which holds an
exclusive `flock` on `<file>.lock` (holding its pid) while it runs, so a second proxy
on the same file refuses to start, naming the first one's pid. A symbolic link is
written through to its target (the link stays a link); a dangling link, something
that is not a regular file, or a JSON file without any of our sections is an error,
never a silent start on `--primary`. A file that holds backend credentials must be the
proxy user's and private (as ssh insists for keys): otherwise the start is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading
from typing import Any

from proxy.atomic import write_text_atomic
from proxy.credentials import redact

SECTIONS = ("routes", "cutover", "tune")


class StateFileError(RuntimeError):
    """The state file exists but cannot be read as ours (or another proxy holds it)."""


class StateFile:
    """`path` None: nothing is persisted (sections live in memory only). `exclusive`: hold
    the one-writer lock until `close()` (the proxy does; readers such as `report` do not)."""

    def __init__(self, path: str | None, exclusive: bool = False) -> None:
        self.path = path
        self._target = _target(path) if path is not None else None
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        if exclusive and self._target is not None:
            self._lock_fd = _hold(self._target, path or "")
        try:
            self._data: dict[str, Any] = self._load()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the one-writer lock (the file stays)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def _load(self) -> dict[str, Any]:
        if self._target is None or not os.path.lexists(self._target):
            return {}
        where = f"state file {self.path!r}"
        info = os.stat(self._target)
        if not stat.S_ISREG(info.st_mode):
            raise StateFileError(f"{where} is not a regular file (a directory, device or "
                                 "FIFO is not a state file)")
        try:
            with open(self._target, encoding="utf-8") as f:
                text = f.read()
            data = json.loads(text)
        except (OSError, ValueError, RecursionError) as exc:
            raise StateFileError(f"{where} cannot be read: {exc}") from exc
        if not isinstance(data, dict):
            raise StateFileError(f"{where} is not a JSON object")
        if data and not set(data) & set(SECTIONS):
            raise StateFileError(f"{where} is not a vllm-cutover state file: it has none of "
                                 f"the sections {list(SECTIONS)!r}, but {sorted(data)[:5]!r}")
        if redact(text) != text:
            _check_private(info, where)
        return data

    def get(self, section: str) -> Any:
        with self._lock:
            return self._data.get(section)

    def put(self, section: str, value: Any) -> None:
        """Set `section` (None removes it) and write the file before returning; the section
        in memory changes only once the file holds it."""
        with self._lock:
            data = dict(self._data)
            if value is None:
                data.pop(section, None)
            else:
                data[section] = value
            if self._target is not None:
                # 0600: the routes keep the credentials of backend URLs.
                write_text_atomic(self._target, json.dumps(data, indent=1, sort_keys=True),
                                  mode=0o600)
            self._data = data


def _target(path: str) -> str:
    """Where writes go: the file a symbolic link points to (a dangling link is an error)."""
    if not os.path.islink(path):
        return path
    target = os.path.realpath(path)
    if not os.path.exists(target):
        raise StateFileError(f"state file {path!r} is a symbolic link to {target!r}, which "
                             "does not exist: create the target or remove the link")
    return target


def _hold(target: str, shown: str) -> int:
    """The descriptor of `<target>.lock`, exclusively flocked and holding our pid."""
    lock_path = f"{target}.lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StateFileError(f"state file {shown!r}: its lock {lock_path!r} cannot be "
                             f"opened: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise StateFileError(f"state file {shown!r} is in use by another proxy (pid "
                             f"{holder}, lock {lock_path!r}): one proxy per state file; "
                             "give this one its own --state-file") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _check_private(info: os.stat_result, where: str) -> None:
    """A file holding credentials must be ours and unreadable by others (as ssh's keys)."""
    if info.st_uid != os.geteuid():
        raise StateFileError(f"{where} holds backend credentials and is owned by uid "
                             f"{info.st_uid}, not this proxy's uid {os.geteuid()}: refused "
                             "(chown it, or start from a file of your own)")
    if info.st_mode & 0o077:
        raise StateFileError(f"{where} holds backend credentials and is readable by others "
                             f"(mode {stat.S_IMODE(info.st_mode):04o}): refused; chmod 600 it")
