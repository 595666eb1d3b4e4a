"""Apply the rule table (`proxy.launcher.rules`) to a set of settings: pure values in and out.

`translate` is what the planner uses on a whole command; `translate_setting` is the small
entry point for the scanner, which fixes one setting (or an env group) at a time.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from packaging.version import Version

from proxy.launcher.rules import (
    AUTO,
    CHOICES,
    DROP,
    FROM_COMPANION,
    MECHANISMS,
    SOURCES,
    Choice,
    Mechanism,
    Policy,
    Scope,
    SettingKind,
    Source,
    family_of,
)
from proxy.launcher.versions import in_range, release_of

ChangeKind = Literal["flag", "env", "config", "warning"]


class TranslationError(ValueError):
    """A setting the table knows whose value it cannot interpret (the value is quoted)."""


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
    when it differs from `kind` (an env var that became a flag)."""

    kind: ChangeKind
    old: str
    new: str | None
    reason: str
    new_kind: SettingKind | None = None


@dataclass(frozen=True)
class Action:
    """Replace `source` with `replacement` (empty: remove it)."""

    source: Setting
    replacement: tuple[Setting, ...]


@dataclass(frozen=True)
class Translation:
    actions: tuple[Action, ...]
    changes: tuple[Change, ...]
    linear_backend: str | None  # effective NVFP4 linear backend, None when left to vLLM
    moe_backend: str | None


@dataclass(frozen=True)
class _Match:
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


def _flag_name(setting: Setting) -> str:
    name = setting.name if setting.kind == "flag" else "--" + setting.name
    return name if not name.startswith("--") else "--" + name[2:].replace("_", "-")


def _normalized(value: str, how: str) -> str:
    if how == "exact":
        return value
    if how == "bool":
        return {"true": "1", "false": "0"}.get(value.strip().lower(), value.strip())
    return value.strip().lower().replace("-", "_")


def _json_value(value: str, path: tuple[str, ...]) -> str | None:
    try:
        node: object = json.loads(value)
    except ValueError:
        return None
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, str) else None


def _match(setting: Setting, position: int, env: Mapping[str, str]) -> _Match | None:
    for source in SOURCES:
        if setting.kind == "env":
            if source.kind != "env" or source.name != setting.name:
                continue
        elif source.kind != "flag" or _flag_name(setting) not in (source.name, *source.aliases):
            continue
        raw = setting.value or ""
        if source.json_path:
            found = _json_value(raw, source.json_path)
            if found is None:
                return None
            raw = found
        value = _normalized(raw, source.normalize)
        if source.values is None:
            return _Match(setting, source, value, position)
        table = dict(source.values)
        if value not in table:
            if source.strict:
                allowed = ", ".join(v for v, _ in source.values)
                raise TranslationError(
                    f"{render(setting)}: unknown value {setting.value!r} for {source.name} "
                    f"(known: {allowed})"
                )
            return None
        intent = table[value]
        if intent == FROM_COMPANION and source.companion:
            chosen = env.get(source.companion)
            intent = dict(source.companion_values).get(chosen or "", source.companion_default)
        return _Match(setting, source, intent, position)
    return None


def _mechanism(scope: Scope, backend: str, target: Version) -> tuple[Mechanism, str] | None:
    for mech in MECHANISMS:
        if mech.scope != scope or not in_range(target, mech.versions):
            continue
        for spelled in mech.values:
            if spelled.backend == backend and in_range(target, spelled.versions):
                return mech, spelled.value
    return None


def _keeps(match: _Match, target: Version) -> bool:
    """Honoured, not deprecated, and (where the table spells its value) valid at `target`."""
    source = match.source
    if not in_range(target, source.accepted) or in_range(target, source.deprecated):
        return False
    for mech in MECHANISMS:
        for kind, name, _ in mech.outputs:
            if kind == source.kind and name == source.name:
                for spelled in mech.values:
                    if spelled.backend == match.intent and not in_range(target, spelled.versions):
                        return False
    return True


def _choice(policy: Policy, scope: Scope, family: str) -> Choice:
    for row in CHOICES:
        if row.scope == scope and row.policy in (policy, "*") and row.family in (family, "*"):
            return row
    raise LookupError(f"no choice row for {policy}/{scope}/{family}")  # table bug


def _emitted(mech: Mechanism, value: str, source_kind: SettingKind) -> tuple[Setting, ...]:
    out = []
    for kind, name, template in mech.outputs:
        text = template.replace("{value}", value)
        if kind == "flag" and source_kind == "config":
            out.append(Setting("config", name[2:], text))
        else:
            out.append(Setting(kind, name, text))
    return tuple(out)


def _describe(settings: Sequence[Setting]) -> str | None:
    return " ".join(render(s) for s in settings) if settings else None


def _new_kind(source: Setting, new: Sequence[Setting]) -> SettingKind | None:
    kinds = {s.kind for s in new}
    return kinds.pop() if len(kinds) == 1 and source.kind not in kinds else None


def _dropped(match: _Match, release: Version) -> Change:
    # vLLM >= 0.17 only logs "Unknown vLLM environment variable"; older ones say nothing.
    return Change(match.setting.kind, render(match.setting), None,
                  f"{match.source.about}; vLLM {release} does not read it, so it is removed "
                  "rather than left to be silently ignored")


