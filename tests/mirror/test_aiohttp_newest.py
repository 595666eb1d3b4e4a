"""The relay and listener suites against the newest aiohttp that pyproject's bound allows.

The proxy leans on aiohttp internals (`web_protocol.RequestHandler` subclassed in
`proxy/mirror/listener.py`, `BaseSite` private attributes, chunk frames and trailers
written to `request.transport` in `relay.py`), so pyproject caps aiohttp one minor above
the newest release tested. `bash scripts/dev.sh setup-e2e` (and `test`) makes a venv with
that newest release over the dev venv's other packages and names its Python in
VLLM_CUTOVER_AIOHTTP_NEWEST_PYTHON; this test runs the suites there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.e2e.resources import skip_or_fail

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NEWEST_ENV = "VLLM_CUTOVER_AIOHTTP_NEWEST_PYTHON"
RELAY_SUITES = ("tests/mirror/test_relay.py", "tests/mirror/upstream/test_http1.py",
                "tests/mirror/upstream/test_http1_cases.py", "tests/mirror/test_disconnect.py")
LISTENER_SUITES = ("tests/mirror/test_server.py", "tests/e2e/test_proxy_input_e2e.py")


def _aiohttp_requirement() -> Requirement:
    match = re.search(r'"(aiohttp[^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert match is not None, "pyproject.toml declares no aiohttp"
    return Requirement(match[1])


@pytest.fixture(scope="module")
def newest_python() -> str:
    python = os.environ.get(NEWEST_ENV, "")
    if not python:
        skip_or_fail(f"{NEWEST_ENV} is not set (`bash scripts/dev.sh setup-e2e` makes that venv)")
    return python


def test_relay_and_listener_suites_pass_on_the_newest_aiohttp(newest_python):
    probe = subprocess.run(
        [newest_python, "-c",
         "import aiohttp, json; print(json.dumps([aiohttp.__version__, aiohttp.__file__]))"],
        capture_output=True, text=True, timeout=60, check=True)
    version, location = json.loads(probe.stdout)
    venv = Path(newest_python).parent.parent
    assert Path(location).is_relative_to(venv), f"aiohttp {version} from {location}, not {venv}"
    requirement = _aiohttp_requirement()
    assert requirement.specifier.contains(version)
    newest = Version(version)  # the fence sits one minor above it, no further
    assert [s.version for s in requirement.specifier if s.operator == "<"] == [
        f"{newest.major}.{newest.minor + 1}"]
    run = subprocess.run(
        [newest_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         *RELAY_SUITES, *LISTENER_SUITES],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=480, check=False)
    assert run.returncode == 0, f"aiohttp {version}:\n{run.stdout[-4000:]}{run.stderr[-2000:]}"
    assert " passed" in run.stdout.splitlines()[-1]
