from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from proxy.capture.types import Capture, RequestMeta
from proxy.compare.types import Comparison, ExchangeRecord
from proxy.evidence.store import SqliteStore


def _capture(role: str, ttft_s: float) -> Capture:
    return Capture(
        role,
        f"{role}:1",
        200,
        ttft_s,
        (0.01,) * 9,
        ttft_s + 0.09,
        10,
        "length",  # type: ignore[arg-type]
        "",
        None,
    )


def _record(i: int, diverged: bool) -> ExchangeRecord:
    outcome = "diverged" if diverged else "match"
    comps = tuple(
        Comparison(
            against,
            outcome if against == "shadow" else "match",  # type: ignore[arg-type]
            not diverged or against == "baseline",
            4 if diverged and against == "shadow" else None,
            1,
            0,
            True,
            None,
        )
        for against in ("shadow", "baseline")
    )
    caps = (_capture("primary", 0.02), _capture("shadow", 0.03), _capture("baseline", 0.02))
    meta = RequestMeta("completions", True, True, f"{i:064x}", 10, 10)
    return ExchangeRecord(f"r{i}", 1.0 + i, meta, caps, comps)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", "report", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_report_json_and_html_from_a_store(tmp_path: Path) -> None:
    db = tmp_path / "records.db"
    store = SqliteStore(str(db))
    store.write([_record(i, diverged=i % 5 == 0) for i in range(400)])
    store.close()
    html = tmp_path / "out.html"
    done = _run("--db", str(db), "--json", "--html", str(html))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["compared"], doc["diverged"]) == (400, 80)
    assert doc["baseline"]["compared"] == 400 and doc["baseline"]["diverged"] == 0
    assert doc["verdict"] == "fail"  # 20% divergence vs none in the baseline
    assert doc["latency"]["ttft"]["p50_ratio"] > 1.4
    assert html.read_text().count("<svg") == 8  # 3 over time, 4 CDFs, the divergence histogram
    text = _run("--db", str(db), "--gate-min-samples", "10")
    assert text.returncode == 0 and "VERDICT: FAIL" in text.stdout
    assert "pass: 400 deterministic requests compared (minimum 10)" in text.stdout
    assert "compared 400, diverged 80" in text.stdout


def test_missing_or_foreign_database_is_an_error(tmp_path: Path) -> None:
    missing = _run("--db", str(tmp_path / "nope.db"))
    assert missing.returncode == 3 and "nope.db" in missing.stderr
    other = tmp_path / "other.db"
    other.write_bytes(b"not sqlite at all" * 100)
    foreign = _run("--db", str(other), "--json")
    assert foreign.returncode == 3 and "other.db" in foreign.stderr
    bad = _run("--db", str(other), "--gate-min-samples", "0")
    assert bad.returncode == 3 and "0" in bad.stderr


