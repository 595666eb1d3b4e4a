"""The proxy's ProxyControl: routes with compare-and-set, requests in flight, a cutover's gate."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from proxy.cutover.control import ProxyControl, RouteConflict, RoutesView
from proxy.evidence.window import EvidenceWindow
from proxy.gate.verdict import GateCriteria
from proxy.metrics import ProxyMetrics
from proxy.mirror.app import CONTROL_KEY, EVIDENCE_KEY, MIRROR_KEY
from proxy.mirror.config import RouteConfig
from proxy.mirror.control import MirrorControl
from proxy.mirror.upstream.routing import Router, make_pool_factory
from proxy.mirror.worker.link import WorkerUnavailable

GREEDY = {"prompt": "hi", "temperature": 0, "stream": True}


async def test_routes_compare_and_set(backend, proxy, make_config):
    a, b = await backend(), await backend()
    client = await proxy(make_config(a.url, None))
    control: ProxyControl = client.app[CONTROL_KEY]
    assert control.routes() == RoutesView(1, a.url)
    assert control.set_routes(b.url, a.url, None, 1) == RoutesView(2, b.url, a.url)
    with pytest.raises(RouteConflict, match="version 2, not 1"):
        control.set_routes(a.url, None, None, 1)
    assert control.routes() == RoutesView(2, b.url, a.url)
    await (await client.get("/echo/x")).read()
    assert len(b.seen) == 1 and not a.seen


async def test_in_flight_counts_a_stream_until_it_ends(backend, proxy, make_config):
    release = asyncio.Event()
    primary = await backend(gate=release)
    client = await proxy(make_config(primary.url, None))
    control = client.app[CONTROL_KEY]
    resp = await client.post("/v1/completions", json=GREEDY)
    await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
    assert control.inflight() == {primary.url: 1}
    release.set()
    await resp.read()
    assert control.inflight() == {primary.url: 0}


async def _send(client: Any, n: int) -> None:
    for _ in range(n):
        assert (await (await client.post("/v1/completions", json=GREEDY)).read()) \
            .endswith(b"[DONE]\n\n")


async def _gate_when(control: ProxyControl, window: EvidenceWindow, samples: int) -> Any:
    for _ in range(400):
        view = await control.gate(window)
        if view.samples >= samples:
            return view
        await asyncio.sleep(0.05)
    raise AssertionError(f"gate never saw {samples} samples: {view}")


@pytest.mark.parametrize("capture_worker", [False, True])
async def test_gate_judges_the_window_new_against_old(backend, proxy, make_config,
                                                     capture_worker):
    old, new, other = await backend(), await backend(ttft_s=0.2), await backend()
    criteria = GateCriteria(min_samples=6)
    client = await proxy(make_config(old.url, other.url, gate=criteria,
                                     capture_worker=capture_worker))
    control = client.app[CONTROL_KEY]
    await _send(client, 2)  # against another shadow: not this cutover's evidence
    window = EvidenceWindow(time.time(), old.url, new.url)
    control.set_routes(old.url, new.url, None, 1)
    await _send(client, 3)
    await _gate_when(control, window, 3)
    control.set_routes(new.url, old.url, None, 2)  # promotion: new serves, old is mirrored
    await _send(client, 3)
    view = await _gate_when(control, window, 6)
    assert view.samples == 6 and view.min_samples == 6
    assert view.checks and view.checks[0].status == view.verdict  # most severe first
    judged = await client.app[EVIDENCE_KEY].window_gate(window)  # what the view came from
    assert judged.window is not None
    assert judged.window.versions["old"].requests == 6
    assert judged.window.versions["new"].requests == 6
    latency = judged.verdict.facts.latency
    assert latency is not None
    ttft = latency.new["ttft"]
    assert ttft.n == 6 and ttft.p50_s is not None and ttft.p50_s >= 0.2
    later = await control.gate(EvidenceWindow(time.time() + 60, old.url, new.url))
    assert later.samples == 0 and later.verdict == "inconclusive"
    if capture_worker:  # the worker gone: no verdict, said so, and nothing raised
        mirror = client.app[MIRROR_KEY]
        os.kill(mirror.link.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        for _ in range(200):
            if not mirror.link.ready:  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.01)
        gone = await control.gate(window)
        assert gone.verdict == "inconclusive" and "evidence unavailable" in gone.reasons[0]


class _NoEvidence:
    async def window_gate(self, window: EvidenceWindow) -> dict[str, Any]:
        raise WorkerUnavailable("the capture worker is not running (restarting)")


async def test_unavailable_evidence_is_an_inconclusive_view():
    router = Router(RouteConfig("http://a:1"), make_pool_factory(1.0))
    control = MirrorControl(router, _NoEvidence(), ProxyMetrics(CollectorRegistry()),  # type: ignore[arg-type]
                            GateCriteria(min_samples=7))
    view = await control.gate(EvidenceWindow(0.0, "http://a:1", "http://b:1"))
    assert (view.verdict, view.samples, view.min_samples) == ("inconclusive", 0, 7)
    assert "not running" in view.reasons[0]
    await router.close()

