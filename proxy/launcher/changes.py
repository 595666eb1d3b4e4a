"""The values translation works with: a setting as written, a change and its reason, an
action on a setting, and a setting matched to its rule; `render` writes a setting back."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Literal

from proxy.launcher.rules import SettingKind, Source

ChangeKind = Literal["flag", "env", "config", "warning"]


@dataclass(frozen=True)
class Setting:
    """One setting as written: a flag (`--x`), an env var or a `--config` YAML key."""

    kind: SettingKind
    name: str
    value: str | None


@dataclass(frozen=True)
class Change:
    """One explained change; `new` is None when the old setting is removed.

    `old`/`new` are written as they appear in their place (shell words for flags,
    NAME=value for env vars, `key: value` for config keys). `new_kind` says where `new` goes
    when it differs from `kind` (an env var that became a flag). `manual` says what the
    operator must decide by hand when the target has no equivalent."""

    kind: ChangeKind
    old: str
    new: str | None
    reason: str
    new_kind: SettingKind | None = None
    manual: str | None = None


@dataclass(frozen=True)
class Action:
    """Replace `source` with `replacement` (empty: remove it)."""

    source: Setting
    replacement: tuple[Setting, ...]


@dataclass(frozen=True)
class Match:
    """A setting, the rule it matched and the backend it asks for (None: nothing)."""

    setting: Setting
    source: Source
    intent: str | None
    position: int


def render(setting: Setting) -> str:
    """A setting as written in its place."""
    if setting.kind == "flag":
        return shlex.join([setting.name] + ([] if setting.value is None else [setting.value]))
    if setting.kind == "env":
        return f"{setting.name}={shlex.quote(setting.value or '')}"
    value = setting.value or ""
    return f"{setting.name}: {shlex.quote(value) if value.startswith('{') else value}"
