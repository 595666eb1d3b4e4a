"""The typed start request of a tune, validated once, at the edge (admin API or CLI).

`TuneSpec.from_json` is the only way a request body becomes a spec; every error quotes the
bad value. The gate's criteria start from the proxy's own (`--gate-*` flags) and take the
request's `gate` overrides; the promotion is a normal cutover, whose stage times the
request's `cutover` object may set.

Two modes: adopt (every candidate has a `url`: it runs already) and container (every
candidate has `args` and maybe `env`: its container is made from the `old` container's
configuration, on the `new_image` (default: old's), `parallel` at a time, each on one of
the `new_gpus` sets).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from proxy.cutover.spec import CutoverSpec
from proxy.gate.verdict import GateCriteria
from proxy.tune.containers import CandidateArgsError, Extra, extra_from, gpu_sets_problem
from proxy.tune.race import RaceCriteria
from proxy.urls import UrlError, normalize_backend_url

Promote = Literal["best", "none"]
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
# The cutover fields a tune passes on to the promotion (its candidate is the new_url).
CUTOVER_FIELDS = ("min_samples", "analysis_delay_s", "analysis_timeout_s", "failure_limit",
                  "post_promotion_s", "scale_down_delay_s", "warmup_timeout_s")
_KEYS = {"candidates", "promote", "sample_rate", "max_duration_s", "rank_confidence",
         "gate", "cutover", "served_model_name", "old", "new_image", "new_gpus", "parallel"}
_GPU_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")


class TuneSpecError(ValueError):
    """A tune request that cannot work; the message quotes the bad value."""


@dataclass(frozen=True)
class Candidate:
    """One engine in the race: adopt mode, it already runs at `url`; container mode
    (`url` ""), `extra` changes old's command and env for its container."""

    name: str
    url: str = ""
    extra: Extra | None = None

    def to_json(self) -> dict[str, Any]:
        if self.extra is None:
            return {"name": self.name, "url": self.url}
        return {"name": self.name, "args": list(self.extra.args), "env": dict(self.extra.env)}


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
    old: str | None = None  # container mode: the old container (name, id, label=K=V)
    new_image: str | None = None  # default: the old container's image
    new_gpus: tuple[tuple[str, ...], ...] = ()  # one set per place
    parallel: int | None = None  # default: one per GPU set, else every candidate

    @property
    def containers(self) -> bool:
        return self.old is not None

    @property
    def places(self) -> int:
        """How many candidates run at once."""
        if self.parallel is not None:
            return self.parallel
        return len(self.new_gpus) if self.new_gpus else len(self.candidates)

    def criteria(self, base: GateCriteria) -> RaceCriteria:
        """The race's criteria: the proxy's gate with this request's overrides."""
        return RaceCriteria(_gate(base, self.gate), self.rank_confidence, self.max_duration_s)

    def promotion(self, winner_url: str, old_container: str | None = None) -> CutoverSpec:
        """The winner adopted by URL; old's container (container mode) is stopped at the
        end and kept for rollback, as in any cutover that names it."""
        extra = {"old": old_container} if old_container else {}
        return CutoverSpec.from_json({**self.cutover, **extra, "new_url": winner_url})

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gate"], data["cutover"] = dict(self.gate), dict(self.cutover)
        data["candidates"] = [c.to_json() for c in self.candidates]
        data["new_gpus"] = [list(devices) for devices in self.new_gpus]
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
        old, image, gpu_sets, parallel = _containers(data, candidates)
        try:
            CutoverSpec.from_json({**cutover, "new_url": candidates[0].url or "http://x:1"})
            spec = cls(candidates, promote, rate, _number(data, "max_duration_s", 1800.0),
                       _number(data, "rank_confidence", 0.95), gate, cutover,
                       data.get("served_model_name"), old, image, gpu_sets, parallel)
            spec.criteria(base or GateCriteria())
        except ValueError as exc:
            raise TuneSpecError(str(exc)) from None
        return spec


SHAPES = ('{"name": N, "url": URL} (adopt mode) or {"name": N, "args": [...], '
          '"env": {...}} (container mode)')


