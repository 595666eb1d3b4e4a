"""Rebuilt images leave nothing unbounded behind: every build stage of our Dockerfiles
and every image the tests build carries a label that `scripts/dev.sh` prunes by (untagged
images only), before and after a suite. A CI run once failed with "no space left on
device" after some 200 rebuilds had left 65 GB of untagged stages and test images."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.images import BUILT_LABEL, STAGE_LABEL, clone_context, clone_files, stage_images

REPO_ROOT = Path(__file__).resolve().parents[1]

DOCKERFILES = ["Dockerfile", "images/sim/Dockerfile", "images/vllm/Dockerfile",
               "images/vllm/Dockerfile.gpu"]


def _stages(text: str) -> list[list[str]]:
    """The Dockerfile's instructions (continuations joined, comments dropped) by stage."""
    stages: list[list[str]] = []
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_the_list_names_every_dockerfile_in_the_repository() -> None:
    ours = {name for name in clone_files()
            if Path(name).name.startswith("Dockerfile") and not name.startswith("tests/")}
    assert ours == set(DOCKERFILES)  # tests/ holds a scanner fixture, never built


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_build_stage_ends_with_the_label_pruned_by(name: str) -> None:
    stages = _stages((REPO_ROOT / name).read_text())
    assert len(stages) >= 2, "expected a multi-stage build"
    for stage in stages[:-1]:
        assert stage[-1] == f"LABEL {STAGE_LABEL}={stage[0].split()[-1]}", stage
    assert not any(STAGE_LABEL in line for line in stages[-1]), \
        "the final image must not carry the label of a prunable stage"


def test_dev_sh_prunes_untagged_images_by_both_labels_only() -> None:
    script = (REPO_ROOT / "scripts" / "dev.sh").read_text()
    body = script[script.index("prune_builds() {"):]
    body = body[:body.index("\n}\n")]
    assert f"for label in {STAGE_LABEL} {BUILT_LABEL}; do" in body
    assert 'docker image prune -f --filter "label=$label"' in body
    assert " -a" not in body and "--all" not in body  # tagged images stay
    # Before the suite, after it, and in setup-e2e.
    assert script.count("\n        prune_builds\n") == 3


def test_a_context_left_by_a_failed_build_is_replaced_not_copied_onto(tmp_path: Path) -> None:
    first = clone_context(tmp_path / "ctx")
    stray = first / "left-by-a-failed-build"
    stray.write_text("x")
    again = clone_context(tmp_path / "ctx")  # was: shutil.SameFileError on the hard links
    assert not stray.exists()
    assert (again / "pyproject.toml").read_bytes() == (REPO_ROOT / "pyproject.toml").read_bytes()


BUILD_OUTPUT = """\
Step 7/16 : COPY . /src
 ---> 60f57bb0706f
Step 8/16 : RUN sh /src/images/install-cutover.sh
 ---> Running in 2a2f530c1da5
Processing /src/.whl/aiohttp-3.14.5-cp311-cp311-manylinux2014_x86_64.whl
Removing intermediate container 2a2f530c1da5
 ---> 931209af1fe2
Step 9/16 : LABEL org.vllm-cutover.build-stage=build
 ---> Running in 1f433f028ba7
Removing intermediate container 1f433f028ba7
 ---> 75276bf53743
Step 10/16 : FROM ${BASE_IMAGE} AS context
 ---> b0ad0ad22fc4
Step 11/16 : LABEL org.vllm-cutover.build-stage=context
 ---> Using cache
 ---> 5d1e0c2a9b8f
Step 12/16 : FROM ${BASE_IMAGE}
 ---> b0ad0ad22fc4
Step 13/16 : COPY --from=build /opt/cutover /opt/cutover
 ---> 08009a9d279b
Step 14/16 : LABEL org.vllm-cutover.test-build=vllm-cutover-test
 ---> Running in 94f799f624d0
 ---> 0462290203ed
Successfully built 0462290203ed
"""


def test_each_stage_image_is_read_from_the_build_output_made_or_cached() -> None:
    # Written out from a real build's log (tests/e2e/images.py keeps one per build).
    assert stage_images(BUILD_OUTPUT) == {"build": "75276bf53743", "context": "5d1e0c2a9b8f"}
    assert stage_images("Step 1/2 : FROM x\n ---> b0ad0ad22fc4\n") == {}
