"""What the launcher says about a vLLM release outside its tables (pure text).

A command the tables match nothing in runs unchanged on any release; a newer release gets
the newest known forms, which the installed vLLM's own parser then accepts or rejects; an
older one is placed by the tables' ranges (`proxy.launcher.versions.coverage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.launcher.changes import Change
from proxy.launcher.releases import NEWEST, TABLES_TEXT
from proxy.launcher.versions import Coverage, outside_text, parse_version, planned_for

STRICT_FLAG = "--strict-versions"


def unchanged(version: str, outcome: str = "so it runs unchanged") -> str:
    """The one line for a command that runs as given on a release outside the tables."""
    return (f"{outside_text(parse_version(version))}: the command and its environment "
            f"hold nothing they match, {outcome}")


def placed_by_ranges(version: str) -> str:
    """The line for an older release whose settings the tables' ranges placed."""
    return (f"{outside_text(parse_version(version))}: the settings above were placed by the "
            f"tables' version ranges; what they cannot place for vLLM {version} is marked "
            "[manual edit]")


def translated_forward(version: str, verdict: str) -> str:
    """The warning for a newer release whose settings got the newest known forms;
    `verdict` says what vLLM's own parser made of them."""
    return (f"warning: {outside_text(parse_version(version))}: the FP4 settings were "
            f"translated to the forms of vLLM {NEWEST}, the newest release the tables were "
            f"written for; {verdict}")


def rejected(version: str, changes: Sequence[Change], errors: Sequence[str]) -> str:
    """Why a newer release's launch stops: vLLM's own message and what was tried."""
    tried = "; ".join(f"{c.old} -> {c.new if c.new is not None else '(removed)'}"
                      for c in changes if c.kind != "warning")
    return (f"{outside_text(parse_version(version))}; the launcher translated the FP4 "
            f"settings to vLLM {NEWEST}'s forms ({tried}) and vLLM {version}'s own parser "
            f"rejects them: {'; '.join(errors)}. Write these settings for vLLM {version} by "
            f"hand, or give {STRICT_FLAG} to refuse releases outside the tables")


def tables_json(version: str, where: Coverage) -> dict[str, Any]:
    """The report's `tables` entry: where the release lies and whose forms were used."""
    return {"coverage": where, "known": TABLES_TEXT,
            "planned_for": str(planned_for(parse_version(version)))}
