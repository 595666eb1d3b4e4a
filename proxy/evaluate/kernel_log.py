"""Which NVFP4 GEMM kernel an engine chose, read from its startup log, against what the
launcher asked for (`launch --report-json`). Pure: text and dicts in, a check out.

What vLLM prints (read from its sources):
- the pick, once: `Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM` (0.20+,
  `vllm/model_executor/kernels/linear/__init__.py`); 0.16-0.19 printed the enum,
  `NvFp4LinearBackend.FLASHINFER_CUTLASS`;
- a removed variable: `Unknown vLLM environment variable detected: NAME` (0.17+; before,
  nothing at all);
- the arguments it parsed: `non-default args: {..., 'kernel_config': KernelConfig(...,
  linear_backend_per_quant={'nvfp4_w4a4': 'flashinfer_cutlass'}), ...}` or
  `'linear_backend': 'flashinfer_cutlass'`.
On a host without CUDA no NVFP4 layer is built, so no kernel is ever picked or printed:
there the line can only show that no removed variable was ignored and that the backend
the launcher asked for reached the engine's arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from proxy.evaluate.results import CheckStatus

# vLLM 0.32's _LINEAR_BACKEND_KERNEL_MAP, NVFP4 kernels only: backend -> kernel classes.
NVFP4_KERNELS: dict[str, frozenset[str]] = {
    "cutlass": frozenset({"CutlassNvFp4LinearKernel"}),
    "flashinfer_cutlass": frozenset({"FlashInferCutlassNvFp4LinearKernel"}),
    "flashinfer_cutedsl": frozenset({"FlashInferCuteDslNvFp4LinearKernel",
                                     "FlashInferCuteDslNvFp4W4A16LinearKernel"}),
    "flashinfer_trtllm": frozenset({"FlashInferTrtllmNvFp4LinearKernel"}),
    "flashinfer_cudnn": frozenset({"FlashInferCudnnNvFp4LinearKernel"}),
    "flashinfer_b12x": frozenset({"FlashInferB12xNvFp4LinearKernel"}),
    "b12x": frozenset({"B12xNvFp4LinearKernel", "B12xNvFp4W4A16LinearKernel"}),
    "marlin": frozenset({"MarlinNvFp4LinearKernel"}),
    "humming": frozenset({"HummingNvFp4LinearKernel"}),
    "torch": frozenset({"TorchNvFp4LinearKernel"}),
    "fbgemm": frozenset({"FbgemmNvFp4LinearKernel"}),
    "emulation": frozenset({"EmulationNvFp4LinearKernel"}),
}

_UNKNOWN_ENV = re.compile(r"Unknown vLLM environment variable detected: (\w+)")
_KERNEL = re.compile(r"Using (\w+) for NVFP4 GEMM")
_ENUM = re.compile(r"NvFp4LinearBackend\.([A-Z0-9_]+)")
_PER_QUANT = re.compile(r"linear_backend_per_quant=\{[^}]*'nvfp4_w4a4': '([a-z0-9_]+)'")
_LINEAR = re.compile(r"'linear_backend': '([a-z0-9_]+)'")


# The lines `parse_log` reads; a log is streamed and only these are kept (bounded memory).
LOG_MARKERS = (b"Unknown vLLM environment variable", b"for NVFP4 GEMM",
               b"NvFp4LinearBackend.", b"non-default args:")
MAX_LINE_BYTES = 64 * 1024
MAX_KEPT_LINES = 10_000


def startup_lines(chunks: Iterable[bytes], max_bytes: int) -> tuple[str, bool]:
    """The lines of a log `parse_log` reads, from at most its first `max_bytes` (vLLM
    prints them at start-up), and whether the log went on beyond that. Memory stays within
    a line (cut at MAX_LINE_BYTES) and MAX_KEPT_LINES, whatever the log's size."""
    kept: list[bytes] = []
    pending, seen, cut = b"", 0, False
    for chunk in chunks:
        if seen + len(chunk) > max_bytes:
            chunk, cut = chunk[:max_bytes - seen], True
        seen += len(chunk)
        *lines, pending = (pending + chunk).split(b"\n")
        pending = pending[:MAX_LINE_BYTES]
        kept.extend(line[:MAX_LINE_BYTES] for line in lines
                    if any(m in line for m in LOG_MARKERS))
        del kept[MAX_KEPT_LINES:]
        if cut:
            break
    if any(m in pending for m in LOG_MARKERS) and len(kept) < MAX_KEPT_LINES:
        kept.append(pending)
    return b"\n".join(kept).decode("utf-8", "replace"), cut


