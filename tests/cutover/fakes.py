"""Fakes of the two Protocols the reconciler acts through (unit tests of the cutover only)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.cutover.control import GateView, RouteConflict, RoutesView
from proxy.cutover.driver import (
    Conflict,
    ContainerInfo,
    DriverError,
    NewContainerPlan,
    NotFound,
)
from proxy.evidence.window import EvidenceWindow


@dataclass
class FakeDriver:
    """Containers as values; `new_url` is where every created container answers."""

    new_url: str
    old_url: str
    containers: dict[str, ContainerInfo] = field(default_factory=dict)
    images: set[str] = field(default_factory=lambda: {"vllm:new"})
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    create_state: str = "running"
    logs: str = "INFO loading weights\nERROR CUDA out of memory"
    raises: dict[str, DriverError] = field(default_factory=dict)  # method -> error
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def add_old(self, state: str = "running", **changes: Any) -> ContainerInfo:
        info = replace(ContainerInfo(id="old0000000001", name="vllm-old", image="vllm:old",
                                     state=state, command=("serve", "/m")),  # type: ignore[arg-type]
                       **changes)
        self.containers[info.id] = info
        return info

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        if name in self.raises:
            raise self.raises[name]

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == name]

    def find(self, ref: str) -> ContainerInfo:
        self._call("find", ref)
        if ref.startswith("label="):
            key, _, value = ref[len("label="):].partition("=")
            hits = [c for c in self.containers.values() if c.labels.get(key) == value]
        else:
            hits = [c for c in self.containers.values() if ref in (c.name, c.id)]
        if not hits:
            raise NotFound(f"no container matches {ref!r}")
        if len(hits) > 1:
            raise Conflict(f"{ref!r} matches {len(hits)} containers")
        return hits[0]

    def inspect(self, container_id: str) -> ContainerInfo:
        self._call("inspect", container_id)
        return self.containers.get(container_id) or ContainerInfo(
            id=container_id, name="", image="", state="missing")

    def image_exists(self, image: str) -> bool:
        self._call("image_exists", image)
        return image in self.images

    def check_gpus(self, gpus: tuple[str, ...]) -> None:
        self._call("check_gpus", gpus)

    def create_like(self, old: ContainerInfo, plan: NewContainerPlan) -> ContainerInfo:
        self._call("create_like", old.id, plan)
        state = self.create_state
        info = ContainerInfo(id=f"new{next(self._ids):010d}", name=plan.name, image=plan.image,
                             state=state,  # type: ignore[arg-type]
                             exit_code=1 if state == "exited" else None,
                             labels={**old.labels, **plan.labels},
                             command=plan.command or old.command)
        self.containers[info.id] = info
        return info

    def _set(self, container_id: str, **changes: Any) -> None:
        if container_id not in self.containers:
            raise NotFound(f"no container {container_id!r}")
        self.containers[container_id] = replace(self.containers[container_id], **changes)

    def start(self, container_id: str) -> None:
        self._call("start", container_id)
        self._set(container_id, state="running", exit_code=None)

    def stop(self, container_id: str, grace_s: float) -> None:
        self._call("stop", container_id, grace_s)
        self._set(container_id, state="exited", exit_code=0)

    def remove(self, container_id: str) -> None:
        self._call("remove", container_id)
        self.containers.pop(container_id, None)

    def logs_tail(self, container_id: str, lines: int = 40) -> str:
        self._call("logs_tail", container_id)
        return self.logs

    def url_for(self, info: ContainerInfo, like_url: str) -> str:
        return self.old_url if info.name == "vllm-old" else self.new_url

    def save_image(self, image: str, path: str) -> int:
        self._call("save_image", image, path)
        data = f"fake image {image}".encode()
        with open(path, "wb") as f:
            f.write(data)
        return len(data)


def gate_passes_once_shadowed(control: FakeControl, samples: int = 20) -> Callable[
        [EvidenceWindow], GateView]:
    """A gate that passes once the new backend takes part in the routes (as shadow or
    primary): records only exist then."""
    def judge(window: EvidenceWindow) -> GateView:
        view = control.view
        if window.new_url not in (view.primary, view.shadow):
            return GateView("inconclusive", ("no samples yet",), 0, 10)
        return GateView("pass", (), samples, 10)
    return judge


@dataclass
class FakeControl:
    view: RoutesView
    inflight_by_url: dict[str, int] = field(default_factory=dict)
    judge: Callable[[EvidenceWindow], GateView] | None = None
    changes: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    windows: list[EvidenceWindow] = field(default_factory=list)

    def routes(self) -> RoutesView:
        return self.view

    def set_routes(self, primary: str, shadow: str | None, baseline: str | None,
                   expect_version: int) -> RoutesView:
        if expect_version != self.view.version:
            raise RouteConflict(f"routes are at version {self.view.version}, not "
                                f"{expect_version}")
        self.view = RoutesView(self.view.version + 1, primary, shadow, baseline)
        self.changes.append((primary, shadow, baseline))
        return self.view

    def inflight(self) -> Mapping[str, int]:
        return dict(self.inflight_by_url)

    async def gate(self, window: EvidenceWindow) -> GateView:
        self.windows.append(window)
        judge = self.judge or gate_passes_once_shadowed(self)
        return judge(window)
