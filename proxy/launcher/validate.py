"""Check final vLLM arguments against the installed vLLM's own parser.

A child process of the interpreter that will run vLLM builds the `vllm serve` /
api_server parser (`make_arg_parser(FlexibleArgumentParser())`, found across vLLM's
module moves) and parses the arguments without starting anything; argparse's exit 2
and its message come back as data, and close matches (difflib over the parser's own
option strings and choices) are added here. The child also runs vLLM's own quick
post-parse checks (`validate_parsed_serve_args`), its environment validation where
`--fail-on-environ-validation` makes an unknown VLLM_* variable an error, and checks
`--quantization` against vLLM's method list, which vLLM itself only does at config validation, after the parser
accepted e.g. the guide's `--quantization nvfp4` (skipped when vLLM plugins are
installed: they may register methods). Building vLLM's parser imports vLLM (about 10 s
on a 2-core CPU host), hence one child per call, or `validate_arg_sets` for several.

Decisions: vLLM not importable from `python` -> ok=False with a clear error (the
launcher is about to exec that interpreter, which would fail the same way); vLLM
importable but none of the known parser builders found (a layout this code does not
know) or a timeout -> ok=True with `skipped_reason`, since the arguments may be fine.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.launcher.command import normalise_flag
from proxy.launcher.gpus import normalize_backend

logger = logging.getLogger(__name__)

MARKER = "@@vllm-cutover-validate@@"

# Values vLLM parses but rejects later, and what to do instead (VLLM_FP4_FACTS.md).
KNOWN_VALUE_HINTS = {
    ("--quantization", "nvfp4"): (
        "drop --quantization: vLLM detects modelopt_fp4 or compressed-tensors from the checkpoint"
    ),
}
# Other servers' flags that users carry into vLLM commands (VLLM_FP4_FACTS.md).
KNOWN_EQUIVALENTS = {
    "--fp4-gemm-backend": ("--linear-backend", "SGLang's FP4 GEMM flag"),
    "--moe-runner-backend": ("--moe-backend", "SGLang's MoE flag"),
}

# Runs in the child: stdin {"arg_sets": [[...], ...]}, stdout MARKER + JSON.
_CHILD = r"""
import contextlib, importlib, io, json, os, sys
sys.path = [p for p in sys.path if p not in ("", ".")]
req = json.load(sys.stdin)
out = {"import_error": None, "parser": None, "vllm_version": None, "results": []}
def emit():
    sys.stdout.write("\n" + MARKER + json.dumps(out) + "\n")
    sys.stdout.flush()
try:
    import vllm
    out["vllm_version"] = getattr(vllm, "__version__", None)
except BaseException as exc:
    out["import_error"] = "%s: %s" % (type(exc).__name__, exc)
    emit()
    sys.exit(0)
tried = []
parser_cls = make = serve_checks = None
for mod in ("vllm.utils.argparse_utils", "vllm.utils"):
    try:
        parser_cls = getattr(importlib.import_module(mod), "FlexibleArgumentParser")
        break
    except (ImportError, AttributeError) as exc:
        tried.append("%s.FlexibleArgumentParser: %s" % (mod, exc))
for mod in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
    try:
        module = importlib.import_module(mod)
        make = getattr(module, "make_arg_parser")
        serve_checks = getattr(module, "validate_parsed_serve_args", None)
        out["parser"] = mod + ".make_arg_parser"
        break
    except (ImportError, AttributeError) as exc:
        tried.append("%s.make_arg_parser: %s" % (mod, exc))
if parser_cls is None or make is None:
    out["parser"] = None
    out["tried"] = tried
    emit()
    sys.exit(0)
try:
    from importlib.metadata import entry_points
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS as methods
    methods = list(methods)
    plugins = [ep for ep in entry_points(group="vllm.general_plugins")
               if not ep.value.startswith("vllm.")]
    if plugins:
        methods = None  # third-party plugins may register more methods when vLLM starts
except Exception:
    methods = None
out["quantization_methods"] = methods
try:
    from vllm import envs as vllm_envs
    known_env = set(vllm_envs.environment_variables)
except Exception:
    known_env = None
