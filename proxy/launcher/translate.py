"""Apply the rule table (`proxy.launcher.rules`) to a set of settings: pure values in and out.

`translate` is what the planner uses on a whole command; `translate_setting` is the small
entry point for the scanner, which fixes one setting (or an env group) at a time. Each
setting is matched to its rule here; `proxy.launcher.choose` decides per scope.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.version import Version

from proxy.launcher.changes import Action, Change, Match, Setting, render
from proxy.launcher.choose import translate_scope
from proxy.launcher.command import flag_of
from proxy.launcher.gpus import normalize_backend
from proxy.launcher.rules import FROM_COMPANION, SOURCES, Policy, SettingKind

__all__ = ["Action", "Change", "Setting", "Translation", "TranslationError", "render",
           "translate", "translate_setting"]


class TranslationError(ValueError):
    """A setting the table knows whose value it cannot interpret (the value is quoted)."""


@dataclass(frozen=True)
class Translation:
    actions: tuple[Action, ...]
    changes: tuple[Change, ...]
    linear_backend: str | None  # effective NVFP4 linear backend, None when left to vLLM
    moe_backend: str | None


def _normalized(value: str, how: str) -> str:
    if how == "exact":
        return value
    if how == "bool":
        return {"true": "1", "false": "0"}.get(value.strip().lower(), value.strip())
    return normalize_backend(value) or ""


def _json_value(value: str, path: tuple[str, ...]) -> str | None:
    try:
        node: object = json.loads(value)
    except ValueError:
        return None
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, str) else None


def _match(setting: Setting, position: int, env: Mapping[str, str]) -> Match | None:
    for source in SOURCES:
        if setting.kind == "env":
            if source.kind != "env" or source.name != setting.name:
                continue
        elif source.kind != "flag" or flag_of(setting.kind, setting.name) not in (source.name, *source.aliases):
            continue
        raw = setting.value or ""
        if source.json_path:
            found = _json_value(raw, source.json_path)
            if found is None:
                return None
            raw = found
        value = _normalized(raw, source.normalize)
        if source.values is None:
            return Match(setting, source, value, position)
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
        return Match(setting, source, intent, position)
    return None


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
        acts, chs, backend = translate_scope(scope, scoped, target, policy,
                                              compute_capability)
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
