"""The diverged requests, listed so an operator can find and replay them (pure).

Only what names a request and where it diverged: its ids, endpoint, time, the field that
diverged first and the position. Never prompt or completion text, nor the comparison's
`reason` (free text).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from proxy.compare.types import Comparison, ExchangeRecord

MAX_LISTED = 50


@dataclass(frozen=True)
class DivergedRequest:
    """One deterministic request whose new answer differed from old's."""

    row_id: int | None  # the record's row in the database (`exchange.id`); None in memory
    request_id: str
    started_unix: float
    endpoint: str
    field: str  # the field that diverged first ("unknown" in older records)
    choice: int  # the choice it diverged in
    position: int | None  # index of the first difference
    unit: str  # what `position` counts: "token" or "character"
    close: bool | None  # within vLLM's top-k rule at that position; None: unknowable
    baseline: str | None  # old-vs-old outcome of the same request; None: no baseline


@dataclass(frozen=True)
class DivergedList:
    """The first diverged requests (oldest first) and how many there are in all."""

    shown: tuple[DivergedRequest, ...] = ()
    total: int = 0


def position_unit(comparison: Comparison) -> str:
    """The diff names the unit of a text-based position only in its reason (characters
    where no token offsets mapped it back to tokens)."""
    return "character" if "first divergence at character" in comparison.reason else "token"


def _against(record: ExchangeRecord, role: str) -> Comparison | None:
    return next((c for c in record.comparisons if c.against == role), None)


def _entry(record: ExchangeRecord, comparison: Comparison) -> DivergedRequest:
    baseline = _against(record, "baseline")
    return DivergedRequest(
        row_id=record.stored.row_id if record.stored else None,
        request_id=record.request_id,
        started_unix=record.started_unix,
        endpoint=record.meta.endpoint,
        field=comparison.field or "unknown",
        choice=comparison.choice or 0,
        position=comparison.first_divergence,
        unit=position_unit(comparison),
        close=comparison.close_match,
        baseline=baseline.outcome if baseline is not None else None,
    )


def list_diverged(records: Iterable[ExchangeRecord],
                      limit: int = MAX_LISTED) -> DivergedList:
    """New-vs-old divergences of deterministic requests (the ones the match rate counts),
    oldest first; the first `limit` of them listed."""
    found = [(record, comparison) for record in sorted(records, key=lambda r: r.started_unix)
             if record.meta.deterministic
             and (comparison := _against(record, "shadow")) is not None
             and comparison.outcome == "diverged"]
    return DivergedList(tuple(_entry(r, c) for r, c in found[:limit]), len(found))
