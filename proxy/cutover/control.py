"""What the cutover asks of the proxy it runs in: routes, requests in flight, the gate.

A Protocol, so the state machine's tests step it against a fake; the proxy's
implementation (`proxy.mirror.control`) acts on its own router and evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Literal, Protocol

from proxy.compare.checks import Check
from proxy.credentials import without_credentials


class RouteConflict(RuntimeError):
    """The routes changed since the version the caller read (compare-and-set failed)."""


@dataclass(frozen=True)
class RoutesView:
    version: int
    primary: str
    shadow: str | None = None
    baseline: str | None = None


@dataclass(frozen=True)
class EvidenceWindow:
    """The records that count for one cutover: started at or after `since_unix`, between
    exactly these two versions (whichever of them was primary). `old_url`/`new_url`
    label the roles by version, so after promotion (new is primary, old is shadow) the
    comparison is still new against old."""

    since_unix: float
    old_url: str
    new_url: str
    baseline_url: str | None = None

    def __post_init__(self) -> None:
        # Records name backends without credentials: so does the window matching them.
        for name in ("old_url", "new_url", "baseline_url"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, without_credentials(value))

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> EvidenceWindow:
        """From `to_json()`'s form; ValueError quoting what does not fit."""
        fields = data if isinstance(data, Mapping) else {}
        since, old, new = fields.get("since_unix"), fields.get("old_url"), fields.get("new_url")
        baseline = fields.get("baseline_url")
        if (not isinstance(since, (int, float)) or isinstance(since, bool)
                or not isinstance(old, str) or not isinstance(new, str)
                or not isinstance(baseline, (str, type(None)))):
            # ValueError, like every other bad value read from a file or a request.
            raise ValueError(  # noqa: TRY004
                "an evidence window is an object with since_unix (a number), old_url and "
                f"new_url (URLs), baseline_url (a URL or null); got {data!r}")
        return cls(float(since), old, new, baseline)


@dataclass(frozen=True)
class GateView:
    """The gate as the cutover reads it: the verdict, its reasons and its checks (most
    severe first; each inconclusive one says what it needs, `Check.need`)."""

    verdict: Literal["pass", "fail", "inconclusive"]
    reasons: tuple[str, ...] = ()
    samples: int = 0  # new-vs-old comparisons counted
    min_samples: int = 0
    checks: tuple[Check, ...] = ()


class ProxyControl(Protocol):
    def routes(self) -> RoutesView: ...

    def set_routes(self, primary: str, shadow: str | None, baseline: str | None,
                   expect_version: int) -> RoutesView:
        """Publish new routes atomically (requests in flight finish where they started);
        RouteConflict when the current version is not `expect_version`."""

    def inflight(self) -> Mapping[str, int]:
        """Requests in flight per backend URL (client requests and mirrors)."""

    async def gate(self, window: EvidenceWindow) -> GateView:
        """The verdict over the records of `window` only."""
