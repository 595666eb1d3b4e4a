"""The tune's outcome as a typed report: one row per candidate (the winner first, then by
state and paired answer time over old's) and the winning command for the deploy file.

Built once from the status `GET /admin/tune` answers (`TuneReport.from_status`), rendered
by `proxy.tune.report_render`; `as_json`/`from_json` are its stable JSON form. Only the
fields named here are kept: the status has no prompt or answer text, and the report
carries none of its free-form extras (history, gate check reasons) either.

The winning command is the launcher's form, ready for the deploy file: in container mode
old's command with the winner's extra args merged in exactly as the race made its
container (`proxy.tune.containers.merge_args`); `--kernels auto` args are already in the
target vLLM's form (`proxy.tune.kernels`). In adopt mode the operator started the engine,
so there is no command to print, only its URL.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.tune.containers import merge_args

SCHEMA = "vllm-cutover.tune-report/1"
# Standing, best first: how the rows after the winner are ordered (then by paired ratio).
STATE_ORDER = ("winner", "finalist", "passed", "racing", "starting", "waiting", "stopped",
               "eliminated", "failed")
Mode = Literal["container", "adopt"]


class ReportError(ValueError):
    """A status or report JSON that is not the shape expected; quotes the bad value."""


@dataclass(frozen=True)
class LatencyRatio:
    """One latency check of the gate: new/old `ratio` against `limit`. Unpaired checks
    bound the ratio (`ratio_bounds`); paired ones bound the share of requests slower
    beyond the limit (`share_slower_bounds`, against 1/2)."""

    check: str  # the criteria field, e.g. max_ttft_p50_ratio
    status: str  # pass / fail / inconclusive
    ratio: float | None
    limit: float | None
    basis: str | None = None
    ratio_bounds: tuple[float | None, float | None] | None = None
    share_slower_bounds: tuple[float, float] | None = None

    @classmethod
    def from_check(cls, check: Mapping[str, Any]) -> LatencyRatio:
        ratio_bounds = None
        old, new = check.get("old"), check.get("new")
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) == 2:
            ratio_bounds = (_over(new[0], old[1]), _over(new[1], old[0]))
        share = check.get("share_bounds")
        return cls(str(check["name"]), str(check.get("status", "")), _num(check.get("ratio")),
                   _num(check.get("limit")), check.get("basis"), ratio_bounds,
                   (float(share[0]), float(share[1])) if isinstance(share, list) else None)


@dataclass(frozen=True)
class CandidateRow:
    """One candidate's standing at the end (or now, for a race still running)."""

    name: str
    state: str
    verdict: str | None
    reason: str
    url: str
    requests: int
    stopped_at_requests: int | None
    divergence_by_field: Mapping[str, int] = field(default_factory=dict)
    latency: tuple[LatencyRatio, ...] = ()
    median_ratio: float | None = None
    paired_ratio: float | None = None
    args: tuple[str, ...] | None = None  # container mode: its extra engine args
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_status(cls, c: Mapping[str, Any]) -> CandidateRow:
        checks = c.get("gate_checks") or []
        args = c.get("args")
        return cls(
            name=str(c["name"]), state=str(c["state"]), verdict=c.get("verdict"),
            reason=str(c.get("reason") or ""), url=str(c.get("url") or ""),
            requests=int(c.get("requests") or 0),
            stopped_at_requests=c.get("stopped_at_requests"),
            divergence_by_field={str(k): int(v) for k, v in
                                 (c.get("divergence_by_field") or {}).items()},
            latency=tuple(LatencyRatio.from_check(check) for check in checks
                          if "ratio" in check and "limit" in check),
            median_ratio=_num(c.get("median_ratio")), paired_ratio=_num(c.get("paired_ratio")),
            args=tuple(str(a) for a in args) if isinstance(args, list) else None,
            env={str(k): str(v) for k, v in (c.get("env") or {}).items()})


@dataclass(frozen=True)
class WinningCommand:
    """What to deploy: `command` (container mode; None in adopt mode or when old's
    command was not recorded) with `env`, or the operator's engine at `url`."""

    mode: Mode
    candidate: str
    command: tuple[str, ...] | None
    env: Mapping[str, str] = field(default_factory=dict)
    url: str = ""
    note: str = ""

    @property
    def line(self) -> str | None:
        """The command as one shell-quoted line."""
        return shlex.join(self.command) if self.command is not None else None


