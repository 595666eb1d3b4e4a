from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request

import pytest


def test_sim_serves_until_terminated() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy",
            "sim",
            "--port",
            "0",
            "--version",
            "1.2.3-sim",
            "--itl-ms",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        url = match.group(1)
        with urllib.request.urlopen(url + "/version", timeout=5) as resp:
            assert json.load(resp) == {"version": "1.2.3-sim"}
        request = urllib.request.Request(
            url + "/v1/completions",
            data=json.dumps({"prompt": "x", "max_tokens": 4, "temperature": 0}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] == 4
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("argv", "quoted"), [(["--error-rate", "1.5"], "1.5"), (["--natural-tokens", "a:b"], "'a:b'")]
)
def test_bad_knob_is_quoted_and_exits_3(argv: list[str], quoted: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "sim", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 3 and quoted in done.stderr
