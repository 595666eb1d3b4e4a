"""The report counts divergences per field, from records stored and read back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from proxy.compare.types import ExchangeRecord
from proxy.evidence.store import SqliteStore
from proxy.report.html import render_html
from proxy.report.model import build_report, report_json
from proxy.report.text import render_text

RecordsFactory = Callable[..., list[ExchangeRecord]]


def test_per_field_counts_survive_the_store_and_reach_every_report(
        records_of: RecordsFactory) -> None:
    records = records_of(count=60, diverge_every=4, baseline=False)
    fields = iter(["tool_calls", "content", "reasoning"] * 20)
    marked = []
    for record in records:
        comps = tuple(replace(c, field=next(fields), choice=record.started_unix % 2 == 0,
                              basis="tool_calls") if c.outcome == "diverged" else c
                      for c in record.comparisons)
        marked.append(replace(record, comparisons=comps))
    store = SqliteStore(":memory:")
    store.write(marked)
    back = list(store.records())
    expected: dict[str, int] = {}
    for record in marked:
        for c in record.comparisons:
            if c.outcome == "diverged" and record.meta.deterministic:
                expected[c.field or ""] = expected.get(c.field or "", 0) + 1
    assert sum(expected.values()) > 0
    assert [c.field for r in back for c in r.comparisons] == \
        [c.field for r in marked for c in r.comparisons]
    report = build_report(back)
    doc = report_json(report)
    assert doc["diverged_fields"] == expected
    assert doc["diverged"] == sum(expected.values())  # the contract keys stay
    assert doc["shadow"]["diverged_later_choice"] > 0
    text = render_text(report)
    assert "diverged first in " in text and f"tool_calls {expected['tool_calls']}" in text
    assert f"tool_calls {expected['tool_calls']}" in render_html(report)


def test_an_older_database_gains_the_columns(tmp_path: object,
                                            records_of: RecordsFactory) -> None:
    import sqlite3
    from pathlib import Path

    path = str(Path(str(tmp_path)) / "old.db")
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE comparison (exchange_id INTEGER NOT NULL, against TEXT NOT NULL,"
               " outcome TEXT NOT NULL, exact_match INTEGER NOT NULL, first_divergence INTEGER,"
               " edit_distance INTEGER, length_delta INTEGER, finish_reason_match INTEGER,"
               " close_match INTEGER, reason TEXT NOT NULL, basis TEXT NOT NULL,"
               " PRIMARY KEY (exchange_id, against))")
    db.commit()
    db.close()
    store = SqliteStore(path)
    store.write(records_of(count=3, baseline=False))
    assert len(list(store.records())) == 3
