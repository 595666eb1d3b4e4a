"""YAML (compose, Kubernetes, vLLM `--config` files) -> settings with source spans.

Reads the node tree (`yaml.compose_all`), which keeps every scalar's raw span, so a fix
edits those spans and nothing else: comments, order and quoting survive. Commands are
found under `command`/`args`/`entrypoint` (a list, or a string split like a shell
would), environments under `env`/`environment` (a map, `KEY=VAL` items or Kubernetes
`name`/`value` items), and in a vLLM config file every top-level key.
"""

from __future__ import annotations

import yaml

from proxy.scan.argv import Item, argv_occurrences
from proxy.scan.model import Host, KeyValueSite, Occurrence, TokenStyle, in_group
from proxy.scan.shell import find_in_shell

COMMAND_KEYS = frozenset({"command", "args", "entrypoint"})
ENV_KEYS = frozenset({"env", "environment"})
_STYLES: dict[str | None, TokenStyle] = {None: "yaml_plain", "'": "yaml_single",
                                         '"': "yaml_double"}


def parse_documents(text: str) -> list[yaml.Node | None]:
    """The node trees of every document; raises yaml.YAMLError on bad YAML."""
    return list(yaml.compose_all(text, Loader=yaml.SafeLoader))


def is_config_document(root: yaml.Node | None) -> bool:
    """A top-level mapping that is neither compose nor Kubernetes: a vLLM config."""
    if not isinstance(root, yaml.MappingNode):
        return False
    keys = {k.value for k, _ in root.value if isinstance(k, yaml.ScalarNode)}
    return not keys & {"services", "apiVersion", "kind", "version", "spec"}


