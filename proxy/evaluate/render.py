"""Text and HTML output of `eval` results (the HTML in the `report` command's style)."""

from __future__ import annotations

from html import escape
from typing import Any

from proxy.report.html import generated_at, page, verdict_block
from proxy.report.svg import Series, histogram_chart


def _num(value: Any, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def compare_text(result: dict[str, Any]) -> str:
    eng = result["engines"]
    low, high = result["match_rate_ci"]
    div = result["first_divergence"]
    lengths = result["lengths"]
    lines = [f"verdict: {result['verdict'].upper()}", *(f"  {r}" for r in result["reasons"])]
    lines.append(f"golden: vLLM {eng['golden']['version']} at {eng['golden']['url']}; "
                 f"new: vLLM {eng['new']['version']} at {eng['new']['url']}")
    lines.append(f"tokens: {result['compared']} compared, {result['diverged']} diverged "
                 f"({result['close']} within vLLM's top-k rule); match rate "
                 f"{_num(result['match_rate'])} (95% CI {low:.3f}..{high:.3f})")
    lines.append(f"first divergence at token: min {div['min']}, median {div['median']}, "
                 f"max {div['max']}")
    lines.append(f"output tokens old -> new: p50 {lengths['old_quantiles']['p50']} -> "
                 f"{lengths['new_quantiles']['p50']}, total ratio {_num(lengths['ratio'])}")
    base = result.get("baseline")
    if base is not None:
        lines.append(f"baseline (old-vs-old noise): {base['compared']} compared, "
                     f"{base['diverged']} diverged, match rate {_num(base['match_rate'])}")
    lines += [f"warning: {w}" for w in result.get("warnings", [])]
    return "\n".join(lines) + "\n"


def compare_html(result: dict[str, Any]) -> str:
    eng = result["engines"]
    rows = "".join(
        "<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in (
            r["source"], r["outcome"], r["first_divergence"], r["close"], r["old_tokens"],
            r["new_tokens"], r["old_finish"], r["new_finish"])) + "</tr>"
        for r in result["requests"])
    head = "".join(f"<th>{h}</th>" for h in (
        "request", "outcome", "first divergence", "top-k close", "old tokens", "new tokens",
        "old finish", "new finish"))
    chart = histogram_chart("First divergence positions", "token index", [
        Series("new vs golden", [float(p) for p in result["first_divergence"]["positions"]],
               "#ff7f0e")])
    body = (f'<p class="muted">golden: vLLM {escape(str(eng["golden"]["version"]))}; new: '
            f'vLLM {escape(str(eng["new"]["version"]))} at {escape(eng["new"]["url"])}. '
            f"Generated {generated_at()}.</p>"
            f"{verdict_block(result['verdict'], result['reasons'])}"
            f"<h2>First divergences</h2><div class='charts'>{chart}</div>"
            f"<h2>Requests</h2><table><tr>{head}</tr>{rows}</table>")
    return page("vllm-cutover eval compare", body)


def perplexity_html(result: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{escape(r['url'])}</td><td>{r['perplexity']:.6g}</td>"
                   f"<td>{escape(r['method'])}</td></tr>" for r in result["results"])
    body = (f'<p class="muted">{result["texts"]} texts, {result["tokens"]} tokens. '
            f"Generated {generated_at()}.</p>"
            f"{verdict_block(result['verdict'], [result['reason']])}"
            f"<table><tr><th>engine</th><th>perplexity</th><th>method</th></tr>{rows}</table>")
    return page("vllm-cutover eval perplexity", body)
