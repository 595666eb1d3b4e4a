"""Reading the persisted cutover state field by field: every type, range and phase checked,
the error naming the field (`cutover.history[0].at_unix must be a number, got 'x'`).

The state file is written by the proxy, but it is a file: a hand edit, another tool or a
bad disk must end the start with a message, never a traceback or a dead background task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_MISSING = object()
# The largest integer a field may hold: a count or a size fits 64 bits, and a larger one
# (a 400-digit number is valid JSON) would break arithmetic later, far from the file.
MAX_INTEGER = 2**63 - 1


class StateError(ValueError):
    """A persisted state that cannot be read as ours (the message quotes the bad value)."""


class Fields:
    """The fields of one JSON object at `where` (a dotted path for messages)."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise StateError(f"{where} must be a JSON object, got {short_repr(data)}")
        self.data = data
        self.where = where

    def _get(self, key: str, required: bool) -> Any:
        value = self.data.get(key, _MISSING)
        if value is _MISSING and required:
            raise StateError(f"{self.where}.{key} is missing")
        return value

    def fail(self, key: str, wanted: str, value: Any) -> StateError:
        return StateError(f"{self.where}.{key} must be {wanted}, got {short_repr(value)}")

    def text(self, key: str, optional: bool = True) -> str | None:
        value = self._get(key, required=not optional)
        if value is _MISSING or (value is None and optional):
            return None
        if not isinstance(value, str):
            raise self.fail(key, "a string" + (" or null" if optional else ""), value)
        return value

    def required_text(self, key: str) -> str:
        value = self.text(key, optional=False)
        assert value is not None
        return value

    def number(self, key: str, optional: bool = True, minimum: float | None = None
               ) -> float | None:
        value = self._get(key, required=not optional)
        if value is _MISSING or (value is None and optional):
            return None
        wanted = "a finite number" + (f" >= {minimum:g}" if minimum is not None else "")
        number = finite_float(value)
        if number is None or (minimum is not None and number < minimum):
            raise self.fail(key, wanted + (" or null" if optional else ""), value)
        return number

    def required_number(self, key: str, minimum: float | None = None) -> float:
        value = self.number(key, optional=False, minimum=minimum)
        assert value is not None
        return value

    def integer(self, key: str, default: int | None = 0, minimum: int = 0) -> int | None:
        value = self._get(key, required=False)
        if value is _MISSING or (value is None and default is None):
            return default
        if isinstance(value, bool) or not isinstance(value, int) \
                or not minimum <= value <= MAX_INTEGER:
            too_big = isinstance(value, int) and not isinstance(value, bool) \
                and value > MAX_INTEGER
            raise self.fail(key, "an integer below 2**63" if too_big
                            else f"an integer >= {minimum}", value)
        return value

    def flag(self, key: str) -> bool:
        value = self._get(key, required=False)
        if value is _MISSING:
            return False
        if not isinstance(value, bool):
            raise self.fail(key, "true or false", value)
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        value = self._get(key, required=False)
        if value is _MISSING or value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, "a list of strings", value)
        return tuple(value)

    def items(self, key: str) -> list[Any]:
        value = self._get(key, required=False)
        if value is _MISSING or value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(key, "a list", value)
        return value


def finite_float(value: Any) -> float | None:
    """`value` as a float when it is a JSON number a float holds (finite), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return number if math.isfinite(number) else None


def short_repr(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
