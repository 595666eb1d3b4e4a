"""Settings found in a file + what the rule table says they become -> findings and fixes.

Pure: file text in, findings (and the edits that would fix them) out. What is
deprecated and what replaces it comes from the launcher's versioned rule table,
through the `Translate` callable (see `proxy.scan.rules_bridge`); this module only
decides whether that replacement can be written where the setting sits.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from proxy.scan.dockerfile import find_in_dockerfile
from proxy.scan.edits import prefix_env, remove_entry, replace_flag, set_key_value
from proxy.scan.envfile import find_in_env_file
from proxy.scan.files import FileKind
from proxy.scan.model import Edit, Occurrence, SettingKind, file_host, line_and_column
from proxy.scan.rewrite import Plan, file_offset
from proxy.scan.shell import find_in_shell
from proxy.scan.template import find_in_template
from proxy.scan.yaml_finder import find_in_yaml

Status = Literal["fixable", "manual"]


@dataclass(frozen=True)
class Replacement:
    """What one old setting becomes for the target: new vLLM flags and/or env vars.

    `flags` are command-line tokens (e.g. ("--linear-backend", "flashinfer_cutlass"));
    `env` holds (NAME, VALUE) pairs to set. Both empty: drop the setting.
    """

    flags: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    reason: str
    error: str | None = None  # the rule table could not read the value
    scope: str = ""  # what it selects ("linear", "moe", ...): fixed together or not at all
    manual: str | None = None  # the target has no equivalent: what to decide by hand

    def describe(self) -> str:
        if self.error is not None:
            return "?"
        parts = [shlex.join(self.flags)] if self.flags else []
        parts += [f"{name}={value}" for name, value in self.env]
        return " + ".join(parts) if parts else "by hand" if self.manual else "remove it"


# All settings of one file -> what each becomes (None: nothing to change).
Translate = Callable[[Sequence[Occurrence]], "list[Replacement | None]"]


@dataclass(frozen=True)
class Finding:
    """One deprecated setting in one file, with its fix for the target version."""

    file: str
    line: int
    column: int
    kind: SettingKind | Literal["image"]  # "image": the vLLM version a file pins
    name: str
    value: str | None
    fix: str
    reason: str
    status: Status
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "column": self.column,
                "kind": self.kind, "name": self.name, "value": self.value,
                "fix": self.fix, "reason": self.reason, "status": self.status,
                "note": self.note}

    def human(self) -> str:
        found = self.name if self.value is None else f"{self.name} {self.value}"
        if self.kind == "env" and self.value is not None:
            found = f"{self.name}={self.value}"
        elif self.kind == "config":
            found = f"{self.name}: {self.value}"
        elif self.kind == "image":
            found = f"{self.value}"
        line = f"{self.file}:{self.line}: found {found} -> fix {self.fix} ({self.reason})"
        return line + (f" [manual edit: {self.note}]" if self.status == "manual" else "")


def find_settings(kind: FileKind, text: str) -> list[Occurrence]:
    """Every flag, env var and config key the finder for `kind` sees (raises on bad YAML)."""
    if kind == "yaml":
        return find_in_yaml(text)
    if kind == "dockerfile":
        return find_in_dockerfile(text)
    if kind == "env":
        return find_in_env_file(text)
    if kind == "template":
        return find_in_template(text)
    return find_in_shell(text, file_host(text))


def _config_key(flag: str, old_key: str) -> str:
    key = flag.removeprefix("--")
    return key.replace("-", "_") if "_" in old_key else key


def plan_edits(occ: Occurrence, repl: Replacement) -> tuple[list[Edit] | None, str]:
    """The local edits writing `repl` where `occ` sits, or (None, why it needs a hand)."""
    if repl.error is not None:
        return None, repl.error
    if repl.manual is not None:
        return None, repl.manual
    flags, env = list(repl.flags), list(repl.env)
    if occ.kind == "flag":
        if not env:
            return replace_flag(occ, flags), ""
        if not flags and len(env) == 1:
            edits = prefix_env(occ, *env[0])
            if edits is not None:
                return edits, ""
        return None, ("the new setting is an environment variable: set it in this "
                      "container's environment")
    if occ.kind == "env":
        if flags:
            return None, ("the new setting is a vLLM flag: add it to this container's "
                          "vLLM command and remove this variable")
        if not env:
            return remove_entry(occ), ""
        if len(env) == 1:
            edits = set_key_value(occ, *env[0])
            return (edits, "") if edits is not None else (None, "the value is not literal")
        return None, "one variable becomes several: set them in this environment"
    if env:
        return None, "the new setting is an environment variable, not a config key"
    if not flags:
        return remove_entry(occ), ""
    values = flags[1:]
    if len(flags) <= 2 and flags[0].startswith("--"):
        key = _config_key(flags[0], occ.name)
        edits = set_key_value(occ, key, values[0] if values else "true")
        if edits is not None:
            return edits, ""
    return None, "the new flags do not map onto this one key"


def scan_text(label: str, kind: FileKind, text: str, translate: Translate
              ) -> list[tuple[Finding, Plan | None]]:
    """Findings in one file's text, each with the plan that fixes it (None: manual)."""
    found = find_settings(kind, text)
    matched = [(occ, repl) for occ, repl in zip(found, translate(found)) if repl is not None]
    planned = [(occ, repl, *plan_edits(occ, repl)) for occ, repl in matched]
    # Fixing half of what selects one kernel (say, dropping a flag superseded by an env
    # var that needs a hand edit) would leave the command asking for something else.
    by_hand = {(occ.group, repl.scope): occ for occ, repl, edits, _ in planned
               if edits is None and repl.scope}
    out: list[tuple[Finding, Plan | None]] = []
    for occ, repl, edits, note in planned:
        partner = by_hand.get((occ.group, repl.scope))
        if edits is not None and partner is not None:
            edits, note = None, f"fix together with {partner.name}, which needs a manual edit"
        line, column = line_and_column(text, file_offset(text, occ))
        finding = Finding(label, line, column, occ.kind, occ.name, occ.value, repl.describe(),
                          repl.reason, "fixable" if edits is not None else "manual", note)
        out.append((finding, Plan(occ, tuple(edits)) if edits is not None else None))
    return sorted(out, key=lambda pair: (pair[0].line, pair[0].column))
