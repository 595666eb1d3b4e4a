"""One vocabulary across commands: one exit-code table (the README's, every --help, and what
each subcommand really exits with for bad input, an address that does not answer, a
refusal), one flag name per meaning, one default admin address."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import build_parser, main
from tests.canned_http import canned_http
from tests.e2e.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
# Independent of proxy/exitcodes.py: what the issue asked for, written out here.
TABLE = {0: "pass", 1: "fail", 2: "inconclusive", 3: "bad input", 4: "cannot reach",
         5: "refused", 127: "launch", 130: "interrupted"}


def _parsers(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path or "vllm-cutover", parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}".strip())


def test_the_readme_table_is_the_table() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.MULTILINE))
    assert {int(code) for code in rows} == set(TABLE)
    for code, word in TABLE.items():
        assert rows[str(code)].startswith(word), (code, rows[str(code)])


def test_every_help_ends_with_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    seen = []
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        seen.append(path)
        table = text.split("exit codes (the same for every command):", 1)
        assert len(table) == 2, f"{path} --help has no exit-code table"
        block = table[1].split("\n\n", 1)[0]  # a command's own notes may follow
        listed = {int(c): w for c, w in re.findall(r"^  (\d+) +(\w+)", block, re.MULTILINE)}
        assert set(TABLE) <= set(listed), (path, listed)
        for code, word in TABLE.items():
            assert listed[code].startswith(word.split()[0]), (path, code, listed[code])
    assert {"vllm-cutover", "gate", "cutover start", "eval compare", "tune status",
            "launch", "scan", "proxy", "report", "sim", "demo", "verify"} <= set(seen)


@pytest.mark.parametrize(("argv", "close"), [
    (["cutvoer"], "cutover"),
    (["gate", "--url", "http://127.0.0.1:9", "--timout", "3"], "--timeout"),
    (["cutover", "strat"], "start"),
    (["cutover", "status", "--jsn"], "--json"),
    (["eval", "compare", "--golden", "g", "--url", "http://a", "--hmtl", "x"], "--html"),
    (["report", "--db", "x", "--stat-file", "y"], "--state-file"),
    (["proxy", "--primary", "http://a", "--admin-prot", "1"], "--admin-port"),
])
def test_a_usage_error_is_one_line_with_a_did_you_mean_and_exit_3(
        argv: list[str], close: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 3
    err = capsys.readouterr().err
    assert close in err.split("; did you mean ", 1)[-1].split("?")[0].split(" or "), err
    assert len(err.strip().splitlines()) == 2 and "usage:" not in err, err  # no usage block


def test_a_bad_value_is_short_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["gate", "--url", "http://127.0.0.1:9", "--timeout", "soon"])
    assert exited.value.code == 3
    err = capsys.readouterr().err
    assert "invalid float value: 'soon'" in err and len(err.strip().splitlines()) == 2


def _dead() -> str:
    return f"http://127.0.0.1:{free_port()}"


def _cases(tmp: Path) -> list[tuple[str, list[str], int]]:
    prompts = tmp / "p.jsonl"
    prompts.write_text('{"prompt": "x"}\n')
    garbled = tmp / "golden.jsonl"
    garbled.write_text("not json\n")
    dead = _dead()
    return [
        ("gate: bad arguments", ["gate", "--url", dead, "--timeout", "-1"], 3),
        ("gate: unreachable", ["gate", "--url", dead], 4),
        ("gate: fleet, unreachable", ["gate", "--prometheus", dead], 4),
        ("cutover: bad input", ["cutover", "start", "--proxy-admin", dead, "--old", "a"], 3),
        ("cutover: unreachable", ["cutover", "status", "--proxy-admin", dead], 4),
        ("tune: unreachable", ["tune", "status", "--proxy-admin", dead], 4),
        ("eval record: unreachable", ["eval", "record", "--url", dead, "--prompts",
                                      str(prompts), "-o", str(tmp / "g.jsonl")], 4),
        ("eval compare: bad golden", ["eval", "compare", "--golden", str(garbled),
                                      "--url", dead], 3),
        ("eval record: missing prompts", ["eval", "record", "--url", dead, "--prompts",
                                          str(tmp / "none.jsonl"), "-o", str(tmp / "o")], 3),
        ("verify: a missing launch report", ["verify", "--url", dead, "--launch-report",
                                             str(tmp / "none.json")], 3),
        # verify checks an engine: one that is down fails its checklist (a verdict, 1)
        ("verify: engine down", ["verify", "--url", dead], 1),
        ("report: missing database", ["report", "--db", str(tmp / "none.db")], 3),
        ("scan: missing path", ["scan", str(tmp / "none")], 3),
        ("sim: bad knob", ["sim", "--port", "0", "--ttft-ms", "-5"], 3),
        ("demo: bad setting", ["demo", "--requests", "0"], 3),
        ("proxy: bad value", ["proxy", "--primary", "localhost:1"], 3),
        ("launch: bad input", ["launch", "--dry-run", "--compute-capability", "99.9",
                               "--", "vllm", "serve", "m"], 3),
        ("no command", [], 3),
    ]


def test_each_command_exits_by_the_table(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    wrong = []
    for name, argv, code in _cases(tmp_path):
        try:
            got = main(argv)
        except SystemExit as exc:
            got = exc.code
        err = capsys.readouterr().err
        if got != code or "Traceback" in err:
            wrong.append((name, code, got, err[-300:]))
    assert not wrong, wrong


def test_refusals_by_the_admin_api_exit_5(capsys: pytest.CaptureFixture[str]) -> None:
    refused = b'{"error": {"message": "cutover ab12 is still shadowing"}}'
    with canned_http() as answer:
        url = answer(refused, status=409)
        assert main(["cutover", "abort", "--proxy-admin", url, "--admin-token",
                     "t" * 16]) == 5
        url = answer(b'{"error": {"message": "missing or wrong token"}}', status=401)
        assert main(["gate", "--url", url]) == 5
    assert "409" in capsys.readouterr().err


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return dict(parser._option_string_actions)


def test_one_flag_name_per_meaning() -> None:
    parsers = dict(_parsers(build_parser()))
    for path in ("cutover start", "cutover status", "tune start", "tune status", "gate"):
        assert "--admin-url" in _options(parsers[path]), path  # the admin API's address
    for path in ("proxy", "report", "eval compare", "cutover start"):
        assert "--gate-min-samples" in _options(parsers[path]), path  # the gate's minimum
    for path in ("cutover status", "tune status", "proxy"):
        assert "--admin-token" in _options(parsers[path]), path


def test_one_default_admin_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CUTOVER_ADMIN_URL", raising=False)
    for path in ("cutover status", "tune status"):
        args = build_parser().parse_args(path.split())
        assert args.proxy_admin == "http://127.0.0.1:8001", path
    proxy_help = dict(_parsers(build_parser()))["proxy"].format_help()
    assert "8001" in " ".join(proxy_help.split())  # --admin-port says where clients look
    monkeypatch.setenv("VLLM_CUTOVER_ADMIN_URL", "http://sidecar:9")
    for path in ("cutover status", "tune status"):
        assert build_parser().parse_args(path.split()).proxy_admin == "http://sidecar:9"


def test_every_command_has_an_example_that_parses() -> None:
    """Each leaf command's --help shows how to call it, and what it shows is a valid call."""
    tree = dict(_parsers(build_parser()))
    leaves = [path for path in tree if not any(
        isinstance(a, argparse._SubParsersAction) for a in tree[path]._actions)]
    missing, broken = [], []
    for path in leaves:
        text = tree[path].format_help()
        if "example" not in text:
            missing.append(path)
            continue
        block = text.split("examples:\n", 1)[-1].split("\n\n", 1)[0] \
            if "examples:\n" in text else ""
        for line in block.splitlines():
            words = shlex.split(line)
            assert words[0] == "vllm-cutover", (path, line)
            try:
                build_parser().parse_args(words[1:])
            except SystemExit:
                broken.append(line)
    assert not missing, f"no example in --help: {missing}"
    assert not broken, f"examples that do not parse: {broken}"


