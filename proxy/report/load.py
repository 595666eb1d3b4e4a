"""Reading the proxy's SQLite records for the report (read-only, never creates a file).

With a cutover's evidence window, only its records are read, each labelled by
version: after a promotion the new version served clients (role "primary") and the
old one was mirrored ("shadow"), so their captures trade roles here and the report
still reads old against new.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from typing import TYPE_CHECKING

from proxy.capture.types import Role
from proxy.compare.types import ExchangeRecord

if TYPE_CHECKING:
    from proxy.evidence.aggregates import PairSeen
    from proxy.evidence.store import SqliteStore, StoreAggregates
    from proxy.evidence.window import EvidenceWindow


class ReportInputError(RuntimeError):
    """The database cannot be read as a proxy record store (message quotes the path)."""


_TRADED: dict[Role, Role] = {"primary": "shadow", "shadow": "primary"}


def by_version(record: ExchangeRecord, promoted: bool, noise: bool) -> ExchangeRecord:
    """`record` with old as "primary" and new as "shadow"; its baseline only when that
    is old-vs-old noise of the window (`noise`)."""
    captures = tuple(
        dataclasses.replace(c, role=_TRADED[c.role]) if promoted and c.role in _TRADED else c
        for c in record.captures if noise or c.role != "baseline")
    comparisons = tuple(
        # Deltas are the compared side's minus the primary's: new minus old again.
        dataclasses.replace(c, length_delta=-c.length_delta)
        if promoted and c.against == "shadow" and c.length_delta is not None else c
        for c in record.comparisons if noise or c.against != "baseline")
    return dataclasses.replace(record, captures=captures, comparisons=comparisons)


def _row(record: ExchangeRecord) -> int:
    assert record.stored is not None  # read from the store
    return record.stored.row_id


def _open(db_path: str) -> SqliteStore:
    """The record store at `db_path`, read-only; ReportInputError quoting the path."""
    from proxy.evidence.store import SqliteStore

    if not os.path.isfile(db_path):
        raise ReportInputError(f"no such database file: {db_path!r}")
    try:
        return SqliteStore(db_path, readonly=True)
    except sqlite3.Error as exc:
        raise ReportInputError(f"cannot open {db_path!r}: {exc}") from exc


def load_store(db_path: str, window: EvidenceWindow | None = None,
               ) -> tuple[list[ExchangeRecord], StoreAggregates]:
    """The kept records (oldest first; only `window`'s when given, by version) and the
    aggregates the live gate judges."""
    store = _open(db_path)
    try:
        if window is None:
            return list(store.records()), store.aggregates()
        members = store.window_members(window)
        records = [by_version(r, *members[_row(r)]) for r in store.records()
                   if _row(r) in members]
        return records, store.aggregates(window=window)
    except sqlite3.Error as exc:
        raise ReportInputError(f"{db_path!r} is not a vllm-cutover record store: {exc}") from exc
    finally:
        store.close()


def load_admission_steps(db_path: str, window: EvidenceWindow | None = None,
                         ) -> list[tuple[float, str, int]]:
    """The proxy's admission counts as flushed (`SqliteStore.admission_steps`): what the
    verdict over time counts up to each look."""
    store = _open(db_path)
    try:
        return store.admission_steps(window)
    except sqlite3.Error as exc:
        raise ReportInputError(f"{db_path!r} is not a vllm-cutover record store: {exc}") from exc
    finally:
        store.close()


def one_comparison(db_path: str, pool: bool = False,
                   ) -> tuple[EvidenceWindow | None, tuple[str, ...]]:
    """The evidence a report judges when no window is named, and the notes that say so.

    Records of one primary/shadow pair: all of them (None), old = primary. Records of
    several pairs (two candidates, a promotion, a route changed by hand): the newest
    record's two backends, labelled by version (old = the one that was primary first,
    whichever served clients later), and a note naming every pair left out; `pool` judges
    every record instead, with a note that this is not one comparison.
    """
    from proxy.evidence.window import EvidenceWindow

    store = _open(db_path)
    try:
        pairs = store.pairs()
    except sqlite3.Error as exc:
        raise ReportInputError(f"{db_path!r} is not a vllm-cutover record store: {exc}") from exc
    finally:
        store.close()
    if len(pairs) < 2:
        return None, ()
    if pool:
        named = ", ".join(map(_pair_text, pairs))
        return None, ((f"POOLED (--all): records of {len(pairs)} primary -> shadow pairs "
                      f"judged as one, old = whichever was primary: not one comparison "
                      f"({named})"),)
    newest = pairs[-1]
    these = [p for p in pairs if {p.primary, p.shadow} == {newest.primary, newest.shadow}]
    first = min(these, key=lambda p: p.first_unix)
    baseline = next((p.baseline for p in reversed(these) if p.primary == first.primary), None)
    window = EvidenceWindow(first.first_unix, first.primary, first.shadow, baseline)
    left = [p for p in pairs if p not in these]
    if not left:  # one comparison, both ways round (a promotion): labelled by version
        return window, ()
    others = ", ".join(map(_pair_text, left))
    return window, ((f"this file holds records of more than one comparison: judged the "
                    f"newest (old = {first.primary}, new = {first.shadow}, "
                    f"{sum(p.records for p in these)} records); not judged: {others}. "
                    "Name one with --state-file or --since/--old-url/--new-url, or pool "
                    "them with --all"),)


def _pair_text(pair: PairSeen) -> str:
    return f"{pair.primary} -> {pair.shadow} ({pair.records} records)"


def window_from_state(path: str) -> EvidenceWindow:
    """The window of the cutover in the proxy's state file (section "cutover", its
    "evidence" entry as `EvidenceWindow.to_json()` writes it)."""
    from proxy.evidence.window import EvidenceWindow
    from proxy.statefile import StateFile

    if not os.path.isfile(path):
        raise ValueError(f"no such state file: {path!r}")
    cutover = StateFile(path).get("cutover")
    if not isinstance(cutover, dict) or "evidence" not in cutover:
        raise ValueError(f"state file {path!r} holds no cutover with its evidence window")
    return EvidenceWindow.from_json(cutover["evidence"])
