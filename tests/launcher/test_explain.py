"""Human lines and the report document."""

from __future__ import annotations

from proxy.launcher.explain import build_report, change_line, command_text, vllm_env
from proxy.launcher.translate import Change


def test_change_lines() -> None:
    assert change_line(Change("flag", "--a x", "--b y", "why")) == "--a x -> --b y (why)"
    assert change_line(Change("env", "A=1", None, "gone")) == "A=1 -> (removed) (gone)"
    assert change_line(Change("warning", "--a x", None, "careful")) == "warning: --a x: careful"
    assert change_line(Change("env", "A=1", None, "none", manual="pick one")) == (
        "A=1 -> (removed) (none) [manual edit: pick one]")


def test_report_has_every_vllm_var_and_changes() -> None:
    env = {"PATH": "/bin", "VLLM_B": "2", "VLLM_A": "1"}
    report = build_report(vllm_version="0.32.0", compute_capability=(10, 0), policy="migrate",
                          argv=["vllm", "serve", "m"], env=env,
                          changes=[Change("flag", "--a x", None, "r")], preflight={"ok": True})
    assert report == {
        "vllm_version": "0.32.0", "compute_capability": "10.0", "policy": "migrate",
        "argv": ["vllm", "serve", "m"], "env": {"VLLM_A": "1", "VLLM_B": "2"},
        "changes": [{"kind": "flag", "old": "--a x", "new": None, "reason": "r", "manual": None}],
        "preflight": {"ok": True}, "tables": None,
    }
    assert list(vllm_env(env)) == ["VLLM_A", "VLLM_B"]


def test_command_text_quotes() -> None:
    text = command_text(["vllm", "serve", "m", "--kernel-config", '{"a": "b"}'],
                        {"VLLM_X": "a b", "HOME": "/h"})
    assert text == "VLLM_X='a b' vllm serve m --kernel-config '{\"a\": \"b\"}'"
