"""Reading the proxy's SQLite records for the report (read-only, never creates a file)."""

from __future__ import annotations

import os
import sqlite3

from proxy.compare.types import ExchangeRecord


class ReportInputError(RuntimeError):
    """The database cannot be read as a proxy record store (message quotes the path)."""


def load_records(db_path: str) -> list[ExchangeRecord]:
    """Every kept record, oldest first."""
    from proxy.store import SqliteStore

    if not os.path.isfile(db_path):
        raise ReportInputError(f"no such database file: {db_path!r}")
    try:
        store = SqliteStore(db_path, readonly=True)
    except sqlite3.Error as exc:
        raise ReportInputError(f"cannot open {db_path!r}: {exc}") from exc
    try:
        return list(store.records())
    except sqlite3.Error as exc:
        raise ReportInputError(f"{db_path!r} is not a vllm-cutover record store: {exc}") from exc
    finally:
        store.close()
