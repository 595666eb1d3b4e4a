"""Run-time routing: which backend is primary, shadow and baseline, changeable while serving.

A request takes a `Routes` snapshot when it starts and keeps the `Upstream`s of
that snapshot (and their connection pools) for its whole life, so a swap or a
replacement never breaks a request in flight. Primary traffic and mirrored
traffic never share a pool: an `Upstream` is keyed by (lane, URL), so a shadow
that hangs on to every connection of its pool cannot starve the primary.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from proxy.mirror.config import RouteConfig
from proxy.mirror.http1 import Http1Pool

log = logging.getLogger(__name__)

Lane = Literal["primary", "mirror"]
SessionFactory = Callable[[Lane, str], Http1Pool]


class Upstream:
    """One backend URL in one lane: its connection pool and a count of the requests using it."""

    __slots__ = ("_router", "active", "lane", "last_warning", "session", "url", "users")

    def __init__(self, url: str, lane: Lane, session: Http1Pool, router: Router) -> None:
        self.url = url
        self.lane = lane
        self.session = session
        self.users = 0
        self.active = True  # part of the current routes
        self.last_warning = 0.0  # monotonic time of the last failure logged (no log floods)
        self._router = router

    def acquire(self) -> Upstream:
        self.users += 1
        return self

    @property
    def pool(self) -> Http1Pool:
        return self.session

    def should_warn(self, every_s: float = 5.0) -> bool:
        """True at most once per `every_s`: an outage logs a line, not one per request."""
        now = time.monotonic()
        if now - self.last_warning < every_s:
            return False
        self.last_warning = now
        return True

    def release(self) -> None:
        self.users -= 1
        if self.users <= 0 and not self.active:
            self._router._retire(self)


@dataclass(frozen=True)
class Routes:
    """An immutable snapshot of the routing table."""

    version: int
    primary: Upstream
    shadow: Upstream | None
    baseline: Upstream | None

    def as_config(self) -> RouteConfig:
        return RouteConfig(
            primary=self.primary.url,
            shadow=self.shadow.url if self.shadow else None,
            baseline=self.baseline.url if self.baseline else None,
        )

    def as_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "primary": self.primary.url,
            "shadow": self.shadow.url if self.shadow else None,
            "baseline": self.baseline.url if self.baseline else None,
        }


class Router:
    """Holds the current `Routes`; `replace()` and `swap()` publish a new snapshot."""

    def __init__(self, initial: RouteConfig, session_factory: SessionFactory) -> None:
        self._factory = session_factory
        self._upstreams: dict[tuple[Lane, str], Upstream] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.routes = self._build(initial, version=1)

    def _upstream(self, lane: Lane, url: str) -> Upstream:
        key = (lane, url)
        upstream = self._upstreams.get(key)
        if upstream is None:
            upstream = Upstream(url, lane, self._factory(lane, url), self)
            self._upstreams[key] = upstream
        upstream.active = True
        return upstream

    def _build(self, config: RouteConfig, version: int) -> Routes:
        return Routes(
            version=version,
            primary=self._upstream("primary", config.primary),
            shadow=self._upstream("mirror", config.shadow) if config.shadow else None,
            baseline=self._upstream("mirror", config.baseline) if config.baseline else None,
        )

    def snapshot(self, config: RouteConfig, version: int) -> Routes:
        """Routes for `config` labelled `version`, not published (the capture worker's view
        of the proxy's routes: it only needs their pools)."""
        return self._build(config, version)

    def replace(self, config: RouteConfig) -> Routes:
        """Publish `config` as the new routes; pools no route uses close once idle."""
        old = self.routes
        for upstream in self._upstreams.values():
            upstream.active = False
        self.routes = self._build(config, old.version + 1)
        for upstream in list(self._upstreams.values()):
            if not upstream.active and upstream.users <= 0:
                self._retire(upstream)
        log.info("routes v%d: primary=%s shadow=%s baseline=%s", self.routes.version,
                 config.primary, config.shadow, config.baseline)
        return self.routes

    def swap(self) -> Routes:
        """Primary <-> shadow; the baseline stays. Raises ValueError without a shadow."""
        current = self.routes.as_config()
        if current.shadow is None:
            raise ValueError("no shadow to swap with")
        return self.replace(RouteConfig(current.shadow, current.primary, current.baseline))

    def _retire(self, upstream: Upstream) -> None:
        if self._upstreams.get((upstream.lane, upstream.url)) is not upstream:
            return
        del self._upstreams[(upstream.lane, upstream.url)]
        task = asyncio.get_running_loop().create_task(
            upstream.session.close(), name=f"close-{upstream.lane}-{upstream.url}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every pool (at shutdown, after requests and background tasks ended)."""
        sessions = [u.session for u in self._upstreams.values()]
        self._upstreams.clear()
        await asyncio.gather(*(s.close() for s in sessions), *self._closing,
                             return_exceptions=True)


def make_session_factory(connect_timeout_s: float) -> SessionFactory:
    """Keep-alive pools; the mirror lane's fail fast while their backend refuses."""

    def factory(lane: Lane, url: str) -> Http1Pool:
        return Http1Pool(url, connect_timeout_s, fail_fast=lane == "mirror")

    return factory
