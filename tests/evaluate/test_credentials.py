"""An engine URL with credentials (`http://user:pass@host`, sent by aiohttp as Basic auth)
is never written into a golden file, a report, stdout or an error message."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import main
from proxy.cli.eval_common import emit, write_html
from proxy.evaluate.client import EngineInfo
from proxy.evaluate.golden import read_golden, write_golden
from tests.evaluate.test_no_logprobs import no_logprobs_url  # noqa: F401 - the fixture

SECRET = "s3cret-pw"


def test_golden_file_names_the_engine_without_its_password(tmp_path: Path) -> None:
    path = tmp_path / "golden.jsonl"
    engine = EngineInfo(f"http://user:{SECRET}@127.0.0.1:8000", "0.10.2", ("m",))
    write_golden(str(path), engine, [], [], store_text=False)
    assert SECRET not in path.read_text()
    with pytest.raises(Exception, match="holds no requests"):
        read_golden(str(path))  # the header itself is read back
    assert "127.0.0.1:8000" in path.read_text()


def test_reports_and_stdout_hide_the_password(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://user:{SECRET}@127.0.0.1:8000"
    result = {"engines": {"new": {"url": url}}, "verdict": "pass"}
    emit(result, True, "")
    emit(result, False, f"new: {url}\n")
    html = tmp_path / "r.html"
    write_html(str(html), f"<td>{url}</td>")
    shown = capsys.readouterr().out + html.read_text()
    assert SECRET not in shown and "127.0.0.1:8000" in shown


def test_error_names_the_engine_without_its_password(
        no_logprobs_url: str, tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x"}\n')
    url = no_logprobs_url.replace("http://", f"http://user:{SECRET}@")
    assert main(["eval", "record", "--url", url, "--prompts", str(prompts),
                 "-o", str(tmp_path / "g.jsonl")]) == 3
    err = capsys.readouterr().err
    assert "returned no logprobs" in err and SECRET not in err
