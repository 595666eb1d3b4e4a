"""The decision for one scope (the NVFP4 GEMM, the MoE): which of the matched settings
stays, and what each of the others becomes in the target release, read from the rule
table (`proxy.launcher.rules`). Pure: matched settings in, actions and changes out."""

from __future__ import annotations

from collections.abc import Sequence

from packaging.version import Version

from proxy.launcher import capabilities
from proxy.launcher.capabilities import Capability
from proxy.launcher.changes import Action, Change, Match, Setting, render
from proxy.launcher.gpus import flashinfer_backend_name
from proxy.launcher.rules import (
    AUTO,
    CHOICES,
    DROP,
    MECHANISMS,
    NOT_FLASHINFER,
    Choice,
    Mechanism,
    Policy,
    Scope,
    SettingKind,
)
from proxy.launcher.versions import in_range, release_of


def _mechanism(scope: Scope, backend: str, target: Version) -> tuple[Mechanism, str] | None:
    for mech in MECHANISMS:
        if mech.scope != scope or not in_range(target, mech.versions):
            continue
        for spelled in mech.values:
            if spelled.backend == backend and in_range(target, spelled.versions):
                return mech, spelled.value
    return None


def mechanism_for(scope: Scope, backend: str, target: Version) -> tuple[Mechanism, str] | None:
    """How release `target` selects `backend` (the mechanism and the backend's spelling in
    it), None when it has no way to; what `vllm-cutover tune --kernels auto` asks."""
    return _mechanism(scope, backend, target)


def _keeps(match: Match, target: Version) -> bool:
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


def _choice(policy: Policy, scope: Scope, family: str, requested: str, target: Version
            ) -> Choice:
    for row in CHOICES:
        if row.scope == scope and row.policy in (policy, "*") \
                and (row.families == "*" or family in row.families) \
                and (row.applies_to is None or requested in row.applies_to) \
                and in_range(target, row.versions):
            return row
    raise LookupError(f"no choice row for {policy}/{scope}/{family}/{requested}/{target}")


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


def _dropped(match: Match, target: Version) -> Change:
    # vLLM >= 0.17 only logs "Unknown vLLM environment variable"; older ones say nothing.
    source, release = match.source, release_of(target)
    why = (f"{source.about}; vLLM {release} still reads it but deprecates it, so it is removed now"
           if in_range(target, source.accepted) else f"{source.about}; vLLM {release} does not "
           "read it, so it is removed rather than left to be silently ignored")
    return Change(match.setting.kind, render(match.setting), None,
                  f"{why} ({source.off_note})" if source.off_note else why)


def _superseded(match: Match, winner: Match, backend: str | None, target: Version
                ) -> list[Change]:
    if match.intent is None:
        return [_dropped(match, target)]
    old, given = render(match.setting), render(winner.setting)
    if match.intent == NOT_FLASHINFER and backend and not backend.startswith("flashinfer"):
        return [Change(match.setting.kind, old, None,
                       f"{match.source.about}; the explicit {given} is no FlashInfer kernel, so "
                       "FlashInfer stays out as this opt-out asked")]
    return [Change(match.setting.kind, old, None, f"superseded: {given} is given explicitly"),
            Change("warning", old, None, f"the explicit {given} wins over the translation of {old}")]


def _runs_on(candidate: str, cc: Capability | None) -> bool:
    """False for a FlashInfer GEMM whose mm_fp4 does not list this (known) capability."""
    fi_backend = flashinfer_backend_name(candidate)
    if cc not in capabilities.KNOWN_CAPABILITIES or fi_backend is None:
        return True  # an unknown GPU: its CHOICES row warns instead
    return capabilities.mm_fp4_supports(fi_backend, cc)


def _pick(row: Choice, requested: str, scope: Scope, target: Version, kind: SettingKind,
          cc: Capability | None,
          ) -> tuple[tuple[Setting, ...], str | None, Mechanism | None, list[str], bool]:
    """Try the row's candidates in order: (settings, backend, mechanism, tried, fell back).
    An explicit request is kept as asked (the preflight judges it); the table's own
    candidates are skipped where FlashInfer does not run them."""
    tried: list[str] = []
    for candidate in (requested if c == "{requested}" else c for c in row.candidates):
        if candidate in (AUTO, DROP):
            return (), None, None, tried, candidate == AUTO
        if candidate != requested and not _runs_on(candidate, cc):
            continue
        tried.append(candidate)
        found = _mechanism(scope, candidate, target)
        if found:
            return _emitted(found[0], found[1], kind), candidate, found[0], tried, False
    return (), None, None, tried, False


def translate_scope(
    scope: Scope, matches: list[Match], target: Version, policy: Policy, cc: Capability | None,
) -> tuple[list[Action], list[Change], str | None]:
    """(actions, changes, the backend vLLM will be asked for: None when left to vLLM).
    A new-style setting the target reads as written wins; else the highest-ranked old one
    leads and becomes what its CHOICES row picks, the others go."""
    actions: list[Action] = []
    changes: list[Change] = []
    release = release_of(target)
    kept = [m for m in matches if _keeps(m, target)]
    wanted = [m for m in kept if m.intent is not None]
    if wanted:
        winner = max(wanted, key=lambda m: (m.source.rank, m.position))
        backend = None if winner.intent in (AUTO, NOT_FLASHINFER) else winner.intent
        for m in matches:
            if m not in kept:
                actions.append(Action(m.setting, ()))
                changes += _superseded(m, winner, backend, target)
        return actions, changes, backend
    asking = [m for m in matches if m.intent is not None]
    for m in matches:
        if m.intent is None and m not in kept:
            actions.append(Action(m.setting, ()))
            changes.append(_dropped(m, target))
    if not asking:
        return actions, changes, None
    lead = max(asking, key=lambda m: (m.source.rank, m.position))
    for m in asking:
        if m is not lead:
            actions.append(Action(m.setting, ()))
            changes.append(Change(m.setting.kind, render(m.setting), None,
                                  f"superseded by {render(lead.setting)}, which takes precedence"))
    requested = lead.intent or AUTO
    row = _choice(policy, scope, capabilities.family_of(cc), requested, target)
    new, chosen, mech, tried, fell_back = _pick(row, requested, scope, target, lead.setting.kind,
                                                cc)
    old = render(lead.setting)
    warnings: list[Change] = []
    manual = None
    if mech is not None:
        why = f"{row.reason}; {mech.note}"
        if mech.warning and new:
            warnings.append(Change("warning", old, _describe(new), mech.warning))
    elif not tried:
        why = f"{row.reason}; '{requested}' leaves the choice to vLLM"
    elif fell_back:
        why = f"{row.reason}; vLLM {release} cannot select {'/'.join(tried)}: it picks by itself"
    else:
        why = f"{row.reason}; vLLM {release} has no way to select {'/'.join(tried)}"
        manual = (f"no equivalent of {old} in vLLM {release}: choose one of its kernels by hand, "
                  f"or stay on a release that can select {'/'.join(tried)}")
    if row.warning and chosen is not None:
        warnings.append(Change("warning", old, chosen, row.warning))
    if new == (lead.setting,):
        changes.append(Change("warning", old, None,
                              f"{lead.source.about}; kept because vLLM {release} has no other "
                              "way to select it"))
        return actions, changes + warnings, chosen
    actions.append(Action(lead.setting, new))
    changes.append(Change(lead.setting.kind, old, _describe(new), f"{lead.source.about}; {why}",
                          _new_kind(lead.setting, new), manual))
    return actions, changes + warnings, chosen
