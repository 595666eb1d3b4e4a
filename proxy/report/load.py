"""Reading the proxy's SQLite records for the report (read-only, never creates a file)."""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING

from proxy.compare.types import ExchangeRecord

if TYPE_CHECKING:
    from proxy.store import StoreAggregates


class ReportInputError(RuntimeError):
    """The database cannot be read as a proxy record store (message quotes the path)."""


def load_store(db_path: str) -> tuple[list[ExchangeRecord], StoreAggregates]:
    """Every kept record (oldest first) and the aggregates the live gate judges."""
    from proxy.store import SqliteStore

    if not os.path.isfile(db_path):
        raise ReportInputError(f"no such database file: {db_path!r}")
    try:
        store = SqliteStore(db_path, readonly=True)
    except sqlite3.Error as exc:
        raise ReportInputError(f"cannot open {db_path!r}: {exc}") from exc
    try:
        return list(store.records()), store.aggregates()
    except sqlite3.Error as exc:
        raise ReportInputError(f"{db_path!r} is not a vllm-cutover record store: {exc}") from exc
    finally:
        store.close()
