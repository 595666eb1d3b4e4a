"""Mirroring to several shadows at once: every candidate of a running tune.

For each sampled generation request the proxy starts one in-process `Exchange` per
candidate still racing (the same request, old's answer tapped once per candidate), and
each record goes to the tune's race instead of the record store: the race's evidence is
its own, apart from the proxy's gate and metrics. Like every mirror, nothing here is on
the client's path beyond the cheap start, and a candidate that fails is data.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import partial
from typing import Any

from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from proxy.capture.types import Endpoint
from proxy.metrics import ProxyMetrics
from proxy.mirror.admission import ExchangeHandle
from proxy.mirror.config import ProxyConfig, RouteConfig
from proxy.mirror.exchange import Mirror
from proxy.mirror.relay import ChunkTap, RelayResult
from proxy.mirror.shadow import Sampler
from proxy.mirror.upstream.routing import Router, Routes, Upstream, make_pool_factory
from proxy.tasks import BackgroundTasks
from proxy.tune.service import TuneService


class FanOut:
    """Several exchanges of one client request, held as one by the handler."""

    def __init__(self, handles: list[ExchangeHandle]) -> None:
        self._handles = handles

    def tap_for(self, content_type: str) -> ChunkTap:
        taps = [h.tap_for(content_type) for h in self._handles]

        def tap(payload: bytes, t: float) -> None:
            for each in taps:
                each(payload, t)

        return tap

    def primary_done(self, result: RelayResult) -> None:
        for handle in self._handles:
            handle.primary_done(result)


def joined(*handles: ExchangeHandle | None) -> ExchangeHandle | None:
    """One handle for the exchanges a request started (None when it started none)."""
    started = [h for h in handles if h is not None]
    if len(started) <= 1:
        return started[0] if started else None
    return FanOut(started)


class CandidateMirrors:
    """Starts the candidates' exchanges of a request for the tune service."""

    def __init__(self, config: ProxyConfig, tune: TuneService) -> None:
        self._tune = tune
        self._tasks = BackgroundTasks()
        # Its own metrics: the race's traffic must not move the proxy's gate or dashboards.
        self._mirror = Mirror(replace(config.mirror, sample_rate=1.0), self._tasks,
                              ProxyMetrics(CollectorRegistry()), None,
                              evidence_in_start_order=False)
        tune.judged_until = self._mirror.judged_until
        self._factory = make_pool_factory(config.connect_timeout_s,
                                          config.max_upstream_connections)
        self._routers: dict[str, Router] = {}
        self._sampler = Sampler(0.0)
        self._numbers = itertools.count(1)

    def _shadow(self, url: str) -> Upstream:
        router = self._routers.get(url)
        if router is None:
            router = self._routers[url] = Router(RouteConfig(url, url), self._factory)
        shadow = router.routes.shadow
        assert shadow is not None
        return shadow

    def racing(self) -> bool:
        """Whether a race runs now (a request's body is read only then)."""
        return bool(self._tune.racing())

    def start(self, routes: Routes, path: str, headers: CIMultiDict[str],
              request: dict[str, Any], endpoint: Endpoint) -> ExchangeHandle | None:
        """Every racing candidate's exchange of a request (`request`: the body as
        `read_request` read it, and mirrorable)."""
        targets = self._tune.racing()
        if self._routers.keys() - targets.values():
            self._forget(set(targets.values()))
        if not targets:
            return None
        if self._sampler.rate != self._tune.sample_rate:
            self._sampler = Sampler(self._tune.sample_rate)
        if not self._sampler.sample(headers):
            return None
        number = next(self._numbers)
        started: list[ExchangeHandle | None] = []
        for name, url in targets.items():
            snapshot = Routes(routes.version, routes.primary, self._shadow(url), None)
            exchange = self._mirror.start(snapshot, path, headers, request, endpoint)
            if exchange is not None:
                exchange.on_record = partial(self._tune.observe, name, number)
                started.append(exchange)
        return joined(*started)

    def _forget(self, racing: set[str]) -> None:
        """Close the pools of candidates no longer racing: the next candidate may get the
        same address (Docker gives a removed container's IP to the next one) and must not
        inherit keep-alive connections to the engine before it; and a tune of many
        candidates must not keep a pool for each."""
        for url in [u for u in self._routers if u not in racing]:
            router = self._routers.pop(url)
            self._tasks.spawn(router.close(), f"close-candidate-{url}")

    def known(self) -> set[str]:
        """The candidate URLs whose pools are open."""
        return set(self._routers)

    async def close(self, drain_timeout_s: float) -> None:
        await self._tasks.drain(drain_timeout_s)
        for router in self._routers.values():
            await router.close()


CANDIDATES_KEY = web.AppKey("candidates", CandidateMirrors)

