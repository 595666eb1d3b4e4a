"""Container mode's pure parts: a candidate's extra words, the engine command they change,
the GPU sets the candidates take turns on, and how a candidate container is named and
labelled. Values in, values out; the Docker calls are in `proxy.tune.launch`.

A candidate's extra words are what `tune candidates` prints: `NAME=VALUE` words first
(environment), then flags (`--flag value`, `--flag=value`, a bare `--flag`). A flag the
old command sets already is replaced (all its occurrences and their values: the words
after it up to the next flag; `--no-X` and `--X`, `_` and `-` count as one flag); the
others are appended.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from proxy.cutover.driver import LABEL_ROLE, NewContainerPlan

LABEL_TUNE = "io.vllm-cutover.tune"  # the tune id that made the container
LABEL_CANDIDATE = "io.vllm-cutover.tune-candidate"  # the candidate's name
ROLE_CANDIDATE = "candidate"
_ENV_WORD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_SHORT_FLAG = re.compile(r"^-[A-Za-z]")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class CandidateArgsError(ValueError):
    """Extra words that are not environment settings followed by flags."""


@dataclass(frozen=True)
class Extra:
    """What a candidate changes in old's configuration."""

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def parse_extra(text: str) -> Extra:
    """`'VLLM_X=1 --kernel-config {...} --enforce-eager'` as env and args."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise CandidateArgsError(f"cannot split {text!r} as a shell would: {exc}") from None
    env: dict[str, str] = {}
    while words and (match := _ENV_WORD.match(words[0])):
        env[match[1]] = match[2]
        words.pop(0)
    return extra_from(words, env)


def extra_from(args: list[str] | tuple[str, ...], env: Mapping[str, str]) -> Extra:
    if args and flag_key(args[0]) is None:
        raise CandidateArgsError(f"extra args must start with a flag (--name [value]), got "
                                 f"{args[0]!r} in {list(args)!r}")
    return Extra(tuple(args), dict(env))


def flag_key(word: str) -> str | None:
    """The flag `word` sets, spelled one way (None: a value or a positional word)."""
    if word.startswith("--") and len(word) > 2:
        name = word[2:].partition("=")[0].replace("_", "-")
        return name.removeprefix("no-")
    if _SHORT_FLAG.match(word):
        return word[1:]
    return None


def split_options(words: tuple[str, ...]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(the words before the first flag, [(flag key, its words)])."""
    head: list[str] = []
    options: list[tuple[str, list[str]]] = []
    for word in words:
        key = flag_key(word)
        if key is not None:
            options.append((key, [word]))
        elif options:
            options[-1][1].append(word)
        else:
            head.append(word)
    return head, options


def merge_args(old: tuple[str, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    """Old's command with `extra`'s flags replacing the same flags, the rest appended."""
    head, options = split_options(old)
    _, added = split_options(extra)
    replaced = {key for key, _ in added}
    kept = [word for key, words in options if key not in replaced for word in words]
    return (*head, *kept, *extra)


def gpu_sets_problem(sets: tuple[tuple[str, ...], ...]) -> str | None:
    """Why these GPU sets cannot be given to candidates at once (None: they can)."""
    seen: dict[str, int] = {}
    for index, devices in enumerate(sets):
        if not devices:
            return f"GPU set {index + 1} is empty"
        for device in devices:
            if device == "all":
                return "a candidate's GPU set cannot be 'all' (they run side by side)"
            if device in seen:
                return (f"GPU {device!r} is in GPU sets {seen[device] + 1} and {index + 1}: "
                        "the sets must not overlap")
            seen[device] = index
    return None


class GpuSlots:
    """`parallel` places for candidate containers, each with its GPU set (None: the old
    container's request, for hosts or engines without GPUs)."""

    def __init__(self, sets: tuple[tuple[str, ...], ...], parallel: int) -> None:
        if sets and parallel > len(sets):
            raise ValueError(f"parallel {parallel} needs {parallel} GPU sets, got {len(sets)}")
        self._sets = sets
        self._holders: list[str | None] = [None] * parallel

    def take(self, name: str) -> tuple[str, ...] | None:
        """The GPU set `name` runs on (ValueError when every place is held)."""
        for index, holder in enumerate(self._holders):
            if holder is None:
                self._holders[index] = name
                return self._sets[index] if self._sets else None
        raise ValueError(f"no free place for {name!r}: {self._holders!r}")

    def free(self, name: str) -> None:
        self._holders = [None if holder == name else holder for holder in self._holders]

    @property
    def free_places(self) -> int:
        return self._holders.count(None)

    def held(self) -> dict[str, tuple[str, ...] | None]:
        return {h: (self._sets[i] if self._sets else None)
                for i, h in enumerate(self._holders) if h is not None}


def container_name(old_name: str, tune_id: str, index: int, candidate: str) -> str:
    """Docker names take [A-Za-z0-9_.-]; the index keeps `a:b` and `a-b` apart."""
    return f"{old_name}-tune-{tune_id}-{index}-{_UNSAFE.sub('-', candidate)}"


def candidate_plan(image: str, name: str, tune_id: str, candidate: str,
                   old_command: tuple[str, ...], extra: Extra,
                   gpus: tuple[str, ...] | None) -> NewContainerPlan:
    """The candidate's container: old's configuration, `extra` on its command and env."""
    command = merge_args(old_command, extra.args) if extra.args else None
    return NewContainerPlan(
        image=image, name=name, command=command, env=dict(extra.env), gpus=gpus,
        labels={LABEL_TUNE: tune_id, LABEL_CANDIDATE: candidate, LABEL_ROLE: ROLE_CANDIDATE})
