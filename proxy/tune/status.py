"""The tune's status as text: the phase, the winner, and one row per candidate."""

from __future__ import annotations

from typing import Any


def _ratio(value: Any) -> str:
    return f"{value:.2f}x" if isinstance(value, (int, float)) else "-"


def render_text(status: dict[str, Any]) -> str:
    """What `tune status` prints (the JSON has every field)."""
    if status.get("phase") is None:
        return "no tune has run on this proxy\n"
    head = f"tune {status.get('id')}: {status['phase']} ({status.get('reason', '')})"
    who = (f"old: {status.get('old_url')}   winner: {status.get('winner') or '-'}   "
           f"promote: {status.get('promote')}")
    lines = [head, who]
    if status.get("cutover"):
        cutover = status["cutover"]
        lines.append(f"promotion: cutover {cutover.get('id')} is {cutover.get('phase')}")
    rows = [("candidate", "state", "verdict", "requests", "answer/old", "reason")]
    for c in status.get("candidates", []):
        rows.append((c["name"], c["state"], c.get("verdict") or "-", str(c.get("requests", 0)),
                     _ratio(c.get("median_ratio")), c.get("reason", "")))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row[:5], widths)) + "  " + row[5])
    return "\n".join(lines) + "\n"
