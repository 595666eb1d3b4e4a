"""The mirroring proxy as a real process for end-to-end tests, and the HTTP it is judged by.

`start_proxy` runs `python -m proxy proxy ...` (this interpreter, this checkout) on
loopback ports with a SQLite file and an admin listener, and waits until the admin
API answers. The HTTP helpers are stdlib only and never raise on an HTTP status, so
a test compares what the proxy answered with what the backend answered, errors included.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.servers import HOST, ServerProcess, free_port, spawn

REPO_ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "e2e-admin-token"
# Fields that differ between two answers to the same request, whoever relays them.
VOLATILE_KEYS = frozenset({"id", "created", "system_fingerprint"})
T = TypeVar("T")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass(frozen=True)
class HttpAnswer:
    """Status, headers (lower-cased names) and the whole body of one HTTP exchange."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class RunningProxy:
    """A started proxy: client URL, admin URL, records file and its log."""

    url: str
    admin_url: str
    db_path: Path
    log_path: Path

    def admin(self, path: str, *, auth: bool = False) -> HttpAnswer:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"} if auth else {}
        return http_request("GET", self.admin_url + path, headers=headers)

    def stats(self) -> dict[str, Any]:
        answer = self.admin("/admin/stats")
        assert answer.status == 200, answer
        return dict(answer.json())

    def settled(self, sent: int, sides: Sequence[str]) -> dict[str, Any] | None:
        """The stats once each of `sent` requests has its comparison per side, else None."""
        stats = self.stats()
        if stats["records"] < sent or stats["live"]["shadow_inflight"] != 0:
            return None
        for side in sides:
            counts = stats.get(side) or {}
            done = sum(counts.get(k, 0) for k in ("compared", "not_comparable", "errors",
                                                  "sampled"))
            if done < sent:
                return None
        return stats

    def metrics(self) -> Samples:
        return scrape(self.admin_url + "/metrics")

    def report_json(self) -> dict[str, Any]:
        """`python -m proxy report --db PATH --json`, run as a user would."""
        done = subprocess.run(
            [sys.executable, "-m", "proxy", "report", "--db", str(self.db_path), "--json"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
        )
        assert done.returncode == 0, f"report failed ({done.returncode}): {done.stderr}"
        return dict(json.loads(done.stdout))


def http_request(
    method: str,
    url: str,
    body: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> HttpAnswer:
    """One request; 4xx/5xx answers are returned, not raised."""
    data = json.dumps(body).encode() if body is not None else None
    all_headers = {"Content-Type": "application/json"} if data is not None else {}
    all_headers.update(headers or {})
    req = urllib.request.Request(url, data=data, headers=all_headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return HttpAnswer(resp.status, _lower(resp.headers.items()), resp.read())
    except urllib.error.HTTPError as err:
        return HttpAnswer(err.code, _lower(err.headers.items()), err.read())


def read_then_hang_up(url: str, body: Mapping[str, Any], lines: int,
                      timeout_s: float = 60.0) -> list[bytes]:
    """POST a streaming request, read `lines` lines of the answer, then close the socket."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or HOST, parts.port, timeout=timeout_s)
    try:
        conn.request("POST", parts.path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        return [resp.readline() for _ in range(lines)]
    finally:
        conn.close()


def stable_headers(answer: HttpAnswer) -> dict[str, str]:
    """Response headers that must be equal with and without the proxy (all but Date)."""
    return {k: v for k, v in answer.headers.items() if k != "date"}


def relayed_content(answer: HttpAnswer) -> Any:
    """The JSON body minus per-answer ids and clocks (a model list's permission ids too)."""
    content = without_volatile(answer.json())
    if isinstance(content, dict) and content.get("object") == "list":
        content["data"] = [(m["id"], m.get("root"), m.get("max_model_len"))
                           for m in content["data"]]
    return content


def scrape(url: str) -> Samples:
    """GET a Prometheus endpoint and parse it: (sample name, labels) -> value."""
    answer = http_request("GET", url)
    assert answer.status == 200, answer
    assert answer.headers["content-type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(answer.body.decode())
            for s in family.samples}


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def vllm_counter(base_url: str, name: str) -> float:
    """One sample name summed over a vLLM server's own /metrics."""
    return total(scrape(base_url + "/metrics"), name)


def _lower(items: Sequence[tuple[str, str]]) -> dict[str, str]:
    return {k.lower(): v for k, v in items}


def sse_events(body: bytes) -> list[Any]:
    """The `data:` payloads of an SSE body, JSON-decoded ("[DONE]" stays a string)."""
    events: list[Any] = []
    for block in body.decode("utf-8").replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip(" ") for line in block.split("\n")
                         if line.startswith("data:"))
        if data:
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def without_volatile(payload: Any) -> Any:
    """A response object (or SSE event) minus the fields that differ between answers."""
    if isinstance(payload, dict):
        return {k: v for k, v in payload.items() if k not in VOLATILE_KEYS}
    return payload


def fold_stream(events: Sequence[Any]) -> dict[str, Any]:
    """What a streamed answer says, independent of how the server grouped tokens into events.

    vLLM puts one or several tokens in an event depending on timing, so two streams
    of the same generation are compared by their concatenated text and token ids per
    choice, finish and stop reasons, usage, and the fields that every event repeats.
    """
    choices: dict[int, dict[str, Any]] = {}
    folded: dict[str, Any] = {"choices": choices, "usage": None, "repeated": set()}
    for event in events:
        if not isinstance(event, dict):
            continue
        folded["repeated"].add(json.dumps(
            {k: event.get(k) for k in ("object", "model")}, sort_keys=True))
        if event.get("usage"):
            folded["usage"] = event["usage"]
        for choice in event.get("choices") or ():
            into = choices.setdefault(choice["index"], {"text": "", "token_ids": []})
            delta = choice.get("delta") or {}
            into["text"] += delta.get("content") or choice.get("text") or ""
            into["token_ids"] += choice.get("token_ids") or []
            for key in ("finish_reason", "stop_reason"):
                if choice.get(key) is not None:
                    into[key] = choice[key]
            if delta.get("role"):
                into["role"] = delta["role"]
    return folded


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str,
             every_s: float = 0.25) -> T:
    """Poll `probe` until it returns something other than None; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


@contextmanager
def start_proxy(
    work_dir: Path,
    primary: str,
    shadow: str,
    baseline: str | None = None,
    extra_args: Sequence[str] = (),
    wrapper: Sequence[str] = (),
) -> Iterator[RunningProxy]:
    """Run the proxy (sample rate 1, otherwise its defaults: light traffic must be mirrored
    in full on a busy machine too) until the block ends; the records go to `work_dir`.
    `wrapper`: a command the proxy runs under (`prlimit --fsize=N`, say)."""
    port, admin_port = free_port(), free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    db_path = work_dir / "records.sqlite"
    argv = [*wrapper, sys.executable, "-m", "proxy", "--log-level", "WARNING", "proxy",
            "--host", HOST, "--port", str(port), "--primary", primary, "--shadow", shadow,
            "--sample-rate", "1", "--db", str(db_path), "--admin-port", str(admin_port),
            "--admin-token", ADMIN_TOKEN, *extra_args]
    if baseline is not None:
        argv += ["--baseline", baseline]
    proc = spawn(argv, port=port, log_path=work_dir / "proxy.log",
                 env={"PYTHONPATH": str(REPO_ROOT)})
    admin_url = f"http://{HOST}:{admin_port}"
    try:
        ServerProcess(proc.proc, admin_url, proc.log_path).wait_ready(60, "/admin/routes")
        yield RunningProxy(proc.url, admin_url, db_path, proc.log_path)
    finally:
        proc.stop(grace_s=10)
