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
_MAX_BYTES = 5_000_000


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


def iter_files(root: Path) -> Iterator[Path]:
    """Files under `root` in a stable order, skipping VCS, dependency and cache dirs."""
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                yield path


def read_text(path: Path) -> tuple[str | None, bytes]:
    """(text, bytes); text None for binary, huge or non-UTF-8 files."""
    data = path.read_bytes()
    if is_binary(data[:8192]) or len(data) > _MAX_BYTES:
        return None, data[:8192]
    try:
        return data.decode("utf-8"), data
    except UnicodeDecodeError:
        return None, data[:8192]


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
    with open(tmp, "w", encoding="utf-8", newline="") as out:
        out.write(new_text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return backup
