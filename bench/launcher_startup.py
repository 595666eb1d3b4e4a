"""The launcher's own time before it would exec vLLM, median over N runs.

Each case is a whole `vllm-cutover launch --dry-run` process on the upgrade guide's old
command (plan, translate, preflight report, print; no exec), timed from spawn to exit:
  (a) without parser validation (`--no-validate`): target <= 0.5 s
  (b) with validation against the installed vLLM's parser (a subprocess that imports vLLM)
both with the vLLM version detected from the vLLM interpreter, and (a') with the version
and compute capability given on the command line. No self-test anywhere.
References measured in the same run: a bare `python -c pass` and `python -m proxy --help`.

    python bench/launcher_startup.py [--runs N] [--vllm-python PATH] [--json]
The vLLM interpreter defaults to env VLLM_CUTOVER_VLLM_PYTHON; without it (b) is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
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


def build_cases(python: str, vllm_python: str | None) -> list[Case]:
    launch = [python, "-m", "proxy", "launch", "--dry-run"]
    target = vllm_python or "python3"
    cases = [
        Case("python -c pass", [python, "-c", "pass"]),
        Case("proxy --help", [python, "-m", "proxy", "--help"]),
        Case("(a) dry-run, no validation",
             [*launch, "--no-validate", "--", target, *OLD_ARGS]),
        Case("(a') dry-run, no validation, version+cc given",
             [*launch, "--no-validate", "--vllm-version", "0.32.0",
              "--compute-capability", "10.0", "--", "python3", *OLD_ARGS]),
    ]
    if vllm_python:
        cases.append(Case("(b) dry-run, parser validation", [*launch, "--", target, *OLD_ARGS]))
    return cases


def measure(cases: list[Case], runs: int, env: dict[str, str]) -> list[Result]:
    samples: dict[str, list[float]] = {case.name: [] for case in cases}
    for case in cases:  # one warm-up each: page cache and .pyc, as in a running container
        time_once(case.argv, env)
    for _ in range(runs):  # interleaved, so machine load drifts hit every case alike
        for case in cases:
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
    parser.add_argument("--vllm-python", default=os.environ.get("VLLM_CUTOVER_VLLM_PYTHON"))
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    results = measure(build_cases(sys.executable, args.vllm_python), args.runs, env)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(f"{'case':48} {'median_s':>9} {'min_s':>7} {'max_s':>7} {'x python':>9} "
              f"{'x --help':>9}")
        for r in results:
            print(f"{r.name:48} {r.median_s:9.3f} {r.min_s:7.3f} {r.max_s:7.3f} "
                  f"{r.ratio_to_python:9.2f} {r.ratio_to_help:9.2f}")
    no_validate = next(r for r in results if r.name.startswith("(a)"))
    verdict = "meets" if no_validate.median_s <= TARGET_NO_VALIDATE_S else "MISSES"
    print(f"(a) median {no_validate.median_s:.3f} s {verdict} the target of "
          f"{TARGET_NO_VALIDATE_S} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
