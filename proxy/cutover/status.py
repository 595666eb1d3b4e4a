"""The cutover's status: the JSON the admin API answers, and its text form for the CLI.

Roles are shown by version: the primary and the shadow are each "old" or "new" (or
"other" for a backend the cutover does not know), so after the promotion the report
still reads "new against old".
"""

from __future__ import annotations

import time
from typing import Any

from proxy.cutover.control import RoutesView
from proxy.cutover.model import CutoverState, Endpoint


def _side(url: str | None, state: CutoverState | None) -> dict[str, Any] | None:
    if url is None:
        return None
    ends: list[tuple[str, Endpoint | None]] = [("old", state.old if state else None),
                                               ("new", state.new if state else None)]
    for version, end in ends:
        if end is not None and end.url == url:
            return {"version": version, **end.to_json()}
    return {"version": "other", "url": url}


def status_json(state: CutoverState | None, routes: RoutesView | None,
                now: float) -> dict[str, Any]:
    """What `GET /admin/cutover` answers; `phase` is null before any cutover."""
    data: dict[str, Any] = {
        "id": None, "phase": None, "terminal": None,
        "primary": _side(routes.primary if routes else None, state),
        "shadow": _side(routes.shadow if routes else None, state),
        "routes_version": routes.version if routes else None,
        "verdict": None, "reasons": [], "samples": 0, "min_samples": None,
        "deadline_unix": None, "time_left_s": None, "history": [],
    }
    if state is None:
        return data
    full = state.to_json()
    for name in ("spec", "schema", "served_models", "baseline_url", "old_stopped",
                 "started_unix", "phase_since_unix", "error", "log_tail", "note", "pending",
                 "promoted_unix", "drained_unix", "rollback_started_unix", "rollback_s",
                 "backup_bytes", "end_phase", "verdict", "reasons", "samples", "waiting_for",
                 "decision_in_s", "hopeless_since_unix", "history",
                 "deadline_unix", "shutdown_grace_s", "mirror_off"):
        data[name] = full[name]
    data.update(id=state.id, phase=state.phase.value, terminal=state.phase.terminal,
                min_samples=state.spec.min_samples, old=state.old.to_json(),
                new=state.new.to_json() if state.new else None)
    if state.deadline_unix is not None and not state.phase.terminal:
        data["time_left_s"] = round(max(0.0, state.deadline_unix - now), 1)
    return data


def _describe(side: dict[str, Any] | None) -> str:
    if side is None:
        return "none"
    parts = [f"{side['version']:<5} {side['url']}"]
    if side.get("image"):
        parts.append(f"image {side['image']}")
    if side.get("vllm_version"):
        parts.append(f"vLLM {side['vllm_version']}")
    if side.get("name"):
        parts.append(f"container {side['name']}")
    return "  ".join(parts)


def _clock(at_unix: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at_unix))


def progress_line(status: dict[str, Any]) -> str:
    """One line: phase, verdict, samples n/min, what the gate waits for and about how
    long, the phase's deadline (for `status --watch`)."""
    parts = [f"phase {status['phase']}"]
    if status.get("verdict"):
        parts.append(f"verdict {status['verdict']}")
    if status.get("min_samples") is not None:
        parts.append(f"samples {status['samples']}/{status['min_samples']}")
    if status.get("waiting_for"):
        parts.append(status["waiting_for"])
    if status.get("time_left_s") is not None:
        parts.append(f"deadline in {status['time_left_s']:.0f}s")
    if status.get("pending"):
        parts.append(f"pending {status['pending']}")
    if status.get("note"):
        parts.append(f"({status['note']})")
    return "  ".join(parts)


def render_text(status: dict[str, Any]) -> str:
    """The text `vllm-cutover cutover status` prints."""
    lines = []
    if status.get("phase") is None:
        lines.append("no cutover has run on this proxy")
    else:
        lines.append(f"cutover {status['id']}: {progress_line(status)}")
    lines.append(f"  primary: {_describe(status.get('primary'))}")
    lines.append(f"  shadow:  {_describe(status.get('shadow'))}")
    if status.get("phase") is None:
        return "\n".join(lines) + "\n"
    for reason in status.get("reasons") or []:
        lines.append(f"  reason:  {reason}")
    if status.get("rollback_s") is not None:
        lines.append(f"  rollback took {status['rollback_s']:.2f}s")
    if status.get("error"):
        lines.append(f"  error:   {status['error']}")
    if status.get("log_tail"):
        lines.append("  last log lines of the new container:")
        lines.extend(f"    | {line}" for line in status["log_tail"].splitlines())
    lines.append("  history:")
    for t in status.get("history") or []:
        lines.append(f"    {_clock(t['at_unix'])}  {t['from'] or '-':>14} -> {t['to']:<14} "
                     f"{t['reason']}")
    return "\n".join(lines) + "\n"