def _span(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.index, node.end_mark.index


def _inner(text: str, node: yaml.ScalarNode) -> tuple[int, int] | None:
    """Span of a single-line scalar's value when the raw text equals the value."""
    start, end = _span(node)
    if node.style in ("'", '"'):
        start, end = start + 1, end - 1
    elif node.style is not None:
        return None
    return (start, end) if text[start:end] == node.value else None


def _lines(text: str, start: int, end: int) -> tuple[int, int]:
    """Whole lines around [start, end) when nothing else is on them, else the span."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    before = text[line_start:start].strip()
    after = text[end:line_end].strip()
    if before in ("", "-") and (after == "" or after.startswith("#")):
        return line_start, line_end
    return start, end


def _style(node: yaml.ScalarNode, flow: bool) -> TokenStyle:
    style = _STYLES.get(node.style, "yaml_double")
    return "yaml_flow_plain" if style == "yaml_plain" and flow else style


def _scalar_host(node: yaml.ScalarNode, path: tuple[int | str, ...], flow: bool) -> Host:
    start, end = _span(node)
    return Host("yaml_scalar", start, end, node.value, node.style, path, flow)


class _Walker:
    def __init__(self, text: str) -> None:
        self.text = text
        self.found: list[Occurrence] = []
        self.file = Host("file", 0, len(text), text)
        self.seen: set[int] = set()

    def first_visit(self, node: yaml.Node) -> bool:
        """An anchored node shared through aliases is reported (and fixed) once."""
        if id(node) in self.seen:
            return False
        self.seen.add(id(node))
        return True

    def walk(self, node: yaml.Node, path: tuple[int | str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            before = len(self.found)
            nested = []
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                if name in COMMAND_KEYS:
                    self.command(value, path + (name,))
                elif name in ENV_KEYS:
                    self.env(value)
                else:
                    nested.append((value, path + (str(name),)))
            # A service / container: its command and its environment are read together.
            self.found[before:] = in_group(self.found[before:], (node.start_mark.index,))
            for value, sub_path in nested:
                self.walk(value, sub_path)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self.walk(item, path + (index,))

    def command(self, node: yaml.Node, path: tuple[int | str, ...]) -> None:
        if not self.first_visit(node):
            return
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":str"):
            self.found.extend(find_in_shell(node.value, _scalar_host(node, path, False)))
        elif isinstance(node, yaml.SequenceNode):
            items = [n for n in node.value if isinstance(n, yaml.ScalarNode)]
            if len(items) == len(node.value):
                self.command_list(items, path, node.flow_style)

    def command_list(self, items: list[yaml.ScalarNode], path: tuple[int | str, ...],
                     flow: bool) -> None:
        listed = [Item(n.start_mark.index, n.end_mark.index, n.value, _style(n, flow),
                       n.start_mark.index + (1 if n.style else 0)) for n in items]
        self.found.extend(argv_occurrences(
            listed, self.file, "flow" if flow else "block",
            lambda index: _scalar_host(items[index], path + (index,), flow),
        ))

    def env(self, node: yaml.Node) -> None:
        if not self.first_visit(node):
            return
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag.endswith(":merge"):
                    merged = value.value if isinstance(value, yaml.SequenceNode) else [value]
                    for part in merged:
                        self.env(part)
                elif isinstance(key, yaml.ScalarNode):
                    self.key_value("env", key, value, node.flow_style)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                if isinstance(item, yaml.ScalarNode):
                    self.env_item(item, node.flow_style)
                elif isinstance(item, yaml.MappingNode):
                    self.k8s_env(item, node.flow_style)

    def key_value(self, kind: str, key: yaml.ScalarNode, value: yaml.Node, flow: bool) -> None:
        literal = isinstance(value, yaml.ScalarNode) and value.tag != "tag:yaml.org,2002:null"
        value_span = _span(value) if literal else None
        end = value.end_mark.index if literal else key.end_mark.index
        site = KeyValueSite(
            name_span=_span(key),
            value_span=value_span,
            entry_span=_lines(self.text, key.start_mark.index, end),
            name_style=_style(key, flow),
            value_style=_style(value, flow) if isinstance(value, yaml.ScalarNode) else "yaml_plain",
        )
        shown = value.value if literal else None
        self.found.append(Occurrence(kind, key.value, shown,  # type: ignore[arg-type]
                                     key.start_mark.index, self.file, site))

    def env_item(self, item: yaml.ScalarNode, flow: bool) -> None:
        inner = _inner(self.text, item)
        name, sep, value = item.value.partition("=")
        if inner is None or not sep or not name:
            return
        start = inner[0]
        site = KeyValueSite(
            name_span=(start, start + len(name)),
            value_span=(start + len(name) + 1, inner[1]),
            entry_span=_lines(self.text, *_span(item)),
            name_style="raw",
            value_style="raw",
        )
        self.found.append(Occurrence("env", name, value, start, self.file, site))

    def k8s_env(self, item: yaml.MappingNode, flow: bool) -> None:
        fields = {k.value: (k, v) for k, v in item.value if isinstance(k, yaml.ScalarNode)}
        if "name" not in fields or not isinstance(fields["name"][1], yaml.ScalarNode):
            return
        name_node = fields["name"][1]
        value_node = fields.get("value", (None, None))[1]
        last_end = max(v.end_mark.index for _, v in item.value)
        site = KeyValueSite(
            name_span=_span(name_node),
            value_span=_span(value_node) if isinstance(value_node, yaml.ScalarNode) else None,
            entry_span=_lines(self.text, item.start_mark.index, last_end),
            name_style=_style(name_node, flow),
            value_style=(_style(value_node, flow) if isinstance(value_node, yaml.ScalarNode)
                         else "yaml_double"),
        )
        value = value_node.value if isinstance(value_node, yaml.ScalarNode) else None
        self.found.append(Occurrence("env", name_node.value, value,
                                     name_node.start_mark.index, self.file, site))

    def config(self, root: yaml.MappingNode, path: tuple[int | str, ...]) -> None:
        before = len(self.found)
        for key, value in root.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            if key.value in COMMAND_KEYS | ENV_KEYS or not isinstance(value, yaml.ScalarNode):
                self.walk(yaml.MappingNode(root.tag, [(key, value)], root.start_mark), path)
                continue
            self.key_value("config", key, value, root.flow_style)
        self.found[before:] = in_group(self.found[before:], (root.start_mark.index,))


def find_in_yaml(text: str) -> list[Occurrence]:
    """All settings in a YAML file (every document). Raises yaml.YAMLError."""
    walker = _Walker(text)
    for index, root in enumerate(parse_documents(text)):
        if root is None:
            continue
        if is_config_document(root) and isinstance(root, yaml.MappingNode):
            walker.config(root, (index,))
        else:
            walker.walk(root, (index,))
    return walker.found


def value_at(text: str, path: tuple[int | str, ...]) -> str | None:
    """The string at `path` (document index, then keys and list indexes), or None."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return None
    node: object = docs
    for step in path:
        try:
            node = node[step]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return None
    return node if isinstance(node, str) else None
