"""A small JSON state file the proxy restores at start: its routes and the cutover.

Each owner reads and writes its own section; a write replaces the whole file
atomically (temporary file, fsync, rename), so a crash leaves the old or the new
file, never half of one.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from proxy.atomic import write_text_atomic


class StateFileError(RuntimeError):
    """The state file exists but cannot be read as ours."""


class StateFile:
    """`path` None: nothing is persisted (sections live in memory only)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[str, Any] = self._load()

    def _load(self) -> dict[str, Any]:
        if self.path is None or not os.path.exists(self.path):
            return {}
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise StateFileError(f"state file {self.path!r} cannot be read: {exc}") from exc
        if not isinstance(data, dict):
            raise StateFileError(f"state file {self.path!r} is not a JSON object")
        return data

    def get(self, section: str) -> Any:
        with self._lock:
            return self._data.get(section)

    def put(self, section: str, value: Any) -> None:
        """Set `section` (None removes it) and write the file before returning."""
        with self._lock:
            if value is None:
                self._data.pop(section, None)
            else:
                self._data[section] = value
            if self.path is None:
                return
            # 0600: the routes keep the credentials of backend URLs.
            write_text_atomic(self.path, json.dumps(self._data, indent=1, sort_keys=True),
                              mode=0o600)
