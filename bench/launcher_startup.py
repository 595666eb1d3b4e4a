"""The launcher's own time before it would exec vLLM, median over N runs.

Each case is a whole `vllm-cutover launch` process on the upgrade guide's old command,
timed from spawn to exit, the vLLM version detected from the vLLM interpreter:
  (a)  `--dry-run --no-validate`: plan, translate, preflight report, print; target <= 0.5 s
  (a') the same with version and compute capability given on the command line
  (a") a real launch without validation whose exec target is `true` (bare arguments,
       `--exec-prefix true`): the launcher's whole time before exec
  (b)  the same real launch with validation against the installed vLLM's own parser (a
       subprocess that imports vLLM: seconds, so fewer runs)
No self-test anywhere. References measured in the same run: a bare `python -c pass` and
`python -m proxy --help`.

    python bench/launcher_startup.py [--runs N] [--validate-runs M] [--vllm-python PATH] [--json]
The vLLM interpreter defaults to env VLLM_CUTOVER_VLLM_PYTHON; without it only (a') runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TARGET_NO_VALIDATE_S = 0.5
OLD_ARGS = ["-m", "vllm.entrypoints.openai.api_server", "--model", "/models/llama-fp4",
            "--port", "8000", "--quantization", "nvfp4", "--fp4-gemm-backend", "cutlass"]


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    runs: int


@dataclass(frozen=True)
class Result:
    name: str
    runs: int
    median_s: float
    min_s: float
    max_s: float
    ratio_to_python: float
    ratio_to_help: float


def time_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=300, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n"
                         f"{done.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def build_cases(
    python: str, vllm_python: str | None, runs: int, validate_runs: int
) -> list[Case]:
    launch = [python, "-m", "proxy", "launch"]
    cases = [
        Case("python -c pass", [python, "-c", "pass"], runs),
        Case("proxy --help", [python, "-m", "proxy", "--help"], runs),
        Case("(a') dry-run, no validation, version+cc given",
             [*launch, "--dry-run", "--no-validate", "--vllm-version", "0.32.0",
              "--compute-capability", "10.0", "--", "python3", *OLD_ARGS], runs),
    ]
    if vllm_python:
        true = shutil.which("true") or "/bin/true"
        real = [*launch, "--vllm-python", vllm_python, "--exec-prefix", true]
        bare_args = OLD_ARGS[2:]  # without `-m module`: the image ENTRYPOINT form
        cases[2:2] = [Case("(a) dry-run, no validation",
                           [*launch, "--dry-run", "--no-validate", "--", vllm_python, *OLD_ARGS],
                           runs)]
        cases += [
            Case('(a") launch -> exec true, no validation',
                 [*real, "--no-validate", "--", *bare_args], runs),
            Case("(b) launch -> exec true, parser validation", [*real, "--", *bare_args],
                 validate_runs),
        ]
    return cases


def measure(cases: list[Case], env: dict[str, str]) -> list[Result]:
    samples: dict[str, list[float]] = {case.name: [] for case in cases}
    for case in cases:  # one warm-up each: page cache and .pyc, as in a running container
        time_once(case.argv, env)
    for round_index in range(max(case.runs for case in cases)):
        # Interleaved, so drifts of the machine's load hit every case alike.
        for case in cases:
            if round_index < case.runs:
                samples[case.name].append(time_once(case.argv, env))
    python_s = statistics.median(samples[cases[0].name])
    help_s = statistics.median(samples[cases[1].name])
    return [
        Result(name, len(values), statistics.median(values), min(values), max(values),
               statistics.median(values) / python_s, statistics.median(values) / help_s)
        for name, values in samples.items()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--validate-runs", type=int, default=3,
                        help="runs of (b), which imports vLLM each time (default 3)")
    parser.add_argument("--vllm-python", default=os.environ.get("VLLM_CUTOVER_VLLM_PYTHON"))
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args()
    if min(args.runs, args.validate_runs) < 1:
        parser.error(f"--runs and --validate-runs must be >= 1, got {args.runs}, "
                     f"{args.validate_runs}")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cases = build_cases(sys.executable, args.vllm_python, args.runs, args.validate_runs)
    results = measure(cases, env)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(f"{'case':48} {'median_s':>9} {'min_s':>7} {'max_s':>7} {'x python':>9} "
              f"{'x --help':>9}")
        for r in results:
            print(f"{r.name:48} {r.median_s:9.3f} {r.min_s:7.3f} {r.max_s:7.3f} "
                  f"{r.ratio_to_python:9.2f} {r.ratio_to_help:9.2f}")
    no_validate = next(r for r in results if r.name.startswith("(a"))
    verdict = "meets" if no_validate.median_s <= TARGET_NO_VALIDATE_S else "MISSES"
    print(f"{no_validate.name}: median {no_validate.median_s:.3f} s {verdict} the target of "
          f"{TARGET_NO_VALIDATE_S} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
