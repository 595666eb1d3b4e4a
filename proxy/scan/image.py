"""Which vLLM a deployment file runs: the vLLM image it names or the `vllm==` it pins.

`scan --fix` writes flags for the target version; a file that still starts an older vLLM
(`image: vllm/vllm-openai:v0.10.2`, `FROM vllm/vllm-openai:v0.21.0`, `pip install
vllm==0.18.1`, or a `requirements*.txt` beside it pinning `vllm==`) would then hand that
old vLLM flags it refuses. Pure apart from `pins_beside`, which reads those requirements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from proxy.launcher.versions import release_of
from proxy.scan.model import Edit, line_and_column

# The public vLLM server images (vllm/vllm-openai, -cpu, -rocm, ...) under any registry.
_IMAGE = re.compile(
    r"(?<![\w./-])(?P<ref>(?:[\w.-]+(?::\d+)?/)*vllm/vllm-openai(?:-[a-z0-9]+)*)"
    r":(?P<v>v?)(?P<version>\d+\.\d+(?:\.\d+)?)(?P<rest>(?:rc\d+|\.post\d+)?(?:-[\w.]+)?)")
_PIP = re.compile(
    r"(?<![\w.-])(?P<ref>vllm(?:-cpu)?)\s*==\s*(?P<v>)(?P<version>\d+\.\d+(?:\.\d+)?)"
    r"(?P<rest>(?:rc\d+|\.post\d+)?)")
REQUIREMENTS = "requirements*.txt"


@dataclass(frozen=True)
class Pin:
    """One place that fixes the vLLM version: `text` spans file[start:end]."""

    file: str
    start: int
    end: int
    text: str  # "vllm/vllm-openai:v0.10.2", "vllm==0.10.2"
    version: Version  # the release it runs
    version_span: tuple[int, int]  # where the version number sits, for a bump
    line: int = 0
    column: int = 0

    def bumped(self, target: Version) -> str:
        """The same reference running `target` (tag style and variant suffix kept)."""
        offset = self.version_span[0] - self.start
        length = self.version_span[1] - self.version_span[0]
        return self.text[:offset] + str(target) + self.text[offset + length:]


def pins_in(label: str, text: str) -> list[Pin]:
    """Every vLLM image or `vllm==` pin in a file's text, in order."""
    found = []
    for pattern in (_IMAGE, _PIP):
        for match in pattern.finditer(text):
            try:
                version = release_of(Version(match["version"]))
            except InvalidVersion:
                continue
            line, column = line_and_column(text, match.start())
            found.append(Pin(label, match.start(), match.end(), match[0], version,
                             match.span("version"), line, column))
    return sorted(found, key=lambda p: p.start)


def pins_beside(path: Path) -> list[Pin]:
    """`vllm==` pins in the requirements files next to `path` (what its build installs)."""
    found: list[Pin] = []
    for requirements in sorted(path.parent.glob(REQUIREMENTS)):
        try:
            text = requirements.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found += [p for p in pins_in(str(requirements), text) if p.text.startswith("vllm")]
    return found


def older(pins: list[Pin], target: Version) -> list[Pin]:
    return [p for p in pins if p.version < release_of(target)]


def bump_edits(text: str, target: Version) -> list[Edit]:
    """Edits moving every older pin in `text` to `target`."""
    return [Edit(p.start, p.end, p.bumped(release_of(target)))
            for p in older(pins_in("", text), target)]


def why_older(pin: Pin, target: Version, here: bool) -> str:
    """The reason a stale pin blocks the flag fixes, in one sentence."""
    place = "" if here else f" in {pin.file}"
    return (f"{pin.text}{place} runs vLLM {pin.version}, older than the target "
            f"{release_of(target)}: the fixed flags are {release_of(target)}'s, which vLLM "
            f"{pin.version} may refuse (unrecognized arguments) or read otherwise")
