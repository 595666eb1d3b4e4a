"""A golden answer keeps every field (with --store-text), so `eval compare` compares the
tool calls, reasoning and every choice as the live proxy does."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from proxy.capture.answer import Answer, ChoiceAnswer, ToolCall
from proxy.capture.types import Capture, RequestMeta
from proxy.compare.diff import compare
from proxy.evaluate.client import Answer as ClientAnswer
from proxy.evaluate.client import EngineInfo
from proxy.evaluate.golden import capture_from_json, capture_json, read_golden, write_golden
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.judge import comparisons
from proxy.evaluate.prompts import EvalRequest


def _capture(arguments: str) -> Capture:
    answer = Answer("chat", (ChoiceAnswer(0, "", "", "", (ToolCall("f", arguments),),
                                          "tool_calls"),))
    return Capture("primary", "old", 200, 0.1, (), 0.2, 5, "tool_calls", "", None,
                   answer=answer)


def test_golden_answer_keeps_fields_only_with_text() -> None:
    stored = json.loads(json.dumps(capture_json(_capture('{"q": "a"}'), store_text=True)))
    golden = capture_from_json(stored, "primary", "golden")
    meta = RequestMeta("chat", True, True, "0" * 64, 1, 8)
    live = _capture('{"q": "b"}')
    result = compare(golden, live, meta, "shadow")
    assert (result.outcome, result.field) == ("diverged", "tool_calls")
    assert compare(golden, _capture('{"q":"a"}'), meta, "shadow").outcome == "match"
    bare = capture_from_json(json.loads(json.dumps(capture_json(_capture("{}"), False))),
                             "primary", "golden")
    assert bare.answer is None  # no text kept: token ids and finish reason only, as before


def _golden_file(tmp_path: Path, caps: list[Capture], store_text: bool) -> Path:
    path = tmp_path / "golden.jsonl"
    requests = [EvalRequest("chat", {"messages": [{"role": "user", "content": "q"}],
                                     "temperature": 0}, "set:1")
                for _ in caps]
    write_golden(str(path), EngineInfo("http://old", "0.32", ("m",)), requests,
                 [ClientAnswer(c) for c in caps], store_text)
    return path


def _two_choices(arguments: str, text: str) -> Capture:
    answer = Answer("chat", (ChoiceAnswer(0, "same words", "think", "", (), "stop"),
                             ChoiceAnswer(1, text, "", "", (ToolCall("f", arguments),),
                                          "tool_calls")))
    return Capture("primary", "old", 200, 0.1, (), 0.2, 3, "stop", "same words", (1, 2, 3),
                   answer=answer)


def test_without_text_the_fields_are_kept_as_keyed_hashes(tmp_path: Path) -> None:
    secret = "the secret completion"
    path = _golden_file(tmp_path, [_two_choices('{"q": "a", "n": 1}', secret)], False)
    stored = path.read_text()
    assert secret not in stored and "same words" not in stored and '"a"' not in stored
    header = json.loads(stored.splitlines()[0])
    assert len(bytes.fromhex(header["digest_key"])) == 32
    golden = read_golden(str(path))
    [entry] = golden.entries
    assert entry.capture.answer is not None and entry.capture.answer.digested
    # the same answer (argument keys reordered, spaces changed) matches on every field
    [same] = comparisons(golden.entries, [_two_choices('{"n":1,"q":"a"}', secret)], "shadow")
    assert same.outcome == "match", same.reason
    [args] = comparisons(golden.entries, [_two_choices('{"q": "b", "n": 1}', secret)],
                         "shadow")
    assert (args.outcome, args.field, args.choice) == ("diverged", "tool_calls", 1)
    assert "b" not in args.reason.replace("keyed hash", "").replace("tool_calls", "")
    # a JSON number as 1.0 instead of 1 is a different value, even hashed
    [num] = comparisons(golden.entries, [_two_choices('{"q": "a", "n": 1.0}', secret)],
                        "shadow")
    assert (num.field, num.choice) == ("tool_calls", 1)
    [content] = comparisons(golden.entries, [_two_choices('{"q":"a","n":1}', "other")],
                            "shadow")
    assert (content.field, content.choice) == ("content", 1)


def test_another_file_keys_its_hashes_differently(tmp_path: Path) -> None:
    a = _golden_file(tmp_path / "a" if (tmp_path / "a").mkdir() is None else tmp_path,
                     [_two_choices("{}", "x")], False)
    b = _golden_file(tmp_path / "b" if (tmp_path / "b").mkdir() is None else tmp_path,
                     [_two_choices("{}", "x")], False)
    first = json.loads(a.read_text().splitlines()[1])["answer"]["answer"]
    second = json.loads(b.read_text().splitlines()[1])["answer"]["answer"]
    assert first["choices"][1]["content"] != second["choices"][1]["content"]


def test_with_text_the_position_is_told_and_old_files_still_read(tmp_path: Path) -> None:
    golden = read_golden(str(_golden_file(tmp_path, [_two_choices("{}", "abcd")], True)))
    [cmp] = comparisons(golden.entries, [_two_choices("{}", "abXd")], "shadow")
    assert (cmp.field, cmp.choice) == ("content", 1) and "character 2" in cmp.reason
    lines = [json.loads(line) for line in
             _golden_file(tmp_path, [_two_choices("{}", "abcd")], False).read_text()
             .splitlines()]
    del lines[0]["digest_key"]
    lines[1]["answer"]["answer"] = None  # a file written before digests
    lines[1]["answer"]["token_id_blocks"] = None  # ids in the clear, as then
    lines[1]["answer"]["token_ids"] = [1, 2, 3]
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(line) + "\n" for line in lines))
    [entry] = read_golden(str(old)).entries
    assert entry.capture.answer is None
    [cmp] = comparisons((entry,), [_two_choices("{}", "abXd")], "shadow")
    assert cmp.outcome == "match"  # as before: token ids (none here) and finish reason


@pytest.mark.parametrize(("store_text", "change", "named"), [
    (True, {"token_ids": [1, -1, 3]}, "token_ids[1] must be a token id in 0..2147483647, got -1"),
    (True, {"token_ids": [1, 2, 10**30]}, "token_ids[2] must be a token id"),
    (True, {"output_tokens": 4}, "output_tokens is 4 but token_ids holds 3 ids"),
    (False, {"output_tokens": 40}, "output_tokens is 40 but token_id_blocks holds 1 blocks"),
    (False, {"token_id_blocks": ["zz"]}, "token_id_blocks must be a list of 16 hex digits"),
])
def test_a_golden_answer_of_impossible_ids_or_lengths_is_refused_naming_the_field(
        tmp_path: Path, store_text: bool, change: dict[str, Any], named: str) -> None:
    path = _golden_file(tmp_path, [_two_choices("{}", "x")], store_text)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[1]["answer"].update(change)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(EvalInputError, match=re.escape(named)):
        read_golden(str(path))
