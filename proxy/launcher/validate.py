"""Check final vLLM arguments against the installed vLLM's own parser (CONTRACT STUB)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ValidationResult:
    ok: bool
    errors: tuple[str, ...]  # e.g. "unrecognized arguments: --fp4-gemm-backend (did you mean --moe-backend?)"
    skipped_reason: str | None = None  # set when vLLM could not be imported to validate


def validate_args(python: str, vllm_args: list[str], timeout_s: float = 120.0) -> ValidationResult:
    """Parse `vllm_args` (the arguments after `vllm serve` / api_server module, model
    included as vLLM expects) with the parser of the vLLM installed for interpreter
    `python`, in a subprocess, without starting anything."""
    raise NotImplementedError