def _translate_scope(
    scope: Scope, matches: list[_Match], target: Version, policy: Policy, family: str,
) -> tuple[list[Action], list[Change], str | None]:
    actions: list[Action] = []
    changes: list[Change] = []
    release = release_of(target)
    kept = [m for m in matches if _keeps(m, target)]
    wanted = [m for m in kept if m.intent is not None]
    if wanted:
        winner = max(wanted, key=lambda m: (m.source.rank, m.position))
        backend: str | None = None if winner.intent == AUTO else winner.intent
        given = render(winner.setting)
        for m in matches:
            if m in kept:
                continue
            actions.append(Action(m.setting, ()))
            if m.intent is None:
                changes.append(_dropped(m, release))
            else:
                changes.append(Change(m.setting.kind, render(m.setting), None,
                                      f"superseded: {given} is given explicitly"))
                changes.append(Change("warning", render(m.setting), None,
                                      f"the explicit {given} wins over the translation of "
                                      f"{render(m.setting)}"))
        return actions, changes, backend
    asking = [m for m in matches if m.intent is not None]
    for m in matches:
        if m.intent is None and m not in kept:
            actions.append(Action(m.setting, ()))
            changes.append(_dropped(m, release))
    if not asking:
        return actions, changes, None
    lead = max(asking, key=lambda m: (m.source.rank, m.position))
    for m in asking:
        if m is not lead:
            actions.append(Action(m.setting, ()))
            changes.append(Change(m.setting.kind, render(m.setting), None,
                                  f"superseded by {render(lead.setting)}, which takes precedence"))
    requested = lead.intent or AUTO
    row = _choice(policy, scope, family)
    candidates = [requested if c == "{requested}" else c for c in row.candidates]
    new: tuple[Setting, ...] = ()
    chosen: str | None = None
    why = ""
    warnings: list[Change] = []
    for candidate in candidates:
        if candidate in (AUTO, DROP):
            break
        found = _mechanism(scope, candidate, target)
        if found:
            mech, value = found
            new, chosen = _emitted(mech, value, lead.setting.kind), candidate
            why = f"{row.reason}; {mech.note}"
            if mech.warning and new:
                warnings.append(Change("warning", render(lead.setting), _describe(new),
                                       mech.warning))
            break
    if chosen is None:
        tried = "/".join(c for c in candidates if c not in (AUTO, DROP))
        why = (f"{row.reason}; vLLM {release} cannot select {tried}: left to vLLM's own choice"
               if tried else f"{row.reason}; '{requested}' leaves the choice to vLLM")
    if row.warning:
        warnings.append(Change("warning", render(lead.setting), chosen, row.warning))
    if new == (lead.setting,):
        changes.append(Change("warning", render(lead.setting), None,
                              f"{lead.source.about}; kept because vLLM {release} has no other "
                              "way to select it"))
        return actions, changes + warnings, chosen
    actions.append(Action(lead.setting, new))
    changes.append(Change(lead.setting.kind, render(lead.setting), _describe(new),
                          f"{lead.source.about}; {why}", _new_kind(lead.setting, new)))
    return actions, changes + warnings, chosen


def translate(
    settings: Sequence[Setting],
    *,
    target: Version,
    policy: Policy,
    compute_capability: tuple[int, int] | None,
) -> Translation:
    """Translate every FP4 setting of one command for vLLM `target` (already range-checked)."""
    env = {s.name: s.value or "" for s in settings if s.kind == "env"}
    matches = [m for i, s in enumerate(settings) if (m := _match(s, i, env)) is not None]
    family = family_of(compute_capability)
    actions: list[Action] = []
    changes: list[Change] = []
    for m in matches:
        if m.source.scope == "quantization":
            actions.append(Action(m.setting, ()))
            changes.append(Change(m.setting.kind, render(m.setting), None,
                                  f"{m.source.about}; vLLM detects ModelOpt NVFP4 "
                                  "(modelopt_fp4) and compressed-tensors checkpoints itself"))
    backends: dict[str, str | None] = {}
    for scope in ("linear", "moe"):
        scoped = [m for m in matches if m.source.scope == scope]
        acts, chs, backend = _translate_scope(scope, scoped, target, policy, family)
        actions += acts
        changes += chs
        backends[scope] = backend
    return Translation(tuple(actions), tuple(changes), backends["linear"], backends["moe"])


def translate_setting(
    kind: SettingKind,
    name: str,
    value: str | None,
    *,
    target: Version,
    policy: Policy = "migrate",
    compute_capability: tuple[int, int] | None = None,
    related_env: Mapping[str, str] | None = None,
) -> list[Change]:
    """Changes for one setting found in a file (scanner API). `related_env` holds the other env
    vars set next to it (VLLM_FLASHINFER_MOE_BACKEND gives VLLM_USE_FLASHINFER_MOE_FP4 its
    meaning). Empty list: nothing to change. Raises TranslationError on an unknown value."""
    setting = Setting(kind, name, value)
    others = [Setting("env", k, v) for k, v in (related_env or {}).items() if k != name]
    result = translate([setting, *others], target=target, policy=policy,
                       compute_capability=compute_capability)
    mine = render(setting)
    return [c for c in result.changes if c.old == mine]
