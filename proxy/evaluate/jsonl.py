"""JSON Lines in and out: errors name the file and line; writes are atomic."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from proxy.atomic import write_text_atomic


class EvalInputError(ValueError):
    """Bad input for `eval` / `verify`: the message quotes the bad value (exit 3)."""


class EngineUnreachable(EvalInputError):
    """An engine or Prometheus that does not answer, or not usably: an error status, an
    answer that is not what was asked for (exit 4)."""


def read_objects(path: str, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of `path`; EvalInputError otherwise."""
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed below; only open() may fail here
    except OSError as exc:
        raise EvalInputError(f"cannot read {what} {path!r}: {exc.strerror}") from None
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise EvalInputError(
                        f"{path}:{number}: not JSON ({exc.msg}): {line.strip()[:80]!r}") from None
                if not isinstance(obj, dict):
                    raise EvalInputError(
                        f"{path}:{number}: expected a JSON object, got {type(obj).__name__}")
                yield number, obj
        except UnicodeDecodeError as exc:
            raise EvalInputError(f"{path}: not UTF-8 ({exc.reason})") from None


def write_objects(path: str, objects: Iterable[dict[str, Any]]) -> None:
    """Write one JSON object per line, all or nothing; EvalInputError when it cannot be."""
    text = "".join(json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n" for obj in objects)
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise EvalInputError(f"cannot write {path!r}: {exc.strerror}") from None
