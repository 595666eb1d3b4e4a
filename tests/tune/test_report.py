"""The tune's report: ranked rows, the winning command, text / JSON / HTML, and the CLI."""

from __future__ import annotations

import json
import random
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from proxy.tune.containers import merge_args
from proxy.tune.race import Race
from proxy.tune.report import SCHEMA, TuneReport
from proxy.tune.report_render import render_html, render_text
from tests.canned_http import canned_http
from tests.e2e.servers import free_port
from tests.tune.test_race import CRITERIA, _feed

OLD_URL = "http://10.0.0.2:8000"
OLD_COMMAND = ["vllm", "serve", "nvidia/Llama-3.1-8B-Instruct-FP4", "--quantization", "nvfp4",
               "--kernel-config", '{"linear_backend_per_quant": {"nvfp4_w4a4": "marlin"}}',
               "--max-model-len", "8192"]
FAST_ARGS = ["--kernel-config", '{"linear_backend_per_quant": {"nvfp4_w4a4": "cutlass"}}',
             "--enforce-eager"]
# Written out by hand: old's --kernel-config replaced, --enforce-eager appended.
EXPECTED_LINE = ("vllm serve nvidia/Llama-3.1-8B-Instruct-FP4 --quantization nvfp4 "
                 "--max-model-len 8192 --kernel-config "
                 "'{\"linear_backend_per_quant\": {\"nvfp4_w4a4\": \"cutlass\"}}' "
                 "--enforce-eager")
# Free text the status carries that a report must never show.
NOT_SHOWN = "HISTORY-TEXT-NOT-IN-REPORT"


def _race() -> Race:
    """A real race to its end: fast wins, diverging is eliminated, crash failed."""
    rng = random.Random(7)
    race = Race({"crash": "http://d", "diverging": "http://b", "fast": "http://a"}, CRITERIA)
    profiles = {"fast": (0.6, 0.0, False), "diverging": (0.5, 0.4, False),
                "crash": (0.7, 0.0, True)}
    for step in range(60):
        _feed(race, profiles, step * 10, 10, rng)
        race.look(float(step))
        if race.over:
            break
    assert race.over and race.winner == "fast"
    return race


def _status(adopt: bool = False) -> dict[str, Any]:
    """What `TuneService.status()` answers at the end of a report-only race."""
    race = _race()
    status: dict[str, Any] = {
        "id": "ab12cd34", "phase": "done", "old_url": OLD_URL, "promote": "none",
        "started_unix": 1000.0, "ended_unix": 1600.0, "cutover_id": None, "terminal": True,
        "reason": f"report only: fast wins ({race.ending})", "winner": race.winner,
        "history": [{"at_unix": 1000.0, "event": NOT_SHOWN}], "containers": {}}
    status.update(race.as_json())
    if adopt:
        return status
    status.update(old_container="vllm", old_container_id="c0ffee", old_command=OLD_COMMAND,
                  parallel=3)
    asked = {"fast": (FAST_ARGS, {"VLLM_USE_DEEP_GEMM": "0"}),
             "diverging": (["--linear-backend", "flashinfer"], {}), "crash": ([], {})}
    for c in status["candidates"]:
        args, env = asked[c["name"]]
        c.update(args=args, env=env, container=f"vllm-tune-ab12cd34-0-{c['name']}",
                 id="f" * 64, gpus=["2"], vllm_version="0.34.0", removed=c["name"] != "fast")
        for check in c["gate_checks"]:
            check["reason"] = NOT_SHOWN  # the gate's sentences are left out too
    return status


def test_the_rows_put_the_winner_first_then_by_state() -> None:
    report = TuneReport.from_status(_status())
    assert [r.name for r in report.candidates] == ["fast", "diverging", "crash"]
    assert [r.state for r in report.candidates] == ["winner", "eliminated", "failed"]
    diverging = report.candidates[1]
    assert diverging.divergence_by_field.get("tool_arguments", 0) > 0
    assert diverging.stopped_at_requests is not None and diverging.requests > 0
    fast = report.candidates[0]
    assert fast.paired_ratio is not None and 0.5 < fast.paired_ratio < 0.7
    assert any(x.check == "max_ttft_p50_ratio" and x.ratio_bounds for x in fast.latency)


def test_the_text_shows_the_winner_first_with_its_reason_within_100_columns() -> None:
    status = _status()
    text = render_text(TuneReport.from_status(status))
    # one shell-quoted line by design, to paste whole; every other line fits
    assert all(len(line) <= 100 for line in text.splitlines()
               if line.strip() != EXPECTED_LINE), text
    table = text.split("\n\n")[1].splitlines()
    assert table[0].split()[:3] == ["candidate", "state", "verdict"]
    assert table[1].split()[:2] == ["fast", "winner"]
    assert [line.split()[0] for line in table[2:4]] == ["diverging", "crash"]
    winner = next(c for c in status["candidates"] if c["name"] == "fast")
    assert f"fast (winner): {winner['reason']}" in " ".join(text.split())
    diverging = next(c for c in status["candidates"] if c["name"] == "diverging")
    assert diverging["reason"].startswith("gate: ")
    assert diverging["reason"][:60] in " ".join(text.split())
    assert "latency: max_ttft_p50_ratio" in text and "limit 1.10" in text
    assert NOT_SHOWN not in text


