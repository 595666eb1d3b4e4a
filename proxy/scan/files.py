"""The scanner's file I/O: which files to read, what kind each is, backups and writes."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

# "template": YAML-like text that does not parse (read by text, never rewritten).
FileKind = Literal["shell", "dockerfile", "yaml", "env", "template"]

SKIP_DIRS = frozenset({".git", "node_modules", ".hg", ".svn", "__pycache__", ".venv",
                       ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"})
BACKUP = re.compile(r"\.bak(\.\d+)?$")
_SHEBANG = re.compile(rb"#![^\n]*\b(ba|z|da|k)?sh\b")
HEAD_BYTES = 512


def kind_of(path: Path, head: bytes) -> FileKind | None:
    """The finder for a file, from its name (or a shell shebang); None to skip it."""
    name = path.name
    lower = name.lower()
    if BACKUP.search(name):
        return None
    if lower in ("dockerfile", "containerfile") or lower.startswith("dockerfile.") \
            or lower.endswith((".dockerfile", ".containerfile")):
        return "dockerfile"
    if lower.endswith((".yaml", ".yml")):
        return "yaml"
    if lower == ".env" or lower.startswith(".env.") or lower.endswith((".env", ".envrc")):
        return "env"
    if lower.endswith((".sh", ".bash", ".zsh")) or _SHEBANG.match(head):
        return "shell"
    return None


def is_binary(head: bytes) -> bool:
    return b"\0" in head


def decode(data: bytes) -> str:
    """A file's text; bytes that are not UTF-8 become lone surrogates, written back as
    they were by `write_with_backup`."""
    return data.decode("utf-8", "surrogateescape")


def read_head(path: Path) -> bytes:
    with open(path, "rb") as file:
        return file.read(HEAD_BYTES)


def iter_files(root: Path) -> Iterator[tuple[Path, str | None]]:
    """(path, None) for each file under `root` to read, in a stable order, each real file
    once; (path, why) for one that cannot be read.

    VCS, dependency and cache dirs are left out. Symlinks are followed when they point
    inside the tree (to what the walk has not reached already, so a loop ends); one
    pointing outside is reported, unless it is a file of no kind the scanner reads.
    """
    if not root.is_dir():
        yield root, None if root.is_file() else "not a regular file"
        return
    walk = _Walk(Path(os.path.realpath(root)))
    yield from walk.tree(root)
    while walk.links:
        yield from walk.follow(walk.links.pop(0))


class _Walk:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.seen: set[str] = set()  # real paths of the dirs and files reached
        self.links: list[Path] = []

    def tree(self, top: Path) -> Iterator[tuple[Path, str | None]]:
        unreadable: list[OSError] = []
        for dirpath, dirnames, filenames in os.walk(top, onerror=unreadable.append):
            yield from _unreadable_dirs(unreadable)
            self.seen.add(os.path.realpath(dirpath))
            dirnames[:] = [d for d in sorted(dirnames) if d not in SKIP_DIRS
                           and not self._link(Path(dirpath) / d)
                           and os.path.realpath(Path(dirpath) / d) not in self.seen]
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if self._link(path) or os.path.realpath(path) in self.seen:
                    continue
                self.seen.add(os.path.realpath(path))
                if path.is_file():
                    yield path, None
                elif kind_of(path, b"") is not None:
                    yield path, "not a regular file"
        yield from _unreadable_dirs(unreadable)

    def _link(self, path: Path) -> bool:
        if path.is_symlink():
            self.links.append(path)
            return True
        return False

    def follow(self, link: Path) -> Iterator[tuple[Path, str | None]]:
        try:
            real = link.resolve(strict=True)
        except (OSError, RuntimeError):  # dangling, or a loop of links: nothing to read
            return
        if str(real) in self.seen:
            return
        if not real.is_relative_to(self.base):
            if real.is_dir() or _readable_kind(link, real):
                yield link, f"symlink to {real}, outside the scanned tree"
        elif real.is_dir():
            yield from self.tree(link)
        else:
            self.seen.add(str(real))
            if real.is_file():
                yield link, None
            elif kind_of(link, b"") or kind_of(real, b""):
                yield link, "not a regular file"


def _unreadable_dirs(errors: list[OSError]) -> Iterator[tuple[Path, str | None]]:
    while errors:
        err = errors.pop(0)
        yield Path(err.filename), f"cannot read the directory ({err.strerror or err})"


def _readable_kind(link: Path, real: Path) -> bool:
    if kind_of(link, b"") or kind_of(real, b""):
        return True
    try:
        return real.is_file() and kind_of(real, read_head(real)) is not None
    except OSError:
        return False


def backup_path(path: Path) -> Path:
    """FILE.bak, or FILE.bak.N when earlier backups exist (never overwrite one)."""
    candidate = path.with_name(path.name + ".bak")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak.{n}")
        n += 1
    return candidate


def write_with_backup(path: Path, original: bytes, new_text: str) -> Path:
    """Keep the original bytes in a fresh backup, then replace the file atomically."""
    backup = backup_path(path)
    with open(backup, "xb") as out:
        out.write(original)
    mode = path.stat().st_mode
    tmp = path.with_name(f".{path.name}.vllm-cutover.tmp")
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="") as out:
        out.write(new_text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return backup
