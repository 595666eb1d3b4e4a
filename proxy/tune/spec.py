"""The typed start request of a tune, validated once, at the edge (admin API or CLI).

`TuneSpec.from_json` is the only way a request body becomes a spec; every error quotes the
bad value. The gate's criteria start from the proxy's own (`--gate-*` flags) and take the
request's `gate` overrides; the promotion is a normal cutover, whose stage times the
request's `cutover` object may set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from proxy.compare.gate import GateCriteria
from proxy.cutover.spec import CutoverSpec
from proxy.tune.race import RaceCriteria
from proxy.urls import UrlError, normalize_backend_url

Promote = Literal["best", "none"]
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
# The cutover fields a tune passes on to the promotion (its candidate is the new_url).
CUTOVER_FIELDS = ("min_samples", "analysis_delay_s", "analysis_timeout_s", "failure_limit",
                  "post_promotion_s", "scale_down_delay_s", "warmup_timeout_s")
_KEYS = {"candidates", "promote", "sample_rate", "max_duration_s", "rank_confidence",
         "gate", "cutover", "served_model_name"}


class TuneSpecError(ValueError):
    """A tune request that cannot work; the message quotes the bad value."""


@dataclass(frozen=True)
class Candidate:
    """One engine in the race (adopt mode: it already runs at `url`)."""

    name: str
    url: str


@dataclass(frozen=True)
class TuneSpec:
    """What to race, how to judge it, and what to do with the winner."""

    candidates: tuple[Candidate, ...]
    promote: Promote = "best"
    sample_rate: float = 1.0  # share of generation requests mirrored to every candidate
    max_duration_s: float = 1800.0
    rank_confidence: float = 0.95
    gate: Mapping[str, Any] = field(default_factory=dict)  # GateCriteria overrides
    cutover: Mapping[str, Any] = field(default_factory=dict)  # CUTOVER_FIELDS for promotion
    served_model_name: str | None = None

    def criteria(self, base: GateCriteria) -> RaceCriteria:
        """The race's criteria: the proxy's gate with this request's overrides."""
        return RaceCriteria(_gate(base, self.gate), self.rank_confidence, self.max_duration_s)

    def promotion(self, winner_url: str) -> CutoverSpec:
        return CutoverSpec.from_json({**self.cutover, "new_url": winner_url})

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gate"], data["cutover"] = dict(self.gate), dict(self.cutover)
        return data

    @classmethod
    def from_json(cls, data: Any, base: GateCriteria | None = None) -> TuneSpec:
        if not isinstance(data, dict) or not set(data) <= _KEYS:
            raise TuneSpecError(f"expected a JSON object with keys among {sorted(_KEYS)}, "
                                f"got {data!r}")
        candidates = _candidates(data.get("candidates"))
        promote = data.get("promote", "best")
        if promote not in ("best", "none"):
            raise TuneSpecError(f"promote must be 'best' or 'none', got {promote!r}")
        rate = _number(data, "sample_rate", 1.0)
        if not 0 < rate <= 1:
            raise TuneSpecError(f"sample_rate must be within (0, 1], got {rate!r}")
        gate = _object(data, "gate")
        _gate(base or GateCriteria(), gate)  # refused now, not at the first look
        cutover = _object(data, "cutover")
        if not set(cutover) <= set(CUTOVER_FIELDS):
            raise TuneSpecError(f"cutover takes keys among {list(CUTOVER_FIELDS)}, got "
                                f"{sorted(cutover)!r}")
        try:
            CutoverSpec.from_json({**cutover, "new_url": candidates[0].url})
            spec = cls(candidates, promote, rate, _number(data, "max_duration_s", 1800.0),
                       _number(data, "rank_confidence", 0.95), gate, cutover,
                       data.get("served_model_name"))
            spec.criteria(base or GateCriteria())
        except ValueError as exc:
            raise TuneSpecError(str(exc)) from None
        return spec


def _candidates(value: Any) -> tuple[Candidate, ...]:
    if not isinstance(value, list) or not value:
        raise TuneSpecError(f"candidates must be a non-empty list of {{\"name\": N, \"url\": "
                            f"URL}}, got {value!r}")
    out: list[Candidate] = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "url"}:
            raise TuneSpecError(f"a candidate is {{\"name\": N, \"url\": URL}}, got {item!r}")
        name, url = item["name"], item["url"]
        if not isinstance(name, str) or not NAME.match(name):
            raise TuneSpecError(f"candidate name must be letters, digits, _.:- (up to 64), "
                                f"got {name!r}")
        if any(c.name == name for c in out):
            raise TuneSpecError(f"candidate name {name!r} is given twice")
        try:
            out.append(Candidate(name, normalize_backend_url(url)))
        except (UrlError, TypeError, AttributeError) as exc:
            raise TuneSpecError(f"candidate {name!r}: url {url!r}: {exc}") from None
    return tuple(out)


def _number(data: Mapping[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TuneSpecError(f"{key} must be a number, got {value!r}")
    return float(value)


def _object(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise TuneSpecError(f"{key} must be a JSON object, got {value!r}")
    return value


def _gate(base: GateCriteria, overrides: Mapping[str, Any]) -> GateCriteria:
    known = {f.name for f in fields(GateCriteria)}
    unknown = set(overrides) - known
    if unknown:
        raise TuneSpecError(f"gate: unknown criteria {sorted(unknown)!r}")
    try:
        return GateCriteria(**{**asdict(base), **overrides})
    except (TypeError, ValueError) as exc:
        raise TuneSpecError(f"gate: {exc}") from None