unknown_env = sorted(k for k in os.environ if k.startswith("VLLM_")
                     and known_env is not None and k not in known_env)
parser = make(parser_cls(description="vLLM OpenAI-Compatible RESTful API server."))
options, choices = [], {}
for action in parser._actions:
    options.extend(action.option_strings)
    if action.option_strings and action.choices is not None:
        try:
            choices[action.option_strings[0]] = [str(c) for c in action.choices]
        except TypeError:
            pass
out["options"], out["choices"] = options, choices
for args in req["arg_sets"]:
    err = io.StringIO()
    res = {"exit_code": None, "stderr": "", "exception": None, "post_errors": [],
           "unknown_quantization": None}
    ns = None
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            ns = parser.parse_args(list(args))
        except SystemExit as exc:
            res["exit_code"] = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:
            res["exception"] = "%s: %s" % (type(exc).__name__, exc)
        if ns is not None and serve_checks is not None:
            try:
                serve_checks(ns)
            except BaseException as exc:
                res["post_errors"].append("vLLM's serve checks: %s: %s" % (type(exc).__name__, exc))
    if unknown_env and getattr(ns, "fail_on_environ_validation", False):
        res["post_errors"].append(
            "vLLM's environment validation (--fail-on-environ-validation): Unknown vLLM "
            "environment variable detected: %s" % ", ".join(unknown_env))
    quantization = getattr(ns, "quantization", None)
    if quantization and methods is not None and quantization not in methods:
        res["unknown_quantization"] = str(quantization)
    res["stderr"] = err.getvalue()[-4000:]
    out["results"].append(res)
emit()
"""


@dataclass(frozen=True)
class ValidationResult:
    ok: bool
    errors: tuple[
        str, ...
    ]  # e.g. "unrecognized arguments: --fp4-gemm-backend (did you mean --moe-backend?)"
    skipped_reason: str | None = None  # set when the parser could not be built or timed out
    vllm_version: str | None = None
    parser: str | None = None  # e.g. "vllm.entrypoints.launchers.cli_args.make_arg_parser"
    elapsed_s: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


def validate_args(
    python: str,
    vllm_args: list[str],
    timeout_s: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> ValidationResult:
    """Parse `vllm_args` (the arguments after `vllm serve` / api_server module, model
    included as vLLM expects) with the parser of the vLLM installed for interpreter
    `python`, in a subprocess, without starting anything."""
    return validate_arg_sets(python, [vllm_args], timeout_s=timeout_s, env=env)[0]


def validate_arg_sets(
    python: str,
    arg_sets: Sequence[Sequence[str]],
    timeout_s: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> list[ValidationResult]:
    """`validate_args` for several argument lists with one child (one vLLM import)."""
    import time

    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    child_env.setdefault("PYTHONWARNINGS", "ignore")
    payload = json.dumps({"arg_sets": [list(a) for a in arg_sets]})
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [python, "-c", f"MARKER = {MARKER!r}\n{_CHILD}"],
            input=payload,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=child_env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _all(arg_sets, ok=True, skipped=f"vLLM's parser took over {timeout_s:.0f} s")
    except OSError as exc:
        return _all(arg_sets, ok=False, error=f"cannot run {python!r}: {exc}")
    elapsed = time.perf_counter() - start
    reply = _reply(proc.stdout)
    if reply is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return _all(
            arg_sets,
            ok=False,
            error=(
                f"validation child of {python!r} exited {proc.returncode} without an answer: "
                + " | ".join(tail)
            ),
            elapsed=elapsed,
        )
    if reply["import_error"]:
        return _all(
            arg_sets,
            ok=False,
            elapsed=elapsed,
            error=(
                f"vLLM is not importable from {python!r} ({reply['import_error']}): the launcher "
                "would exec an interpreter without vLLM; fix the image or pass --no-validate"
            ),
        )
    if reply["parser"] is None:
        return _all(
            arg_sets,
            ok=True,
            elapsed=elapsed,
            skipped=(
                f"no known argument parser in vLLM {reply['vllm_version']}: "
                + "; ".join(reply.get("tried", []))
            ),
        )
    results = []
    for res in reply["results"]:
        errors = _errors(res, reply["options"], reply["choices"])
        errors += res["post_errors"]
        if res["unknown_quantization"]:
            errors.append(
                unknown_quantization(res["unknown_quantization"], reply["quantization_methods"])
            )
        results.append(
            ValidationResult(
                ok=not errors,
                errors=tuple(errors),
                vllm_version=reply["vllm_version"],
                parser=reply["parser"],
                elapsed_s=elapsed,
                details={"exit_code": res["exit_code"]},
            )
        )
    return results


def _all(
    arg_sets: Sequence[Sequence[str]],
    *,
    ok: bool,
    error: str | None = None,
    skipped: str | None = None,
    elapsed: float = 0.0,
) -> list[ValidationResult]:
    errors = (error,) if error else ()
    if skipped:
        logger.warning("argument validation skipped: %s", skipped)
    return [ValidationResult(ok, errors, skipped, elapsed_s=elapsed) for _ in arg_sets]


def _reply(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    return None


def _errors(res: dict[str, Any], options: list[str], choices: dict[str, list[str]]) -> list[str]:
    if res["exception"]:
        return [f"vLLM's parser raised {res['exception']}"]
    if res["exit_code"] in (None, 0):
        return []
    message = argparse_message(res["stderr"]) or f"exit {res['exit_code']}"
    return [explain(message, options, choices)]


def unknown_quantization(method: str, methods: Sequence[str]) -> str:
    """vLLM's own later error for a --quantization value, with what to do instead."""
    hint = KNOWN_VALUE_HINTS.get(("--quantization", method))
    if hint is None:
        close = difflib.get_close_matches(method, methods, n=2)
        hint = f"did you mean {' or '.join(close)}?" if close else f"one of {', '.join(methods)}"
    return (
        f"--quantization {method}: Unknown quantization method: {method} (the parser accepts "
        f"it, vLLM exits 1 at config validation); {hint}"
    )


