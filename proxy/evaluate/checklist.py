"""`verify`: the post-upgrade checklist, one line per check: pass, fail or n/a with why.

A line that cannot be checked here (no GPU, no Prometheus given) is `n/a`, never a pass;
the verdict passes only when every applicable line does. Each line runs on its own: an
engine that is down fails its lines with the reason, the rest still report.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.evaluate import observe
from proxy.evaluate.containers import ContainerReader, container_log, docker_containers
from proxy.evaluate.golden import Golden, read_golden
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.judge import CompareCriteria
from proxy.evaluate.kernel_log import kernel_check, parse_log, startup_lines
from proxy.evaluate.replaying import ReplaySettings
from proxy.evaluate.results import CheckLine, Checklist, CheckStatus

Line = tuple[CheckStatus, str]
DEFAULT_LOG_MAX_BYTES = 256 * 1024 * 1024
MAX_REPORT_BYTES = 16 * 1024 * 1024


class NoVerdict(RuntimeError):
    """A peer (the engine, Prometheus) answered something this checklist cannot read."""


@dataclass(frozen=True)
class VerifyOptions:
    url: str
    expect_version: str | None = None
    golden: str | None = None
    launch_report: str | None = None
    log_path: str | None = None
    log_max_bytes: int = DEFAULT_LOG_MAX_BYTES  # read from the start of the log
    container: str | None = None
    prometheus: str | None = None
    gpu_util_range: tuple[float, float] | None = None
    allow_model_mismatch: bool = False
    replay: ReplaySettings = field(default_factory=ReplaySettings)
    criteria: CompareCriteria = field(default_factory=CompareCriteria)


def read_inputs(opts: VerifyOptions, containers: ContainerReader | None = None,
                ) -> tuple[str | None, dict[str, Any] | None]:
    """The startup log and the launch report; EvalInputError (exit 2) when unreadable."""
    report = None
    if opts.launch_report is not None:
        try:
            with open(_regular(opts.launch_report, "--launch-report"), "rb") as handle:
                report = json.loads(handle.read(MAX_REPORT_BYTES))
        except (OSError, ValueError, RecursionError) as exc:
            raise EvalInputError(f"--launch-report {opts.launch_report!r}: {exc}") from None
        if not isinstance(report, dict) or "argv" not in report:
            raise EvalInputError(f"--launch-report {opts.launch_report!r} is not a "
                                 "`launch --report-json` document (no argv)")
    log = None
    if opts.log_path is not None:
        try:
            with open(_regular(opts.log_path, "--log"), "rb") as handle:
                log, _ = startup_lines(iter(lambda: handle.read(1 << 20), b""),
                                       opts.log_max_bytes)
        except OSError as exc:
            raise EvalInputError(f"--log {opts.log_path!r}: {exc.strerror}") from None
    elif opts.container is not None:
        log = container_log(containers or docker_containers(), opts.container,
                            opts.log_max_bytes)
    return log, report


def _regular(path: str, flag: str) -> str:
    """`path` when it is a regular file: a device (/dev/zero) or a FIFO never ends."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise EvalInputError(f"{flag} {path!r}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise EvalInputError(f"{flag} {path!r} is not a regular file (a device or FIFO "
                             "is not read)")
    return path


def _engine_lines(opts: VerifyOptions) -> list[tuple[str, Line]]:
    try:
        status, _ = observe.http_get(opts.url + "/health")
    except EvalInputError as exc:
        return [(name, ("fail", str(exc))) for name in ("health", "models", "version")]
    out: list[tuple[str, Line]] = [("health", ("pass", "/health 200") if status == 200
            else ("fail", f"/health answered HTTP {status}"))]
    _, body = observe.http_get(opts.url + "/v1/models")
    try:
        models = [m["id"] for m in observe.json_of(body, opts.url + "/v1/models")["data"]]
    except (EvalInputError, KeyError, TypeError):
        models = []
    out.append(("models", ("pass", f"serves {models}") if models
                else ("fail", "/v1/models lists no model")))
    status, body = observe.http_get(opts.url + "/version")
    try:
        version = (str(observe.json_of(body, opts.url + "/version")["version"])
                   if status == 200 else None)
    except (EvalInputError, KeyError, TypeError):
        version = None
    if opts.expect_version is None:
        out.append(("version", ("n/a", f"reports {version}; no --expect-version given")))
    elif version == opts.expect_version:
        out.append(("version", ("pass", f"/version {version}")))
    else:
        out.append(("version", ("fail", f"/version {version}, expected {opts.expect_version}")))
    return out


