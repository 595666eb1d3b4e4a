"""The cutover's persisted state: phases, endpoints, transitions, and their JSON form.

Values only. The state is written to the proxy's state file (section "cutover") after
every step and read back at start, so a restarted proxy resumes the cutover where it was.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from proxy.cutover.fields import Fields, StateError
from proxy.cutover.spec import CutoverSpec, SpecError
from proxy.evidence.window import EvidenceWindow

__all__ = ["SCHEMA_VERSION", "Command", "CutoverSpec", "CutoverState", "Endpoint", "Phase",
           "SpecError", "StateError", "Transition"]

SCHEMA_VERSION = 1

Command = Literal["promote", "force_promote", "rollback", "abort"]
COMMANDS: tuple[str, ...] = get_args(Command)


class Phase(str, enum.Enum):
    BACKING_UP = "backing_up"
    STARTING_NEW = "starting_new"
    WARMING = "warming"
    SHADOWING = "shadowing"
    PROMOTING = "promoting"
    POST_PROMOTION = "post_promotion"
    DRAINING_OLD = "draining_old"
    ABORTING = "aborting"
    ROLLING_BACK = "rolling_back"
    DONE = "done"
    ABORTED = "aborted"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def promoted(self) -> bool:
        """The new version is (or is being made) primary: a way back is a rollback."""
        return self in (Phase.PROMOTING, Phase.POST_PROMOTION, Phase.DRAINING_OLD, Phase.DONE)


TERMINAL = frozenset({Phase.DONE, Phase.ABORTED, Phase.ROLLED_BACK, Phase.FAILED})


@dataclass(frozen=True)
class Endpoint:
    """One side of the cutover, labelled by version (old/new), never by role."""

    url: str
    container_id: str | None = None
    name: str | None = None
    image: str | None = None
    vllm_version: str | None = None
    removed: bool = False  # its container was removed by the cutover
    # The Docker network whose IP `url` uses: the address is re-read from the container
    # (by id) before clients or mirrors go there, as a restart may give it another IP.
    network: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "container": self.container_id, "name": self.name,
                "image": self.image, "vllm_version": self.vllm_version,
                "removed": self.removed, "network": self.network}

    @classmethod
    def from_json(cls, data: Any, where: str = "endpoint") -> Endpoint:
        f = Fields(data, where)
        return cls(url=f.required_text("url"), container_id=f.text("container"),
                   name=f.text("name"), image=f.text("image"),
                   vllm_version=f.text("vllm_version"), removed=f.flag("removed"),
                   network=f.text("network"))


@dataclass(frozen=True)
class Transition:
    """One phase change, as `status` lists it: when, from where, to where, and why."""

    at_unix: float
    from_phase: Phase | None  # None: the cutover was created
    to_phase: Phase
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"at_unix": self.at_unix,
                "from": self.from_phase.value if self.from_phase else None,
                "to": self.to_phase.value, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Any, where: str = "transition") -> Transition:
        f = Fields(data, where)
        came = f.text("from")
        return cls(at_unix=f.required_number("at_unix", minimum=0),
                   from_phase=_phase(came, f"{where}.from") if came else None,
                   to_phase=_phase(f.required_text("to"), f"{where}.to"),
                   reason=f.required_text("reason"))


@dataclass(frozen=True)
class CutoverState:
    """Everything the reconciler needs to continue, and everything `status` shows."""

    id: str
    spec: CutoverSpec
    phase: Phase
    old: Endpoint
    new: Endpoint | None
    started_unix: float
    phase_since_unix: float
    served_models: tuple[str, ...] = ()  # the names the new one must list too
    baseline_url: str | None = None  # the old-vs-old noise route kept while shadowing
    # The shadow and baseline routes the operator had set when the cutover began: an abort
    # puts them back (old stays primary), not none.
    operator_shadow: str | None = None
    operator_baseline: str | None = None
    shutdown_grace_s: float = 30.0
    deadline_unix: float | None = None  # when the current phase gives up (or ends)
    history: tuple[Transition, ...] = ()
    pending: Command | None = None  # an operator command not yet acted on
    end_phase: Phase | None = None  # where aborting ends: aborted or failed
    verdict: str | None = None
    reasons: tuple[str, ...] = ()
    samples: int = 0
    # While shadowing: the check the gate waits for and about how long at the traffic seen
    # ("waiting for TTFT p99: about 6 min at 4.8 req/s"; `proxy.cutover.eta`).
    waiting_for: str | None = None
    # About how many seconds until it decides at that traffic (None: no estimate).
    decision_in_s: float | None = None
    # Since when every look has found the gate hopeless before the timeout (`eta.hopeless`).
    hopeless_since_unix: float | None = None
    error: str | None = None  # why it failed, aborted or rolled back
    log_tail: str | None = None  # the new container's last log lines when it failed
    note: str | None = None  # what the last step waits on or retries (transient)
    promoted_unix: float | None = None
    drained_unix: float | None = None  # when no request was left in flight on old
    old_stopped: bool = False
    rollback_started_unix: float | None = None
    rollback_s: float | None = None  # from the rollback request to old serving again
    analysis_since_unix: float | None = None  # evidence counts from here (shadowing + delay)
    gate_failures: int = 0  # consecutive failing gate evaluations
    backup_bytes: int | None = None
    mirror_off: str | None = None  # why mirroring to old stopped after the promotion
    removing_new: str | None = None  # "NAME (STATE)" of the new container being removed

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION, "id": self.id, "spec": self.spec.to_json(),
            "phase": self.phase.value, "old": self.old.to_json(),
            "new": self.new.to_json() if self.new else None,
            "started_unix": self.started_unix, "phase_since_unix": self.phase_since_unix,
            "served_models": list(self.served_models), "baseline_url": self.baseline_url,
            "operator_shadow": self.operator_shadow,
            "operator_baseline": self.operator_baseline,
            "shutdown_grace_s": self.shutdown_grace_s, "deadline_unix": self.deadline_unix,
            "history": [t.to_json() for t in self.history], "pending": self.pending,
            "end_phase": self.end_phase.value if self.end_phase else None,
            "verdict": self.verdict, "reasons": list(self.reasons), "samples": self.samples,
            "waiting_for": self.waiting_for, "decision_in_s": self.decision_in_s,
            "hopeless_since_unix": self.hopeless_since_unix,
            "error": self.error, "log_tail": self.log_tail, "note": self.note,
            "promoted_unix": self.promoted_unix, "drained_unix": self.drained_unix,
            "old_stopped": self.old_stopped,
            "rollback_started_unix": self.rollback_started_unix,
            "rollback_s": self.rollback_s, "backup_bytes": self.backup_bytes,
            "analysis_since_unix": self.analysis_since_unix,
            "gate_failures": self.gate_failures, "mirror_off": self.mirror_off,
            "removing_new": self.removing_new,
            # What `vllm-cutover report --state-file` reads: this cutover's records only.
            "evidence": self.evidence.to_json() if self.evidence is not None else None,
        }

    @property
    def evidence(self) -> EvidenceWindow | None:
        """The records that count for this cutover (none before the new one has a URL)."""
        if self.new is None:
            return None
        since = self.analysis_since_unix if self.analysis_since_unix is not None \
            else self.started_unix
        return EvidenceWindow(since, self.old.url, self.new.url, self.baseline_url)

    @classmethod
    def from_json(cls, data: Any) -> CutoverState:
        """The state `to_json` wrote; StateError naming the first field that does not fit
        (its type, its range, its phase)."""
        f = Fields(data, "cutover")
        if data.get("schema") != SCHEMA_VERSION:
            raise StateError(f"cutover state schema {data.get('schema')!r} is not the "
                             f"supported {SCHEMA_VERSION!r}")
        unknown = sorted(set(data) - set(cls.__dataclass_fields__) - {"schema", "evidence"})
        if unknown:
            raise StateError(f"cutover state has unknown field(s) {unknown!r}")
        pending = f.text("pending")
        if pending is not None and pending not in COMMANDS:
            raise f.fail("pending", f"one of {COMMANDS!r} or null", pending)
        try:
            spec = CutoverSpec.from_json(data.get("spec"))
        except SpecError as exc:
            raise StateError(f"cutover state has a bad spec: {exc}") from exc
        end_phase = f.text("end_phase")
        num = f.number
        return cls(
            id=f.required_text("id"), spec=spec,
            phase=_phase(f.required_text("phase"), "cutover.phase"),
            old=Endpoint.from_json(data.get("old"), "cutover.old"),
            new=Endpoint.from_json(data["new"], "cutover.new") if data.get("new") else None,
            started_unix=f.required_number("started_unix", minimum=0),
            phase_since_unix=f.required_number("phase_since_unix", minimum=0),
            served_models=f.texts("served_models"), baseline_url=f.text("baseline_url"),
            operator_shadow=f.text("operator_shadow"),
            operator_baseline=f.text("operator_baseline"),
            shutdown_grace_s=f.required_number("shutdown_grace_s", minimum=0)
            if "shutdown_grace_s" in data else 30.0,
            deadline_unix=num("deadline_unix", minimum=0),
            history=tuple(Transition.from_json(t, f"cutover.history[{i}]")
                          for i, t in enumerate(f.items("history"))),
            pending=pending,  # type: ignore[arg-type]  # checked against COMMANDS above
            end_phase=_phase(end_phase, "cutover.end_phase") if end_phase else None,
            verdict=f.text("verdict"), reasons=f.texts("reasons"),
            samples=f.integer("samples") or 0, waiting_for=f.text("waiting_for"),
            decision_in_s=num("decision_in_s", minimum=0),
            hopeless_since_unix=num("hopeless_since_unix", minimum=0),
            error=f.text("error"),
            log_tail=f.text("log_tail"), note=f.text("note"),
            promoted_unix=num("promoted_unix", minimum=0),
            drained_unix=num("drained_unix", minimum=0), old_stopped=f.flag("old_stopped"),
            rollback_started_unix=num("rollback_started_unix", minimum=0),
            rollback_s=num("rollback_s", minimum=0),
            analysis_since_unix=num("analysis_since_unix", minimum=0),
            gate_failures=f.integer("gate_failures") or 0,
            backup_bytes=f.integer("backup_bytes", default=None),
            mirror_off=f.text("mirror_off"), removing_new=f.text("removing_new"),
        )

    def moved(self, to: Phase, reason: str, now: float, **changes: Any) -> CutoverState:
        """This state in phase `to`, the transition recorded; `deadline_unix`, `pending`
        `note`, `waiting_for`, `decision_in_s` and `hopeless_since_unix` reset unless given."""
        for name in ("deadline_unix", "pending", "note", "waiting_for", "decision_in_s",
                     "hopeless_since_unix"):
            changes.setdefault(name, None)
        return replace(self, phase=to, phase_since_unix=now,
                       history=self.history + (Transition(now, self.phase, to, reason),),
                       **changes)


def _phase(value: Any, where: str = "phase") -> Phase:
    try:
        return Phase(value)
    except ValueError:
        raise StateError(f"{where}: unknown phase {value!r}; one of "
                         f"{[p.value for p in Phase]!r}") from None
