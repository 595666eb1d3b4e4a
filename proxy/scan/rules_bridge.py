"""The one versioned rule table (the launcher's) seen from the scanner.

The scanner has no rules of its own: for every setting a finder sees it asks
`proxy.launcher.rules.translate_setting` what that setting becomes for the target
vLLM version, and turns the launcher's changes into a `Replacement`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any

from proxy.scan.findings import Replacement, Translate
from proxy.scan.model import Occurrence

_ENV = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)


def setting_of(occ: Occurrence) -> tuple[str, str]:
    """(kind, name) as the rule table keys them: config keys are flags; `_` -> `-`."""
    if occ.kind == "env":
        return "env", occ.name
    name = occ.name if occ.kind == "flag" else "--" + occ.name
    return "flag", "--" + name[2:].replace("_", "-")


def replacement_of(changes: Sequence[Any]) -> Replacement | None:
    """Fold the launcher's changes for one setting into one Replacement (None: nothing)."""
    if not changes:
        return None
    flags: list[str] = []
    env: list[tuple[str, str]] = []
    reasons: list[str] = []
    for change in changes:
        new = change.new
        reasons.append(change.reason)
        if new is None or new == "" or new == []:
            continue
        if isinstance(new, (list, tuple)):
            flags.extend(str(t) for t in new)
        elif str(new).startswith("-"):
            flags.extend(shlex.split(str(new)))
        else:
            match = _ENV.fullmatch(str(new))
            if match is None:
                raise ValueError(f"rule table change with unreadable new value {new!r}")
            env.append((match.group(1), match.group(2)))
    reason = "; ".join(dict.fromkeys(r for r in reasons if r))
    return Replacement(tuple(flags), tuple(env), reason)


def make_translate(target: str, policy: str,
                   compute_capability: tuple[int, int] | None) -> Translate:
    """A Translate bound to one target version; ValueError for an unsupported target."""
    from proxy.launcher import rules

    version = rules.parse_target(target)

    def translate(occ: Occurrence) -> Replacement | None:
        kind, name = setting_of(occ)
        changes = rules.translate_setting(kind, name, occ.value, target=version,
                                          policy=policy, compute_capability=compute_capability)
        return replacement_of(changes)

    return translate
