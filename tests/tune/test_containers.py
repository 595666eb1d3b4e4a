"""Container mode's pure parts: candidate words, the merged command, GPU places, names."""

from __future__ import annotations

import re
import shlex

import pytest

from proxy.cutover.driver import LABEL_ROLE
from proxy.launcher.capabilities import parse_capability
from proxy.launcher.versions import parse_version
from proxy.tune.containers import (
    LABEL_CANDIDATE,
    LABEL_TUNE,
    CandidateArgsError,
    Extra,
    GpuSlots,
    candidate_plan,
    container_name,
    gpu_sets_problem,
    merge_args,
    parse_extra,
)
from proxy.tune.kernels import auto_candidates

OLD = ("serve", "/models/m", "--port", "8000", "--linear-backend", "cutlass",
       "--enable-prefix-caching", "--max-num-seqs", "64")


def test_env_words_come_first_then_flags() -> None:
    extra = parse_extra("VLLM_USE_X=1 A_B='x y' --kernel-config "
                        "'{\"linear_backend_per_quant\": {\"nvfp4_w4a4\": \"marlin\"}}'")
    assert extra.env == {"VLLM_USE_X": "1", "A_B": "x y"}
    assert extra.args == ("--kernel-config",
                          '{"linear_backend_per_quant": {"nvfp4_w4a4": "marlin"}}')
    assert parse_extra("") == Extra()


@pytest.mark.parametrize(("text", "quoted"), [("serve x", "'serve'"), ("--a 'b", "\"--a 'b\"")])
def test_bad_words_are_refused_quoting_them(text: str, quoted: str) -> None:
    with pytest.raises(CandidateArgsError, match=re.escape(quoted)):
        parse_extra(text)


@pytest.mark.parametrize(("extra", "merged"), [
    # a new flag is appended
    (("--enforce-eager",), (*OLD, "--enforce-eager")),
    # the same flag replaces old's, value and all, wherever it was
    (("--linear-backend", "marlin"),
     ("serve", "/models/m", "--port", "8000", "--enable-prefix-caching", "--max-num-seqs",
      "64", "--linear-backend", "marlin")),
    # --flag=value, underscores and --no-X name the same flag
    (("--max_num_seqs=8", "--no-enable-prefix-caching"),
     ("serve", "/models/m", "--port", "8000", "--linear-backend", "cutlass",
      "--max_num_seqs=8", "--no-enable-prefix-caching")),
])
def test_extra_flags_replace_old_ones_or_are_appended(extra: tuple[str, ...],
                                                      merged: tuple[str, ...]) -> None:
    assert merge_args(OLD, extra) == merged


def test_a_flag_given_twice_in_old_is_replaced_both_times() -> None:
    old = ("--a", "1", "--b", "--a=2", "-tp", "2")
    assert merge_args(old, ("--a", "3", "-tp", "4")) == ("--b", "--a", "3", "-tp", "4")


def test_every_kernels_auto_candidate_works_as_candidate_args() -> None:
    """What `tune candidates --as-flags` prints parses back to the same args and env."""
    for version, cc in (("0.34.0", "12.0"), ("0.24.0", "10.0"), ("0.30.0", "9.0")):
        plan = auto_candidates(parse_version(version), parse_capability(cc), moe=True)
        for c in plan.candidates:
            words = [f"{k}={v}" for k, v in c.env] + [shlex.quote(a) for a in c.args]
            extra = parse_extra(" ".join(words))
            assert extra.args == c.args and dict(extra.env) == dict(c.env), c.name
            merged = merge_args(OLD, extra.args)
            assert merged[len(merged) - len(c.args):] == c.args
            assert merged[:2] == ("serve", "/models/m")


def test_gpu_sets_must_not_overlap_nor_be_empty_nor_all() -> None:
    assert gpu_sets_problem((("2", "3"), ("4", "5"))) is None
    assert "'3'" in (gpu_sets_problem((("2", "3"), ("3",))) or "")
    assert "empty" in (gpu_sets_problem(((),)) or "")
    assert "all" in (gpu_sets_problem((("all",),)) or "")


def test_places_are_taken_and_freed_in_turn() -> None:
    slots = GpuSlots((("2", "3"), ("4", "5")), parallel=2)
    assert slots.take("a") == ("2", "3")
    assert slots.take("b") == ("4", "5")
    assert slots.free_places == 0
    with pytest.raises(ValueError, match="'c'"):
        slots.take("c")
    slots.free("a")
    assert slots.take("c") == ("2", "3")  # a's set, freed, goes to the next one
    assert slots.held() == {"c": ("2", "3"), "b": ("4", "5")}


def test_one_place_per_set_and_no_sets_means_old_s_request() -> None:
    with pytest.raises(ValueError, match="parallel 3 needs 3 GPU sets"):
        GpuSlots((("2",), ("3",)), parallel=3)
    slots = GpuSlots((), parallel=2)
    assert slots.take("a") is None and slots.take("b") is None and slots.free_places == 0


def test_the_plan_labels_names_and_merges() -> None:
    name = container_name("vllm", "ab12", 3, "moe:cutlass")
    assert name == "vllm-tune-ab12-3-moe-cutlass"
    plan = candidate_plan("img:1", name, "ab12", "moe:cutlass", OLD,
                          Extra(("--moe-backend", "cutlass"), {"X": "1"}), ("4", "5"))
    assert plan.command == (*OLD, "--moe-backend", "cutlass")
    assert plan.env == {"X": "1"} and plan.gpus == ("4", "5") and plan.image == "img:1"
    assert plan.labels == {LABEL_TUNE: "ab12", LABEL_CANDIDATE: "moe:cutlass",
                           LABEL_ROLE: "candidate"}
    assert candidate_plan("i", name, "t", "auto", OLD, Extra(), None).command is None


def test_a_freed_address_waits_longer_than_the_mirror_reuses_a_connection() -> None:
    from proxy.mirror.upstream.http1 import MAX_IDLE_S
    from proxy.tune.lineup import FREED_ADDRESS_WAIT_S

    assert FREED_ADDRESS_WAIT_S > MAX_IDLE_S
