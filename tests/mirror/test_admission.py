"""The admission tally: eligible and shed counts per route, taken and given back whole."""

from __future__ import annotations

from proxy.mirror.admission import AdmissionTally


def test_tally_counts_per_route_and_outcome_then_starts_over():
    tally = AdmissionTally()
    for _ in range(3):
        tally.count("http://old", "http://new", "eligible")
    tally.count("http://old", "http://new", "overload", 2)
    tally.count("http://new", "http://old", "eligible")  # after a swap: another route
    rows = tally.take()
    assert sorted(rows) == [("http://new", "http://old", "eligible", 1),
                            ("http://old", "http://new", "eligible", 3),
                            ("http://old", "http://new", "overload", 2)]
    assert tally.take() == []


def test_counts_that_could_not_be_delivered_go_out_with_the_next_flush():
    tally = AdmissionTally()
    tally.count("http://old", "http://new", "eligible", 2)
    undelivered = tally.take()
    tally.count("http://old", "http://new", "eligible")
    tally.give_back(undelivered)
    assert tally.take() == [("http://old", "http://new", "eligible", 3)]
