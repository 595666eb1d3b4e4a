"""Write a file so that readers see the old contents or the new, never half of it."""

from __future__ import annotations

import os
import tempfile


def write_text_atomic(path: str, text: str, mode: int | None = None) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, rename it over `path`, and
    fsync the directory (the rename itself survives a crash). `mode`: the file's permissions;
    default what open() gives (0666 less the umask), not mkstemp's 0600."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.fchmod(fd, _umasked(0o666) if mode is None else mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _umasked(mode: int) -> int:
    umask = os.umask(0o077)  # read it (only by setting it), then put it back
    os.umask(umask)
    return mode & ~umask
