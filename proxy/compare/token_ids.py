"""Which token ids two answers are compared on, decided before any I/O (docs/TOKEN_IDS.md).

The mirror's exchange asks `plan` what it needs, fetches that (the primary's /tokenize,
the one I/O), and hands the ids to `apply`; both are pure, so every rule is tested by
value, without a server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from proxy.capture.types import Capture, RequestMeta, Role
from proxy.compare.types import TokenSource

Ids = Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class TokenPlan:
    """What to tokenize (`texts`, empty: nothing) and what comes of it."""

    primary: Capture  # as decided before tokenizing (its length filled from an equal side)
    texts: frozenset[str] = frozenset()
    source: TokenSource = "none"  # the source when nothing is tokenized, or once it is
    count_only: bool = False  # tokenized only to count the primary's answer (source "none")


def _ok(capture: Capture) -> bool:
    return capture.error is None and not capture.cancelled


def with_ids(capture: Capture, ids: tuple[int, ...]) -> Capture:
    """`capture` with re-tokenized ids; the engine's per-token offsets no longer fit them."""
    tokens = capture.output_tokens if capture.output_tokens is not None else len(ids)
    return dataclasses.replace(capture, token_ids=ids, token_char_ends=None,
                               output_tokens=tokens)


def plan(meta: RequestMeta | None, primary: Capture,
         others: Sequence[tuple[Role, Capture]]) -> TokenPlan:
    """The token source of an exchange's comparison and the texts it needs tokenized."""
    if primary.token_ids is not None:
        return TokenPlan(primary, source="client")
    usable = [c for _, c in others if _ok(c)]
    if meta is None or not meta.deterministic or not _ok(primary) or not usable:
        if _ok(primary) and primary.output_tokens is None and primary.text:
            # No usage chunk: the primary's length (and so its TPOT sample) needs a count.
            return TokenPlan(primary, frozenset({primary.text}), count_only=True)
        return TokenPlan(primary)
    texts = frozenset({primary.text} | {c.text for c in usable})
    if len(texts) == 1:
        # Equal texts give equal ids: nothing to re-tokenize. The primary's length, if it
        # sent no usage, is the engine's count on a side that produced the same text.
        if primary.output_tokens is None:
            count = next((c.output_tokens for c in usable if c.output_tokens is not None),
                         None)
            primary = dataclasses.replace(primary, output_tokens=count)
        if primary.output_tokens is not None:
            return TokenPlan(primary, source="equal_text")
    return TokenPlan(primary, texts, source="tokenize")


def apply(chosen: TokenPlan, others: Sequence[tuple[Role, Capture]], ids: Ids | None
          ) -> tuple[TokenSource, Capture, list[tuple[Role, Capture]]]:
    """The source and the captures to compare, given the ids the plan's texts got (None:
    not asked, or /tokenize failed)."""
    primary, rest = chosen.primary, list(others)
    if not chosen.texts:
        return chosen.source, primary, rest
    if ids is None:
        return "none", primary, rest
    if chosen.count_only:
        return "none", dataclasses.replace(primary, output_tokens=len(ids[primary.text])), rest
    return chosen.source, with_ids(primary, ids[primary.text]), [
        (role, with_ids(c, ids[c.text]) if _ok(c) else c) for role, c in rest]
