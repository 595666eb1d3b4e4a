"""Reading a cutover's evidence for the report: only its records, labelled by version."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.evidence.window import EvidenceWindow
from proxy.report.build import report_from_db
from proxy.report.load import by_version, load_admission_steps, load_store
from proxy.report.text import render_text
from tests.evidence_records import BASE, NEW, OLD, OTHER, SINCE, SPEEDS, record, store_of


def test_by_version_trades_roles_after_promotion_only():
    promoted = record(1010, NEW, OLD, ttft=SPEEDS, diverged=True, baseline=BASE)
    promoted = replace(promoted, comparisons=tuple(
        replace(c, length_delta=3) for c in promoted.comparisons))
    back = by_version(promoted, promoted=True, noise=False)
    assert [(c.role, c.ttft_s) for c in back.captures] == [("shadow", 0.3), ("primary", 0.1)]
    assert [(c.against, c.length_delta) for c in back.comparisons] == [("shadow", -3)]
    before = record(1001, OLD, NEW, ttft=SPEEDS, baseline=BASE)
    assert by_version(before, promoted=False, noise=True) == before


def test_window_report_reads_old_against_new(tmp_path):
    records = (
        [record(990, OLD, NEW, ttft={OLD: 0.5, NEW: 0.5})]  # before the cutover: left out
        + [record(1001 + i, OLD, OTHER, ttft=SPEEDS) for i in range(2)]
        + [record(1010 + i, OLD, NEW, ttft=SPEEDS, diverged=i == 0) for i in range(3)]
        + [record(1020 + i, NEW, OLD, ttft=SPEEDS) for i in range(3)]
    )
    store_of(tmp_path, records).close()
    db = str(tmp_path / "r.db")
    window = EvidenceWindow(SINCE, OLD, NEW)
    kept, aggregates = load_store(db, window)
    assert len(kept) == 6 and aggregates.records == 6
    assert {c.ttft_s for r in kept for c in r.captures if c.role == "primary"} == {0.1}
    report = report_from_db(db, window=window)
    assert (report.shadow.compared, report.shadow.diverged) == (6, 1)
    ttft = next(row for row in report.latency if row.metric == "ttft")
    assert ttft.old.p50_s == pytest.approx(0.1) and ttft.new.p50_s == pytest.approx(0.3)
    text = render_text(report)
    assert f"old = {OLD}, new = {NEW}, whichever served clients" in text
    assert "primary" not in text and "shadow" not in text


def test_admission_counts_as_flushed_for_the_verdict_over_time(tmp_path):
    records = [record(1010 + i, OLD, NEW, ttft=SPEEDS) for i in range(4)]
    store = store_of(tmp_path, records)
    store.add_admission(1011.5, [(OLD, NEW, "eligible", 4), (OLD, NEW, "overload", 4)])
    store.add_admission(1005.0, [(OLD, NEW, "eligible", 2)])
    store.add_admission(1002.0, [(OLD, OTHER, "eligible", 9)])  # another pair
    store.add_admission(990.0, [(OLD, NEW, "eligible", 7)])  # before the cutover
    store.close()
    db = str(tmp_path / "r.db")
    window = EvidenceWindow(SINCE, OLD, NEW)
    assert load_admission_steps(db, window) == [
        (1005.0, "eligible", 2), (1011.5, "eligible", 4), (1011.5, "overload", 4)]
    assert len(load_admission_steps(db)) == 5
    looks = report_from_db(db, window=window).timeline.looks
    assert [look.records for look in looks] == [1, 2, 3, 4]
    assert "pass: 2 of 2 sampled requests mirrored (100.0%, minimum 50%)" in looks[1].reasons
    assert any("2 of 6 sampled requests mirrored" in r for r in looks[-1].deciding)
