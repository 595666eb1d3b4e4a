"""`tune start`'s flags as the admin API's start body (checked offline, before any call)."""

from __future__ import annotations

import pytest

from proxy.cli import build_parser
from proxy.cli.tune_cmd import start_request


def _body(*argv: str) -> dict[str, object]:
    return start_request(build_parser().parse_args(["tune", "start", *argv]))


def test_container_mode_flags_make_the_container_mode_body() -> None:
    body = _body("--old", "vllm", "--candidate", "a=VLLM_X=1 --linear-backend marlin",
                 "--candidate", "auto=", "--new-image", "vllm/vllm-openai:v0.34.0",
                 "--new-gpus", "2,3", "--new-gpus", "4, 5", "--parallel", "2", "--report-only")
    assert body == {"candidates": [{"name": "a", "args": ["--linear-backend", "marlin"],
                                    "env": {"VLLM_X": "1"}},
                                   {"name": "auto", "args": [], "env": {}}],
                    "promote": "none", "old": "vllm", "new_image": "vllm/vllm-openai:v0.34.0",
                    "parallel": 2, "new_gpus": [["2", "3"], ["4", "5"]]}


@pytest.mark.parametrize(("argv", "quoted"), [
    (("--candidate", "a=--x"), "give old"),
    (("--old", "v", "--candidate", "a=--x", "--candidate-url", "b=http://b:1"), "not both"),
    (("--old", "v"), "not neither"),
    (("--old", "v", "--candidate", "a=--x", "--candidate", "a=--y"), "given twice"),
    (("--old", "v", "--candidate", "a"), "NAME='ARGS'"),
    (("--old", "v", "--candidate", "a=x --y"), "'x'"),
    (("--old", "v", "--candidate", "a=--x", "--new-gpus", "2,,3"), "'2,,3'"),
    (("--old", "v", "--candidate", "a=--x", "--new-gpus", "2", "--parallel", "2"),
     "parallel 2 needs 2 GPU sets"),
    (("--candidate-url", "a=http://a:1", "--parallel", "2"), "['parallel']"),
])
def test_bad_container_mode_flags_are_refused_quoting_the_value(argv: tuple[str, ...],
                                                                quoted: str) -> None:
    with pytest.raises(ValueError, match=quoted.replace("[", r"\[").replace("(", r"\(")):
        _body(*argv)
