"""The hashes kept instead of prompt and completion text: HMAC-SHA256 per database.

The key is made with the database and kept in its `meta` table: equal texts still hash
alike inside one database (comparisons, the report), but a guessed text cannot be
confirmed with a plain sha256, nor matched across databases. A database from before
the key keeps its older rows' plain sha256; `meta` says from which exchange id on the
hashes are keyed, and a record says which kind it carries.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sqlite3

META_TABLE = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
_KEY, _KEYED_FROM = "hash_key", "hash_keyed_from_id"


class RecordHasher:
    """Hashes for one records database; `open` reads its key (making one if writable)."""

    def __init__(self, key: bytes | None, keyed_from_id: int | None) -> None:
        self._key = key
        self.keyed_from_id = keyed_from_id

    @classmethod
    def open(cls, db: sqlite3.Connection, writable: bool) -> RecordHasher:
        if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
                      ).fetchone() is None:
            return cls(None, None)  # an old database opened read-only: plain sha256
        with db:
            rows = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if _KEY not in rows and writable:
                seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'exchange'"
                                 ).fetchone()
                rows = {_KEY: os.urandom(32).hex(), _KEYED_FROM: str((seq or [0])[0] + 1)}
                db.executemany("INSERT INTO meta VALUES (?, ?)", rows.items())
        if _KEY not in rows:
            return cls(None, None)
        return cls(bytes.fromhex(rows[_KEY]), int(rows[_KEYED_FROM]))

    def text(self, text: str) -> str:
        """The stored hash of a prompt's or completion's `text`."""
        digest = hashlib.sha256(text.encode("utf-8", "replace")).digest()
        return self._keyed(digest, digest.hex())

    def prompt(self, prompt_sha256: str) -> str:
        """The stored hash of a request, from its canonical sha256 (`RequestMeta`)."""
        return self._keyed(prompt_sha256.encode(), prompt_sha256)

    def kind(self, exchange_id: int) -> str:
        """What the hashes of that exchange's row are: "hmac_sha256" or "sha256"."""
        keyed = self.keyed_from_id is not None and exchange_id >= self.keyed_from_id
        return "hmac_sha256" if keyed else "sha256"

    def _keyed(self, data: bytes, unkeyed: str) -> str:
        if self._key is None:
            return unkeyed  # an old database read as it is: nothing is written to it
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()
