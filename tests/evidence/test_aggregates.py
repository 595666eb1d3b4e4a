"""Aggregates over a cutover's evidence window: which records count, and by version."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.evidence.window import EvidenceWindow
from proxy.gate.verdict import GateCriteria
from proxy.mirror.judging import evaluate_window
from tests.evidence_records import (
    BASE,
    META,
    NEW,
    OLD,
    OTHER,
    OTHER_BASE,
    SINCE,
    SPEEDS,
    record,
    store_of,
)


def test_window_keeps_only_its_versions_since_its_start(tmp_path):
    records = (
        [record(990 + i, OLD, NEW, ttft=SPEEDS) for i in range(2)]  # before the start
        + [record(1001 + i, OLD, OTHER, ttft=SPEEDS) for i in range(3)]  # another shadow
        + [record(1004, OTHER, NEW, ttft=SPEEDS), record(1005, OLD, None, ttft=SPEEDS)]
        + [record(1010 + i, OLD, NEW, ttft=SPEEDS, diverged=i == 0) for i in range(4)]
        + [record(1020 + i, NEW, OLD, ttft=SPEEDS) for i in range(5)]  # after promotion
    )
    # written before records said which URLs they were between
    legacy = replace(record(1030, OLD, NEW, ttft=SPEEDS), routes=None)
    store = store_of(tmp_path, [*records, legacy])
    window = store.aggregates(window=EvidenceWindow(SINCE, OLD, NEW))
    assert window.records == 9
    assert (window.shadow.compared, window.shadow.diverged) == (9, 1)
    assert window.roles["primary"].requests == 9 and window.roles["shadow"].requests == 9
    everything = store.aggregates()
    assert everything.records == 17 and everything.shadow.compared == 16


def test_after_the_swap_old_is_still_old(tmp_path):
    # Enough answers a side for the gate's anytime-valid bounds to decide a 3x TTFT.
    n = 60
    pre = [record(1001 + i / 1000, OLD, NEW, ttft=SPEEDS) for i in range(n)]
    pre.append(record(1005, OLD, NEW, ttft=SPEEDS, errors={NEW: "timeout"}))
    post = [record(1010 + i / 1000, NEW, OLD, ttft=SPEEDS) for i in range(n)]
    post.append(record(1015, NEW, OLD, ttft=SPEEDS, errors={NEW: "reset"}))
    store = store_of(tmp_path, pre + post)
    window = store.aggregates(window=EvidenceWindow(SINCE, OLD, NEW))
    old, new = window.latency["primary"], window.latency["shadow"]  # the gate's words
    assert old.ttft_s == pytest.approx((0.1,) * (2 * n + 2))  # every old answer, either role
    assert new.ttft_s == pytest.approx((0.3,) * (2 * n))  # the two errors have no latency
    assert window.roles["shadow"].errors == 2 and window.roles["primary"].errors == 0
    # Judged by role, the promoted half would mix into the primary's side.
    assert sorted(set(store.aggregates().latency["primary"].ttft_s)) == \
        pytest.approx([0.1, 0.3])
    criteria = GateCriteria(min_samples=5, min_latency_samples=5, max_length_shift=None)
    verdict = evaluate_window(store, criteria, EvidenceWindow(SINCE, OLD, NEW))
    assert verdict["verdict"] == "fail"
    assert verdict["details"]["latency"]["old"]["ttft"]["p50_s"] == pytest.approx(0.1)
    assert verdict["details"]["latency"]["new"]["ttft"]["p50_s"] == pytest.approx(0.3)
    assert any(r.startswith("fail: TTFT p50 new/old 3.000") for r in verdict["reasons"])
    assert verdict["versions"]["new"]["errors"] == 2
    assert verdict["records"] == 2 * n + 2 and verdict["window"]["old_url"] == OLD


def test_baseline_noise_is_old_against_its_copy_in_the_window(tmp_path):
    records = (
        [record(1001 + i, OLD, NEW, ttft=SPEEDS, baseline=BASE, baseline_diverged=i == 0)
         for i in range(4)]
        + [record(990, OLD, NEW, ttft=SPEEDS, baseline=BASE, baseline_diverged=True)]
        + [record(1006, OLD, NEW, ttft=SPEEDS, baseline=OTHER_BASE, baseline_diverged=True)]
        # A baseline still mirrored after promotion compares the old copy with new: not noise.
        + [record(1010, NEW, OLD, ttft=SPEEDS, baseline=BASE, baseline_diverged=True)]
    )
    store = store_of(tmp_path, records)
    window = store.aggregates(window=EvidenceWindow(SINCE, OLD, NEW, BASE))
    assert window.baseline is not None
    assert (window.baseline.compared, window.baseline.diverged) == (4, 1)
    assert window.roles["baseline"].requests == 4
    assert window.shadow.compared == 6  # every new-vs-old comparison in the window
    assert store.aggregates(window=EvidenceWindow(SINCE, OLD, NEW)).baseline is None
    members = store.window_members(EvidenceWindow(SINCE, OLD, NEW, BASE))
    assert sorted(members.values()) == [(False, False)] + [(False, True)] * 4 + [(True, False)]


def test_unstreamed_samples_are_labelled_by_version_in_the_window(tmp_path):
    """Unstreamed answers before and after the promotion: their E2E and per-token samples
    follow the version, not the role, and no streamed sample appears."""
    unstreamed = replace(META, stream=False)
    records = [replace(record(1001 + i, OLD, NEW, ttft=SPEEDS), meta=unstreamed)
               for i in range(4)]
    records += [replace(record(1010 + i, NEW, OLD, ttft=SPEEDS), meta=unstreamed)
                for i in range(3)]
    store = store_of(tmp_path, records)
    window = store.aggregates(window=EvidenceWindow(SINCE, OLD, NEW))
    old, new = window.latency["primary"], window.latency["shadow"]
    assert old.e2e_unstreamed_s == pytest.approx((0.15,) * 7)  # E2E = TTFT + 0.05
    assert new.e2e_unstreamed_s == pytest.approx((0.35,) * 7)
    assert new.tpot_unstreamed_s == pytest.approx((0.35 / 6,) * 7)  # over 6 tokens
    assert old.ttft_s == old.e2e_s == old.tpot_s == old.itl_s == ()
    assert new.ttft_s == new.e2e_s == ()
