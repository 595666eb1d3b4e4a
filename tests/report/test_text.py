from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from proxy.compare.types import ExchangeRecord
from proxy.gate.verdict import AdmissionCounts, GateInputs, evaluate
from proxy.report.model import build_report, report_json
from proxy.report.text import render_text


def test_text_has_verdict_reasons_counts_and_latency_table(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    text = render_text(build_report(records_of(count=150, new_slowdown=1.5, diverge_every=10)))
    assert "VERDICT: FAIL" in text
    assert "new vs old:       compared 100, diverged" in text
    assert "baseline (noise): compared 100, diverged 0" in text
    ttft_line = next(line for line in text.splitlines() if line.strip().startswith("TTFT"))
    assert "150/150" in ttft_line and "p=" in ttft_line and "1.5" in ttft_line
    assert "- fail: TTFT" in text


def test_text_without_baseline_says_how_to_get_one(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    text = render_text(build_report(records_of(count=10, baseline=False)))
    assert "--baseline" in text and "VERDICT: INCONCLUSIVE" in text


def test_text_and_json_say_how_many_sampled_requests_were_shed_and_why(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    admission = AdmissionCounts(40, {"overload": 30, "worker_busy": 9})
    records = records_of(count=1)
    report = build_report(records, verdict=evaluate(
        replace(GateInputs.from_records(records), admission=admission)), admission=admission)
    text = render_text(report)
    assert "Mirrored 1 of 40 sampled requests (2.5%); shed 39: overload 30, worker_busy 9" in text
    assert "- inconclusive: 1 of 40 sampled requests mirrored (2.5%, minimum 50%)" in text
    document = report_json(report)
    assert document["admission"]["shed"] == {"overload": 30, "worker_busy": 9}
    assert document["admission"]["drop_rate"] == 39 / 40
    assert "Mirrored" not in render_text(build_report(records))  # nothing counted: no line


def test_unstreamed_rows_only_when_there_are_unstreamed_answers(
    records_of: Callable[..., list[ExchangeRecord]],
) -> None:
    streamed = records_of(count=60)
    text = render_text(build_report(streamed))
    assert "unstreamed" not in text
    assert "unstreamed" not in json.dumps(report_json(build_report(streamed))["latency"])
    mixed = [replace(r, meta=replace(r.meta, stream=i % 3 != 0)) for i, r in enumerate(streamed)]
    report = build_report(mixed)
    lines = render_text(report).splitlines()
    row = next(line for line in lines if line.strip().startswith("TPOT (unstreamed)"))
    head = next(line for line in lines if line.strip().startswith("metric"))
    assert "20/20" in row and head.index("n old/new") + len("n old/new") == row.index("20/20") + 5
    doc = report_json(report)["latency"]
    assert doc["e2e_unstreamed"]["old"]["n"] == 20 and doc["ttft"]["old"]["n"] == 40
