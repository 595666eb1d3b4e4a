"""A new version that hangs on some requests is not promoted on its survivors, through the
real product: simulators, a proxy and its capture worker, an adopt-mode cutover under
steady client load, all on real sockets.

The new engine answers like old, quickly, except that on 5 % of requests its first token
would come 100 s late; the proxy gives up on a shadow answer after 45 s
(`--shadow-timeout`, 120 s by default: shortened only so the test ends in about a minute
and a half; `bench/gate_survivors.py` runs the default) and records a timeout. Records are written when an exchange ends, so
for 45 s every quick answer is on record and no hung one is: a gate judging every record
written sees only survivors (no error, a short TTFT tail). Before the fix this cutover
was promoted (post_promotion after about 25 s, with 3,800 samples and not one timeout on
record). The gate must judge only the records of exchanges that started before the
oldest one still out (`Mirror.judged_until`), so the hung ones count as the errors they
are and the cutover ends without a promotion."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from proxy.cutover.shell.client import CutoverClient
from tests.e2e.cutover_harness import LoadThread
from tests.e2e.gate_sims import MODEL, admin_get, proxy, sims
from tests.e2e.proxy_fixtures import ADMIN_TOKEN

pytestmark = [pytest.mark.e2e, pytest.mark.solo]  # judged under load: alone (conftest.py)
ENGINE = ("--ttft-ms", "5", "--itl-ms", "1")
HANGS = (*ENGINE, "--ttft-tail-share", "0.05", "--ttft-tail-factor", "20000")  # 100 s
SHADOW_TIMEOUT_S = 45.0
PROMOTED = ("promoting", "post_promotion", "draining_old", "done")


def test_a_version_hanging_on_some_requests_is_not_promoted_on_its_survivors(
        tmp_path: Path) -> None:
    with sims(tmp_path, {"old": ENGINE, "new": HANGS, "baseline": ENGINE}) as up, \
            proxy(tmp_path, up["old"].url,
                  ["--shadow-timeout", str(SHADOW_TIMEOUT_S)]) as px:
        client = CutoverClient(px.admin_url or "", ADMIN_TOKEN)
        looks: list[dict[str, Any]] = []
        with LoadThread(px.url, MODEL, clients=8) as load:
            client.start({"new_url": up["new"].url, "baseline_url": up["baseline"].url,
                          "analysis_delay_s": 1.0, "analysis_timeout_s": 240.0})
            deadline = time.monotonic() + 300
            status: dict[str, Any] = {}
            while time.monotonic() < deadline:
                status = admin_get(px, "/admin/cutover")
                looks.append(status)
                if status["phase"] in PROMOTED or status.get("terminal"):
                    break
                time.sleep(0.5)
            failures = load.stop().failures
    print("looks:", [(s.get("samples"), s.get("verdict")) for s in looks[::10]])
    assert status["phase"] not in PROMOTED, status
    # Aborted by the gate on the hung requests (the new version's timeouts on record),
    # not by the analysis timeout.
    assert status["phase"] == "aborted", status
    error = str(status.get("error"))
    assert error.startswith("gate failed while shadowing"), error
    assert "new error rate" in error, error
    assert failures == [], failures[:3]
