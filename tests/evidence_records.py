"""Exchange records between named versions, as a cutover's evidence window sees them."""

from __future__ import annotations

from typing import Any

from proxy.capture.types import Capture, RequestMeta, Role
from proxy.compare.types import Comparison, ExchangeRecord, RouteStamp
from proxy.evidence.store import SqliteStore

OLD, NEW, BASE = "http://old:8000", "http://new:8000", "http://base:8000"
OTHER, OTHER_BASE = "http://other:8000", "http://base2:8000"
SINCE = 1000.0
META = RequestMeta(endpoint="completions", stream=True, deterministic=True,
                   prompt_sha256="ab" * 32, prompt_chars=5, max_tokens=6)


def capture(role: Role, url: str, ttft_s: float, error: str | None = None) -> Capture:
    return Capture(role=role, backend=url.split("://")[1], status=None if error else 200,
                   ttft_s=ttft_s, itl_s=(0.01,) * 5, e2e_s=ttft_s + 0.05, output_tokens=6,
                   finish_reason="length", text="", token_ids=None, error=error)


def record(started: float, primary: str, shadow: str | None, *, ttft: dict[str, float],
           diverged: bool = False, errors: dict[str, str] | None = None,
           baseline: str | None = None, baseline_diverged: bool = False) -> ExchangeRecord:
    """One exchange; `ttft` and `errors` are keyed by URL, as a version is."""
    errors = errors or {}
    sides: list[tuple[Role, str]] = [("primary", primary)]
    if shadow is not None:
        sides.append(("shadow", shadow))
    if baseline is not None:
        sides.append(("baseline", baseline))
    captures = tuple(capture(role, url, ttft[url], errors.get(url)) for role, url in sides)
    comparisons = []
    for role, url in sides[1:]:
        bad = diverged if role == "shadow" else baseline_diverged
        outcome = "error" if errors.get(url) else "diverged" if bad else "match"
        comparisons.append(Comparison(role, outcome, outcome == "match",
                                      2 if bad else None, 1 if bad else 0, 1, True, None))
    return ExchangeRecord(f"r{started}", started, META, captures, tuple(comparisons),
                          routes=RouteStamp(1, primary, shadow, baseline))


def store_of(tmp_path: Any, records: list[ExchangeRecord]) -> SqliteStore:
    store = SqliteStore(str(tmp_path / "r.db"))
    store.write(records)
    return store


SPEEDS = {OLD: 0.1, NEW: 0.3, OTHER: 0.2, BASE: 0.1, OTHER_BASE: 0.1}
