"""vLLM's `--kernel-config` JSON: read the user's, check its shape, add our NVFP4 entry.

vLLM (0.30+) validates the value against its KernelConfig; a value it would refuse, or
one the launcher would have to guess how to merge with, is refused here with the value
quoted, before anything runs. Pure: values in, values out.
"""

from __future__ import annotations

import json
from typing import Any

PER_QUANT = "linear_backend_per_quant"
_QUOTE_CHARS = 200


class KernelConfigError(ValueError):
    """A `--kernel-config` that is not a JSON object of the shape vLLM reads (quoted)."""


def parse_kernel_config(value: Any, where: str = "--kernel-config") -> dict[str, Any]:
    """The user's kernel config as a dict: `value` is the flag's JSON text, or what a
    YAML config file holds under the key (a mapping, or JSON text). Raises
    KernelConfigError naming `where` and quoting the value."""
    data = value
    shown = repr(value)
    if len(shown) > _QUOTE_CHARS:  # an error line, not the whole value back
        shown = f"{shown[:_QUOTE_CHARS]}... ({len(shown)} characters)"
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except (ValueError, RecursionError) as err:
            raise KernelConfigError(f"{where} {shown}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise KernelConfigError(f"{where} {shown}: expected a JSON object such as "
                                f'{{"{PER_QUANT}": {{"nvfp4_w4a4": "marlin"}}}}')
    per_quant = data.get(PER_QUANT)
    if per_quant is not None and not (
            isinstance(per_quant, dict) and per_quant
            and all(isinstance(v, str) for v in per_quant.values())):
        raise KernelConfigError(
            f"{where} {shown}: {PER_QUANT} must map quantization schemes to backend "
            f'names, e.g. {{"nvfp4_w4a4": "marlin"}}')
    return data


def merge_kernel_config(users: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """The user's config with our per-quantization entries added (ours win per scheme:
    the planner only adds one when the user's own did not pick that scheme)."""
    per_quant = {**(users.get(PER_QUANT) or {}), **(ours.get(PER_QUANT) or {})}
    return {**users, **{k: v for k, v in ours.items() if k != PER_QUANT}, PER_QUANT: per_quant}