@dataclass(frozen=True)
class TuneReport:
    """The whole outcome: the tune, its candidates ranked, the winner's command."""

    id: str | None
    phase: str | None
    reason: str
    old_url: str
    winner: str | None
    candidates: tuple[CandidateRow, ...]
    command: WinningCommand | None

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> TuneReport:
        try:
            rows = [CandidateRow.from_status(c) for c in status.get("candidates", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise ReportError(f"a candidate of the status is not as expected: {exc!r}") from None
        winner = status.get("winner")
        ranked = tuple(sorted(rows, key=lambda r: _rank(r, winner)))
        return cls(status.get("id"), status.get("phase"), str(status.get("reason") or ""),
                   str(status.get("old_url") or ""), winner, ranked,
                   winning_command(status, ranked, winner))

    def as_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "id": self.id, "phase": self.phase, "reason": self.reason,
                "old_url": self.old_url, "winner": self.winner,
                "candidates": [_row_json(r) for r in self.candidates],
                "winning_command": None if self.command is None else {
                    "mode": self.command.mode, "candidate": self.command.candidate,
                    "command": _list(self.command.command), "line": self.command.line,
                    "env": dict(self.command.env), "url": self.command.url,
                    "note": self.command.note}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TuneReport:
        if data.get("schema") != SCHEMA:
            raise ReportError(f"expected a report of schema {SCHEMA!r}, got "
                              f"{data.get('schema')!r}")
        win = data.get("winning_command")
        command = None if win is None else WinningCommand(
            win["mode"], win["candidate"], _tuple(win["command"]), dict(win["env"]),
            win["url"], win["note"])
        return cls(data["id"], data["phase"], data["reason"], data["old_url"], data["winner"],
                   tuple(_row_from_json(r) for r in data["candidates"]), command)


def winning_command(status: Mapping[str, Any], rows: tuple[CandidateRow, ...],
                    winner: str | None) -> WinningCommand | None:
    row = next((r for r in rows if r.name == winner), None)
    if row is None:
        return None
    if row.args is None:
        return WinningCommand("adopt", row.name, None, url=row.url,
                              note="adopt mode: the operator started this engine, so there is "
                                   "no command to print; deploy what runs at its URL")
    old = status.get("old_command")
    if not isinstance(old, list):
        return WinningCommand("container", row.name, None, dict(row.env), row.url,
                              "old's command was not recorded by this proxy's tune (an "
                              "older version); merge the args into it by hand: "
                              + shlex.join(row.args))
    merged = merge_args(tuple(map(str, old)), row.args) if row.args else tuple(map(str, old))
    return WinningCommand("container", row.name, merged, dict(row.env), row.url,
                          f"old's command with {row.name}'s args, as the race ran it")


def _rank(row: CandidateRow, winner: str | None) -> tuple[int, int, float, str]:
    state = STATE_ORDER.index(row.state) if row.state in STATE_ORDER else len(STATE_ORDER)
    paired = row.paired_ratio if row.paired_ratio is not None else float("inf")
    return (0 if row.name == winner else 1, state, paired, row.name)


def _row_json(r: CandidateRow) -> dict[str, Any]:
    return {"name": r.name, "state": r.state, "verdict": r.verdict, "reason": r.reason,
            "url": r.url, "requests": r.requests, "stopped_at_requests": r.stopped_at_requests,
            "divergence_by_field": dict(r.divergence_by_field),
            "latency": [{"check": x.check, "status": x.status, "ratio": x.ratio,
                         "limit": x.limit, "basis": x.basis,
                         "ratio_bounds": _list(x.ratio_bounds),
                         "share_slower_bounds": _list(x.share_slower_bounds)}
                        for x in r.latency],
            "median_ratio": r.median_ratio, "paired_ratio": r.paired_ratio,
            "args": _list(r.args), "env": dict(r.env)}


def _row_from_json(d: Mapping[str, Any]) -> CandidateRow:
    latency = tuple(LatencyRatio(x["check"], x["status"], x["ratio"], x["limit"], x["basis"],
                                 _pair(x["ratio_bounds"]), _pair(x["share_slower_bounds"]))
                    for x in d["latency"])
    return CandidateRow(d["name"], d["state"], d["verdict"], d["reason"], d["url"],
                        d["requests"], d["stopped_at_requests"], dict(d["divergence_by_field"]),
                        latency, d["median_ratio"], d["paired_ratio"], _tuple(d["args"]),
                        dict(d["env"]))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _over(new: Any, old: Any) -> float | None:
    new, old = _num(new), _num(old)
    return new / old if new is not None and old else None


def _list(values: tuple[Any, ...] | None) -> list[Any] | None:
    return list(values) if values is not None else None


def _tuple(values: list[str] | None) -> tuple[str, ...] | None:
    return tuple(values) if values is not None else None


def _pair(values: list[Any] | None) -> Any:
    return (values[0], values[1]) if values is not None else None
