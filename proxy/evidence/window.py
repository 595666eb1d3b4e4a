"""Which records count for one cutover: its evidence window (since when, between which
two versions), as the store, the aggregates, the worker's messages and the cutover read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from proxy.credentials import without_credentials


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
