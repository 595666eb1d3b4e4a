"""JSON text read with its nesting bounded: the admin API's bodies (`proxy.adminhttp`) and
the CLI's one-shot answers (`proxy.boundedhttp`) share it.

No aiohttp here: the launcher, installed without dependencies into a vLLM image, imports
the CLI, and the CLI's HTTP reads import this.
"""

from __future__ import annotations

import json
from typing import Any

MAX_JSON_DEPTH = 32  # no admin body needs more than a few levels


def parse_json(raw: bytes | str) -> Any:
    """JSON text as values; ValueError (never quoting the text, which may hold a token)
    for what is not JSON or is nested deeper than MAX_JSON_DEPTH."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ValueError(f"body is JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise ValueError(f"body must be JSON ({exc})") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"body is JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level > MAX_JSON_DEPTH:
                break
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest
