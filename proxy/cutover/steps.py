"""What one step of the cutover sees (an Observation) and asks for (an Action).

The machine (`proxy.cutover.machine`) maps state + observation to state + action; the
reconciler gathers observations and performs actions. Both sides meet only in these values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from proxy.cutover.control import GateView, RoutesView
from proxy.cutover.driver import ContainerInfo, NewContainerPlan

# What the reconciler may be asked to look at before a step.
Probe = Literal["routes", "inflight", "gate", "old", "new", "new_logs", "warmup", "old_health",
                "old_identity", "new_health"]


@dataclass(frozen=True)
class WarmupResult:
    """The new backend's readiness, probed in order; later fields stay unset after a
    step fails."""

    healthy: bool = False  # GET /health answered 200
    models: tuple[str, ...] | None = None  # GET /v1/models ids
    completion_ok: bool = False  # one tiny completion answered
    vllm_version: str | None = None
    error: str | None = None  # the first step that did not work, and why


@dataclass(frozen=True)
class Identity:
    """Who answers at an address: its `/v1/models` ids and `/version`."""

    models: tuple[str, ...]
    vllm_version: str | None

    def mismatch(self, models: tuple[str, ...], version: str | None) -> str | None:
        """Why this is not the engine that served `models` at `version` (None: it is)."""
        missing = [m for m in models if m not in self.models]
        if missing:
            return f"it serves {list(self.models)!r}, not {list(models)!r}"
        if version is not None and self.vllm_version != version:
            return f"its /version is {self.vllm_version!r}, not {version!r}"
        return None


@dataclass(frozen=True)
class ActionFailure:
    """The last action raised; `transient` ones (route conflict, engine unreachable) are
    retried, the others decide the phase."""

    action: str
    message: str
    transient: bool = False


@dataclass(frozen=True)
class Observation:
    """What the reconciler saw; a probe missing from `seen` could not be made (or was not
    asked), so its field says nothing."""

    seen: frozenset[str] = frozenset()
    routes: RoutesView | None = None
    inflight: Mapping[str, int] = field(default_factory=dict)
    gate: GateView | None = None
    old: ContainerInfo | None = None
    new: ContainerInfo | None = None  # None with "new" seen: no container of this cutover
    new_url: str | None = None  # how the proxy reaches `new`
    new_logs: str | None = None
    warmup: WarmupResult | None = None
    old_healthy: bool = False
    old_url: str | None = None  # where old is now (its container's current address)
    old_identity: Identity | None = None  # who answers at old_url
    new_healthy: bool | None = None  # adopt mode: new's /health (None: not probed)
    failure: ActionFailure | None = None  # of the action asked by the previous step
    saved_bytes: int | None = None  # SaveImage's result
    problems: tuple[str, ...] = ()  # probes that failed, for the status note


@dataclass(frozen=True)
class Wait:
    """Nothing to do until the next tick."""


@dataclass(frozen=True)
class SaveImage:
    image: str
    path: str


@dataclass(frozen=True)
class CreateNew:
    plan: NewContainerPlan


@dataclass(frozen=True)
class SetRoutes:
    primary: str
    shadow: str | None
    baseline: str | None
    expect_version: int


@dataclass(frozen=True)
class StartContainer:
    container_id: str


@dataclass(frozen=True)
class StopContainer:
    container_id: str
    grace_s: float


@dataclass(frozen=True)
class RemoveContainer:
    container_id: str


Action = Wait | SaveImage | CreateNew | SetRoutes | StartContainer | StopContainer \
    | RemoveContainer
