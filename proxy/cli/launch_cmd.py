"""`vllm-cutover launch [OPTIONS] -- COMMAND...`: translate old FP4 settings, check, exec vLLM."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from proxy import exitcodes
from proxy.launcher.releases import TABLES_TEXT

if TYPE_CHECKING:
    from proxy.launcher.config import LaunchConfig

DESCRIPTION = f"""\
Start vLLM with a command written for another vLLM version. The FP4 kernel settings in it
(--fp4-gemm-backend, --quantization nvfp4, --moe-runner-backend, VLLM_NVFP4_GEMM_BACKEND,
VLLM_USE_TRTLLM_FP4_GEMM, VLLM_USE_FBGEMM, VLLM_USE_NVFP4_CT_EMULATIONS,
VLLM_USE_FLASHINFER_MOE_FP4/VLLM_FLASHINFER_MOE_BACKEND, and the same keys in a --config
YAML) are translated for the vLLM version that will run, each change is explained on
stderr, the GPU and FlashInfer are checked, the final arguments are checked against vLLM's
own parser, then vLLM is exec'd (same PID: signals go straight to vLLM).

The tables know vLLM {TABLES_TEXT}; any other release still starts. A command with
nothing the tables match runs unchanged (one stderr line says the version is outside
them). On a newer release the settings get the newest known forms and the installed
vLLM's own parser decides: accepted, vLLM starts with a warning; rejected, exit 2 with
vLLM's message. An older release is placed by the tables' ranges (what they cannot place
is a manual edit). --strict-versions refuses every release outside the tables instead.

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

exit codes: 0 dry run done; 2 bad input (entry form, values, config file, version; with
--strict-versions a release outside the tables) or arguments vLLM's parser rejects; 3 preflight found that the chosen kernel cannot work here;
127 the vLLM program cannot be run. Otherwise the exit code is vLLM's own.

example:
  vllm-cutover launch --dry-run --compute-capability 10.0 -- \\
      vllm serve nvidia/Llama-3.1-8B-Instruct-FP4 --quantization nvfp4 --fp4-gemm-backend cutlass
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "launch", help="translate old vLLM FP4 flags for the installed vLLM, check, then exec it",
        description=DESCRIPTION, epilog=EPILOG + "\n" + exitcodes.EPILOG,
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
    parser.add_argument("--strict-versions", action="store_true",
                        help="refuse a vLLM release outside the tables (0.10.0 .. the newest "
                        "known) instead of running it")
    parser.add_argument("--report-json", metavar="PATH", help="write the plan and checks as JSON")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the final command and env, report the preflight, do not exec")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...",
                        help="the vLLM start command")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from proxy.launcher.config import LaunchConfigError
    from proxy.launcher.launch import EXIT_BAD_INPUT, LaunchStop, launch

    try:
        return launch(_config(args), os.environ)
    except LaunchConfigError as exc:
        print(f"vllm-cutover launch: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except LaunchStop as stop:
        print(f"vllm-cutover launch: error: {stop}", file=sys.stderr)
        return stop.code


def _config(args: argparse.Namespace) -> LaunchConfig:
    """The only place the launch's argparse namespace is read."""
    from proxy.launcher.config import (
        LaunchConfig,
        command_words,
        read_capability,
        read_exec_prefix,
    )

    return LaunchConfig(
        command=command_words(args.command), policy=args.policy,
        vllm_version=args.vllm_version, vllm_python=args.vllm_python,
        compute_capability=read_capability(args.compute_capability),
        exec_prefix=read_exec_prefix(args.exec_prefix), config_out=args.config_out,
        self_test=args.self_test, preflight=not args.no_preflight,
        validate=not args.no_validate, report_json=args.report_json, dry_run=args.dry_run,
        strict_versions=args.strict_versions,
    )
