"""Typed configuration of the mirroring proxy, built once by the CLI.

Every value is validated here and the bad value is quoted in the error, so the
rest of the proxy never sees an invalid setting.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Literal

from proxy import urls
from proxy.credentials import redact
from proxy.gate.verdict import GateCriteria

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
# An answer with top-20 logprobs for 8k tokens is about 10 MB; a shadow answering more
# is recorded too_large and not read further (40 such at once: 1.3 GB, given back after).
DEFAULT_MAX_SHADOW_ANSWER_BYTES = 32 * 1024 * 1024
MAIN_METRICS_PATH = "/_vllm_cutover/metrics"


class ConfigError(ValueError):
    """A setting that cannot work; the message quotes the bad value."""


def default_state_file(db_path: str) -> str | None:
    """Where the proxy keeps its state beside a records file (none beside an in-memory db)."""
    return None if db_path == ":memory:" else f"{db_path}.state.json"


def normalize_backend_url(url: str, what: str = "backend URL") -> str:
    """`proxy.urls.normalize_backend_url`, its error a ConfigError."""
    try:
        return urls.normalize_backend_url(url, what)
    except urls.UrlError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class RouteConfig:
    """Which backend serves clients (primary) and which ones are mirrored to."""

    primary: str
    shadow: str | None = None
    baseline: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "primary", normalize_backend_url(self.primary, "primary URL"))
        for name in ("shadow", "baseline"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, normalize_backend_url(value, f"{name} URL"))
        if self.baseline is not None and self.shadow is None:
            raise ConfigError(f"a baseline ({redact(self.baseline)!r}) needs a shadow to "
                              "compare against")


@dataclass(frozen=True)
class MirrorConfig:
    """Sampling, limits and timeouts of the shadow path."""

    sample_rate: float = 1.0
    sample_header: str | None = None  # consistent sampling by this header's hash
    shadow_timeout_s: float = 120.0
    max_shadow_inflight: int = 256
    # A shadow (or baseline) answer larger than this is recorded too_large, not read on.
    max_shadow_answer_bytes: int = DEFAULT_MAX_SHADOW_ANSWER_BYTES
    tokenize_concurrency: int = 4
    tokenize_timeout_s: float = 10.0
    # Streamed to like the shadow, the baseline is old's timing read by the same capture
    # worker the same way (like with like, paired per request: the gate's latency
    # reference). Off: unstreamed, parsed once (same tokens, a third less proxy CPU), and
    # streamed latency falls back to the relay-read primary.
    baseline_stream: bool = True
    # Overload (proxy.mirror.load): while the proxy's event loop runs this late (moving
    # average) and its own thread uses at least `overload_busy` of a CPU, new requests are
    # not mirrored (shadow_dropped{reason="overload"}). Lag alone would shed whenever other
    # processes hold the CPUs. overload_lag_s 0 turns shedding off; overload_busy 0 sheds
    # on lag alone (the rule before 0.x).
    overload_lag_s: float = 0.01
    overload_busy: float = 0.5
    # The capture worker is behind (shadow_dropped{reason="worker_busy"}) when what the
    # proxy sent it has waited this long to be handled.
    max_worker_delay_s: float = 2.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.sample_rate <= 1.0) or math.isnan(self.sample_rate):
            raise ConfigError(f"--sample-rate must be in [0, 1], got {self.sample_rate!r}")
        if not self.shadow_timeout_s > 0:
            raise ConfigError(f"--shadow-timeout must be > 0, got {self.shadow_timeout_s!r}")
        if self.max_shadow_inflight < 0:
            raise ConfigError(
                f"--max-shadow-inflight must be >= 0, got {self.max_shadow_inflight!r}"
            )
        if self.max_shadow_answer_bytes < 1024:
            raise ConfigError(f"--max-shadow-answer-bytes must be >= 1024, got "
                              f"{self.max_shadow_answer_bytes!r}")
        if not self.overload_lag_s >= 0:
            raise ConfigError(f"overload lag must be >= 0 s, got {self.overload_lag_s!r}")
        if not 0 <= self.overload_busy <= 1:
            raise ConfigError(f"--overload-busy must be in [0, 1], got {self.overload_busy!r}")
        if not self.max_worker_delay_s > 0:
            raise ConfigError(
                f"--max-worker-delay-ms must be > 0, got {self.max_worker_delay_s * 1000!r}")
        if self.tokenize_concurrency < 1:
            raise ConfigError(
                f"tokenize concurrency must be >= 1, got {self.tokenize_concurrency!r}"
            )


@dataclass(frozen=True)
class StoreConfig:
    """Where records go and what they may contain."""

    db_path: str = ":memory:"
    retention_rows: int = 100_000
    store_text: bool = False

    def __post_init__(self) -> None:
        if self.retention_rows < 1:
            raise ConfigError(f"--retention must be >= 1, got {self.retention_rows!r}")
        if self.db_path != ":memory:":
            parent = os.path.dirname(os.path.abspath(self.db_path))
            if not os.path.isdir(parent):
                raise ConfigError(f"--db: directory {parent!r} does not exist "
                                  f"(for {self.db_path!r})")


@dataclass(frozen=True)
class AdminConfig:
    """The admin listener (routes, gate, stats, /metrics)."""

    host: str = "127.0.0.1"
    port: int | None = None  # None: no admin listener
    token: str | None = None  # None: mutating and record-reading endpoints refuse
    # The Argo Rollouts / Flagger gate endpoints take the admin token or this read-only one;
    # gate_open: they take no token at all (the listener must then be private).
    gate_token: str | None = None
    gate_open: bool = False

    def __post_init__(self) -> None:
        if self.port is not None and not (0 <= self.port <= 65535):
            raise ConfigError(f"--admin-port must be in 0..65535, got {self.port!r}")
        if self.token is not None and len(self.token) < 8:
            raise ConfigError("the admin token must have at least 8 characters")
        if self.gate_token is not None and len(self.gate_token) < 8:
            raise ConfigError("the gate token (--gate-token) must have at least 8 characters")


@dataclass(frozen=True)
class ProxyConfig:
    """Everything `vllm-cutover proxy` needs."""

    routes: RouteConfig
    host: str = "0.0.0.0"
    port: int = 8080
    mirror: MirrorConfig = MirrorConfig()
    store: StoreConfig = StoreConfig()
    admin: AdminConfig = AdminConfig()
    gate: GateCriteria = field(default_factory=GateCriteria)
    gate_refresh_s: float = 15.0  # how often the verdict gauge is recomputed
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    main_metrics_path: str | None = MAIN_METRICS_PATH  # None: /metrics only on the admin port
    drain_timeout_s: float = 30.0
    connect_timeout_s: float = 10.0
    # A connection must send a complete request head within this long of opening or of
    # its previous answer (nginx's client_header_timeout default); it bounds idle
    # keep-alive connections too (nginx: 75 s).
    header_timeout_s: float = 60.0
    # The whole request body must arrive within this long of its head (a total bound,
    # stricter than nginx's client_body_timeout between two reads): a body trickling in
    # byte by byte is answered 408 and its connection closed.
    body_timeout_s: float = 60.0
    # Idle connections (no request in flight) one client IP may hold; one more closes
    # its oldest. High enough for a gateway's keep-alive pool in front of the proxy.
    max_idle_per_client: int = 256
    # Connections per backend and lane (proxy.mirror.upstream.http1.Http1Pool); more requests wait.
    max_upstream_connections: int = 1024
    # Mirroring, capture, comparison and records in a worker process (proxy.mirror.worker.remote);
    # False: all on the proxy's own event loop.
    capture_worker: bool = True
    worker_cpus: tuple[int, ...] | None = None  # pin the worker (None: inherit)
    # nice: nice 10, below the relay and the engines but never starved; idle: only CPU
    # time nothing else wants (Linux SCHED_IDLE: on a busy host, next to none).
    worker_priority: Literal["nice", "idle", "normal"] = "nice"
    # Routes (and the cutover) persisted here and restored at start; None: memory only.
    state_file: str | None = None
    reset_routes: bool = False  # start from `routes` even when the state file has others
    # The cutover's container driver; "none": only adopt mode (--new-url), no Docker socket.
    driver: Literal["none", "docker"] = "none"

    def __post_init__(self) -> None:
        if self.worker_cpus is not None and (
                not self.worker_cpus or any(cpu < 0 for cpu in self.worker_cpus)):
            raise ConfigError(f"--worker-cpus must list CPU numbers >= 0, got {self.worker_cpus!r}")
        cpu_count = os.cpu_count()
        if self.worker_cpus is not None and cpu_count and max(self.worker_cpus) >= cpu_count:
            # The proxy's own affinity (taskset) does not bound its child's: any CPU will do.
            raise ConfigError(f"--worker-cpus {self.worker_cpus!r}: this machine has CPUs "
                              f"0..{cpu_count - 1}")
        if not (0 <= self.port <= 65535):
            raise ConfigError(f"--port must be in 0..65535, got {self.port!r}")
        if self.state_file is not None:
            parent = os.path.dirname(os.path.abspath(self.state_file))
            if not self.state_file or os.path.isdir(self.state_file) or not os.path.isdir(parent):
                raise ConfigError(f"--state-file must be a file in an existing directory, "
                                  f"got {self.state_file!r}")
        if not (math.isfinite(self.header_timeout_s) and self.header_timeout_s > 0):
            raise ConfigError(f"--header-timeout must be > 0 s, got {self.header_timeout_s!r}")
        if not (math.isfinite(self.body_timeout_s) and self.body_timeout_s > 0):
            raise ConfigError(f"--body-timeout must be > 0 s, got {self.body_timeout_s!r}")
        if self.max_idle_per_client < 1:
            raise ConfigError(f"--max-idle-per-client must be >= 1, got "
                              f"{self.max_idle_per_client!r}")
        if self.max_upstream_connections < 1:
            raise ConfigError(f"--max-upstream-connections must be >= 1, got "
                              f"{self.max_upstream_connections!r}")
        if self.max_body_bytes < 1:
            raise ConfigError(f"--max-body-bytes must be >= 1, got {self.max_body_bytes!r}")
        if self.main_metrics_path is not None and (
            not self.main_metrics_path.startswith("/") or self.main_metrics_path == "/metrics"
        ):
            raise ConfigError(
                "the proxy's own metrics path must start with '/' and not be the primary's "
                f"/metrics, got {self.main_metrics_path!r}"
            )
