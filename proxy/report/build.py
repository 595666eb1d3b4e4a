"""From a database path to rendered output: the edge the CLI and the demo call."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from proxy.compare.gate import GateCriteria
from proxy.report.html import render_html
from proxy.report.load import ReportInputError, load_records
from proxy.report.model import Report, build_report, report_json
from proxy.report.text import render_text

__all__ = ["ReportInputError", "report_from_db", "write_report"]


def report_from_db(db_path: str, min_samples: int | None = None) -> Report:
    criteria = GateCriteria()
    if min_samples is not None:
        criteria = replace(criteria, min_samples=min_samples)
    return build_report(load_records(db_path), criteria)


def write_report(
    db_path: str,
    as_json: bool = False,
    html_path: str | None = None,
    min_samples: int | None = None,
) -> str:
    """The text (or JSON) summary; with `html_path`, also writes the HTML file there."""
    report = report_from_db(db_path, min_samples)
    if html_path:
        tmp = f"{html_path}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(render_html(report))
        os.replace(tmp, html_path)
    if as_json:
        return json.dumps(report_json(report), indent=2, sort_keys=True, default=str) + "\n"
    return render_text(report)
