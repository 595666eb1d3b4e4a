"""A minimal reader of the Prometheus HTTP API (`/api/v1/query`), standard library only."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["PrometheusClient", "PrometheusUnavailable", "Sample"]


class PrometheusUnavailable(RuntimeError):
    """Prometheus could not be reached, or refused or failed a query."""


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class PrometheusClient:
    """Instant queries against `url` (e.g. http://prometheus:9090), optionally as of `time_unix`."""

    url: str
    timeout_s: float = 10.0
    bearer_token: str | None = None
    time_unix: float | None = None

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"--prometheus must be an http(s) URL like "
                             f"http://prometheus:9090, got {self.url!r}")

    def query(self, promql: str) -> list[Sample]:
        """The instant vector of `promql`; PrometheusUnavailable on any failure."""
        params = {"query": promql}
        if self.time_unix is not None:
            params["time"] = f"{self.time_unix:.3f}"
        request = urllib.request.Request(
            self.url.rstrip("/") + "/api/v1/query",
            data=urllib.parse.urlencode(params).encode(), method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded",
                     **({"Authorization": f"Bearer {self.bearer_token}"}
                        if self.bearer_token else {})})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read(500).decode("utf-8", "replace")
            raise PrometheusUnavailable(f"{self.url} answered {exc.code} to {promql!r}: "
                                        f"{detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PrometheusUnavailable(f"cannot query {self.url}: {exc}") from None
        return _vector(payload, promql)


def _vector(payload: Any, promql: str) -> list[Sample]:
    if not isinstance(payload, dict) or payload.get("status") != "success":
        raise PrometheusUnavailable(f"query {promql!r} failed: {str(payload)[:300]}")
    data = payload.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusUnavailable(f"query {promql!r} gave a {data.get('resultType')!r}, "
                                    "expected an instant vector")
    return [Sample(dict(row["metric"]), float(row["value"][1])) for row in data["result"]]
