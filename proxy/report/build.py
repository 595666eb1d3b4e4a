"""From a database path to rendered output: the edge the CLI and the demo call."""

from __future__ import annotations

import dataclasses
import json

from proxy.atomic import write_text_atomic
from proxy.evidence.window import EvidenceWindow
from proxy.gate.verdict import GateCriteria, evaluate
from proxy.report.html import render_html
from proxy.report.load import (
    ReportInputError,
    load_admission_steps,
    load_store,
    one_comparison,
)
from proxy.report.model import Report, build_report, report_json
from proxy.report.text import render_text

__all__ = ["ReportInputError", "report_from_db", "write_report"]


def report_from_db(db_path: str, criteria: GateCriteria | None = None,
                   window: EvidenceWindow | None = None, pool: bool = False) -> Report:
    """The report of a record store (or of one cutover's evidence `window` in it), with
    the verdict computed as the live gate does it (`proxy.gate.verdict.evaluate` on the
    store's aggregates). Without a window it judges one comparison (`one_comparison`)
    unless `pool`."""
    notes: tuple[str, ...] = ()
    if window is None:
        window, notes = one_comparison(db_path, pool)
    records, aggregates = load_store(db_path, window)
    criteria = criteria or GateCriteria()
    verdict = evaluate(aggregates.gate_inputs(), criteria)
    report = build_report(records, criteria, verdict=verdict, latency=aggregates.latency,
                          window=window, admission=aggregates.admission,
                          admission_steps=load_admission_steps(db_path, window))
    return dataclasses.replace(report, notes=notes)


def write_report(
    db_path: str,
    as_json: bool = False,
    html_path: str | None = None,
    criteria: GateCriteria | None = None,
    window: EvidenceWindow | None = None,
    pool: bool = False,
) -> str:
    """The text (or JSON) summary; with `html_path`, also writes the HTML file there."""
    report = report_from_db(db_path, criteria, window, pool)
    if html_path:
        write_text_atomic(html_path, render_html(report))
    if as_json:
        return json.dumps(report_json(report), indent=2, sort_keys=True, default=str) + "\n"
    return render_text(report)