def _candidates(value: Any) -> tuple[Candidate, ...]:
    if not isinstance(value, list) or not value:
        raise TuneSpecError(f"candidates must be a non-empty list of {SHAPES}, got {value!r}")
    out: list[Candidate] = []
    for item in value:
        adopt = isinstance(item, dict) and set(item) == {"name", "url"}
        if not adopt and not (isinstance(item, dict) and "name" in item
                              and set(item) <= {"name", "args", "env"}):
            raise TuneSpecError(f"a candidate is {SHAPES}, got {item!r}")
        name = item["name"]
        if not isinstance(name, str) or not NAME.match(name):
            raise TuneSpecError(f"candidate name must be letters, digits, _.:- (up to 64), "
                                f"got {name!r}")
        if any(c.name == name for c in out):
            raise TuneSpecError(f"candidate name {name!r} is given twice")
        out.append(_adopted(name, item["url"]) if adopt else _made(name, item))
    if len({c.extra is None for c in out}) > 1:
        raise TuneSpecError("give every candidate a url (adopt mode) or none (container "
                            f"mode), got {[c.name for c in out]!r} mixed")
    return tuple(out)


def _adopted(name: str, url: Any) -> Candidate:
    try:
        return Candidate(name, normalize_backend_url(url))
    except (UrlError, TypeError, AttributeError) as exc:
        raise TuneSpecError(f"candidate {name!r}: url {url!r}: {exc}") from None


def _made(name: str, item: dict[str, Any]) -> Candidate:
    args, env = item.get("args", []), item.get("env", {})
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise TuneSpecError(f"candidate {name!r}: args must be a list of strings, got {args!r}")
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)
            and isinstance(v, str) for k, v in env.items()):
        raise TuneSpecError(f"candidate {name!r}: env must map variable names to strings, "
                            f"got {env!r}")
    try:
        return Candidate(name, "", extra_from(args, env))
    except CandidateArgsError as exc:
        raise TuneSpecError(f"candidate {name!r}: {exc}") from None


def _containers(data: Mapping[str, Any], candidates: tuple[Candidate, ...]
                ) -> tuple[str | None, str | None, tuple[tuple[str, ...], ...], int | None]:
    """(old, new_image, new_gpus, parallel), checked against the candidates' mode."""
    old, image = data.get("old"), data.get("new_image")
    made = candidates[0].extra is not None
    if not made:
        given = sorted(k for k in ("old", "new_image", "new_gpus", "parallel")
                       if data.get(k) not in (None, []))
        if given:
            raise TuneSpecError(f"{given!r} apply to container mode (candidates with args), "
                                "not to candidates given by url")
        return None, None, (), None
    for key, value in (("old", old), ("new_image", image)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise TuneSpecError(f"{key} must be a non-empty string, got {value!r}")
    if old is None:
        raise TuneSpecError("candidates with args are made from a container: give old "
                            "(--old CONTAINER)")
    sets = _gpu_sets(data.get("new_gpus", []))
    parallel = data.get("parallel")
    if parallel is not None and (isinstance(parallel, bool) or not isinstance(parallel, int)
                                 or parallel < 1):
        raise TuneSpecError(f"parallel must be an integer >= 1, got {parallel!r}")
    if sets and parallel is not None and parallel > len(sets):
        raise TuneSpecError(f"parallel {parallel} needs {parallel} GPU sets (--new-gpus, one "
                            f"per candidate running at once), got {len(sets)}")
    return old, image, sets, parallel


def _gpu_sets(value: Any) -> tuple[tuple[str, ...], ...]:
    if not isinstance(value, list) or not all(
            isinstance(s, list) and all(isinstance(g, str) and _GPU_ID.match(g) for g in s)
            for s in value):
        raise TuneSpecError(f"new_gpus must be a list of GPU sets like [[\"2\", \"3\"]], "
                            f"got {value!r}")
    sets = tuple(tuple(s) for s in value)
    problem = gpu_sets_problem(sets)
    if problem:
        raise TuneSpecError(f"new_gpus {value!r}: {problem}")
    return sets


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
