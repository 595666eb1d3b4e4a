from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.capture.types import Capture, RequestMeta
from proxy.compare.types import Comparison, ExchangeRecord
from proxy.gate.tally import GateInputs, MatchCounts


def test_match_counts_validation_and_rates() -> None:
    counts = MatchCounts(10, 4, close=3)
    assert (counts.matched, counts.match_rate) == (6, 0.6)
    assert counts.counting_close_as_match() == MatchCounts(10, 1, 0)
    assert MatchCounts().match_rate is None
    with pytest.raises(ValueError, match="0/3/2"):
        MatchCounts(2, 3)
    with pytest.raises(ValueError, match="5/4/10"):
        MatchCounts(10, 4, close=5)


META = RequestMeta("chat", True, True, "0" * 64, 3, 8)


def _cap(role: str, **kw: object) -> Capture:
    base = Capture(role="primary", backend="b", status=200, ttft_s=0.1, itl_s=(0.01,),
                   e2e_s=0.2, output_tokens=2, finish_reason="stop", text="", token_ids=(1, 2))
    return replace(base, role=role, **kw)  # type: ignore[arg-type]


def _cmp(against: str, outcome: str, close: bool | None = None) -> Comparison:
    return Comparison(against, outcome, outcome == "match", None, None, None, None,  # type: ignore[arg-type]
                      close)


def test_inputs_from_records() -> None:
    records = [
        ExchangeRecord("a", 0.0, META, (_cap("primary"), _cap("shadow"), _cap("baseline")),
                       (_cmp("shadow", "match"), _cmp("baseline", "match"))),
        ExchangeRecord("b", 0.0, META, (_cap("primary"), _cap("shadow", error="timeout")),
                       (_cmp("shadow", "error"),)),
        ExchangeRecord("c", 0.0, META, (_cap("primary"), _cap("shadow", ttft_s=0.3)),
                       (_cmp("shadow", "diverged", close=True),
                        _cmp("baseline", "not_comparable"))),
        ExchangeRecord("d", 0.0, META, (_cap("primary", cancelled=True),), ()),
    ]
    agg = GateInputs.from_records(records)
    assert agg.new_vs_old == MatchCounts(2, 1, close=1)
    assert agg.baseline_vs_old == MatchCounts(1, 0)
    assert dict(agg.requests) == {"primary": 3, "shadow": 3, "baseline": 1}
    assert dict(agg.errors) == {"primary": 0, "shadow": 1, "baseline": 0}
    assert agg.latency["shadow"].ttft_s == (0.1, 0.3)
    assert GateInputs.from_records(records[1:2]).baseline_vs_old is None


def test_unstreamed_answers_give_their_own_e2e_and_per_token_samples() -> None:
    """Never pooled: streamed E2E/TPOT from streamed answers only, unstreamed E2E and E2E
    over completion tokens from unstreamed ones only."""
    unstreamed = replace(META, stream=False)
    records = [
        ExchangeRecord("s", 0.0, META, (_cap("primary"), _cap("shadow")), ()),
        ExchangeRecord("u", 0.0, unstreamed,
                       (_cap("primary", ttft_s=0.2), _cap("shadow", ttft_s=0.2)), ()),
    ]
    latency = GateInputs.from_records(records).latency
    assert latency["primary"].ttft_s == (0.1,)
    assert latency["primary"].e2e_s == (0.2,)
    assert latency["primary"].e2e_unstreamed_s == (0.2,)
    assert latency["primary"].tpot_unstreamed_s == (pytest.approx(0.2 / 2),)
    assert len(latency["shadow"].tpot_s) == 1 and latency["shadow"].tpot_s[0] > 0
    assert latency["primary"].output_tokens == (2, 2)


def test_unmirrorable_requests_are_shown_but_not_held_against_coverage():
    """A multi-turn Responses client: its continued turns cannot be mirrored (the shadow
    lacks the stored response) and say so; coverage is still about load shedding."""
    from proxy.gate.tally import AdmissionCounts

    counts = AdmissionCounts.of([("eligible", 100), ("responses_previous_response", 70),
                                 ("overload", 6)])
    assert counts.unmirrorable == 70 and counts.mirrored == 24
    assert counts.coverage == 24 / 30
    assert counts.as_json()["unmirrorable"] == 70
    load_only = AdmissionCounts.of([("eligible", 100), ("overload", 6)])
    assert load_only.coverage == 0.94 and load_only.unmirrorable == 0
    assert AdmissionCounts.of([("eligible", 5), ("responses_background", 5)]).coverage is None