def argparse_message(stderr: str) -> str | None:
    """The text after `PROG: error: ` in argparse's output, on one line (pydantic's
    messages for JSON options span several; their documentation links are dropped)."""
    match = re.search(r"^\S[^\n]*?: error: (.*)", stderr, flags=re.MULTILINE | re.DOTALL)
    if not match:
        return None
    lines = [ln.strip() for ln in match.group(1).splitlines()]
    return " ".join(ln for ln in lines if ln and not ln.startswith("For further information"))


def explain(message: str, options: Sequence[str], choices: Mapping[str, Sequence[str]]) -> str:
    """argparse's error plus close-match suggestions from the parser's options/choices."""
    if message.startswith("unrecognized arguments:"):
        flags = [tok for tok in message.split()[2:] if tok.startswith("-")]
        hints = [h for h in (_option_hint(f, options) for f in flags) if h]
        return message + (f" ({'; '.join(hints)})" if hints else "")
    invalid = re.match(r"argument (\S+?)(?:/\S+)?: invalid choice: '([^']*)'", message)
    if invalid:
        flag, value = invalid.groups()
        allowed = _choices_for(flag, choices)
        close = difflib.get_close_matches(normalize_backend(value) or "", allowed, n=2)
        short = message.split(" (choose from")[0]
        if close:
            return f"{short} (did you mean {' or '.join(repr(c) for c in close)}?)"
        return f"{short} (choose from {', '.join(allowed)})" if allowed else message
    return message


def _option_hint(token: str, options: Sequence[str]) -> str | None:
    flag = token.split("=", 1)[0]
    known = KNOWN_EQUIVALENTS.get(normalise_flag(flag))
    if known and known[0] in options:
        return f"{flag} is {known[1]}; vLLM's is {known[0]}"
    long_options = [o for o in options if o.startswith("--")]
    close = difflib.get_close_matches(normalise_flag(flag), long_options, n=2, cutoff=0.7)
    return f"did you mean {' or '.join(close)} for {flag}?" if close else None


def _choices_for(flag: str, choices: Mapping[str, Sequence[str]]) -> list[str]:
    if flag in choices:
        return list(choices[flag])
    for key, values in choices.items():
        if normalise_flag(key) == normalise_flag(flag):
            return list(values)
    return []
