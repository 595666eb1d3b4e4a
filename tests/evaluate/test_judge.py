"""The verdict of `eval compare` on hand-made captures (no engine)."""

from __future__ import annotations

import json

from proxy.capture.types import Capture
from proxy.cli.eval_common import to_json
from proxy.evaluate.golden import GoldenEntry
from proxy.evaluate.judge import CompareCriteria, judge
from proxy.evaluate.prompts import EvalRequest


def cap(ids: list[int], finish: str = "length", role: str = "primary") -> Capture:
    return Capture(role=role, backend="x", status=200, ttft_s=0.01, itl_s=(), e2e_s=0.1,  # type: ignore[arg-type]
                   output_tokens=len(ids), finish_reason=finish, text="", token_ids=tuple(ids),
                   top_logprobs=tuple({str(i): -0.1, "alt": -2.0} for i in ids),
                   sampled_tokens=tuple(str(i) for i in ids))


def golden(answers: list[list[int]]) -> list[GoldenEntry]:
    return [GoldenEntry(EvalRequest("completions", {"prompt": f"p{i}", "temperature": 0,
                                                    "model": "m", "max_tokens": 32}, f"f:{i}"),
                        cap(ids), 0.0) for i, ids in enumerate(answers)]


OLD = [[i, i + 1, i + 2] * 8 for i in range(40)]  # 24 tokens each


def test_identical_answers_pass() -> None:
    result = judge(golden(OLD), [cap(a, role="shadow") for a in OLD], None, CompareCriteria())
    assert result.verdict == "pass", result.reasons
    assert (result.compared, result.diverged, result.match_rate) == (40, 0, 1.0)


def test_divergent_tokens_fail_with_positions() -> None:
    new = [a[:5] + [999] + a[6:] for a in OLD]
    result = judge(golden(OLD), [cap(a, role="shadow") for a in new], None, CompareCriteria())
    assert result.verdict == "fail"
    assert result.diverged == 40
    assert result.first_divergence.positions == [5] * 40
    assert result.close == 0  # 999 is not in the old top-k
    assert result.lengths.ratio == 1.0


def test_answers_cut_short_fail_on_lengths_only_by_the_length_check() -> None:
    """Prefix-identical but a third as long: the first tokens all match."""
    new = [a[:8] for a in OLD]
    result = judge(golden(OLD), [cap(a, role="shadow") for a in new], None,
                   CompareCriteria())
    length_reason = next(r for r in result.reasons if "output tokens" in r)
    assert length_reason.startswith("fail") and "shorter" in length_reason
    assert result.lengths.ratio == 1 / 3
    assert result.first_divergence.positions == [8] * 40


def test_a_few_shorter_answers_are_within_the_allowed_change() -> None:
    new = [a[:-1] if i < 4 else a for i, a in enumerate(OLD)]
    result = judge(golden(OLD), [cap(a, role="shadow") for a in new], None,
                   CompareCriteria())
    assert any(r.startswith("pass: new/old output tokens") for r in result.reasons)


def test_finish_reason_changes_fail() -> None:
    result = judge(golden(OLD), [cap(a, "stop", role="shadow") for a in OLD], None,
                   CompareCriteria())
    reason = next(r for r in result.reasons if "finish reason changed" in r)
    assert reason.startswith("fail") and "length->stop 40" in reason


def test_baseline_noise_raises_the_bar() -> None:
    """A new engine as noisy as old-vs-old passes; the noise itself is shown."""
    noisy = [a[:20] + [7, 7, 7, 7] if i % 10 == 0 else a for i, a in enumerate(OLD)]
    criteria = CompareCriteria()
    base = [cap(a, role="baseline") for a in noisy]
    result = judge(golden(OLD), [cap(a, role="shadow") for a in noisy], base, criteria)
    assert result.baseline is not None and result.baseline.diverged == 4
    assert result.gate is not None and result.gate["threshold"] == 0.9 - 0.05
    assert result.verdict == "inconclusive"  # 36/40: interval straddles 0.85


def test_the_json_keeps_the_documented_keys() -> None:
    """The typed result prints the keys `eval compare --json` always printed."""
    base = [cap(a, role="baseline") for a in OLD]
    result = judge(golden(OLD), [cap(a, role="shadow") for a in OLD], base, CompareCriteria())
    doc = json.loads(json.dumps(to_json(result)))
    assert list(doc) == ["verdict", "reasons", "compared", "diverged", "close", "match_rate",
                         "match_rate_ci", "first_divergence", "lengths", "finish_reasons",
                         "errors", "baseline", "gate", "requests", "engines", "warnings"]
    assert doc["match_rate_ci"][1] > 0.99 and doc["first_divergence"]["positions"] == []
    assert set(doc["lengths"]) == {"pairs", "old_total", "new_total", "ratio", "shorter",
                                   "longer", "wilcoxon_p", "old_quantiles", "new_quantiles"}
    assert doc["lengths"]["old_quantiles"]["p50"] == 24
    assert doc["finish_reasons"] == {"pairs": 40, "changed": 0, "transitions": {}}
    assert list(doc["baseline"]) == ["compared", "diverged", "close", "match_rate", "lengths",
                                     "finish_reasons"]
    assert list(doc["requests"][0]) == ["source", "outcome", "first_divergence", "close",
                                        "old_tokens", "new_tokens", "old_finish",
                                        "new_finish", "reason", "field", "choice"]
