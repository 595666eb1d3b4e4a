"""The records database on a full disk (issue 33 item 10), through the real proxy process
and its capture worker: the proxy runs under a file-size limit (RLIMIT_FSIZE: writes past
it fail as on a filesystem that has run out of room), so its records file stops growing
after a few hundred records.

Every client request is still answered; the loss is counted by reason in the metrics and
in /admin/stats; the log says so once a minute at most, with counts, never a traceback per
write batch.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from proxy.demo.processes import Child, sim_ready, spawn_sim
from tests.e2e.proxy_fixtures import RunningProxy, http_request, start_proxy, total, wait_for

pytestmark = pytest.mark.e2e

LIMIT_BYTES = 256 * 1024  # the schema and a few hundred records; the proxy's log fits too
REQUESTS = 600


@pytest.fixture(scope="module")
def full_disk_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    if shutil.which("prlimit") is None:
        pytest.fail("prlimit (util-linux) is needed to limit the proxy's file size")
    logs = tmp_path_factory.mktemp("sims")
    started = {name: spawn_sim(["--version", name, "--itl-ms", "1"], logs / f"{name}.log")
               for name in ("old", "new")}
    sims: dict[str, Child] = {n: sim_ready(n, p, logs / f"{n}.log") for n, p in started.items()}
    try:
        with start_proxy(tmp_path_factory.mktemp("proxy"), sims["old"].url, sims["new"].url,
                         wrapper=["prlimit", f"--fsize={LIMIT_BYTES}"]) as running:
            yield running
    finally:
        for sim in sims.values():
            sim.stop()


def _one(proxy: RunningProxy, i: int) -> int:
    body = {"model": "sim-model", "prompt": f"request {i} " + "word " * 40, "max_tokens": 16,
            "temperature": 0, "stream": i % 2 == 0}
    return http_request("POST", proxy.url + "/v1/completions", body, timeout_s=60).status


def test_a_full_records_disk_loses_records_counted_and_says_so_once(
        full_disk_proxy: RunningProxy) -> None:
    proxy = full_disk_proxy
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda i: _one(proxy, i), range(REQUESTS)))
    assert statuses == [200] * REQUESTS  # the client path never notices

    seen: list[dict[str, int]] = []

    def dropped() -> dict[str, int] | None:
        # A busy host may shed a mirror (no record: counted in shadow_dropped) or find the
        # records queue full (counted as queue_full): settled is every mirror accounted for.
        stats, metrics = proxy.stats(), proxy.metrics()
        counts: dict[str, int] = dict(stats.get("records_dropped") or {})
        counts["stored"] = stats["records"]
        counts["mirrored"] = int(total(metrics, "vllm_cutover_shadow_mirrored_total",
                                           role="shadow"))
        counts["shed"] = int(total(metrics, "vllm_cutover_shadow_dropped_total"))
        seen[:] = [counts]
        records = counts["stored"] + counts.get("write_failed", 0) + counts.get("queue_full", 0)
        settled = stats["live"]["shadow_inflight"] == 0 and records >= counts["mirrored"] and \
            counts["mirrored"] + counts["shed"] >= REQUESTS
        return counts if settled else None

    try:
        counts = wait_for(dropped, 60, "every record stored or counted as dropped")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last counts {seen}") from None
    assert counts["write_failed"] > 0, counts  # the limit was reached
    assert counts["mirrored"] + counts["shed"] == REQUESTS, counts
    assert counts["stored"] + counts["write_failed"] + counts.get("queue_full", 0) == \
        counts["mirrored"], counts
    metrics = proxy.metrics()
    assert total(metrics, "vllm_cutover_records_dropped_total",
                 reason="write_failed") == counts["write_failed"]
    log = proxy.log_path.read_text(errors="replace")
    warnings = [line for line in log.splitlines() if "records not stored" in line]
    assert 1 <= len(warnings) <= 2, warnings  # the run takes well under two minutes
    assert "write_failed" in warnings[0] and "Traceback" not in log, log[-3000:]
