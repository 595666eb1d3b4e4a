"""What the comparison makes of two captures, and the record of one exchange (CONTRACT).

Everything here is a frozen value: the comparison turns two `Capture`s
(`proxy.capture.types`) into a `Comparison`, the store persists `ExchangeRecord`s and the
gate reads aggregates back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from proxy.capture.types import Capture, RequestMeta, Role

Outcome = Literal["match", "diverged", "not_comparable", "error"]
# Where the token ids compared came from: the answers' own, /tokenize on the primary, equal
# texts (no ids needed), or none (compared as text).
TokenSource = Literal["client", "tokenize", "equal_text", "none"]


@dataclass(frozen=True)
class Comparison:
    """Shadow (or baseline) vs primary for one request."""

    against: Role  # "shadow" or "baseline": which side was compared with the primary
    outcome: Outcome
    exact_match: bool
    first_divergence: int | None  # token index of the first difference, None if equal
    edit_distance: int | None  # token-level Levenshtein
    length_delta: int | None  # other - primary output tokens
    finish_reason_match: bool | None
    close_match: bool | None  # vLLM rule: each token at first divergence in the other's top-k
    reason: str = ""  # why not comparable / what differed
    basis: str = "token_ids"  # what decided: "token_ids", "logprob_tokens", "text",
    # "tool_calls", "value" (finish/stop reason, status) or "choices" (their count)
    field: str | None = None  # the field that diverged first (proxy.compare.fields)
    choice: int | None = None  # the choice it diverged in


@dataclass(frozen=True)
class RouteStamp:
    """The routing table an exchange was mirrored under: its version and each side's URL
    (which cutover's evidence a record is, `proxy.evidence.aggregates` reads from these)."""

    version: int
    primary: str
    shadow: str | None = None
    baseline: str | None = None


@dataclass(frozen=True)
class TextDigest:
    """An answer's text as a store keeps it when the text itself is not kept."""

    kind: str  # "sha256" or "hmac_sha256" (proxy.evidence.record_hash)
    digest: str
    chars: int


@dataclass(frozen=True)
class Stored:
    """Where a record read back from a store sits in it, and its answers' digests."""

    row_id: int  # the store's row id (paging: `records(after_id=...)`)
    texts: tuple[tuple[Role, TextDigest], ...] = ()

    def text(self, role: Role) -> TextDigest | None:
        return next((digest for r, digest in self.texts if r == role), None)


@dataclass(frozen=True)
class ExchangeRecord:
    """Everything kept about one mirrored request (no prompt/completion text unless enabled).
    Built once, never changed."""

    request_id: str
    started_unix: float
    meta: RequestMeta
    captures: tuple[Capture, ...]
    comparisons: tuple[Comparison, ...]
    token_ids_source: TokenSource | None = None  # None: not said (records made elsewhere)
    routes: RouteStamp | None = None  # None: not said (stores written before routes were)
    # False when the baseline was asked unstreamed for a streamed request
    # (`--no-baseline-stream`): its latency is then of another kind (tally.latency_kind).
    baseline_streamed: bool = True
    request_json: str | None = None  # the client's body, kept only when the operator asked
    stored: Stored | None = None  # set on the records a store reads back
