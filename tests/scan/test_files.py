from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from proxy.scan.files import backup_path, iter_files, kind_of, write_with_backup


@pytest.mark.parametrize(("name", "head", "kind"), [
    ("Dockerfile", b"", "dockerfile"),
    ("Dockerfile.gpu", b"", "dockerfile"),
    ("serve.Containerfile", b"", "dockerfile"),
    ("docker-compose.yml", b"", "yaml"),
    ("deploy.yaml", b"", "yaml"),
    (".env", b"", "env"),
    ("prod.env", b"", "env"),
    (".env.local", b"", "env"),
    ("run.sh", b"", "shell"),
    ("start", b"#!/bin/bash\nvllm serve", "shell"),
    ("start", b"#!/usr/bin/env sh\n", "shell"),
    ("README.md", b"", None),
    ("Dockerfile.bak", b"", None),
    ("run.sh.bak.2", b"", None),
])
def test_kind_of(name: str, head: bytes, kind: str | None) -> None:
    assert kind_of(Path(name), head) == kind


def test_walk_skips_vcs_and_dependencies(tmp_path: Path) -> None:
    for rel in (".git/hooks/run.sh", "node_modules/x/run.sh", "app/run.sh", "b.sh"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    found = [p.relative_to(tmp_path).as_posix() for p, _ in iter_files(tmp_path)]
    assert found == ["b.sh", "app/run.sh"]


def _walked(root: Path) -> list[tuple[str, str | None]]:
    return [(p.relative_to(root).as_posix(), why) for p, why in iter_files(root)]


def test_symlinks_inside_the_tree_are_followed_once(tmp_path: Path) -> None:
    root = tmp_path / "deploy"
    (root / "real").mkdir(parents=True)
    (root / "real" / "run.sh").write_text("x\n")
    (root / "node_modules" / "tool").mkdir(parents=True)
    (root / "node_modules" / "tool" / "serve.sh").write_text("x\n")
    (root / "a-link.sh").symlink_to("real/run.sh")  # the real file is read, once
    (root / "alias").symlink_to("real")  # same directory again: not walked twice
    (root / "real" / "loop").symlink_to("..")  # a loop: ends
    (root / "tool").symlink_to("node_modules/tool")  # reached only through the link
    (root / "x.sh").symlink_to("y.sh")
    (root / "y.sh").symlink_to("x.sh")  # a loop of links: nothing to read
    (root / "gone.sh").symlink_to("missing.sh")
    assert _walked(root) == [("real/run.sh", None), ("tool/serve.sh", None)]


def test_what_is_not_read_is_named(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "serve.sh").write_text("x\n")
    (outside / "LICENSE").write_text("x\n")
    root = tmp_path / "deploy"
    root.mkdir()
    (root / "serve.sh").symlink_to(outside / "serve.sh")
    (root / "LICENSE").symlink_to(outside / "LICENSE")  # no kind the scanner reads
    (root / "shared").symlink_to(outside)
    os.mkfifo(root / "pipe.sh")
    assert _walked(root) == [
        ("pipe.sh", "not a regular file"),
        ("shared", f"symlink to {outside}, outside the scanned tree"),
        ("serve.sh", f"symlink to {outside / 'serve.sh'}, outside the scanned tree"),
    ]
    assert list(iter_files(root / "pipe.sh")) == [(root / "pipe.sh", "not a regular file")]


def test_backup_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "run.sh"
    target.write_text("new\n")
    (tmp_path / "run.sh.bak").write_text("older backup\n")
    assert backup_path(target).name == "run.sh.bak.1"
    target.chmod(0o750)
    backup = write_with_backup(target, b"original\n", "fixed\n")
    assert backup.name == "run.sh.bak.1" and backup.read_bytes() == b"original\n"
    assert (tmp_path / "run.sh.bak").read_text() == "older backup\n"
    assert target.read_text() == "fixed\n" and target.stat().st_mode & 0o777 == 0o750


def test_an_unreadable_directory_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "serve.sh").write_text("x\n")
    (tmp_path / "run.sh").write_text("x\n")
    scandir = os.scandir

    def refusing(path: Any) -> Any:  # root reads every directory: refuse one by hand
        if os.fspath(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    assert _walked(tmp_path) == [("run.sh", None),
                                 ("locked", "cannot read the directory (Permission denied)")]
