"""Values the scanner passes around: a setting found in a file and where it sits.

A finder turns file text into `Occurrence`s. Each occurrence names its `Host` (the
text its spans refer to: the file itself, or one encoded string inside it such as a
YAML scalar holding a whole shell command) and a `Site` that knows how to rewrite the
setting in place, producing `Edit`s on the host's decoded text. Nothing here reads or
writes files.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

SettingKind = Literal["flag", "env", "config"]
HostKind = Literal["file", "yaml_scalar", "json_string"]
# How a token is written where it lands: shell word, JSON string, YAML scalar styles,
# or verbatim (an .env value, an unquoted Dockerfile ENV value).
TokenStyle = Literal["shell", "json", "yaml_plain", "yaml_flow_plain", "yaml_single",
                     "yaml_double", "raw"]


@dataclass(frozen=True)
class Edit:
    """Replace text[start:end] with `text` (offsets into the host's decoded text)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Host:
    """The text an occurrence's spans refer to.

    For "file" the decoded text is the file and the edits are file edits. For the
    others the decoded text is the value of one encoded string whose raw form spans
    file[start:end]; edits to it are re-encoded (YAML scalar `style`: None plain,
    "'", '"', "|", ">"). `path` locates a YAML scalar for verification after a fix.
    """

    kind: HostKind
    start: int
    end: int
    decoded: str
    style: str | None = None
    path: tuple[int | str, ...] = ()
    flow: bool = False


@dataclass(frozen=True)
class WordsSite:
    """A flag (and its value) among shell words: text[start:end] in the host.

    `env_prefix_at` is where `NAME=VALUE ` may be put in front of the program when
    the command runs vLLM directly (None when it does not).
    """

    start: int
    end: int
    env_prefix_at: int | None = None


@dataclass(frozen=True)
class ListSite:
    """A flag (and its value) as one or two items of a list (JSON array, YAML list).

    `items` are the raw spans of those items in the host; `layout` says how to add or
    drop items: "flow" (`[a, b]`, JSON arrays too) or "block" (`- a` lines), with
    `indent` the text in front of a block item's dash.
    """

    items: tuple[tuple[int, int], ...]
    style: TokenStyle
    layout: Literal["flow", "block"]
    indent: str = ""


@dataclass(frozen=True)
class KeyValueSite:
    """A NAME=VALUE or `name: value` setting: an env entry or a config key.

    `name_span`/`value_span` are raw spans in the host (value_span None when the
    entry has no literal value); `entry_span` is what to delete to drop the setting
    (whole lines where possible). Names and values are written with the styles given.
    """

    name_span: tuple[int, int]
    value_span: tuple[int, int] | None
    entry_span: tuple[int, int]
    name_style: TokenStyle
    value_style: TokenStyle


Site = WordsSite | ListSite | KeyValueSite


@dataclass(frozen=True)
class Occurrence:
    """One setting found in a file: a flag, an env var or a vLLM config key."""

    kind: SettingKind
    name: str  # "--fp4-gemm-backend", "VLLM_USE_FBGEMM", "fp4-gemm-backend"
    value: str | None
    offset: int  # file offset of the name, for line and column
    host: Host
    site: Site
    # Settings read together by the rule table: one command with its environment (a
    # compose service, a Kubernetes container, a Dockerfile's image) shares a group.
    group: tuple[int, ...] = ()


def in_group(found: list[Occurrence], group: tuple[int, ...]) -> list[Occurrence]:
    return [replace(occ, group=group) for occ in found]


def file_host(text: str) -> Host:
    return Host(kind="file", start=0, end=len(text), decoded=text)


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of `offset` in `text`."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column
