"""After `--fix` removed environment entries: drop an `env:` / `environment:` key that the
fix emptied. Left behind it reads as null, which docker-compose refuses ("environment
contains an invalid type") and which says nothing to a reader. Pure: text in, text out.
"""

from __future__ import annotations

from collections.abc import Iterator

import yaml

from proxy.scan.edits import apply_edits
from proxy.scan.model import Edit
from proxy.scan.yaml_finder import ENV_KEYS, parse_documents

Path = tuple[int | str, ...]


def _env_keys(node: yaml.Node | None, path: Path
              ) -> Iterator[tuple[Path, yaml.ScalarNode, yaml.Node]]:
    """Every env key in a document with its value node, by path."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            if key.value in ENV_KEYS:
                yield path + (key.value,), key, value
            else:
                yield from _env_keys(value, path + (key.value,))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _env_keys(item, path + (index,))


def _empty(value: yaml.Node) -> bool:
    if isinstance(value, yaml.ScalarNode):
        return value.tag == "tag:yaml.org,2002:null" and value.value in ("", "~", "null")
    return isinstance(value, (yaml.SequenceNode, yaml.MappingNode)) and not value.value


def _whole_lines(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The lines holding [start, end) when nothing else is on them."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    if text[line_start:start].strip() or text[end:line_end].split("#", 1)[0].strip():
        return None
    return line_start, line_end


def drop_emptied_env_keys(before: str, after: str) -> str:
    """`after` without the env keys that have entries in `before` and none in `after`."""
    try:
        old_docs, new_docs = parse_documents(before), parse_documents(after)
    except yaml.YAMLError:
        return after
    had = {path for i, doc in enumerate(old_docs) for path, _, value in _env_keys(doc, (i,))
           if not _empty(value)}
    edits = []
    for i, doc in enumerate(new_docs):
        for path, key, value in _env_keys(doc, (i,)):
            if path in had and _empty(value):
                span = _whole_lines(after, key.start_mark.index, value.end_mark.index)
                if span is not None:
                    edits.append(Edit(*span, ""))
    return apply_edits(after, edits) if edits else after
