"""A cutover whose gate cannot decide ends early, through the real product: simulators, a
proxy and its capture worker, an adopt-mode cutover under steady client load, all on
real sockets. The new engine diverges on 6 % of deterministic requests against a
baseline that never does, one point beyond the default excess-divergence limit (0.05): the
match-rate check can never pass, and at engine-like pacing (about 25 requests/s here) its
fail side needs far more samples than the hopeless rule waits for (by simulation through
`checks.match_rate`: a median of ~12,000 pairs, the earliest of 20 runs 3,900). The
cutover must end `aborted` with the gate's own reason within about a minute of the first
look that found it hopeless, long before its analysis timeout, and clients must not
notice.

A version exactly at the limit is no case for it: its observed rate wanders about the line,
and each time it is above, the projection is a finite (if large) number of samples, so
"hopeless" comes and goes with the walk (in CI, 470 s). Unpaced 1 ms tokens are none
either: eight clients then saturate two cores and the TTFT p99 check flips the verdict."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from proxy.cutover.eta import HOPELESS_FOR_S
from proxy.cutover.shell.client import CutoverClient
from tests.e2e.cutover_harness import LoadThread
from tests.e2e.gate_sims import MODEL, admin_get, proxy, sims
from tests.e2e.proxy_fixtures import ADMIN_TOKEN

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.solo]  # alone: conftest.py
ENGINE = ("--ttft-ms", "30", "--itl-ms", "12")  # engine-like pacing
BEYOND_THE_LIMIT = (*ENGINE, "--divergence-rate", "0.06")
ANALYSIS_TIMEOUT_S = 900.0
LOOK_SLACK_S = 10.0  # the reconciler looks every second; the status is polled every 0.5 s


def test_an_undecidable_gate_ends_the_cutover_within_a_minute_of_knowing(tmp_path: Path
                                                                          ) -> None:
    with sims(tmp_path, {"old": ENGINE, "new": BEYOND_THE_LIMIT, "baseline": ENGINE}) as up, \
            proxy(tmp_path, up["old"].url) as px:
        client = CutoverClient(px.admin_url or "", ADMIN_TOKEN)
        with LoadThread(px.url, MODEL, clients=8) as load:
            started = time.time()
            client.start({"new_url": up["new"].url, "baseline_url": up["baseline"].url,
                          "analysis_delay_s": 1.0, "analysis_timeout_s": ANALYSIS_TIMEOUT_S})
            hopeless_since: float | None = None
            status: dict[str, Any] = {}
            while time.time() < started + 600:
                status = admin_get(px, "/admin/cutover")
                since = status.get("hopeless_since_unix")
                hopeless_since = float(since) if isinstance(since, (int, float)) \
                    else hopeless_since
                if status.get("terminal"):
                    break
                time.sleep(0.5)
            failures = load.stop().failures
    assert status.get("phase") == "aborted", status
    error = str(status.get("error") or "")
    assert "the gate cannot decide before the analysis timeout" in error, error
    assert "match rate" in error, error
    history = status["history"]
    assert isinstance(history, list)
    ended = max(float(t["at_unix"]) for t in history)
    assert hopeless_since is not None, "no look was ever reported hopeless"
    # within a minute of knowing, and long before the analysis timeout
    assert ended - hopeless_since <= HOPELESS_FOR_S + LOOK_SLACK_S, (ended, hopeless_since)
    assert ended - started < ANALYSIS_TIMEOUT_S / 3, ended - started
    assert not failures, failures[:5]
