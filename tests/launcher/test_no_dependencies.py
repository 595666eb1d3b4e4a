"""The launcher runs inside a vLLM image with none of the sidecar's dependencies
(images/install-cutover.sh installs it with NO_DEPS): `vllm-cutover launch` must import
nothing but the standard library, packaging and PyYAML. The image test
(tests/e2e/test_images.py) proves it in Docker; this proves it in a second, before any
image is built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the sidecar needs and a vLLM image lacks (the image test's stand-in uninstalls the
# same): each is made unimportable. vLLM itself brings numpy, requests, prometheus-client.
ABSENT = ("aiohttp", "docker", "rapidfuzz", "scipy", "uvloop", "orjson")
PROGRAM = """
import sys
for name in {absent!r}:
    sys.modules[name] = None
from proxy.cli import main
code = main(sys.argv[1:])
leaked = sorted(n for n in {absent!r} if sys.modules.get(n) is not None)
assert not leaked, leaked
sys.exit(code)
"""


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROGRAM.format(absent=ABSENT), *args],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_launch_help_needs_none_of_the_sidecars_dependencies() -> None:
    done = run_cli("launch", "--help")
    assert done.returncode == 0, done.stderr
    assert "launch" in done.stdout


def test_a_launch_dry_run_needs_none_of_them_either() -> None:
    done = run_cli("launch", "--dry-run", "--vllm-version", "0.12.0",
                   "--compute-capability", "10.0", "--no-validate", "--",
                   "vllm", "serve", "some/model", "--fp4-gemm-backend", "cutlass")
    assert done.returncode == 0, done.stderr
    assert "vllm" in done.stdout
