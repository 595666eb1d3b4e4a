"""Values the cutover tests build states and observations from."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proxy.cutover.control import GateView, RoutesView
from proxy.cutover.driver import ContainerInfo
from proxy.cutover.machine import begin
from proxy.cutover.model import CutoverSpec, CutoverState, Endpoint, Phase
from proxy.cutover.steps import Identity, Observation

OLD_URL = "http://old:8000"
NEW_URL = "http://new:8000"
T0 = 1_000_000.0
PROBES = {"routes", "inflight", "gate", "old", "new", "new_logs", "warmup", "old_health"}


def spec(**changes: Any) -> CutoverSpec:
    values: dict[str, Any] = {"old": "vllm-old", "new_image": "vllm:new", "min_samples": 10,
                              "warmup_timeout_s": 60.0, "analysis_timeout_s": 100.0,
                              "post_promotion_s": 50.0, "scale_down_delay_s": 30.0}
    values.update(changes)
    return CutoverSpec(**values)


def old_endpoint(**changes: Any) -> Endpoint:
    return replace(Endpoint(url=OLD_URL, container_id="old-id-0001", name="vllm-old",
                            image="vllm:old", vllm_version="0.31.0"), **changes)


def new_endpoint(**changes: Any) -> Endpoint:
    return replace(Endpoint(url=NEW_URL, container_id="new-id-0002",
                            name="vllm-old-cutover-c1", image="vllm:new"), **changes)


def started(**spec_changes: Any) -> CutoverState:
    """A fresh cutover (container mode unless new_url is given) at T0."""
    s = spec(**spec_changes)
    old = old_endpoint() if s.old is not None else Endpoint(url=OLD_URL)
    return begin(s, "c1", old, T0, None, served_models=("tiny",), shutdown_grace_s=20.0)


def state_in(phase: Phase, **changes: Any) -> CutoverState:
    """A state as it is in `phase` after the steps before it (new known from warming on)."""
    base = started(**changes.pop("spec", {}))
    new = base.new or new_endpoint()
    values: dict[str, Any] = {"phase": phase, "new": new if phase not in (
        Phase.BACKING_UP, Phase.STARTING_NEW) else base.new}
    if phase.promoted:
        values["promoted_unix"] = T0 + 10
    values.update(changes)
    return replace(base, **values)


def container(cid: str = "new-id-0002", state: str = "running", **changes: Any) -> ContainerInfo:
    name = "vllm-old" if cid.startswith("old") else "vllm-old-cutover-c1"
    return replace(ContainerInfo(id=cid, name=name, image="vllm:new", state=state),  # type: ignore[arg-type]
                   **changes)


def routes(primary: str = OLD_URL, shadow: str | None = None, baseline: str | None = None,
           version: int = 1) -> RoutesView:
    return RoutesView(version=version, primary=primary, shadow=shadow, baseline=baseline)


def gate(verdict: str = "pass", samples: int = 10, *reasons: str) -> GateView:
    return GateView(verdict=verdict, reasons=reasons, samples=samples,  # type: ignore[arg-type]
                    min_samples=10)


OLD_IDENTITY = Identity(("tiny",), "0.31.0")


def obs(**fields: Any) -> Observation:
    """An observation of exactly the probes given (new=None: looked, none there)."""
    seen = {k for k in fields if k in PROBES}
    if "old_healthy" in fields:
        seen.add("old_health")
        if fields["old_healthy"]:  # healthy old answers as the old engine did, unless told
            fields.setdefault("old_identity", OLD_IDENTITY)
    if fields.get("old_identity") is not None:
        seen.add("old_identity")
    if fields.get("new_healthy") is not None:
        seen.add("new_health")
    return Observation(seen=frozenset(seen), **fields)
