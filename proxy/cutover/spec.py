"""The typed start request of a cutover, validated once, at the edge (admin API or CLI).

`CutoverSpec.from_json` is the only way a request body becomes a spec; every error
quotes the bad value. The CLI builds the same JSON, so both sides validate alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from proxy.cutover.fields import MAX_INTEGER, finite_float, short_repr
from proxy.urls import UrlError, normalize_backend_url

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GPU_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")
DEFAULT_SHUTDOWN_GRACE_S = 30.0
# SIGKILL comes this long after vLLM's own --shutdown-timeout would have ended it.
SHUTDOWN_GRACE_MARGIN_S = 5.0


class SpecError(ValueError):
    """A start request that cannot work; the message quotes the bad value."""


@dataclass(frozen=True)
class CutoverSpec:
    """What to cut over to and how long each stage may take (seconds).

    Container mode: `old` is a container reference and `new_image` the image of the new
    container made from the old one's configuration. Adopt mode: `new_url` is a backend
    that already runs (no container is created; `old` is then optional and, if given,
    stopped at the end).
    """

    old: str | None = None  # container name, id or label=KEY=VALUE
    old_url: str | None = None  # default: the proxy's primary route
    new_image: str | None = None
    new_url: str | None = None
    baseline_url: str | None = None  # a second old copy: old-vs-old noise while shadowing
    new_name: str | None = None  # default: "<old name>-cutover-<id>"
    new_command: tuple[str, ...] | None = None
    new_env: Mapping[str, str] = field(default_factory=dict)
    new_env_unset: tuple[str, ...] = ()
    new_gpus: tuple[str, ...] | None = None
    served_model_name: str | None = None  # default: what the old one lists in /v1/models
    warmup_timeout_s: float = 900.0
    analysis_timeout_s: float = 1800.0
    min_samples: int = 50
    # The new one's first seconds as a shadow do not count (a just-started engine's cold
    # caches are not its speed), as Argo Rollouts' analysis `initialDelay`.
    analysis_delay_s: float = 10.0
    # Consecutive failing gate evaluations (one per reconciler tick) before an abort or a
    # rollback, as Argo Rollouts' `failureLimit` / Flagger's `threshold`.
    failure_limit: int = 3
    auto_promote: bool = True
    post_promotion_s: float = 300.0
    scale_down_delay_s: float = 30.0  # as Argo Rollouts' scaleDownDelaySeconds
    shutdown_grace_s: float | None = None  # None: from the old one's --shutdown-timeout
    remove_old: bool = False
    keep_failed: bool = False
    backup_image: str | None = None  # `docker save` of the old image to this path

    def __post_init__(self) -> None:
        if (self.new_image is None) == (self.new_url is None):
            raise SpecError("give exactly one of new_image (start a container) and new_url "
                            f"(adopt a running backend), got new_image={self.new_image!r}, "
                            f"new_url={self.new_url!r}")
        if self.new_image is not None and self.old is None:
            raise SpecError(f"new_image {self.new_image!r} needs old (the container whose "
                            "configuration the new one copies)")
        if self.new_url is not None:
            overrides = {"new_command": self.new_command, "new_env": dict(self.new_env) or None,
                         "new_env_unset": self.new_env_unset or None,
                         "new_gpus": self.new_gpus, "new_name": self.new_name}
            given = {k: v for k, v in overrides.items() if v is not None}
            if given:
                raise SpecError(f"{given!r} only apply to a new container (new_image), "
                                f"not to an adopted new_url {self.new_url!r}")
        if self.backup_image is not None and self.old is None:
            raise SpecError(f"backup_image {self.backup_image!r} needs old (a container)")
        for name in ("old_url", "new_url", "baseline_url"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _url(value, name))
        if self.old_url is not None and self.old_url == self.new_url:
            raise SpecError(f"old_url and new_url are the same backend: {self.new_url!r}")
        for name in ("old", "new_image", "new_name", "served_model_name", "backup_image"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise SpecError(f"{name} must not be empty, got {value!r}")
        self._check_numbers()
        for key in list(self.new_env) + list(self.new_env_unset):
            if not _ENV_NAME.match(key):
                raise SpecError(f"environment variable name {key!r} is not valid")
        if self.new_gpus is not None:
            bad = [g for g in self.new_gpus if not _GPU_ID.match(g)]
            if bad or not self.new_gpus:
                raise SpecError(f"new_gpus must be device ids like 0,1, got {self.new_gpus!r}")
        if self.new_command is not None and not self.new_command:
            raise SpecError("new_command must not be empty (leave it out to keep the old one)")

    def _check_numbers(self) -> None:
        for name in ("warmup_timeout_s", "analysis_timeout_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise SpecError(f"{name} must be > 0 seconds, got {value!r}")
        for name in ("post_promotion_s", "scale_down_delay_s", "shutdown_grace_s",
                     "analysis_delay_s"):
            value = getattr(self, name)
            if value is not None and not (value >= 0 and math.isfinite(value)):
                raise SpecError(f"{name} must be >= 0 seconds, got {value!r}")
        for name in ("min_samples", "failure_limit"):
            if getattr(self, name) < 1:
                raise SpecError(f"{name} must be >= 1, got {getattr(self, name)!r}")

    @property
    def adopt(self) -> bool:
        """The new backend already runs: no container is created or removed for it."""
        return self.new_url is not None

    @property
    def needs_driver(self) -> bool:
        return self.old is not None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["new_env"] = dict(self.new_env)
        for name in ("new_command", "new_env_unset", "new_gpus"):
            if data[name] is not None:
                data[name] = list(data[name])
        return data

    @classmethod
    def from_json(cls, data: Any) -> CutoverSpec:
        if not isinstance(data, dict):
            raise SpecError(f"a cutover start request is a JSON object, got {data!r}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise SpecError(f"unknown field(s) {unknown!r}; expected some of {sorted(known)!r}")
        values: dict[str, Any] = {}
        for name, value in data.items():
            values[name] = _typed(name, value, str(known[name].type))
        try:
            return cls(**values)
        except TypeError as exc:
            raise SpecError(str(exc)) from exc


def _url(value: str, name: str) -> str:
    try:
        return normalize_backend_url(value, name)
    except UrlError as exc:
        raise SpecError(str(exc)) from exc


def _typed(name: str, value: Any, annotation: str) -> Any:
    """`value` checked against the field's annotation (as written in this module)."""
    if value is None:
        if "None" in annotation:
            return None
        raise SpecError(f"{name} must not be null")
    if annotation.startswith("bool"):
        if not isinstance(value, bool):
            raise SpecError(f"{name} must be true or false, got {value!r}")
        return value
    if annotation.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int) \
                or not -MAX_INTEGER <= value <= MAX_INTEGER:
            raise SpecError(f"{name} must be an integer of at most 64 bits, "
                            f"got {short_repr(value)}")
        return value
    if annotation.startswith("float"):
        number = finite_float(value)
        if number is None:
            raise SpecError(f"{name} must be a finite number of seconds, got {short_repr(value)}")
        return number
    if annotation.startswith("str"):
        if not isinstance(value, str):
            raise SpecError(f"{name} must be a string, got {value!r}")
        return value
    if annotation.startswith("tuple"):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecError(f"{name} must be a list of strings, got {value!r}")
        return tuple(value)
    if annotation.startswith("Mapping"):
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise SpecError(f"{name} must be an object of string values, got {value!r}")
        return dict(value)
    raise AssertionError(f"no JSON rule for {name}: {annotation}")


def grace_from_command(command: tuple[str, ...]) -> float | None:
    """The stop grace matching a vLLM command's `--shutdown-timeout N` (plus a margin)."""
    for i, arg in enumerate(command):
        text = None
        if arg == "--shutdown-timeout" and i + 1 < len(command):
            text = command[i + 1]
        elif arg.startswith("--shutdown-timeout="):
            text = arg.partition("=")[2]
        if text is not None:
            try:
                seconds = float(text)
            except ValueError:
                return None
            return seconds + SHUTDOWN_GRACE_MARGIN_S if seconds > 0 else None
    return None
