"""The race core on synthetic records: gate per candidate, paired ranking, early stops."""

from __future__ import annotations

import random

import pytest

from proxy.capture.types import Capture, RequestMeta
from proxy.compare.types import Comparison, ExchangeRecord
from proxy.gate.verdict import GateCriteria
from proxy.tune.race import Race, RaceCriteria, faster_share_bounds

META = RequestMeta(endpoint="chat", stream=True, deterministic=True,
                   prompt_sha256="ab" * 32, prompt_chars=5, max_tokens=6)


def _capture(role: str, e2e_s: float, error: str | None = None) -> Capture:
    return Capture(role=role, backend=role, status=None if error else 200,  # type: ignore[arg-type]
                   ttft_s=e2e_s / 4, itl_s=(e2e_s / 20,) * 15, e2e_s=e2e_s, output_tokens=16,
                   finish_reason="stop", text="", token_ids=None, error=error)


def _record(n: int, old_s: float, new_s: float, diverged: bool = False,
            error: str | None = None) -> ExchangeRecord:
    outcome = "error" if error else "diverged" if diverged else "match"
    comparison = Comparison("shadow", outcome, outcome == "match",  # type: ignore[arg-type]
                            3 if diverged else None, 1 if diverged else 0, 0, True, None,
                            field="tool_arguments" if diverged else None)
    return ExchangeRecord(f"r{n}", 1000.0 + n, META,
                          (_capture("primary", old_s), _capture("shadow", new_s, error)),
                          (comparison,))


# The gate as a short test can decide it: errors judged loosely, no p99 (its bounds need
# about a thousand samples), lengths not judged.
CRITERIA = RaceCriteria(GateCriteria(min_samples=30, min_latency_samples=20,
                                     max_error_rate_excess=0.2, max_length_shift=None,
                                     max_ttft_p99_ratio=None, max_tpot_p99_ratio=None,
                                     max_tpot_unstreamed_p99_ratio=None),
                        max_duration_s=600)


def _feed(race: Race, profiles: dict[str, tuple[float, float, bool]], start: int,
          count: int, rng: random.Random) -> None:
    """`profiles`: name -> (speed factor against old, divergence rate, crashed)."""
    for n in range(start, start + count):
        old_s = 0.2 * rng.uniform(0.9, 1.1)
        for name, (factor, diverge, crashed) in profiles.items():
            new_s = old_s * factor * rng.uniform(0.9, 1.1)
            race.observe(name, n, _record(n, old_s, new_s, rng.random() < diverge,
                                          "connect" if crashed else None))


def test_four_candidates_the_fast_identical_one_wins() -> None:
    rng = random.Random(7)
    race = Race({"fast": "http://a", "diverging": "http://b", "slow": "http://c",
                 "crash": "http://d"}, CRITERIA)
    healthy = {"fast": (0.6, 0.0, False), "diverging": (0.5, 0.4, False),
               "slow": (1.6, 0.0, False), "crash": (0.7, 0.0, False)}
    _feed(race, healthy, 0, 20, rng)
    assert race.look(1.0) == [] or not race.over  # warm-up: too few samples to decide
    crashed = {**healthy, "crash": (0.7, 0.0, True)}
    seen_slow_stop = None
    for step in range(40):
        _feed(race, crashed, 20 + step * 10, 10, rng)
        race.look(float(step))
        if race.lanes["slow"].state != "racing" and seen_slow_stop is None:
            seen_slow_stop = step
        if race.over:
            break
    assert race.over and race.winner == "fast"
    assert race.lanes["diverging"].state == "eliminated"
    assert "match" in race.lanes["diverging"].reason
    assert race.lanes["crash"].state == "failed"
    assert race.lanes["slow"].state == "eliminated"
    assert seen_slow_stop is not None
    status = race.as_json()
    assert status["gate_confidence_per_candidate"] == pytest.approx(1 - 0.05 / 4)
    diverging = next(c for c in status["candidates"] if c["name"] == "diverging")
    assert diverging["divergence_by_field"].get("tool_arguments", 0) > 0


