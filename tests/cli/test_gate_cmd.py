"""`vllm-cutover gate`: bad arguments exit 4 with the value quoted; no verdict exits 3.
(Exit 0/1/2 per verdict: tests/mirror/admin/test_gate_hooks.py and tests/fleet.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from proxy.cli import main
from tests.canned_http import canned_http
from tests.e2e.servers import free_port


@pytest.mark.parametrize(("argv", "quoted"), [
    (["--prometheus", "http://p:9090", "--selector", "job=x"], "'job=x'"),
    (["--prometheus", "http://p:9090", "--window", "5x"], "'5x'"),
    (["--prometheus", "http://p:9090", "--min-targets", "-1"], "-1"),
    (["--prometheus", "ftp://p"], "'ftp://p'"),
    (["--prometheus", "http://p:9090", "--gate-min-samples", "0"], "0"),
    (["--url", "http://a", "--prometheus", "http://b"], "not allowed with"),
    (["--url", "http://a", "--bogus"], "unrecognized arguments: --bogus"),
    (["--url", "http://a", "extra"], "unrecognized arguments: extra"),
    (["--url", "http://a", "--timeout", "-1"], "got -1.0"),
    (["--prometheus", "http://p:9090", "--timeout", "nan"], "got nan"),
])
def test_bad_arguments_exit_3(argv, quoted, capsys):
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(main(["gate", *argv]))
    assert exited.value.code == 3  # bad input
    assert quoted in capsys.readouterr().err


def test_unreachable_exits_4(capsys):
    dead = f"http://127.0.0.1:{free_port()}"
    assert main(["gate", "--url", dead]) == 4  # cannot reach
    assert main(["gate", "--prometheus", dead]) == 4
    assert "no verdict" in capsys.readouterr().err


def test_without_a_source_it_asks_the_default_admin_url(capsys, monkeypatch):
    """One default admin address for every client command: VLLM_CUTOVER_ADMIN_URL."""
    dead = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("VLLM_CUTOVER_ADMIN_URL", dead)
    assert main(["gate"]) == 4
    assert f"{dead}/admin/gate/analysis" in capsys.readouterr().err


def test_no_verdict_error_hides_a_url_password(capsys):
    port = free_port()
    assert main(["gate", "--url", f"http://u:s3cret@127.0.0.1:{port}"]) == 4
    assert main(["gate", "--prometheus", f"http://u:s3cret@127.0.0.1:{port}"]) == 4
    err = capsys.readouterr().err
    assert "s3cret" not in err and "u:***@127.0.0.1" in err


@pytest.fixture
def canned() -> Iterator[Callable[[bytes], str]]:
    with canned_http() as answer:
        yield answer


def _vector(value: object) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"job": "vllm-cutover", "instance": "a:1"}, "value": [1.0, value]}]}}
    ).encode()


@pytest.mark.parametrize(("source", "body"), [
    ("--url", b"[1, 2]"), ("--url", b'{"verdict": "pass", "reasons": "x"}'),
    ("--url", b"[" * 100_000), ("--url", b"not json"),
    ("--prometheus", b'{"status": "success", "data": "nope"}'),
    ("--prometheus", _vector("NaN")), ("--prometheus", _vector("abc")),
    ("--prometheus", _vector(7)),
    ("--prometheus", b'{"status": "success", "data": {"resultType": "vector", "result": [1]}}'),
])
def test_an_answer_it_cannot_read_is_no_verdict_in_one_line(canned, capsys, source: str,
                                                            body: bytes) -> None:
    assert main(["gate", source, canned(body)]) == 4  # no usable answer
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no verdict" in err and "Traceback" not in err
