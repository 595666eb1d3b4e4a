"""The proxy as the cutover sees it (`proxy.cutover.control.ProxyControl`).

One object over the app's router, its requests in flight and its evidence (in
process or in the capture worker); the admin API changes routes through it too, so
the compare-and-set, the state file and the route-version gauge are handled in one
place. Call it on the proxy's event loop (the router is not thread-safe).
"""

from __future__ import annotations

import logging

from proxy.credentials import without_credentials
from proxy.cutover.control import GateView, RoutesView
from proxy.evidence.window import EvidenceWindow
from proxy.gate.verdict import GateCriteria
from proxy.metrics import ProxyMetrics
from proxy.mirror.config import RouteConfig
from proxy.mirror.evidence import Evidence
from proxy.mirror.upstream.routing import Router, Routes

log = logging.getLogger(__name__)


def _view(routes: Routes) -> RoutesView:
    """The cutover's view: the URLs as configured (credentials included), the ones it
    sets back; the admin API redacts them (`redacted_view`)."""
    config = routes.as_config()
    return RoutesView(routes.version, config.primary, config.shadow, config.baseline)


def redacted_view(view: RoutesView) -> dict[str, object]:
    """`view` as JSON for a person: backend URLs without their credentials."""
    return {"version": view.version, **{k: without_credentials(v) if v else v
                                        for k, v in (("primary", view.primary),
                                                     ("shadow", view.shadow),
                                                     ("baseline", view.baseline))}}


class MirrorControl:
    """`ProxyControl` of this proxy."""

    def __init__(self, router: Router, evidence: Evidence, metrics: ProxyMetrics,
                 criteria: GateCriteria) -> None:
        self._router = router
        self._evidence = evidence
        self._metrics = metrics
        self._criteria = criteria

    def routes(self) -> RoutesView:
        return _view(self._router.routes)

    def set_routes(self, primary: str, shadow: str | None, baseline: str | None,
                   expect_version: int | None) -> RoutesView:
        """Publish new routes (persisted first); `expect_version` None: unconditionally.

        RouteConflict when the version differs, ConfigError for a bad URL, OSError when
        the state file cannot be written: in each case the routes stay as they were.
        """
        routes = self._router.replace(RouteConfig(primary, shadow, baseline), expect_version)
        self._metrics.route_version.set(routes.version)
        return _view(routes)

    def swap(self, expect_version: int | None = None) -> RoutesView:
        """Primary <-> shadow (ValueError without a shadow)."""
        routes = self._router.swap(expect_version)
        self._metrics.route_version.set(routes.version)
        return _view(routes)

    def inflight_by_lane(self) -> dict[str, dict[str, int]]:
        """URL -> {"primary": client requests relayed, "mirror": mirrored exchanges}."""
        return self._router.inflight()

    def inflight(self) -> dict[str, int]:
        """URL -> requests in flight on it (client requests and mirrors); a URL missing
        from the answer has none."""
        return {url: counts["primary"] + counts["mirror"]
                for url, counts in self._router.inflight(by_target=True).items()}

    async def gate(self, window: EvidenceWindow) -> GateView:
        """The verdict over `window`'s records; inconclusive (saying why) while the
        capture worker cannot answer, so a caller waiting for a pass keeps waiting."""
        try:
            result = await self._evidence.window_gate(window)
        except RuntimeError as exc:  # WorkerUnavailable, or the worker's call failed
            log.warning("cutover gate not evaluated: %s", exc)
            return GateView("inconclusive", (f"inconclusive: evidence unavailable: {exc}",),
                            min_samples=self._criteria.min_samples)
        verdict = result.verdict
        return GateView(verdict.verdict, tuple(verdict.reasons), verdict.samples,
                        self._criteria.min_samples, verdict.checks)
