"""The messages between the proxy and its capture worker, one class per kind.

The channel (`proxy.mirror.worker.ipc`) pickles each as `(wire code, field values...)`,
which costs what the positional tuples it replaced cost (bench/README.md, "IPC
messages"), and rebuilds the class on the other side, where every field is read
by name. The proxy's first message, `Configure`, carries `SCHEMA`, a digest of
every class's field names and types: a worker built from other code than the
proxy's refuses to start instead of reading a field added on one side as another.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeAlias

from proxy.capture.types import Endpoint
from proxy.evidence.window import EvidenceWindow
from proxy.gate.tally import AdmissionRow
from proxy.mirror.config import ProxyConfig
from proxy.mirror.judging import GateResult


def _values_getter(cls: type[Any]) -> Callable[[Any], tuple[Any, ...]]:
    names = [f.name for f in dataclasses.fields(cls)]
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda message: (one(message),)
    return lambda message: ()


# Proxy -> worker


@dataclass(slots=True)
class Configure:
    """First and once: the proxy's whole configuration. Always wire code 0, `schema` first."""

    schema: str
    config: ProxyConfig
    log_level: int


@dataclass(slots=True)
class Start:
    """A request was chosen for mirroring (sent after the primary's request went out)."""

    xid: int
    route_version: int
    primary: str
    shadow: str | None
    baseline: str | None
    path: str
    headers: list[tuple[str, str]]
    request: dict[str, Any]  # the body as read_request read it (once, on the client path)
    endpoint: Endpoint
    started_unix: float
    t_start: float  # perf_counter() when the client's request arrived


@dataclass(slots=True)
class Chunks:
    """The primary's relayed bytes so far, with the time each piece was read."""

    xid: int
    content_type: str
    payloads: list[bytes]
    times: list[float]


@dataclass(slots=True)
class End:
    """The primary's last bytes and how its answer ended."""

    xid: int
    content_type: str
    payloads: list[bytes]
    times: list[float]
    status: int | None
    error: str | None
    cancelled: bool
    t_end: float


@dataclass(slots=True)
class AdmissionCounts:
    """Eligible and shed counts for the store's `admission` table."""

    t_unix: float
    rows: list[AdmissionRow]


@dataclass(slots=True)
class GateQuery:
    """The current verdict."""


@dataclass(slots=True)
class WindowGateQuery:
    """The verdict over one cutover's evidence."""

    window: EvidenceWindow


@dataclass(slots=True)
class AggregatesQuery:
    """The records' aggregates (`SqliteStore.aggregates`)."""


@dataclass(slots=True)
class RecordsQuery:
    """One page of records."""

    after_id: int
    limit: int


@dataclass(slots=True)
class MetricsQuery:
    """The worker's Prometheus exposition."""


Query: TypeAlias = GateQuery | WindowGateQuery | AggregatesQuery | RecordsQuery | MetricsQuery


@dataclass(slots=True)
class Call:
    """A question the proxy waits for; answered by a `Reply` with the same `call_id`."""

    call_id: int
    query: Query


@dataclass(slots=True)
class Shutdown:
    """Finish the exchanges in flight and their records, then say `Bye`."""


@dataclass(slots=True)
class PeerConfirmed:
    """The answer to `ConfirmPeer`: None, the connection may carry prompts; else why not."""

    call_id: int
    refusal: str | None


# Worker -> proxy


@dataclass(slots=True)
class Ready:
    scheduling: str  # what the worker's priority became: nice 10, SCHED_IDLE, normal
    handled_bytes: int


@dataclass(slots=True)
class Done:
    """Exchange `xid` is recorded (or dropped): the proxy releases what it held for it."""

    xid: int


# A call's answer: the gate's typed result (GateQuery, WindowGateQuery), the admin API's
# JSON as written (aggregates, a page of records), the Prometheus exposition, or the
# error's text.
ReplyValue: TypeAlias = GateResult | dict[str, object] | list[dict[str, object]] | bytes | str


@dataclass(slots=True)
class Reply:
    call_id: int
    ok: bool
    value: ReplyValue  # the answer, or the error's text when not ok


@dataclass(slots=True)
class Progress:
    handled_bytes: int
    loop_lag_s: float
    loop_busy: float


@dataclass(slots=True)
class Bye:
    cancelled: int  # exchanges cancelled when the drain ran out of time


@dataclass(slots=True)
class ConfirmPeer:
    """A new mirror-lane connection to `url` waits, unused, for `PeerConfirmed`
    (`proxy.mirror.peers`)."""

    call_id: int
    url: str


# A message's wire code is its place here; Configure stays first.
MESSAGE_TYPES: tuple[type[Any], ...] = (
    Configure, Start, Chunks, End, AdmissionCounts, GateQuery, WindowGateQuery,
    AggregatesQuery, RecordsQuery, MetricsQuery, Call, Shutdown, PeerConfirmed,
    Ready, Done, Reply, Progress, Bye, ConfirmPeer,
)
_CODES = {cls: code for code, cls in enumerate(MESSAGE_TYPES)}
_FIELDS = {cls: _values_getter(cls) for cls in MESSAGE_TYPES}


def _schema() -> str:
    parts = [f"{cls.__name__}({','.join(f'{f.name}:{f.type}' for f in dataclasses.fields(cls))})"
             for cls in MESSAGE_TYPES]
    return hashlib.sha256(";".join(parts).encode()).hexdigest()[:16]


SCHEMA = _schema()


def to_wire(message: Any) -> tuple[Any, ...]:
    """(wire code, field values...): what the channel pickles (a tuple pickles fastest)."""
    cls = type(message)
    return (_CODES[cls], *_FIELDS[cls](message))


def from_wire(wire: tuple[Any, ...]) -> Any:
    """The message `to_wire` made; TypeError/IndexError for a frame of other code."""
    return MESSAGE_TYPES[wire[0]](*wire[1:])
