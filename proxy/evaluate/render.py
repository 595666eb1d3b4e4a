"""Text and HTML output of `eval` results (the HTML in the `report` command's style)."""

from __future__ import annotations

from html import escape
from typing import Any

from proxy.evaluate.results import CompareResult, MemoryResult, PerfResult, PerplexityResult
from proxy.report.html import generated_at, page, verdict_block
from proxy.report.svg import Series, histogram_chart


def _num(value: Any, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def compare_text(result: CompareResult) -> str:
    low, high = result.match_rate_ci
    div = result.first_divergence
    lengths = result.lengths
    lines = [f"verdict: {result.verdict.upper()}", *(f"  {r}" for r in result.reasons)]
    if result.engines is not None:
        eng = result.engines
        lines.append(f"golden: vLLM {eng.golden.version} at {eng.golden.url}; "
                     f"new: vLLM {eng.new.version} at {eng.new.url}")
    lines.append(f"tokens: {result.compared} compared, {result.diverged} diverged "
                 f"({result.close} within vLLM's top-k rule); match rate "
                 f"{_num(result.match_rate)} (95% CI {low:.3f}..{high:.3f})")
    lines.append(f"first divergence at token: min {div.min}, median {div.median}, "
                 f"max {div.max}")
    lines.append(f"output tokens old -> new: p50 {lengths.old_quantiles['p50']} -> "
                 f"{lengths.new_quantiles['p50']}, total ratio {_num(lengths.ratio)}")
    base = result.baseline
    if base is not None:
        lines.append(f"baseline (old-vs-old noise): {base.compared} compared, "
                     f"{base.diverged} diverged, match rate {_num(base.match_rate)}")
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def compare_html(result: CompareResult) -> str:
    rows = "".join(
        "<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in (
            r.source, r.outcome, r.first_divergence, r.close, r.old_tokens,
            r.new_tokens, r.old_finish, r.new_finish)) + "</tr>"
        for r in result.requests)
    head = "".join(f"<th>{h}</th>" for h in (
        "request", "outcome", "first divergence", "top-k close", "old tokens", "new tokens",
        "old finish", "new finish"))
    chart = histogram_chart("First divergence positions", "token index", [
        Series("new vs golden", [float(p) for p in result.first_divergence.positions],
               "#ff7f0e")])
    engines = ""
    if result.engines is not None:
        eng = result.engines
        engines = (f"golden: vLLM {escape(str(eng.golden.version))}; new: vLLM "
                   f"{escape(str(eng.new.version))} at {escape(eng.new.url)}. ")
    body = (f'<p class="muted">{engines}Generated {generated_at()}.</p>'
            f"{verdict_block(result.verdict, result.reasons)}"
            f"<h2>First divergences</h2><div class='charts'>{chart}</div>"
            f"<h2>Requests</h2><table><tr>{head}</tr>{rows}</table>")
    return page("vllm-cutover eval compare", body)


def perplexity_text(result: PerplexityResult) -> str:
    lines = [f"verdict: {result.verdict.upper()}: {result.reason}"]
    lines += [f"{r.url}: perplexity {r.perplexity:.6g} ({r.method})" for r in result.results]
    lines.append(f"{result.texts} texts, {result.tokens} tokens scored in "
                 f"{result.windows} windows of <= {result.max_model_len - 1} tokens")
    return "\n".join(lines) + "\n"


