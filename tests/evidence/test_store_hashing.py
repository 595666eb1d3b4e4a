"""Stored hashes are keyed per database: equal inside one, not confirmable with sha256."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import replace

from proxy.compare.types import ExchangeRecord, TextDigest
from proxy.evidence.store import SqliteStore
from tests.evidence.test_store import _record

COMPLETION = "secret completion"


def _digest(record: ExchangeRecord) -> TextDigest:
    digest = record.stored.text("primary") if record.stored else None
    assert digest is not None
    return digest


def _stored(path: str) -> tuple[list[str], list[str]]:
    with sqlite3.connect(path) as db:
        texts = [r[0] for r in db.execute("SELECT text_sha256 FROM capture ORDER BY rowid")]
        prompts = [r[0] for r in db.execute("SELECT prompt_sha256 FROM exchange ORDER BY id")]
    return texts, prompts


def test_a_guessed_completion_cannot_be_confirmed_but_equality_holds(tmp_path):
    paths = [str(tmp_path / "a.db"), str(tmp_path / "b.db")]
    for path in paths:
        store = SqliteStore(path)
        store.write([_record(1), _record(2)])  # every capture's text is COMPLETION
        store.close()
    (texts_a, prompts_a), (texts_b, prompts_b) = _stored(paths[0]), _stored(paths[1])
    plain = hashlib.sha256(COMPLETION.encode()).hexdigest()
    assert plain not in texts_a + texts_b
    assert "ab" * 32 not in prompts_a + prompts_b  # the prompt's sha256 is keyed too
    assert len(set(texts_a)) == 1 and len(set(prompts_a)) == 1  # equal within a database
    assert set(texts_a).isdisjoint(texts_b) and set(prompts_a).isdisjoint(prompts_b)
    reopened = SqliteStore(paths[0], readonly=True)
    assert reopened.hasher.text(COMPLETION) == texts_a[0]  # the key is kept in the database
    (first, _) = list(reopened.records())
    assert _digest(first) == TextDigest("hmac_sha256", texts_a[0], 17)


def test_an_older_database_keeps_its_plain_hashes_and_says_which_are_keyed(tmp_path):
    path = str(tmp_path / "old.db")
    store = SqliteStore(path)
    store.write([_record(1)])
    store.close()
    plain = hashlib.sha256(COMPLETION.encode()).hexdigest()
    with sqlite3.connect(path) as db:  # as a database written before hashes were keyed
        db.execute("DROP TABLE meta")
        db.execute("UPDATE capture SET text_sha256 = ?", (plain,))
    old_view = SqliteStore(path, readonly=True)
    (before,) = list(old_view.records())
    assert _digest(before) == TextDigest("sha256", plain, 17)
    store = SqliteStore(path)  # opened for writing: keyed from the next exchange on
    store.write([replace(_record(2), request_id="r2")])
    old, new = list(store.records())
    assert _digest(old) == TextDigest("sha256", plain, 17)
    new_digest = _digest(new)
    assert new_digest.kind == "hmac_sha256" and new_digest.digest != plain