def test_a_candidate_slower_than_one_that_passed_stops_before_its_own_gate_decides() -> None:
    rng = random.Random(3)
    # Both faster than old, so both pass the gate; the second is slower than the first.
    race = Race({"a": "http://a", "b": "http://b"}, CRITERIA)
    for step in range(60):
        _feed(race, {"a": (0.5, 0.0, False), "b": (0.7, 0.0, False)}, step * 10, 10, rng)
        race.look(float(step))
        if race.over:
            break
    assert race.winner == "a"
    assert race.lanes["b"].state == "eliminated"
    assert race.lanes["b"].reason.startswith("slower than a")


def test_nobody_wins_when_every_candidate_fails() -> None:
    race = Race({"x": "http://x"}, CRITERIA)
    rng = random.Random(1)
    for step in range(30):
        _feed(race, {"x": (1.0, 0.5, False)}, step * 10, 10, rng)
        race.look(float(step))
    assert race.over and race.winner is None
    assert race.lanes["x"].state == "eliminated"


def test_the_deadline_picks_the_fastest_passing_one_by_median() -> None:
    rng = random.Random(5)
    race = Race({"a": "http://a", "b": "http://b"}, RaceCriteria(CRITERIA.gate, max_duration_s=10))
    # Same speed: neither bound separates them, so only the deadline ends it.
    for step in range(10):
        _feed(race, {"a": (0.5, 0.0, False), "b": (0.5, 0.0, False)}, step * 10, 10, rng)
        race.look(float(step))
    assert not race.over
    race.look(10.0)
    assert race.over and race.winner in ("a", "b")
    loser = "b" if race.winner == "a" else "a"
    assert race.lanes[loser].state == "stopped"


def test_paired_bounds_are_symmetric_and_need_data() -> None:
    race = Race({"a": "http://a", "b": "http://b"}, CRITERIA)
    low, high, n = faster_share_bounds(race.lanes["a"], race.lanes["b"], 0.05)
    assert (low, high, n) == (0.0, 1.0, 0)
    for k in range(50):
        race.lanes["a"].times_s[k] = 1.0
        race.lanes["b"].times_s[k] = 2.0
    low_ab, high_ab, _ = faster_share_bounds(race.lanes["a"], race.lanes["b"], 0.05)
    low_ba, high_ba, _ = faster_share_bounds(race.lanes["b"], race.lanes["a"], 0.05)
    assert low_ab > 0.5 > high_ba
    assert low_ab == pytest.approx(1 - high_ba)
    assert high_ab == pytest.approx(1 - low_ba)


def test_bad_race_criteria_are_refused_quoting_the_value() -> None:
    with pytest.raises(ValueError, match="1.5"):
        RaceCriteria(rank_confidence=1.5)
    with pytest.raises(ValueError, match="at least one"):
        Race({}, CRITERIA)


def test_the_status_shows_candidate_urls_without_their_credentials() -> None:
    race = Race({"a": "http://user:secret@a:1"}, CRITERIA)
    shown = race.as_json()["candidates"][0]["url"]
    assert "secret" not in shown and shown.endswith("a:1")


def _drive(race: Race, profiles: dict[str, tuple[float, float, bool]], start: int,
           steps: int, rng: random.Random, clock: list[float]) -> int:
    """Feed the lanes racing now and look, `steps` times; admit lanes that were begun.
    Returns the next request number."""
    n = start
    for _ in range(steps):
        for name in race.begin_waiting():
            race.admit(name, f"http://{name}", clock[0])
        racing = {k: v for k, v in profiles.items() if k in race.racing()}
        _feed(race, racing, n, 10, rng)
        n += 10
        clock[0] += 1.0
        race.look(clock[0])
        if race.over:
            break
    return n