def _golden_line(opts: VerifyOptions, golden: Golden | None) -> Line:
    if golden is None:
        return "n/a", "no --golden given"
    from proxy.evaluate.replaying import compare_golden

    result = compare_golden(golden, opts.url, None, opts.replay,
                            opts.criteria, opts.allow_model_mismatch)
    detail = (f"{result.compared} compared, {result.diverged} diverged, match rate "
              f"{result.match_rate}; " + "; ".join(
                  r for r in result.reasons if not r.startswith("pass")))
    return ("pass" if result.verdict == "pass" else "fail"), detail.rstrip("; ")


def _gpu_line(opts: VerifyOptions) -> Line:
    gpus = observe.nvml_gpus()
    if gpus:
        utils = [g.util_percent for g in gpus]
        source = "NVML"
    elif opts.prometheus is not None and (
            utils := observe.prom_vector(opts.prometheus, "DCGM_FI_DEV_GPU_UTIL")):
        source = "DCGM exporter via Prometheus"
    else:
        return "n/a", "no GPU seen (no NVML, no DCGM_FI_DEV_GPU_UTIL in Prometheus)"
    shown = ", ".join(f"{u:.0f}%" for u in utils)
    if opts.gpu_util_range is None:
        return "n/a", f"{source}: {shown}; no --gpu-util-range given"
    low, high = opts.gpu_util_range
    ok = all(low <= u <= high for u in utils)
    return ("pass" if ok else "fail"), f"{source}: {shown}, expected {low:g}..{high:g}%"


def _metrics_line(opts: VerifyOptions) -> Line:
    missing = observe.missing_series(set(observe.engine_samples(opts.url)))
    if missing:
        return "fail", f"{opts.url}/metrics lacks {missing}"
    return "pass", f"{opts.url}/metrics has the {len(observe.REQUIRED_VLLM_SERIES)} vllm: series"


def _prometheus_line(opts: VerifyOptions) -> Line:
    if opts.prometheus is None:
        return "n/a", "no --prometheus given"
    instance = observe.instance_of(opts.url)
    health = observe.prom_target_health(opts.prometheus, instance)
    if not health:
        return "fail", f"Prometheus {opts.prometheus} has no target with instance {instance}"
    if "up" not in health:
        return "fail", f"Prometheus target {instance} is {', '.join(health)}"
    missing = observe.missing_series(observe.prom_series_names(opts.prometheus, instance))
    if missing:
        return "fail", f"target {instance} is up but Prometheus has no {missing}"
    return "pass", f"target {instance} up; the vllm: series are in Prometheus"


def run_checklist(opts: VerifyOptions, containers: ContainerReader | None = None) -> Checklist:
    """Every line; `containers` reads `--container`'s log (default: the local Docker)."""
    log, report = read_inputs(opts, containers)
    # Read before any line runs: an unreadable golden file is bad input (exit 2), not a fail.
    golden = read_golden(opts.golden) if opts.golden is not None else None
    try:
        lines = _engine_lines(opts)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        raise NoVerdict(f"the engine's answers cannot be read ({type(exc).__name__}: "
                        f"{str(exc)[:200]})") from None

    def kernel() -> Line:
        if log is None:
            return "n/a", "no --log or --container given"
        return kernel_check(parse_log(log), report)

    named: list[tuple[str, Callable[[], Line]]] = [
        ("kernel", kernel), ("golden", lambda: _golden_line(opts, golden)),
        ("gpu", lambda: _gpu_line(opts)), ("metrics", lambda: _metrics_line(opts)),
        ("prometheus", lambda: _prometheus_line(opts))]
    for name, check in named:
        try:
            lines.append((name, check()))
        except EvalInputError as exc:
            lines.append((name, ("fail", str(exc))))
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
            raise NoVerdict(f"the {name} line cannot read an answer ({type(exc).__name__}: "
                            f"{str(exc)[:200]})") from None
    checks = [CheckLine(n, s, d) for n, (s, d) in lines]
    ok = all(c.status in ("pass", "n/a") for c in checks)
    return Checklist(opts.url, checks, "pass" if ok else "fail")
