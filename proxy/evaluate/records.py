"""The requests of the proxy's records as an eval prompt set (`eval record --records DB`).

The proxy keeps a request's body only when it was started with `--store-text`
(the record's `request_json`); records without one are skipped and counted,
and a database with none at all is refused, naming the flag.
"""

from __future__ import annotations

import json

from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.prompts import EvalRequest, endpoint_of, greedy_body
from proxy.report.load import ReportInputError, load_store


def read_record_requests(db_path: str, *, logprobs: int, max_tokens: int) -> list[EvalRequest]:
    try:
        records, _ = load_store(db_path)
    except ReportInputError as exc:
        raise EvalInputError(str(exc)) from None
    out = []
    for record in records:
        raw = record.request_json
        if raw is None:
            continue
        source = f"{db_path}:exchange {record.stored.row_id if record.stored else '?'}"
        try:
            obj = json.loads(raw)
        except ValueError:
            raise EvalInputError(f"{source}: the stored request is not JSON") from None
        if not isinstance(obj, dict):
            raise EvalInputError(f"{source}: the stored request is not a JSON object")
        endpoint = endpoint_of(obj, source)
        out.append(EvalRequest(endpoint, greedy_body(obj, endpoint, logprobs=logprobs,
                                                     max_tokens=max_tokens), source))
    if not out:
        raise EvalInputError(f"{db_path}: none of its {len(records)} records holds its request; "
                             "the proxy keeps requests only with --store-text")
    return out
