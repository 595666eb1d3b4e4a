"""`verify` and golden files on input that is large, endless or wrongly typed: the log is
streamed within bounded memory (devices and FIFOs refused), answers it cannot read are
"no verdict" (exit 3) in one line, golden token ids are JSON integers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.evaluate.golden import read_golden
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.kernel_log import parse_log, startup_lines
from tests.canned_http import canned_http

REPO_ROOT = Path(__file__).resolve().parents[2]
KERNEL_LINE = b"INFO [nvfp4.py:1] Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM\n"


def test_startup_lines_keep_what_parse_log_reads_within_the_byte_limit() -> None:
    chunks = [b"noise " * 100 + b"\n", KERNEL_LINE[:20], KERNEL_LINE[20:], b"x" * 10**6,
              b"\nnon-default args: {'linear_backend': 'cutlass'}\n"]
    text, cut = startup_lines(iter(chunks), max_bytes=10**7)
    facts = parse_log(text)
    assert not cut and facts.kernels == ("FlashInferCutlassNvFp4LinearKernel",)
    assert facts.logged_backend == "cutlass" and len(text) < 300
    text, cut = startup_lines(iter(chunks), max_bytes=700)
    assert cut and parse_log(text).kernels == ("FlashInferCutlassNvFp4LinearKernel",)
    assert parse_log(text).logged_backend is None  # beyond the limit


def test_a_large_log_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """300 MB of log: the verify process grows by far less than the file (it grew by 3x
    the file when it read it whole)."""
    log = tmp_path / "engine.log"
    with open(log, "wb") as f:
        f.write(KERNEL_LINE)
        line = b"INFO 12-04 10:00:00 [engine.py:1] a line of ordinary log text .........\n"
        block = line * (1 << 14)
        f.writelines(block for _ in range(300 * 10**6 // len(block)))
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the forked test runner.
    code = (
        "import sys\n"
        "from proxy.evaluate.checklist import VerifyOptions, read_inputs\n"
        f"log, _ = read_inputs(VerifyOptions(url='http://x', log_path={str(log)!r}, "
        "log_max_bytes=400 * 10**6))\n"
        "assert 'FlashInferCutlass' in log, log[:200]\n"
        "print(next(line.split()[1] for line in open('/proc/self/status')\n"
        "           if line.startswith('VmHWM:')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    peak_kib = int(done.stdout.split()[-1])
    assert peak_kib < 200 * 1024, f"peak RSS {peak_kib} KiB for a 300 MB log"


@pytest.mark.parametrize("path", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_as_log_is_bad_input(tmp_path: Path, path: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    if path == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    assert main(["verify", "--url", "http://127.0.0.1:9", "--log", path]) == 3
    assert "not a regular file" in capsys.readouterr().err


@pytest.fixture
def prometheus_answering() -> Iterator[Callable[[bytes], str]]:
    with canned_http() as answer:
        yield answer


@pytest.mark.parametrize("body", [b'{"status": "success", "data": "nope"}', b"[1]",
                                  b'{"status": "success", "data": {"activeTargets": 3}}'])
def test_a_prometheus_answer_it_cannot_read_is_no_verdict(prometheus_answering, body: bytes,
                                                          capsys) -> None:
    url = prometheus_answering(body)
    # the engine is this same server (its answers unreadable too): one line, exit 3
    assert main(["verify", "--url", url, "--prometheus", url]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no verdict" in err and "Traceback" not in err


def _golden(tmp_path: Path, answer: dict[str, object]) -> str:
    path = tmp_path / "g.jsonl"
    base = {"status": 200, "token_ids": [1, 2], "output_tokens": 2}
    path.write_text(json.dumps({"golden": 1, "engine": {"url": "http://e"}}) + "\n"
                    + json.dumps({"request": {"prompt": "a"}, "answer": {**base, **answer}})
                    + "\n")
    return str(path)


@pytest.mark.parametrize(("answer", "named"), [
    ({"token_ids": [1793.5]}, "token_ids must be a list of JSON integers"),
    ({"token_ids": ["1793"]}, "token_ids must be a list of JSON integers"),
    ({"token_ids": [True]}, "token_ids must be a list of JSON integers"),
    ({"output_tokens": -5}, "output_tokens must be a non-negative integer, got -5"),
    ({"ttft_s": -1.0}, "ttft_s must be a non-negative number"),
    ({"itl_s": ["0.1"]}, "itl_s must be a list of seconds"),
    ({"status": "200"}, "status must be an integer"),
])
def test_golden_values_are_strict(tmp_path: Path, answer: dict[str, object],
                                  named: str) -> None:
    with pytest.raises(EvalInputError, match=f"g.jsonl:2: malformed golden entry: {named}"):
        read_golden(_golden(tmp_path, answer))
    assert read_golden(_golden(tmp_path, {})).entries[0].capture.token_ids == (1, 2)
