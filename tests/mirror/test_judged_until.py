"""`Mirror.judged_until`: the cutoff on start times the gate judges before."""

from __future__ import annotations

import math
import time

from prometheus_client import CollectorRegistry

from proxy.metrics import ProxyMetrics
from proxy.mirror.config import MirrorConfig
from proxy.mirror.exchange import Mirror
from proxy.tasks import BackgroundTasks


def _mirror() -> Mirror:
    return Mirror(MirrorConfig(), BackgroundTasks(), ProxyMetrics(CollectorRegistry()), None)


def test_the_oldest_exchange_out_holds_the_cutoff_per_shadow_and_it_never_moves_back() -> None:
    mirror = _mirror()
    began = mirror.newest_start
    assert began <= time.time()
    # nothing out: just after the newest start seen (at first, when the mirror was made:
    # records kept from before were complete then)
    assert mirror.judged_until() == math.nextafter(began, math.inf)
    mirror.open_starts = {"a": (began + 10.0, "http://new:8000"),
                          "b": (began + 5.0, "http://other:8000")}
    mirror.newest_start = began + 12.0
    assert mirror.judged_until() == began + 5.0
    # a shadow given with credentials is the same backend as the one recorded without
    assert mirror.judged_until("http://user:secret@new:8000") == began + 10.0
    assert mirror.judged_until("http://new:8000") == began + 10.0
    del mirror.open_starts["a"]
    assert mirror.judged_until("http://new:8000") == math.nextafter(began + 12.0, math.inf)
    # a start read late (earlier than the cutoff already given) does not move it back
    mirror.open_starts["c"] = (began + 1.0, "http://new:8000")
    assert mirror.judged_until("http://new:8000") == math.nextafter(began + 12.0, math.inf)
    assert mirror.judged_until() == began + 5.0
