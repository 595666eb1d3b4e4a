"""The diverged requests are listed by id, field and position, never by their text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from proxy.compare.types import ExchangeRecord
from proxy.evidence.store import SqliteStore
from proxy.report.build import report_from_db
from proxy.report.divergences import MAX_LISTED, list_diverged
from proxy.report.html import render_html
from proxy.report.model import build_report

Records = Callable[..., list[ExchangeRecord]]
SECRET = "PROMPT-OR-ANSWER-TEXT-MUST-NOT-SHOW"


def _one_divergence(records: list[ExchangeRecord], index: int) -> list[ExchangeRecord]:
    """`records` with every capture holding secret text and record `index` diverged in its
    tool calls at token 7."""
    out = []
    for i, record in enumerate(records):
        captures = tuple(replace(c, text=f"{SECRET} {c.role}") for c in record.captures)
        comparisons = tuple(
            replace(c, outcome="diverged", exact_match=False, first_divergence=7,
                    field="tool_calls", choice=0, close_match=False,
                    reason=f"first divergence at token 7; {SECRET}")
            if i == index and c.against == "shadow" else c
            for c in record.comparisons)
        out.append(replace(record, request_id=f"req-{i}", captures=captures,
                           comparisons=comparisons))
    return out


def test_a_stored_divergence_is_listed_by_id_field_and_position_without_text(
        tmp_path: Path, records_of: Records) -> None:
    path = str(tmp_path / "r.db")
    store = SqliteStore(path, store_text=True)  # even text on record is never shown
    store.write(_one_divergence(records_of(count=30), index=10))
    store.close()
    report = report_from_db(path)
    listing = report.diverged_requests
    assert listing.total == 1 and len(listing.shown) == 1
    entry = listing.shown[0]
    assert (entry.row_id, entry.request_id, entry.field, entry.position, entry.unit) == (
        11, "req-10", "tool_calls", 7, "token")
    assert (entry.endpoint, entry.close, entry.baseline) == ("chat", False, "match")
    html = render_html(report)
    row = html[html.index('<td class="id">11</td>'):]
    row = row[:row.index("</tr>")]
    for cell in ("req-10", "chat", "tool_calls", "token 7", "no", "match"):
        assert f">{cell}</td>" in row, cell
    assert "All 1, oldest first." in html
    assert SECRET not in html


def test_the_list_is_capped_and_says_how_many_more(records_of: Records) -> None:
    records = records_of(count=300, diverge_every=2)  # 100 deterministic ones diverge
    listing = list_diverged(list(reversed(records)))
    assert listing.total == 100 and len(listing.shown) == MAX_LISTED
    assert [e.request_id for e in listing.shown][:2] == ["r0", "r4"]  # oldest first
    html = render_html(replace(build_report(records), diverged_requests=listing))
    assert f"The first {MAX_LISTED} of 100 (oldest first); 50 more." in html
    assert html.count('<td class="id">r') == MAX_LISTED


def test_sampled_requests_and_matches_are_not_listed(records_of: Records) -> None:
    records = records_of(count=30, diverge_every=1)
    listing = list_diverged(records)
    assert listing.total == 20  # every third is sampled: compared as distributions only
    assert all(e.request_id != "r2" for e in listing.shown)
    assert list_diverged(records_of(count=30)).total == 0


def test_a_text_position_without_token_offsets_is_in_characters(records_of: Records) -> None:
    record = _one_divergence(records_of(count=1), index=0)[0]
    comparisons = tuple(replace(c, reason="first divergence at character 12")
                        if c.against == "shadow" else c for c in record.comparisons)
    entry = list_diverged([replace(record, comparisons=comparisons)]).shown[0]
    assert (entry.position, entry.unit, entry.row_id) == (7, "character", None)
