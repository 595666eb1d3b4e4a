"""`eval record` + `eval compare` with a Responses-API request set, on simulated vLLMs.

The golden is recorded without `--store-text` (fields kept as keyed hashes) from one sim;
an identical sim never fails on fields; a sim whose tool-call arguments differ
(`--diverge-field tool_arguments`) is reported as diverged on `tool_calls`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import main
from tests.e2e.test_answer_fields_sims_e2e import RESPONSE_TOOLS, sim

pytestmark = [pytest.mark.e2e]


def write_set(path: Path, n: int = 12) -> Path:
    lines = [{"input": f"ask {i}", "max_output_tokens": 24, "stream": i % 2 == 0,
              "tools": RESPONSE_TOOLS, "tool_choice": "required"} for i in range(n)]
    path.write_text("".join(json.dumps(obj) + "\n" for obj in lines))
    return path


def test_responses_set_recorded_and_compared_on_fields(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    golden = tmp_path / "golden.jsonl"
    with sim(tmp_path) as old, sim(tmp_path, "--seed", "0") as same, \
            sim(tmp_path, "--diverge-field", "tool_arguments") as diverging:
        code = main(["eval", "record", "--url", old, "--prompts",
                     str(write_set(tmp_path / "set.jsonl")), "-o", str(golden)])
        assert code == 0
        capsys.readouterr()
        stored = golden.read_text()
        assert json.loads(stored.splitlines()[0])["digest_key"]
        assert '"digested": true' in stored and "ask 3" in stored
        main(["eval", "compare", "--golden", str(golden), "--url", same, "--json"])
        same_out = json.loads(capsys.readouterr().out)
        main(["eval", "compare", "--golden", str(golden), "--url", diverging, "--json"])
        diverged_out = json.loads(capsys.readouterr().out)
    assert same_out["compared"] == 12 and same_out["diverged"] == 0, same_out["reasons"]
    assert same_out["verdict"] != "fail"
    assert diverged_out["compared"] == 12 and diverged_out["diverged"] == 12
    rows = diverged_out["requests"]
    assert {(r["field"], r["choice"]) for r in rows} == {("tool_calls", 0)}
    assert diverged_out["verdict"] == "fail"
