"""README's "Layout" names every package and room of `proxy/`, and nothing that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layout_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Layout\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_layout_names_every_package_of_the_tree() -> None:
    layout = _layout_section()
    packages = sorted(
        p.parent.relative_to(ROOT).as_posix()
        for p in (ROOT / "proxy").rglob("__init__.py")
        if p.parent != ROOT / "proxy"
    )
    missing = [p for p in packages if f"`{p}`" not in layout]
    assert not missing, f"README Layout does not name {missing}"


def test_every_path_the_layout_names_exists() -> None:
    named = re.findall(r"`(proxy/[A-Za-z0-9_/.]+)`", _layout_section())
    assert named
    gone = [p for p in named if not (ROOT / p).exists()]
    assert not gone, f"README Layout names paths that do not exist: {gone}"
