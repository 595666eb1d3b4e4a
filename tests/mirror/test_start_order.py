"""Evidence metrics in start order (`proxy.mirror.start_order`): what the fleet gate reads
through Prometheus counts a record only once every exchange started before it has ended."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from proxy.metrics import ProxyMetrics
from proxy.mirror.config import MirrorConfig
from proxy.mirror.exchange import Mirror
from proxy.mirror.start_order import StartOrderHold
from proxy.tasks import BackgroundTasks
from tests.evidence_records import record

OLD, NEW = "http://old:8000", "http://new:8000"
SPEEDS = {OLD: 0.1, NEW: 0.1}


def _compared(registry: CollectorRegistry) -> float:
    return sum(registry.get_sample_value("vllm_cutover_comparisons_total",
                                         {"against": "shadow", "outcome": outcome,
                                          "deterministic": "true"}) or 0.0
               for outcome in ("match", "diverged"))


def _requests(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("vllm_cutover_evidence_requests_total",
                                     {"role": "shadow", "result": "ok"}) or 0.0


def test_records_after_a_hung_exchange_wait_for_it_then_count_in_start_order() -> None:
    registry = CollectorRegistry()
    mirror = Mirror(MirrorConfig(), BackgroundTasks(), ProxyMetrics(registry), None)
    t0 = mirror.newest_start
    # "hung" started first and is still out; three later ones end (one diverged).
    mirror.open_starts["hung"] = (t0 + 1.0, NEW)
    later = [record(t0 + 2.0 + i, OLD, NEW, ttft=SPEEDS, diverged=i == 1) for i in range(3)]
    for i, done in enumerate(later):
        mirror.open_starts[f"q{i}"] = (done.started_unix, NEW)
        mirror.newest_start = max(mirror.newest_start, done.started_unix)
    for i, done in enumerate(later):
        mirror.count_evidence(done)
        del mirror.open_starts[f"q{i}"]
        mirror.release_evidence()
    assert _compared(registry) == 0 and _requests(registry) == 0  # survivors not counted
    assert len(mirror.evidence_hold) == 3
    # the hung one ends (timed out: its record says so) and everything counts
    mirror.count_evidence(record(t0 + 1.0, OLD, NEW, ttft=SPEEDS, errors={NEW: "timeout"}))
    del mirror.open_starts["hung"]
    mirror.release_evidence()
    assert len(mirror.evidence_hold) == 0
    assert _compared(registry) == 3  # the timed-out shadow is not a comparison
    assert registry.get_sample_value("vllm_cutover_comparisons_total", {
        "against": "shadow", "outcome": "diverged", "deterministic": "true"}) == 1
    assert _requests(registry) == 3
    assert registry.get_sample_value("vllm_cutover_evidence_requests_total",
                                     {"role": "shadow", "result": "error"}) == 1


def test_a_record_with_nothing_older_out_counts_at_once() -> None:
    registry = CollectorRegistry()
    mirror = Mirror(MirrorConfig(), BackgroundTasks(), ProxyMetrics(registry), None)
    done = record(mirror.newest_start + 1.0, OLD, NEW, ttft=SPEEDS)
    mirror.open_starts["a"] = (done.started_unix, NEW)
    mirror.newest_start = done.started_unix
    mirror.count_evidence(done)
    del mirror.open_starts["a"]
    mirror.release_evidence()
    assert _compared(registry) == 1 and len(mirror.evidence_hold) == 0


def test_the_hold_is_bounded_and_releases_oldest_start_first() -> None:
    hold = StartOrderHold(limit=3)
    records = [record(float(t), OLD, NEW, ttft=SPEEDS) for t in (5, 1, 4, 2, 3)]
    forced = [out.started_unix for r in records for out in hold.hold(r)]
    assert forced == [1.0, 2.0] and len(hold) == 3  # over the limit: the oldest go
    assert [r.started_unix for r in hold.release(4.5)] == [3.0, 4.0]
    assert [r.started_unix for r in hold.release(float("inf"))] == [5.0]
    with pytest.raises(ValueError, match="at least 1"):
        StartOrderHold(limit=0)


def test_what_is_held_is_slim_and_a_tune_race_counts_at_once() -> None:
    from dataclasses import replace

    from proxy.mirror.start_order import slim

    full = record(1.0, OLD, NEW, ttft=SPEEDS)
    full = replace(full, request_json='{"prompt": "secret"}', captures=tuple(
        replace(c, text="secret answer", token_ids=(1, 2), itl_s=(0.01,) * 50)
        for c in full.captures))
    held = slim(full)
    assert held.request_json is None
    assert all(c.text == "" and c.token_ids is None and c.itl_s == () for c in held.captures)
    assert [(c.role, c.ttft_s, c.e2e_s, c.output_tokens, c.error) for c in held.captures] == \
        [(c.role, c.ttft_s, c.e2e_s, c.output_tokens, c.error) for c in full.captures]
    assert held.comparisons == full.comparisons
    registry = CollectorRegistry()
    race = Mirror(MirrorConfig(), BackgroundTasks(), ProxyMetrics(registry), None,
                  evidence_in_start_order=False)
    race.open_starts["older"] = (race.newest_start, NEW)  # out, yet not waited for
    race.count_evidence(record(race.newest_start + 1.0, OLD, NEW, ttft=SPEEDS))
    assert _compared(registry) == 1 and race.evidence_hold is None
