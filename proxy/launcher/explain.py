"""Human and JSON explanations of a launch plan: one stderr line per change, the report."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.launcher.translate import Change


def change_line(change: Change) -> str:
    """`old -> new (why)`; removals read `old -> (removed)`, warnings start with `warning:`,
    and what has no equivalent ends with `[manual edit: ...]`."""
    if change.kind == "warning":
        return f"warning: {change.old}: {change.reason}"
    line = f"{change.old} -> {change.new if change.new is not None else '(removed)'} ({change.reason})"
    return line + (f" [manual edit: {change.manual}]" if change.manual else "")


def vllm_env(env: Mapping[str, str]) -> dict[str, str]:
    """The VLLM_* variables vLLM will start with, sorted by name."""
    return {k: env[k] for k in sorted(env) if k.startswith("VLLM_")}


def compute_capability_text(capability: tuple[int, int] | None) -> str | None:
    return None if capability is None else f"{capability[0]}.{capability[1]}"


def command_text(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """The final command as a shell line, preceded by its VLLM_* environment."""
    assignments = [f"{k}={shlex.quote(v)}" for k, v in vllm_env(env).items()]
    return " ".join([*assignments, shlex.join(argv)])


def build_report(
    *,
    vllm_version: str,
    compute_capability: tuple[int, int] | None,
    policy: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    changes: Sequence[Change],
    preflight: Mapping[str, Any] | None,
    tables: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The `--report-json` document."""
    return {
        "vllm_version": vllm_version,
        "compute_capability": compute_capability_text(compute_capability),
        "policy": policy,
        "argv": list(argv),
        "env": vllm_env(env),
        "changes": [
            {"kind": c.kind, "old": c.old, "new": c.new, "reason": c.reason, "manual": c.manual}
            for c in changes
        ],
        "preflight": dict(preflight) if preflight is not None else None,
        "tables": dict(tables) if tables is not None else None,
    }