@dataclass(frozen=True)
class LogFacts:
    unknown_env: tuple[str, ...]
    kernels: tuple[str, ...]  # class names, or backend names from the 0.16-0.19 enum
    logged_backend: str | None  # the NVFP4 backend in the engine's non-default args
    saw_args: bool  # the non-default args line is there (the log is a vLLM start-up)


def parse_log(text: str) -> LogFacts:
    kernels = [*_KERNEL.findall(text), *(m.lower() for m in _ENUM.findall(text))]
    args_lines = [line for line in text.splitlines() if "non-default args:" in line]
    backend = None
    for line in args_lines:
        found = _PER_QUANT.search(line) or _LINEAR.search(line)
        if found:
            backend = found.group(1)
    return LogFacts(tuple(dict.fromkeys(_UNKNOWN_ENV.findall(text))),
                    tuple(dict.fromkeys(kernels)), backend, bool(args_lines))


def _flag_value(argv: list[str], flag: str) -> str | None:
    value = None
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith(flag + "="):
            value = word.split("=", 1)[1]
    return value


def requested_backend(report: dict[str, Any]) -> str | None:
    """The NVFP4 GEMM backend the launched command names (its final argv / env)."""
    argv = [str(a) for a in report.get("argv") or []]
    config = _flag_value(argv, "--kernel-config")
    if config is not None:
        try:
            per_quant = json.loads(config).get("linear_backend_per_quant") or {}
        except (ValueError, AttributeError):
            per_quant = {}
        if isinstance(per_quant, dict) and per_quant.get("nvfp4_w4a4"):
            return str(per_quant["nvfp4_w4a4"])
    linear = _flag_value(argv, "--linear-backend")
    if linear is not None:
        return linear.lower().replace("-", "_")
    env_choice = (report.get("env") or {}).get("VLLM_NVFP4_GEMM_BACKEND")
    return None if env_choice is None else str(env_choice).replace("-", "_")


def _no_cuda(report: dict[str, Any] | None) -> bool:
    summary = ((report or {}).get("preflight") or {}).get("summary") or {}
    return summary.get("cuda") is False


def kernel_check(facts: LogFacts, report: dict[str, Any] | None) -> tuple[CheckStatus, str]:
    """(status, detail) of the checklist's kernel line."""
    if facts.unknown_env:
        return "fail", (f"vLLM ignored {', '.join(facts.unknown_env)} (\"Unknown vLLM "
                        "environment variable\"): the kernel it chose is not the one the old "
                        "command asked for; start it through `vllm-cutover launch`")
    wanted = requested_backend(report) if report is not None else None
    notes = []
    if report is not None:
        changed = [c["old"] for c in report.get("changes") or [] if c.get("kind") == "env"]
        if changed:
            notes.append(f"the launcher translated {', '.join(map(str, changed))}")
    if wanted is not None:
        if not facts.saw_args:
            return "fail", "no `non-default args` line in the log: is it this engine's start-up?"
        if facts.logged_backend != wanted:
            return "fail", (f"the launcher asked for {wanted} but the engine's arguments carry "
                            f"{facts.logged_backend}: not started from this report?")
        notes.append(f"the engine's arguments carry NVFP4 backend {wanted}")
    if facts.kernels:
        chosen = ", ".join(facts.kernels)
        expected = NVFP4_KERNELS.get(wanted or "", frozenset())
        if wanted is not None and not all(k in expected or k == wanted for k in facts.kernels):
            return "fail", f"asked for {wanted} ({'/'.join(sorted(expected))}), vLLM chose {chosen}"
        return "pass", "; ".join([*notes, f"vLLM chose {chosen}"])
    if wanted is not None and _no_cuda(report):
        cpu = ("no CUDA on this host (the launcher's preflight): vLLM builds no NVFP4 layer "
               "and prints no kernel pick")
        return "pass", "; ".join([*notes, cpu])
    none = "vLLM printed no NVFP4 kernel pick (no NVFP4 model, or no report naming a backend)"
    return "n/a", "; ".join([*notes, none])
