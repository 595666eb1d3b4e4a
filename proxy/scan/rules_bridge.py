"""The one versioned rule table (the launcher's) seen from the scanner.

The scanner has no rules of its own. The settings of one group (a command with its
environment: a compose service, a Kubernetes container, a Dockerfile's image, a shell
command with its env prefix) go through `proxy.launcher.translate.translate` together,
exactly as the launcher would see them, and each action on a setting becomes the
`Replacement` of the occurrence it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.scan.findings import Replacement, Translate
from proxy.scan.model import Occurrence, WordsSite


def _tokens(setting: Any) -> list[str]:
    """A replacing setting as command-line tokens (config keys are flags without `--`)."""
    from proxy.launcher.command import flag_of

    return [flag_of(setting.kind, setting.name)] + ([] if setting.value is None else [setting.value])


def replacement_of(action: Any, changes: Sequence[Any]) -> Replacement:
    """One launcher Action (+ the changes that explain it) as a scanner Replacement."""
    from proxy.launcher.translate import render

    old = render(action.source)
    mine = [c for c in changes if c.old == old]
    reasons = [c.reason for c in mine if c.kind != "warning"]
    warnings = [f"warning: {c.reason}" for c in mine if c.kind == "warning"]
    flags = [t for s in action.replacement if s.kind != "env" for t in _tokens(s)]
    env = [(s.name, s.value or "") for s in action.replacement if s.kind == "env"]
    reason = "; ".join(dict.fromkeys(reasons + warnings)) or "deprecated for this version"
    manual = next((c.manual for c in mine if c.manual), None)
    return Replacement(tuple(flags), tuple(env), reason, scope=_scope(action.source),
                       manual=manual)


def _scope(setting: Any) -> str:
    """Which kernel choice a setting belongs to, read from the launcher's table."""
    from proxy.launcher.command import flag_of
    from proxy.launcher.rules import SOURCES

    name = setting.name if setting.kind == "env" else flag_of(setting.kind, setting.name)
    for source in SOURCES:
        if (source.kind == "env") == (setting.kind == "env") and \
                name in (source.name, *source.aliases):
            return source.scope
    return ""


def contexts(occs: Sequence[Occurrence]) -> list[tuple[list[int], list[int]]]:
    """Which settings are read together, as (members, owned): a group (one command with its
    environment) owns its settings; a shell command that runs vLLM also reads the variables
    exported before it in the same script, as the launcher would see them."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, occ in enumerate(occs):
        groups.setdefault(occ.group, []).append(index)
    out = []
    for key, members in groups.items():
        exported = groups.get((key[0], -1), []) if len(key) == 2 and key[1] >= 0 else []
        sites = [occs[i].site for i in members]
        runs_vllm = any(isinstance(s, WordsSite) and s.env_prefix_at is not None for s in sites)
        before = [i for i in exported if runs_vllm and occs[i].offset < occs[members[0]].offset]
        out.append((before + members, members))
    return out


def _effect(repl: Replacement | None) -> object:
    return None if repl is None else (repl.flags, repl.env, repl.manual is None, repl.error)


def make_translate(target: str, policy: str,
                   compute_capability: tuple[int, int] | None) -> Translate:
    """A Translate bound to one target; ValueError (quoting it) for a bad target version.
    A target newer than the tables gets the newest known forms, an older one the tables'
    ranges, as the launcher does."""
    from proxy.launcher import translate as engine
    from proxy.launcher.versions import parse_version, planned_for

    version = planned_for(parse_version(target))

    def run(settings: list[Any]) -> Any:
        return engine.translate(settings, target=version, policy=policy,  # type: ignore[arg-type]
                                compute_capability=compute_capability)

    def read(occs: Sequence[Occurrence], indexes: list[int]) -> dict[int, Replacement]:
        """What the settings at `indexes`, translated together, become (absent: unchanged)."""
        out: dict[int, Replacement] = {}
        settings = [engine.Setting(occs[i].kind, occs[i].name, occs[i].value) for i in indexes]
        try:
            results = [(indexes, settings, run(settings))]
        except engine.TranslationError:
            results = []
            for i, setting in zip(indexes, settings):
                try:
                    results.append(([i], [setting], run([setting])))
                except engine.TranslationError as err:
                    out[i] = Replacement((), (), str(err), error=str(err))
        for ids, group, translation in results:
            for action in translation.actions:
                at = next(k for k, s in enumerate(group) if s is action.source)
                out[ids[at]] = replacement_of(action, translation.changes)
        return out

    def translate(occs: Sequence[Occurrence]) -> list[Replacement | None]:
        out: list[Replacement | None] = [None] * len(occs)
        reached: dict[int, list[Replacement | None]] = {}
        for members, owned in contexts(occs):
            found = read(occs, members)
            for i in members:
                if i in owned:
                    out[i] = found.get(i)
                else:
                    reached.setdefault(i, []).append(found.get(i))
        for i, seen in reached.items():
            fixes = sorted({r.describe() if r else "keep it" for r in seen})
            out[i] = seen[0] if len({_effect(r) for r in seen}) == 1 else Replacement(
                (), (), f"the vLLM commands it reaches need different fixes ({' / '.join(fixes)})",
                manual="fix it per command: move it onto each vLLM command that reads it")
        return out

    return translate
