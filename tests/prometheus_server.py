"""A real Prometheus server (Debian's `prometheus` package) for the tests that claim Prometheus.

One server per test session (fixture `prometheus_server` in tests/conftest.py), scraping
every second. A test points a job at its targets with `set_targets`, which rewrites the
config and reloads it over the lifecycle API, then waits for the scrapes it needs:

    prometheus_server.set_targets("fleet", ["127.0.0.1:8001", "127.0.0.1:8002"])
    prometheus_server.wait_for_targets("fleet", 2)
    prometheus_server.wait_until('sum(vllm_cutover_requests_total{job="fleet"}) >= 10')
    rows = prometheus_server.query('up{job="fleet"}')  # [{"metric": {...}, "value": [t, "1"]}]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.servers import free_port

SCRAPE_INTERVAL_S = 1


class PrometheusError(RuntimeError):
    """Prometheus did not start, refused a query, or a wait ran out."""


@dataclass
class Job:
    targets: list[str]
    metrics_path: str = "/metrics"


@dataclass
class PrometheusServer:
    """A running `prometheus` process on 127.0.0.1 with a config this object owns."""

    workdir: Path
    binary: str = "prometheus"
    port: int = 0
    jobs: dict[str, Job] = field(default_factory=dict)
    _process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        binary = shutil.which(self.binary)
        if binary is None:
            raise PrometheusError(f"no {self.binary!r} on PATH (Debian package `prometheus`)")
        self.port = self.port or free_port()
        self._write_config()
        log = (self.workdir / "prometheus.log").open("wb")
        self._process = subprocess.Popen(
            [binary, f"--config.file={self._config_path}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        self._wait(lambda: self._get("/-/ready") is not None, timeout_s, "Prometheus ready")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def set_targets(self, job: str, targets: list[str], metrics_path: str = "/metrics") -> None:
        """Scrape `targets` ("host:port") as `job` from now on; an empty list drops the job
        (its last samples stay queryable for Prometheus's lookback window)."""
        if targets:
            self.jobs[job] = Job(list(targets), metrics_path)
        else:
            self.jobs.pop(job, None)
        self._write_config()
        request = urllib.request.Request(self.url + "/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 200:
                raise PrometheusError(f"reload answered {response.status}")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector or scalar result of `promql` now (the API's `data.result`)."""
        body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if body is None:
            raise PrometheusError(f"query failed: {promql}")
        payload = json.loads(body)
        if payload.get("status") != "success":
            raise PrometheusError(f"query {promql!r}: {payload}")
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result

    def wait_for_targets(self, job: str, count: int, timeout_s: float = 30.0) -> None:
        """Until `count` targets of `job` are up and each was scraped at least once."""
        self.wait_until(f'count(up{{job="{job}"}} == 1) >= {count}', timeout_s)

    def wait_until(self, promql: str, timeout_s: float = 30.0) -> None:
        """Until `promql` (a filtering expression) returns a non-empty result."""
        self._wait(lambda: bool(self.query(promql)), timeout_s, promql)

    @property
    def _config_path(self) -> Path:
        return self.workdir / "prometheus.yml"

    def _write_config(self) -> None:
        scrape_configs = [
            {"job_name": name, "metrics_path": job.metrics_path,
             "scrape_interval": f"{SCRAPE_INTERVAL_S}s", "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
             "static_configs": [{"targets": job.targets}]}
            for name, job in sorted(self.jobs.items())
        ]
        config = {"global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                             "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
                  "scrape_configs": scrape_configs}
        # JSON is YAML: no YAML writer needed.
        self._config_path.write_text(json.dumps(config, indent=1))

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                data: bytes = response.read()
                return data
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def _wait(self, ready: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                log = (self.workdir / "prometheus.log").read_text(errors="replace")[-2000:]
                raise PrometheusError(f"prometheus exited ({self._process.returncode}): {log}")
            if ready():
                return
            time.sleep(0.2)
        raise PrometheusError(f"waited {timeout_s:.0f} s for: {what}")