def test_the_winning_command_is_olds_with_the_winners_args_merged() -> None:
    command = TuneReport.from_status(_status()).command
    assert command is not None and command.mode == "container"
    assert command.line == EXPECTED_LINE
    assert command.command == merge_args(tuple(OLD_COMMAND), tuple(FAST_ARGS))
    assert shlex.split(EXPECTED_LINE) == list(command.command)
    assert dict(command.env) == {"VLLM_USE_DEEP_GEMM": "0"}
    text = render_text(TuneReport.from_status(_status()))
    assert f"\n  {EXPECTED_LINE}\n" in text
    assert "environment: VLLM_USE_DEEP_GEMM=0" in text


def test_adopt_mode_has_no_command_and_names_the_url() -> None:
    report = TuneReport.from_status(_status(adopt=True))
    assert report.command is not None and report.command.mode == "adopt"
    assert report.command.command is None and report.command.line is None
    assert report.command.url == "http://a"
    text = render_text(report)
    assert "no command to print" in text and "url: http://a" in text


def test_no_winner_has_no_command() -> None:
    status = {**_status(), "winner": None, "reason": "no winner: none passed"}
    status["candidates"] = [{**c, "state": "eliminated"} if c["state"] == "winner" else c
                            for c in status["candidates"]]
    report = TuneReport.from_status(status)
    assert report.command is None
    assert "winning command: none (no winner)" in render_text(report)


def test_the_json_round_trips() -> None:
    report = TuneReport.from_status(_status())
    data = json.loads(json.dumps(report.as_json()))
    assert data["schema"] == SCHEMA
    assert TuneReport.from_json(data) == report
    assert data["winning_command"]["line"] == EXPECTED_LINE
    assert [c["name"] for c in data["candidates"]] == ["fast", "diverging", "crash"]
    assert NOT_SHOWN not in json.dumps(data)


def test_the_html_escapes_names_and_shows_only_the_listed_fields() -> None:
    status = _status()
    evil = "<script>alert(1)</script>"
    for c in status["candidates"]:
        if c["name"] == "diverging":
            c["name"] = evil
            c["reason"] = "gate: <b>answers</b> & more"
    page = render_html(TuneReport.from_status(status))
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;answers&lt;/b&gt; &amp; more" in page
    assert NOT_SHOWN not in page
    assert not re.search(r"(src|href)\s*=", page)  # nothing fetched
    assert html_text_only(page) - _allowed(status) == set()


def _allowed(status: dict[str, Any]) -> set[str]:
    """The words a page may hold: the listed fields, the command, the page's own labels."""
    report = TuneReport.from_status(status)
    fields = [report.id, report.phase, report.reason, report.old_url, report.winner,
              EXPECTED_LINE, "VLLM_USE_DEEP_GEMM=0"]
    for r in report.candidates:
        fields += [r.name, r.state, r.verdict, r.reason, *r.divergence_by_field]
        fields += [x.check for x in r.latency] + [x.status for x in r.latency]
    labels = ("vllm-cutover tune candidate state verdict why it stopped requests stopped at "
              "divergence by field latency ratios bounds, limit median old paired reason "
              "winner Winning winning command old's command with fast's args, as the race ran it "
              "environment: none no slower on of")
    words: set[str] = set()
    for text in [*map(str, fields), labels]:
        words |= set(re.findall(r"[A-Za-z_']{3,}", text))
    return words


def html_text_only(page: str) -> set[str]:
    import html

    body = page.split("</style>", 1)[1]
    text = html.unescape(re.sub(r"<[^>]+>", " ", body))
    return set(re.findall(r"[A-Za-z_']{3,}", text))


def test_tune_report_reads_the_status_and_writes_the_html(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    body = json.dumps(_status()).encode()
    page = tmp_path / "tune.html"
    with canned_http() as answer:
        url = answer(body)
        assert main(["tune", "report", "--admin-url", url, "--json",
                     "--html", str(page)]) == 0
    assert json.loads(capsys.readouterr().out)["winner"] == "fast"
    assert "<table>" in page.read_text()


def test_tune_report_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    assert main(["tune", "report", "--admin-url", dead]) == 4
    with canned_http() as answer:
        url = answer(json.dumps(_status()).encode())
        assert main(["tune", "report", "--admin-url", url,
                     "--html", str(tmp_path / "none" / "x.html")]) == 3
    assert "--html" in capsys.readouterr().err


def test_secrets_in_commands_are_hidden_where_no_token_is_asked() -> None:
    """GET /admin/tune needs no token: old's command (vLLM's `--api-key`, a token in the
    environment) is shown with those values hidden, never as given."""
    from proxy.credentials import HIDDEN, redact_argv, redact_env

    argv = ["vllm", "serve", "m", "--api-key", "sk-live-1", "--hf-token=hf_abc",
            "--kernel-config", '{"a": 1}', "--served-model-name", "m"]
    shown = redact_argv(argv)
    assert "sk-live-1" not in shown and "--hf-token=hf_abc" not in shown
    assert shown[3:5] == ["--api-key", HIDDEN] and shown[5] == f"--hf-token={HIDDEN}"
    assert shown[6:] == argv[6:]  # other flags as they were
    assert redact_env({"HF_TOKEN": "hf_x", "VLLM_USE_FLASHINFER_MOE_FP4": "1"}) == {
        "HF_TOKEN": HIDDEN, "VLLM_USE_FLASHINFER_MOE_FP4": "1"}
