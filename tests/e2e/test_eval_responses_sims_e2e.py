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


def test_a_golden_without_text_keeps_no_ids_or_logprobs_and_still_places_a_divergence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ids, sampled tokens and top-k logprobs give the answer's text back: without
    --store-text the file keeps the ids as keyed hashes of 16-id blocks and no logprobs;
    `eval compare` still names the field, the choice and the block a divergence is in."""
    prompts = tmp_path / "set.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"text {i}", "max_tokens": 40}) + "\n"
                               for i in range(8)))
    hashed, clear = tmp_path / "golden.jsonl", tmp_path / "golden-text.jsonl"
    with sim(tmp_path) as old, sim(tmp_path, "--seed", "0") as same, \
            sim(tmp_path, "--divergence-rate", "1", "--divergence-at", "20") as diverging:
        assert main(["eval", "record", "--url", old, "--prompts", str(prompts),
                     "-o", str(hashed)]) == 0
        assert main(["eval", "record", "--url", old, "--prompts", str(prompts),
                     "-o", str(clear), "--store-text"]) == 0
        capsys.readouterr()
        main(["eval", "compare", "--golden", str(hashed), "--url", same, "--json"])
        same_out = json.loads(capsys.readouterr().out)
        main(["eval", "compare", "--golden", str(hashed), "--url", diverging, "--json"])
        diverged_out = json.loads(capsys.readouterr().out)
    stored = hashed.read_text()
    for line in clear.read_text().splitlines()[1:]:
        answer = json.loads(line)["answer"]
        assert answer["token_ids"] and answer["sampled_tokens"] and answer["top_logprobs"]
        assert answer["text"] and answer["text"] not in stored
        assert json.dumps(answer["token_ids"][:4])[1:-1] not in stored
        assert not any(f'"{t}"' in stored for t in answer["sampled_tokens"] if len(t) > 3)
    for line in stored.splitlines()[1:]:
        answer = json.loads(line)["answer"]
        assert answer["token_ids"] is answer["sampled_tokens"] is answer["top_logprobs"] is None
        assert len(answer["token_id_blocks"]) == -(-answer["output_tokens"] // 16) > 1
    assert same_out["compared"] == 8 and same_out["diverged"] == 0, same_out["reasons"]
    # The sim diverges at token 20 of each answer long enough to have one.
    rows = [r for r in diverged_out["requests"] if r["outcome"] == "diverged"]
    assert diverged_out["diverged"] == len(rows) >= 6, diverged_out["requests"]
    for row in rows:
        assert (row["field"], row["choice"], row["first_divergence"]) == ("text", 0, 16), row
        assert "tokens 16..31" in row["reason"], row["reason"]
