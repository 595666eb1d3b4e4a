"""Routes as JSON: read from the admin API and the state file, persisted on every change.

The state file's "routes" section is the routing table the proxy served last, with
its version. At start it wins over the command line, so that a proxy restarted after
a promotion keeps serving from the new backend, not from the `--primary` it was first
started with; `--reset-routes` starts from the command line on purpose.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from proxy.credentials import redact, redact_json
from proxy.mirror.config import ConfigError, RouteConfig
from proxy.mirror.upstream.routing import PersistRoutes
from proxy.statefile import StateFile, StateFileError

log = logging.getLogger(__name__)

SECTION = "routes"
ROUTE_KEYS = ("primary", "shadow", "baseline")


def routes_from_json(data: Mapping[str, Any], base: RouteConfig | None = None) -> RouteConfig:
    """`base` changed by the route keys in `data` (all of them without a base).

    ConfigError quoting the value: a primary that is not a URL string, a shadow or
    baseline that is neither a URL string nor null.
    """
    values: dict[str, Any] = {k: getattr(base, k) for k in ROUTE_KEYS} if base else {}
    for key in ROUTE_KEYS:
        if key not in data:
            if base is None and key == "primary":
                raise ConfigError("routes need a primary URL")
            continue
        value = data[key]
        if not (isinstance(value, str) or (value is None and key != "primary")):
            allowed = "a URL string" if key == "primary" else "a URL string or null"
            raise ConfigError(f"{key} must be {allowed}, got {redact_json(value)!r}")
        values[key] = value
    return RouteConfig(**values)


def describe(config: RouteConfig) -> str:
    return redact(f"primary={config.primary} shadow={config.shadow} baseline={config.baseline}")


def restore_routes(state: StateFile, configured: RouteConfig,
                   reset: bool) -> tuple[RouteConfig, int, bool]:
    """(routes to serve, their version, whether they must be written now)."""
    saved = state.get(SECTION)
    if saved is None:
        return configured, 1, True
    where = f"state file {state.path!r}"
    version = saved.get("version") if isinstance(saved, dict) else None
    if type(version) is not int or version < 1:
        raise StateFileError(f"{where}: section {SECTION!r} is not routes with a version "
                             f">= 1: {redact_json(saved)!r}")
    try:
        persisted = routes_from_json(saved)
    except ConfigError as exc:
        raise StateFileError(f"{where}: section {SECTION!r}: {exc}") from exc
    if reset:
        log.warning("--reset-routes: serving the command line's routes (%s) instead of "
                    "those in the %s (version %d: %s)", describe(configured), where, version,
                    describe(persisted))
        return configured, version + 1, True
    if persisted != configured:
        log.warning("serving the routes restored from the %s (version %d: %s), not the "
                    "command line's (%s); --reset-routes uses the command line instead",
                    where, version, describe(persisted), describe(configured))
    return persisted, version, False


def route_persister(state: StateFile) -> PersistRoutes:
    """Writes the "routes" section (atomically, before it returns)."""

    def persist(config: RouteConfig, version: int) -> None:
        state.put(SECTION, {"version": version, "primary": config.primary,
                            "shadow": config.shadow, "baseline": config.baseline,
                            "updated_unix": time.time()})

    return persist