def perplexity_html(result: PerplexityResult) -> str:
    rows = "".join(f"<tr><td>{escape(r.url)}</td><td>{r.perplexity:.6g}</td>"
                   f"<td>{escape(r.method)}</td></tr>" for r in result.results)
    body = (f'<p class="muted">{result.texts} texts, {result.tokens} tokens. '
            f"Generated {generated_at()}.</p>"
            f"{verdict_block(result.verdict, [result.reason])}"
            f"<table><tr><th>engine</th><th>perplexity</th><th>method</th></tr>{rows}</table>")
    return page("vllm-cutover eval perplexity", body)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _perf_rows(result: PerfResult) -> list[list[str]]:
    rows = []
    labels = ["old", "new"] if len(result.urls) == 2 else ["engine"]
    for level in result.levels:
        for label, eng in zip(labels, level.engines):
            rows.append([str(level.concurrency), label,
                         *(f"{_ms(eng[m]['p50_s'])} / {_ms(eng[m]['p99_s'])}"
                           for m in ("ttft", "itl", "tpot")),
                         _num(eng["output_throughput"], ".1f"),
                         _num(eng["request_throughput"], ".2f"), str(eng["failed"])])
        ratios = level.ratios
        if ratios is not None:
            rows.append([str(level.concurrency), "new/old",
                         *(f"x{_num(ratios[m + '_p50'], '.2f')} / x{_num(ratios[m + '_p99'], '.2f')}"
                           for m in ("ttft", "itl", "tpot")),
                         f"x{_num(ratios['output_throughput'], '.2f')}",
                         f"x{_num(ratios['request_throughput'], '.2f')}", ""])
    return rows


PERF_HEAD = ["conc.", "engine", "TTFT p50/p99 ms", "ITL p50/p99 ms", "TPOT p50/p99 ms",
             "out tok/s", "req/s", "failed"]


def _aligned(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)


def perf_text(result: PerfResult) -> str:
    table = _aligned([PERF_HEAD, *_perf_rows(result)])
    return (f"verdict: {result.verdict.upper()}: {result.reason}\n"
            f"load: {result.tool}; old {result.urls[0]}"
            + (f", new {result.urls[1]}" if len(result.urls) == 2 else "")
            + f"\n{table}\n")


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>"
                    for r in rows)
    return f"<table><tr>{''.join(f'<th>{escape(h)}</th>' for h in head)}</tr>{cells}</table>"


def perf_html(result: PerfResult) -> str:
    body = (f'<p class="muted">load: {escape(result.tool)}. Generated {generated_at()}.</p>'
            f"{verdict_block(result.verdict, [result.reason])}"
            f"{_table(PERF_HEAD, _perf_rows(result))}")
    return page("vllm-cutover eval perf", body)


MEMORY_HEAD = ["engine", "KV blocks", "block size", "KV tokens", "KV bytes", "KV in use",
               "container memory"]


def _memory_rows(result: MemoryResult) -> list[list[str]]:
    rows = []
    for eng in result.engines:
        kv, box = eng.kv_cache, eng.container
        rows.append([eng.url, _num(kv.num_gpu_blocks, ".0f"), _num(kv.block_size, ".0f"),
                     _num(kv.kv_cache_size_tokens, ".0f"), _num(kv.kv_cache_memory_bytes, ".0f"),
                     "-" if kv.usage is None else f"{kv.usage:.1%}",
                     "n/a" if box is None else f"{box.usage_bytes} / {box.limit_bytes}"])
    return rows


def _gpus(result: MemoryResult) -> str:
    if isinstance(result.gpus, str):
        return result.gpus
    return "; ".join(f"{g.index} {g.name}: {g.util_percent:.0f}% busy, {g.memory_used_bytes} / "
                     f"{g.memory_total_bytes} bytes" for g in result.gpus)


def memory_text(result: MemoryResult) -> str:
    lines = [f"verdict: {result.verdict.upper()}: {result.reason}"]
    lines.append(_aligned([MEMORY_HEAD, *_memory_rows(result)]))
    lines.append(f"GPUs: {_gpus(result)}")
    return "\n".join(lines) + "\n"


def memory_html(result: MemoryResult) -> str:
    body = (f"{verdict_block(result.verdict, [result.reason])}"
            f"{_table(MEMORY_HEAD, _memory_rows(result))}"
            f"<p>GPUs: {escape(_gpus(result))}</p>")
    return page("vllm-cutover eval memory", body)
