"""A minimal reader of the Prometheus HTTP API (`/api/v1/query`), standard library only."""

from __future__ import annotations

import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from proxy import boundedhttp

__all__ = ["MAX_ANSWER_BYTES", "PrometheusClient", "PrometheusUnavailable", "Sample"]

MAX_ANSWER_BYTES = 64 * 1024 * 1024  # a fleet's vectors are far smaller; a peer may not be


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
            status, raw = boundedhttp.get(request, self.timeout_s, MAX_ANSWER_BYTES)
        except boundedhttp.AnswerOverLimit as exc:
            raise PrometheusUnavailable(f"{exc} (query {promql!r})") from None
        except boundedhttp.Unreachable as exc:
            raise PrometheusUnavailable(f"cannot query {self.url}: {exc}") from None
        if status != 200:
            detail = raw[:500].decode("utf-8", "replace")
            raise PrometheusUnavailable(f"{self.url} answered {status} to {promql!r}: "
                                        f"{detail}")
        try:
            payload = boundedhttp.json_answer(raw, self.url)
        except ValueError as exc:
            raise PrometheusUnavailable(f"{exc} (query {promql!r})") from None
        return _vector(payload, promql)


def _vector(payload: Any, promql: str) -> list[Sample]:
    """The samples of an instant-vector answer; PrometheusUnavailable (no verdict) for any
    answer of another shape or with a value that is not a finite number."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        raise PrometheusUnavailable(f"query {promql!r} failed: {str(payload)[:300]}")
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" \
            or not isinstance(data.get("result"), list):
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise PrometheusUnavailable(f"query {promql!r} gave {kind!r}, expected an instant "
                                    "vector")
    return [_sample(row, promql) for row in data["result"]]


def _sample(row: Any, promql: str) -> Sample:
    metric = row.get("metric") if isinstance(row, dict) else None
    pair = row.get("value") if isinstance(row, dict) else None
    if not isinstance(metric, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metric.items()) \
            or not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        raise PrometheusUnavailable(f"query {promql!r}: a sample is not "
                                    f"{{metric, value: [t, \"v\"]}}: {str(row)[:200]}")
    try:
        value = float(pair[1])
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise PrometheusUnavailable(f"query {promql!r}: value {pair[1]!r} of {metric!r} is "
                                    "not a finite number")
    return Sample(dict(metric), value)