def test_every_default_is_shown() -> None:
    """Each option's --help line says its default (zero included: `0 == False`, yet a 0 ms
    delay is a default a reader needs to see)."""
    hidden = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            default = action.default
            if (not action.option_strings or default is None or isinstance(default, bool)
                    or default in ([], argparse.SUPPRESS)):
                continue
            text = parser._get_formatter()._expand_help(action) if action.help else ""
            if "default" not in text.lower():
                hidden.append(f"{path} {action.option_strings[0]}")
    assert not hidden, f"options whose default --help does not show: {hidden}"
    sim = dict(_parsers(build_parser()))["sim"].format_help()
    assert "(default: 0.0)" in " ".join(sim.split())


def test_the_gate_doc_counts_the_default_checks_as_the_code_does() -> None:
    """docs/GATE.md's "N at the defaults, X % each" is what GateCriteria() splits the fail
    side over (it once said 11 and 0.45 % while the report said 0.005)."""
    from proxy.gate.criteria import GateCriteria

    text = " ".join((ROOT / "docs" / "GATE.md").read_text().split())
    found = re.search(r"(\d+) at the defaults, ([\d.]+) % each", text)
    assert found, "docs/GATE.md no longer states the default split"
    criteria = GateCriteria()
    assert int(found.group(1)) == criteria.checks()
    assert float(found.group(2)) / 100 == pytest.approx(criteria.fail_alpha())
