"""The capture worker process: records, metrics, gate, cancellation, crash and shutdown.

Every test here runs the proxy's default mode: a real worker process, started by the
app, talking to the fake backends over real sockets, read back through the admin API.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3

from prometheus_client.parser import text_string_to_metric_families

from proxy.mirror.app import MIRROR_KEY
from proxy.mirror.config import StoreConfig
from proxy.mirror.worker.messages import Chunks, End, Start
from proxy.mirror.worker.remote import RemoteMirror
from tests.mirror.conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
GREEDY = {"prompt": "hi", "temperature": 0, "stream": True}


async def _stats_when(api, done, timeout_s: float = 20.0):  # type: ignore[no-untyped-def]
    """Poll /admin/stats until `done(stats)` holds."""
    stats = None
    for _ in range(int(timeout_s / 0.05)):
        resp = await api.get("/admin/stats")
        if resp.status == 200:
            stats = await resp.json()
            if done(stats):
                return stats
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition never held; last stats {stats}")


def _recorded(n: int):  # type: ignore[no-untyped-def]
    return lambda s: s["records"] >= n and s["live"]["shadow_inflight"] == 0


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


async def test_worker_records_compares_and_merges_metrics(backend, proxy, admin, make_config):
    primary, shadow, baseline = await backend(), await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, baseline.url, capture_worker=True))
    mirror = client.app[MIRROR_KEY]
    assert isinstance(mirror, RemoteMirror) and mirror.link.pid != os.getpid()
    api = await admin(client.app)
    direct = await (await client.post("/v1/completions", json=GREEDY)).read()
    for _ in range(2):
        assert await (await client.post("/v1/completions", json=GREEDY)).read() == direct
    stats = await _stats_when(api, _recorded(3))
    assert stats["shadow"]["compared"] == 3 and stats["shadow"]["diverged"] == 0
    assert stats["baseline"]["compared"] == 3
    worker = stats["live"]["capture_worker"]
    assert {k: worker[k] for k in ("pid", "running", "restarts", "scheduling")} == {
        "pid": mirror.link.pid, "running": True, "restarts": 0, "scheduling": "nice 10"}
    assert os.getpriority(os.PRIO_PROCESS, mirror.link.pid) == \
        os.getpriority(os.PRIO_PROCESS, 0) + 10  # the kernel agrees
    assert worker["queued_bytes"] >= 0 and set(worker["loop"]) == {"lag_ms", "busy"}
    assert stats["admission"] == {"eligible": 3, "mirrored": 3, "shed": {}, "shed_total": 0,
                                  "unmirrorable": 0, "coverage": 1.0, "drop_rate": 0.0}
    (first, *_) = (await (await api.get("/admin/records", headers=AUTH)).json())["records"]
    primary_capture = next(c for c in first["captures"] if c["role"] == "primary")
    assert primary_capture["status"] == 200 and primary_capture["ttft_s"] > 0
    assert primary_capture["output_tokens"] == 4 and primary_capture["text"] == ""
    gate = await api.get("/admin/gate")
    verdict = (await gate.json())["verdict"]
    samples = _samples(await (await api.get("/metrics")).text())
    # Counted by the proxy (the client path) and by the worker (the comparisons), one page.
    assert samples[("vllm_cutover_requests_total", (
        ("backend", primary.url.split("://")[1]), ("endpoint", "completions"),
        ("role", "primary"), ("status_class", "2xx")))] == 3
    assert samples[("vllm_cutover_comparisons_total", (
        ("against", "shadow"), ("deterministic", "true"), ("outcome", "match")))] == 3
    assert samples[("vllm_cutover_shadow_inflight", ())] == 0
    assert samples[("vllm_cutover_verdict", (("verdict", verdict),))] == 1.0
    assert sum(v for (name, _), v in samples.items() if name == "vllm_cutover_verdict") == 1.0


async def test_client_disconnect_cancels_the_shadow_in_the_worker(backend, proxy, admin,
                                                                 make_config):
    held = asyncio.Event()  # never set: both backends hang after their first chunk
    primary, shadow = await backend(gate=held), await backend(gate=held)
    client = await proxy(make_config(primary.url, shadow.url, capture_worker=True))
    api = await admin(client.app)
    resp = await client.post("/v1/completions", json=GREEDY)
    await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
    for _ in range(500):  # both generating (the worker sends the shadow's request)
        if shadow.seen:
            break
        await asyncio.sleep(0.01)
    resp.connection.transport.abort()
    await asyncio.wait_for(primary.cancelled.wait(), 5)
    await asyncio.wait_for(shadow.cancelled.wait(), 5)
    await _stats_when(api, _recorded(1))
    (record,) = (await (await api.get("/admin/records", headers=AUTH)).json())["records"]
    assert {c["role"]: c["cancelled"] for c in record["captures"]} == \
        {"primary": True, "shadow": True}


async def test_a_killed_worker_never_touches_the_client_path(backend, proxy, admin, make_config):
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, capture_worker=True))
    api = await admin(client.app)
    link = client.app[MIRROR_KEY].link
    direct = await (await client.post("/v1/completions", json=GREEDY)).read()
    await _stats_when(api, _recorded(1))
    os.kill(link.pid, signal.SIGKILL)
    for _ in range(100):
        if not link.ready:
            break
        await asyncio.sleep(0.01)
    # Relayed unchanged while the worker is gone; the admin API says why it can't answer.
    for _ in range(5):
        resp = await client.post("/v1/completions", json=GREEDY)
        assert resp.status == 200 and await resp.read() == direct
    assert (await api.get("/admin/gate")).status == 503
    text = await (await api.get("/metrics")).text()  # the proxy's own series still answer
    dropped = _samples(text)[("vllm_cutover_shadow_dropped_total", (("reason", "worker_down"),))]
    assert dropped == 5
    stats = await _stats_when(api, lambda s: s["live"]["capture_worker"]["restarts"] == 1)
    assert stats["records"] == 0  # the default store is in memory: the new worker's is empty
    await (await client.post("/v1/completions", json=GREEDY)).read()
    await _stats_when(api, _recorded(1))


async def test_idle_priority_stays_available(backend, proxy, admin, make_config):
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, capture_worker=True,
                                     worker_priority="idle"))
    link = client.app[MIRROR_KEY].link
    assert link.scheduling == "SCHED_IDLE"
    assert os.sched_getscheduler(link.pid) == os.SCHED_IDLE


async def test_a_worker_that_falls_behind_sheds_mirrors_and_the_client_is_served(
        backend, proxy, admin, make_config):
    primary, shadow = await backend(), await backend()
    client = await proxy(make_config(primary.url, shadow.url, capture_worker=True,
                                     max_worker_delay_s=0.3))
    api = await admin(client.app)
    mirror = client.app[MIRROR_KEY]
    direct = await (await client.post("/v1/completions", json=GREEDY)).read()
    await _stats_when(api, _recorded(1))
    os.kill(mirror.link.pid, signal.SIGSTOP)  # as far behind as a worker gets
    try:
        # Mirrored: nothing waits yet. Its messages then wait, unhandled, past the limit.
        assert await (await client.post("/v1/completions", json=GREEDY)).read() == direct
        await asyncio.sleep(0.5)
        assert mirror.link.behind(0.3)
        for _ in range(3):
            resp = await client.post("/v1/completions", json=GREEDY)
            assert resp.status == 200 and await resp.read() == direct
        assert mirror.admission.inflight == 1
    finally:
        os.kill(mirror.link.pid, signal.SIGCONT)
    stats = await _stats_when(api, _recorded(2))  # the worker catches up
    assert stats["admission"]["shed"] == {"worker_busy": 3}
    assert stats["admission"]["eligible"] == 5
    text = await (await api.get("/metrics")).text()
    dropped = _samples(text)[("vllm_cutover_shadow_dropped_total", (("reason", "worker_busy"),))]
    assert dropped == 3
    gate = await (await api.get("/admin/gate")).json()
    assert "inconclusive: 2 of 5 sampled requests mirrored (40.0%, minimum 50%); " \
           "3 shed (60.0%): worker_busy 3" in gate["reasons"]
    for _ in range(100):  # its progress reports come back: mirroring resumes
        if not mirror.link.behind(0.3):
            break
        await asyncio.sleep(0.05)
    await (await client.post("/v1/completions", json=GREEDY)).read()
    await _stats_when(api, _recorded(3))


async def test_shutdown_records_every_mirror_in_flight(backend, proxy, admin, make_config,
                                                        tmp_path, aiohttp_client):
    db = tmp_path / "records.sqlite"
    primary, shadow = await backend(), await backend(ttft_s=0.5)  # the shadow is slow
    config = make_config(primary.url, shadow.url, capture_worker=True,
                         store=StoreConfig(db_path=str(db)))
    client = await proxy(config)
    for _ in range(4):
        await (await client.post("/v1/completions", json=GREEDY)).read()
    assert client.app[MIRROR_KEY].admission.inflight == 4  # the shadow answers are still coming
    await client.close()  # app cleanup: the worker drains, records, exits
    assert client.app[MIRROR_KEY].link.process.returncode == 0
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM exchange").fetchone()
    assert count == 4


class _Link:
    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, message: object) -> bool:
        self.sent.append(message)
        return True


def _start(xid: int) -> Start:
    return Start(xid, 1, "http://p:1", "http://s:1", None, "/v1/completions", [], {},
                 "completions", 0.0, 0.0)


def test_start_goes_first_and_a_lost_exchange_sends_nothing_more():
    from proxy.mirror.relay import RelayResult
    from proxy.mirror.worker.remote import FLUSH_BYTES, RemoteExchange

    link = _Link()
    exchange = RemoteExchange(link, 7, None, [], _start(7))  # type: ignore[arg-type]
    tap = exchange.tap_for("text/event-stream")
    tap(b"x" * FLUSH_BYTES, 1.0)  # a flush before the deferred start ran
    exchange.send_start()  # the loop's turn comes: already sent, not twice
    exchange.primary_done(RelayResult(status=200))
    assert [type(m) for m in link.sent] == [Start, Chunks, End]

    link = _Link()
    lost = RemoteExchange(link, 8, None, [], _start(8))  # type: ignore[arg-type]
    lost.gone = True  # the worker died; a restarted one never heard of it
    lost.tap_for("text/event-stream")(b"x", 1.0)
    lost.primary_done(RelayResult(status=200))
    assert link.sent == []