def test_parallel_one_runs_the_candidates_one_after_another() -> None:
    rng, clock = random.Random(3), [0.0]
    profiles = {"slow": (0.9, 0.0, False), "diverging": (0.5, 0.4, False),
                "fast": (0.6, 0.0, False)}
    race = Race({name: "" for name in profiles}, CRITERIA, parallel=1)
    assert {lane.state for lane in race.lanes.values()} == {"waiting"}
    order: list[str] = []
    n = 0
    while not race.over and n < 20_000:
        assert len(race.racing()) + sum(
            lane.state == "starting" for lane in race.lanes.values()) <= 1
        n = _drive(race, profiles, n, 1, rng, clock)
        for name in race.racing():
            if name not in order:
                order.append(name)
    assert order == ["slow", "diverging", "fast"]
    assert race.winner == "fast"
    assert race.lanes["diverging"].state in ("eliminated", "failed")
    assert race.lanes["slow"].state == "stopped"  # a finalist the fast one beat
    assert "fast answers faster" in race.lanes["slow"].reason


def test_the_gate_split_covers_all_candidates_whatever_the_rounds() -> None:
    for parallel in (None, 1, 2):
        race = Race({"a": "", "b": "", "c": "", "d": ""}, CRITERIA, parallel=parallel)
        assert race.gate_criteria.confidence == pytest.approx(1 - (1 - 0.95) / 4)
        assert race.pair_alpha == pytest.approx(0.05 / 6)


def test_a_freed_place_goes_to_the_next_waiting_one() -> None:
    race = Race({"a": "", "b": "", "c": ""}, CRITERIA, parallel=2)
    assert race.begin_waiting() == ["a", "b"]
    assert race.begin_waiting() == []
    race.fail("a", "not ready: its container exited")
    assert race.lanes["a"].state == "failed"
    assert race.begin_waiting() == ["c"]
    race.admit("b", "http://b", 0.0)
    assert race.racing() == {"b": "http://b"}
    race.fail("b", "x")
    race.fail("c", "y")
    assert race.look(1.0) == [("race over without a winner: no candidate is left: none "
                               "passed the gate")]


def test_a_passed_one_keeps_its_place_while_another_starts() -> None:
    """With a free place the next candidate starts beside the passed one: no finalist."""
    rng, clock = random.Random(11), [0.0]
    profiles = {"a": (0.6, 0.0, False), "b": (0.9, 0.0, False), "c": (1.0, 0.0, False)}
    race = Race({name: "" for name in profiles}, CRITERIA, parallel=2)
    _drive(race, profiles, 0, 200, rng, clock)
    assert race.over and race.winner == "a"
    assert all(lane.state != "finalist" for lane in race.lanes.values())


def test_a_hung_request_holds_back_the_records_that_started_after_it() -> None:
    """A candidate answers quickly except one request still out (to its shadow timeout):
    the race judges none of the records that started after that one until it is on record
    (as the error it is), so a hanging candidate is not ranked on its survivors."""
    rng = random.Random(3)
    race = Race({"hangs": "http://a"}, CRITERIA)
    hung = 5
    for n in range(200):
        if n != hung:
            race.observe("hangs", n, _record(n, 0.2, 0.2 * rng.uniform(0.9, 1.1)))
    out = {"http://a": 1000.0 + hung}  # the hung exchange's start: the cutoff
    race.look(1.0, out.__getitem__)
    lane = race.lanes["hangs"]
    assert len(lane.records) == hung and len(lane.times_s) == hung
    assert [r.started_unix for r in lane.records] == [1000.0 + n for n in range(hung)]
    race.observe("hangs", hung, _record(hung, 0.2, 120.0, error="timeout"))
    race.look(2.0)  # nothing out any more
    assert len(lane.records) == 200
    assert sorted(r.started_unix for r in lane.records) == [r.started_unix for r in lane.records]


def test_a_stopped_candidate_keeps_its_held_records_for_the_report() -> None:
    race = Race({"a": "http://a"}, CRITERIA)
    for n in range(10):
        race.observe("a", n, _record(n, 0.2, 0.2))
    race.look(1.0, lambda url: 1000.0 + 3)
    lane = race.lanes["a"]
    assert len(lane.records) == 3 and len(lane.held) == 7
    lane.stop("finalist", "passed")
    assert len(lane.records) == 10 and not lane.held and lane.stopped_at_requests == 10
    # ... but not in the answer times a finalist is ranked by (`paired_ratio`)
    assert len(lane.times_s) == len(lane.old_times_s) == 3