def test_report_of_one_cutover_by_flags_or_state_file(tmp_path: Path) -> None:
    from tests.evidence_records import NEW, OLD, OTHER, SPEEDS, record, store_of

    records = ([record(900, OLD, NEW, ttft={OLD: 0.5, NEW: 0.5})]
               + [record(1001, OLD, OTHER, ttft=SPEEDS)]
               + [record(1010 + i, OLD, NEW, ttft=SPEEDS) for i in range(2)]
               + [record(1020 + i, NEW, OLD, ttft=SPEEDS) for i in range(2)])
    store_of(tmp_path, records).close()
    db = str(tmp_path / "r.db")
    by_flags = _run("--db", db, "--json", "--since", "1000", "--old-url", OLD + "/",
                    "--new-url", NEW)
    assert by_flags.returncode == 0, by_flags.stderr
    doc = json.loads(by_flags.stdout)
    assert doc["compared"] == 4 and doc["samples"] == 4
    assert doc["latency"]["ttft"]["old"]["p50_s"] == 0.1
    assert doc["latency"]["ttft"]["new"]["p50_s"] == 0.3
    assert doc["window"] == {"since_unix": 1000.0, "old_url": OLD, "new_url": NEW,
                             "baseline_url": None}
    state = tmp_path / "proxy.state.json"
    state.write_text(json.dumps({"cutover": {"evidence": doc["window"]}}))
    by_state = _run("--db", db, "--json", "--state-file", str(state))
    assert json.loads(by_state.stdout) == doc
    newest = json.loads(_run("--db", db, "--json").stdout)  # one comparison: old/new
    assert newest["compared"] == 5 and newest["window"]["new_url"] == NEW
    assert OTHER in newest["notes"][0]  # the record left out is named
    assert json.loads(_run("--db", db, "--json", "--all").stdout)["compared"] == 6
    half = _run("--db", db, "--since", "1000", "--old-url", OLD)
    assert half.returncode == 3 and "needs --new-url" in half.stderr
    both = _run("--db", db, "--state-file", str(state), "--since", "5")
    assert both.returncode == 3 and "leave out --since" in both.stderr
    state.write_text(json.dumps({"routes": {}}))
    empty = _run("--db", db, "--state-file", str(state))
    assert empty.returncode == 3 and "holds no cutover" in empty.stderr


def test_a_file_of_two_cutovers_is_judged_one_comparison_at_a_time(tmp_path: Path) -> None:
    """Issue 34: after one aborted candidate (diverging) and one promoted one, a plain
    `report --db` pooled both with the time after promotion and said PASS. Now it judges
    the newest comparison, names it and the one it left out; pooling is asked for, and
    says so."""
    from tests.evidence_records import NEW, OLD, OTHER, record, store_of

    same = {OLD: 0.1, NEW: 0.1, OTHER: 0.1}
    first = [record(1000 + i, OLD, OTHER, ttft=same, diverged=i % 2 == 0) for i in range(60)]
    second = [record(2000 + i, OLD, NEW, ttft=same) for i in range(300)]
    after = [record(3000 + i, NEW, OLD, ttft=same) for i in range(200)]  # promoted
    store_of(tmp_path, first + second + after).close()
    db = str(tmp_path / "r.db")
    plain = _run("--db", db)
    assert plain.returncode == 0, plain.stderr
    head = plain.stdout.split("VERDICT")[0]
    assert f"old = {OLD}, new = {NEW}, whichever served clients" in head
    assert "WARNING: this file holds records of more than one comparison" in head
    assert f"not judged: {OLD} -> {OTHER} (60 records)" in head
    doc = json.loads(_run("--db", db, "--json").stdout)
    assert doc["compared"] == 500 and doc["diverged"] == 0  # the other's 30 are not in it
    assert doc["window"]["old_url"] == OLD and doc["window"]["new_url"] == NEW
    html = tmp_path / "r.html"
    assert _run("--db", db, "--html", str(html)).returncode == 0
    assert "Warning:</b> this file holds records of more than one comparison" in \
        html.read_text()
    pooled = _run("--db", db, "--all")
    assert pooled.returncode == 0 and "WARNING: POOLED (--all)" in pooled.stdout
    alone = json.loads(_run("--db", db, "--json", "--since", "0", "--old-url", OLD,
                            "--new-url", OTHER).stdout)
    assert alone["compared"] == 60 and alone["diverged"] == 30 and alone["notes"] == []
    # The report leads with one line: verdict, divergence, the check that decides it.
    assert alone["summary"].startswith(f"{alone['verdict'].upper()}; new diverges on 50.0% "
                                       "of 60; TTFT p50 unchanged")
    assert re.search(r"^IN ONE LINE: \w+; new diverges on 0\.0% of 500", plain.stdout,
                     re.MULTILINE), plain.stdout[:600]
    assert "<p class=\"lead\"><b>" in html.read_text()
    mixed = _run("--db", db, "--all", "--since", "0", "--old-url", OLD, "--new-url", OTHER)
    assert mixed.returncode == 3 and "--all" in mixed.stderr
