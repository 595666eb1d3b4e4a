"""YAML that does not parse (Helm templates, Jinja) -> settings, found by text alone.

A CI gate must not wave a file through because `{{ .Values.x }}` is not YAML. Lists are
flattened into one line of words (same length, so offsets stay true) and read like shell;
env vars are matched as `VLLM_NAME: value`, `VLLM_NAME=value` or a Kubernetes
`name:`/`value:` pair. These findings are reported for a manual edit, never rewritten.
"""

from __future__ import annotations

import re
from dataclasses import replace

from proxy.scan.model import Host, KeyValueSite, Occurrence
from proxy.scan.shell import find_in_shell

_LIST_ITEM = re.compile(r"\n([ \t]*)-([ \t]+)")
_ENV = re.compile(r"\b(VLLM_[A-Z0-9_]+)[\"']?[ \t]*[:=][ \t]*[\"']?([^\"'\s#,}\]]*)")
_K8S_ENV = re.compile(r"name:[ \t]*[\"']?(VLLM_[A-Z0-9_]+)[\"']?[ \t]*\n[ \t]*value:[ \t]*"
                      r"[\"']?([^\"'\s#]*)")


def flatten(text: str) -> str:
    """List items joined into their parent line, brackets and commas blanked (same length)."""
    flat = _LIST_ITEM.sub(lambda m: " " + m.group(1) + " " + m.group(2), text)
    return flat.translate(str.maketrans("[],", "   "))


def find_in_template(text: str) -> list[Occurrence]:
    """Flags and VLLM_* env vars in text that is YAML-like but not YAML."""
    file = Host("file", 0, len(text), text)
    flat = flatten(text)
    flags = [o for o in find_in_shell(flat, Host("file", 0, len(flat), flat))
             if o.kind == "flag"]
    found = [Occurrence(o.kind, o.name, o.value, o.offset, file, o.site) for o in flags]
    seen: set[int] = set()
    for pattern in (_K8S_ENV, _ENV):
        for match in pattern.finditer(text):
            if match.start(1) in seen:
                continue
            seen.add(match.start(1))
            site = KeyValueSite(match.span(1), match.span(2), match.span(), "raw", "raw")
            found.append(Occurrence("env", match.group(1), match.group(2), match.start(1),
                                    file, site))
    # Without the document's structure nothing says which settings belong together.
    return [replace(occ, group=(index,)) for index, occ in enumerate(found)]
