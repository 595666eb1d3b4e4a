"""`vllm-cutover cutover` against a small admin API stub on a real socket: the requests it
sends, what it prints, and its exit codes for each kind of failure."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from proxy.cli import main

TOKEN = "cli-t0ken"


def _status(phase: str | None, **extra: Any) -> dict[str, Any]:
    history = [{"at_unix": 1.0e9, "from": None, "to": "starting_new", "reason": "started"}]
    return {"id": "c0ffee01", "phase": phase, "terminal": phase in ("done", "failed",
                                                                    "aborted", "rolled_back"),
            "primary": {"version": "old", "url": "http://old:8000", "image": "vllm:0.31",
                        "vllm_version": "0.31.0", "name": "vllm-old"},
            "shadow": {"version": "new", "url": "http://new:8000", "image": "vllm:0.32",
                       "vllm_version": "0.32.0", "name": "vllm-new"},
            "verdict": "inconclusive", "reasons": ["12 < 50 samples"], "samples": 12,
            "min_samples": 50, "time_left_s": 240.0, "history": history, **extra}


@dataclass
class Stub:
    """Answers the cutover endpoints; `answers` overrides a path's reply once per entry."""

    statuses: list[dict[str, Any]] = field(default_factory=lambda: [_status("shadowing")])
    answers: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    received: list[tuple[str, Any]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        if request.method == "POST" and request.headers.get("Authorization") != \
                f"Bearer {TOKEN}":
            return web.json_response({"error": {"message": "missing or wrong bearer token"}},
                                     status=401)
        body = await request.json() if request.can_read_body else None
        self.received.append((f"{request.method} {request.path}", body))
        if request.path in self.answers:
            status, payload = self.answers[request.path]
            return web.json_response(payload, status=status)
        if request.method == "GET":
            reply = self.statuses[0] if len(self.statuses) == 1 else self.statuses.pop(0)
            return web.json_response(reply)
        return web.json_response(self.statuses[0], status=202)


@pytest.fixture
async def stub(aiohttp_server: Any) -> Stub:
    s = Stub()
    app = web.Application()
    app.router.add_route("*", "/admin/cutover{tail:.*}", s.handle)
    server = await aiohttp_server(app)
    s.url = str(server.make_url("")).rstrip("/")
    return s


async def run(stub_url: str, *argv: str, token: str | None = TOKEN) -> int:
    args = ["cutover", *argv[:1], "--proxy-admin", stub_url, "--interval", "0.01", *argv[1:]]
    if token is not None:
        args += ["--admin-token", token]
    return await asyncio.to_thread(main, args)


async def test_start_sends_the_typed_request(stub: Stub, capsys) -> None:
    code = await run(stub.url, "start", "--old", "vllm-old", "--new-image", "vllm:0.32",
                     "--new-gpus", "2,3", "--new-env", "A=1", "--new-env", "B=x=y",
                     "--new-command", "serve /models/m --shutdown-timeout '60'",
                     "--analysis-timeout", "600", "--min-samples", "80", "--remove-old",
                     "--manual-promote", "--scale-down-delay", "5")
    assert code == 0 and "start: accepted; cutover c0ffee01 is shadowing" in \
        capsys.readouterr().out
    assert stub.received[0] == ("POST /admin/cutover", {
        "old": "vllm-old", "new_image": "vllm:0.32", "new_gpus": ["2", "3"],
        "new_env": {"A": "1", "B": "x=y"}, "analysis_timeout_s": 600.0, "min_samples": 80,
        "new_command": ["serve", "/models/m", "--shutdown-timeout", "60"], "remove_old": True,
        "auto_promote": False, "scale_down_delay_s": 5.0})


@pytest.mark.parametrize(("argv", "quoted"), [
    (("--old", "a", "--new-image", "b", "--new-env", "NOEQUALS"), "KEY=VALUE, got 'NOEQUALS'"),
    (("--old", "a", "--new-image", "b", "--min-samples", "0"), "got 0"),
    (("--old", "a"), "give exactly one of --new-image"),  # flag names, not API fields
    (("--new-url", "localhost:8000"), "'localhost:8000'"),
])
async def test_bad_input_exits_3_without_calling_the_proxy(stub: Stub, capsys, argv,
                                                           quoted) -> None:
    assert await run(stub.url, "start", *argv) == 3
    assert quoted in capsys.readouterr().err and stub.received == []


async def test_admin_api_down_exits_4(capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert await run(dead, "status") == 4
    err = capsys.readouterr().err
    assert "cannot be reached" in err and dead in err and "--admin-url" in err


async def test_wrong_token_exits_5_and_env_token_works(stub: Stub, capsys,
                                                       monkeypatch) -> None:
    assert await run(stub.url, "abort", token="wrong") == 5
    assert "refused the token (401)" in capsys.readouterr().err and stub.received == []
    monkeypatch.setenv("VLLM_CUTOVER_ADMIN_TOKEN", TOKEN)
    assert await run(stub.url, "abort", token=None) == 0
    assert stub.received[0] == ("POST /admin/cutover/abort", None)


@pytest.mark.parametrize(("path", "status", "message", "code"), [
    ("/admin/cutover", 409, "cutover ab12 is still shadowing", 5),
    ("/admin/cutover", 501, "start it with --driver docker", 5),
    ("/admin/cutover", 404, "no container matches 'vllm-old'", 3),
    ("/admin/cutover", 503, "Docker daemon unreachable", 5),
    ("/admin/cutover", 502, "nothing accepts connections at http://127.0.0.1:9", 4),
])
async def test_refusals_are_quoted_with_their_exit_code(stub: Stub, capsys, path, status,
                                                        message, code) -> None:
    stub.answers[path] = (status, {"error": {"message": message}})
    assert await run(stub.url, "start", "--old", "vllm-old", "--new-image", "x") == code
    assert f"the proxy answered {status}: {message}" in capsys.readouterr().err


async def test_promote_force_and_refused_promote(stub: Stub, capsys) -> None:
    assert await run(stub.url, "promote", "--force") == 0
    assert stub.received[0] == ("POST /admin/cutover/promote", {"force": True})
    stub.answers["/admin/cutover/promote"] = (409, {"error": {"message": "gate inconclusive"}})
    assert await run(stub.url, "promote") == 5
    assert "409: gate inconclusive" in capsys.readouterr().err


async def test_status_text_and_json(stub: Stub, capsys) -> None:
    assert await run(stub.url, "status") == 0
    out = capsys.readouterr().out
    assert "cutover c0ffee01: phase shadowing  verdict inconclusive  samples 12/50  deadline in 240s" \
        in out
    assert "primary: old   http://old:8000  image vllm:0.31  vLLM 0.31.0" in out
    assert "shadow:  new   http://new:8000" in out and "reason:  12 < 50 samples" in out
    assert "-> starting_new   started" in out
    assert await run(stub.url, "status", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert {"phase", "primary", "shadow", "verdict", "reasons", "history"} <= set(data)
    stub.statuses = [_status(None, history=[], primary={"version": "other",
                                                        "url": "http://old:8000"})]
    assert await run(stub.url, "status") == 0
    assert "no cutover has run on this proxy" in capsys.readouterr().out


@pytest.mark.parametrize(("end", "code"), [("done", 0), ("rolled_back", 1), ("failed", 1)])
async def test_watch_follows_until_the_end(stub: Stub, capsys, end, code) -> None:
    moved = [{"at_unix": 1.0e9 + 5, "from": "shadowing", "to": "promoting",
              "reason": "gate pass"}]
    stub.statuses = [_status("shadowing"), _status("shadowing", samples=30),
                     _status("promoting", history=_status("x")["history"] + moved),
                     _status(end, history=_status("x")["history"] + moved)]
    assert await run(stub.url, "status", "--watch") == code
    out = capsys.readouterr().out
    assert "samples 12/50" in out and "samples 30/50" in out
    assert "shadowing -> promoting: gate pass" in out and f"phase {end}" in out


async def test_watch_says_a_note_once_then_counts_it(stub: Stub, capsys,
                                                     monkeypatch) -> None:
    """Issue 34: a probe failing every 5 s for 15 minutes printed the same error line each
    time. In plain lines (not a terminal) a note is said once, then counted."""
    import proxy.terminal

    monkeypatch.setattr(proxy.terminal.StatusLine.__init__, "__kwdefaults__",
                        {"in_place": False, "plain_every_s": 0.0, "clock": time.monotonic})
    note = "/health: nothing answers at http://new:8000 (connection refused)"
    stub.statuses = [_status("warming", note=note, time_left_s=float(t))
                     for t in (10, 9, 8, 7)]
    stub.statuses.append(_status("failed"))
    assert await run(stub.url, "status", "--watch") == 1
    out = capsys.readouterr().out
    assert out.count("nothing answers at http://new:8000") == 1, out
    assert "the same as above, 3 times" in out, out


async def test_start_wait_exits_1_when_it_fails(stub: Stub, capsys) -> None:
    stub.statuses = [_status("warming"), _status("warming"),
                     _status("failed", error="new exited with code 1")]
    assert await run(stub.url, "start", "--old", "a", "--new-image", "b", "--wait") == 1
    assert "phase failed" in capsys.readouterr().out
