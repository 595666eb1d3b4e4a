"""Synthetic exchange records for the report tests (old slower/faster, divergences, errors)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from proxy.capture.types import Capture, RequestMeta
from proxy.compare.types import Comparison, ExchangeRecord


def capture(
    role: str, ttft_s: float, tokens: int = 20, itl_s: float = 0.005, **kw: object
) -> Capture:
    fields: dict[str, object] = dict(  # noqa: C408
        role=role,
        backend=f"{role}:1",
        status=200,
        ttft_s=ttft_s,
        itl_s=tuple([itl_s] * (tokens - 1)),
        e2e_s=ttft_s + itl_s * (tokens - 1),
        output_tokens=tokens,
        finish_reason="length",
        text="",
        token_ids=None,
    )
    fields.update(kw)
    return Capture(**fields)  # type: ignore[arg-type]


def comparison(against: str, diverged_at: int | None, outcome: str | None = None) -> Comparison:
    if outcome is None:
        outcome = "match" if diverged_at is None else "diverged"
    return Comparison(
        against=against,  # type: ignore[arg-type]
        outcome=outcome,  # type: ignore[arg-type]
        exact_match=outcome == "match",
        first_divergence=diverged_at,
        edit_distance=0 if diverged_at is None else 5,
        length_delta=0,
        finish_reason_match=True,
        close_match=None if diverged_at is None else True,
    )


def make_records(
    count: int = 120,
    new_slowdown: float = 1.0,
    diverge_every: int = 0,
    baseline: bool = True,
    shadow_errors_every: int = 0,
    seed: int = 1,
) -> list[ExchangeRecord]:
    """`count` mirrored exchanges; every third is sampled (not deterministic)."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        deterministic = i % 3 != 2
        meta = RequestMeta("chat", True, deterministic, f"{i:064x}", 40, 32)
        old_ttft = rng.uniform(0.018, 0.022)
        caps = [capture("primary", old_ttft)]
        diverged_at = 3 + i % 7 if diverge_every and i % diverge_every == 0 else None
        if shadow_errors_every and i % shadow_errors_every == 0:
            caps.append(
                replace(
                    capture("shadow", 0.0),
                    status=500,
                    ttft_s=None,
                    e2e_s=None,
                    itl_s=(),
                    error="http_5xx",
                )
            )
            comps = [comparison("shadow", None, "error")]
        else:
            caps.append(capture("shadow", rng.uniform(0.018, 0.022) * new_slowdown))
            outcome = None if deterministic else "not_comparable"
            comps = [comparison("shadow", diverged_at if deterministic else None, outcome)]
        if baseline:
            caps.append(capture("baseline", rng.uniform(0.018, 0.022)))
            comps.append(comparison("baseline", None, None if deterministic else "not_comparable"))
        records.append(ExchangeRecord(f"r{i}", 1000.0 + i, meta, tuple(caps), tuple(comps)))
    return records


RecordsFactory = Callable[..., list[ExchangeRecord]]


@pytest.fixture
def records_of() -> RecordsFactory:
    """`make_records` as a fixture (test modules cannot import conftest in importlib mode)."""
    return make_records
