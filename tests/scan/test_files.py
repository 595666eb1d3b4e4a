from __future__ import annotations

from pathlib import Path

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
    found = [p.relative_to(tmp_path).as_posix() for p in iter_files(tmp_path)]
    assert found == ["b.sh", "app/run.sh"]


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
