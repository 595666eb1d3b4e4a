"""What is installed for another interpreter, read without starting it.

The launcher often runs in another venv than vLLM (a sidecar venv, CI's dev venv). Starting
that interpreter only to read package metadata costs 50-150 ms of the launch budget, so a
venv's own site-packages are read directly; anything else falls back to a subprocess.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Sequence


def is_this_interpreter(python: str | None) -> bool:
    """True for the interpreter running the launcher. Not samefile: venv pythons are
    symlinks to one base interpreter with different packages."""
    return python is None or os.path.abspath(python) == os.path.abspath(sys.executable)


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def venv_site_packages(python: str) -> list[str] | None:
    """site-packages of the isolated venv that `python` belongs to; None when it is not
    one (a system Python, or a venv that also sees the system site-packages)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    try:
        with open(os.path.join(root, "pyvenv.cfg"), encoding="utf-8") as handle:
            config = handle.read().lower().replace(" ", "")
    except OSError:
        return None
    if "include-system-site-packages=true" in config:
        return None
    sites = sorted(glob.glob(os.path.join(root, "lib", "python3*", "site-packages")))
    return sites or None


def venv_version(python: str, distributions: Sequence[str]) -> tuple[bool, str | None]:
    """(known, version of the first of `distributions` installed for `python`), read from
    the `NAME-VERSION.dist-info` folder names of its venv (parsing every METADATA file of a
    vLLM venv costs ~0.2 s); known is False when `python` is not an isolated venv."""
    sites = venv_site_packages(python)
    if sites is None:
        return False, None
    wanted = {_normalise(name): rank for rank, name in enumerate(distributions)}
    found: dict[int, str] = {}
    for site in sites:
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith(".dist-info") or "-" not in entry:
                continue
            name, _, version = entry[: -len(".dist-info")].partition("-")
            rank = wanted.get(_normalise(name))
            if rank is not None and version:
                found.setdefault(rank, version)
    return True, found[min(found)] if found else None
