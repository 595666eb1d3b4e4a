"""What the simulator answers beyond plain content (pure: values in, values out).

Tool calls (`tools` with `tool_choice` named, `auto` or `required`), a reasoning part
before the content (`--reasoning`), a JSON content for `response_format` with a JSON
schema. Everything is derived from the choice's `Generation` key, so every simulator with
the same seed answers a deterministic request identically; `--diverge-field` changes one
field only (`tool_arguments`, `reasoning`), as a new engine whose kernels moved a logit
there would. `auto` calls the first tool for about half of the prompts (hash-chosen).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from proxy.sim.request import RequestError
from proxy.sim.tokens import Generation
from proxy.sim.vocab import Vocab

REASONING_WORDS = 12


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Extras:
    """The parts of a request that shape more than the content."""

    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"  # "auto", "required", "none", or a function name
    schema: dict[str, Any] | None = None  # response_format's JSON schema
    reasoning: bool = False

    @property
    def plain(self) -> bool:
        return not self.reasoning and self.schema is None and (
            not self.tools or self.tool_choice == "none")


@dataclass(frozen=True)
class Structured:
    """One choice's answer as parts: reasoning, content, tool calls (name, arguments)."""

    reasoning: str
    content: str
    calls: tuple[tuple[str, str], ...]
    finish_reason: str


def parse_extras(body: dict[str, Any], reasoning: bool, responses: bool = False) -> Extras:
    """Tools, tool_choice and response_format of a chat (or Responses-API) request."""
    tools = []
    for tool in body.get("tools") or ():
        function = tool.get("function") if isinstance(tool, dict) and not responses else tool
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(400, f"each tool needs a function name, got {tool!r}", "tools")
        params = function.get("parameters")
        tools.append(Tool(function["name"], params if isinstance(params, dict) else {}))
    choice = body.get("tool_choice", "auto") or "auto"
    if isinstance(choice, dict):
        named = choice.get("name") if responses else (choice.get("function") or {}).get("name")
        if not isinstance(named, str) or named not in {t.name for t in tools}:
            raise RequestError(400, f"tool_choice names no given tool: {choice!r}",
                               "tool_choice")
        choice = named
    elif choice not in ("auto", "required", "none"):
        raise RequestError(400, f"tool_choice must be auto, required, none or a named "
                                f"function, got {choice!r}", "tool_choice")
    schema = None
    fmt = (body.get("text") or {}).get("format") if responses else body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        inner = fmt if responses else fmt.get("json_schema") or {}
        schema = inner.get("schema") if isinstance(inner.get("schema"), dict) else {}
    return Extras(tuple(tools), choice, schema, reasoning)


def _words(vocab: Vocab, seed: int, count: int) -> str:
    rng = random.Random(seed)
    return " ".join(vocab.texts[rng.choice(vocab.word_ids)].strip() for _ in range(count))


def _value(schema: Any, rng: random.Random, vocab: Vocab) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind in ("integer", "number"):
        return rng.randrange(1, 1000)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "object":
        return _object(schema, rng, vocab)
    if kind == "array":
        return [_value(schema.get("items"), rng, vocab) for _ in range(2)]
    return vocab.texts[rng.choice(vocab.word_ids)].strip()


def _object(schema: dict[str, Any], rng: random.Random, vocab: Vocab) -> dict[str, Any]:
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        props = {"query": {"type": "string"}}
    return {name: _value(sub, rng, vocab) for name, sub in props.items()}


def _called(extras: Extras, gen: Generation) -> Tool | None:
    if not extras.tools or extras.tool_choice == "none":
        return None
    if extras.tool_choice == "auto":
        return extras.tools[0] if gen.key % 2 == 0 else None
    if extras.tool_choice == "required":
        return extras.tools[0]
    return next(t for t in extras.tools if t.name == extras.tool_choice)


def structure(vocab: Vocab, extras: Extras, gen: Generation, diverge: str | None,
              deterministic: bool) -> Structured:
    """One choice's parts; `diverge` ("tool_arguments", "reasoning") alters that one."""
    def salt(field: str) -> int:
        return gen.key ^ (0x9E3779B97F4A7C15 if deterministic and diverge == field else 0)

    reasoning = _words(vocab, salt("reasoning"), REASONING_WORDS) if extras.reasoning else ""
    tool = _called(extras, gen)
    if tool is not None:
        arguments = json.dumps(_object(tool.parameters, random.Random(salt("tool_arguments")),
                                       vocab))
        finish = "stop" if extras.tool_choice not in ("auto", "required") else "tool_calls"
        return Structured(reasoning, "", ((tool.name, arguments),), finish)
    content = vocab.text_of(gen.token_ids)
    if extras.schema is not None:
        seed = gen.key if gen.diverged_key is None else gen.diverged_key
        content = json.dumps(_object(extras.schema, random.Random(seed), vocab))
    return Structured(reasoning, content, (), gen.finish_reason)


def pieces(text: str, size: int = 8) -> list[str]:
    """`text` cut as a stream sends it (at least one piece)."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]
