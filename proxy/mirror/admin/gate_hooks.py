"""The gate in the forms Argo Rollouts and Flagger call (admin listener).

- `GET|POST /admin/gate/analysis`: Argo Rollouts' `web` provider. Always 200 with JSON
  (`verdict`, `pass`, `reasons`, `samples`, ...) while a verdict exists, so
  `successCondition: result.pass == true` and `failureCondition: result.verdict == "fail"`
  judge it; Argo counts any non-2xx as an Error, so only "no verdict can be computed"
  (capture worker down: 503) and a refused token (401) are non-2xx.
- `POST /admin/gate/flagger`: a Flagger `confirm-promotion` / `pre-rollout` / `rollout`
  webhook. Flagger's body is read and checked, its phase kept for `/admin/stats`; 200 on
  pass, 409 otherwise (Flagger: above 202 fails the check).
- `POST /admin/gate/flagger/rollback`: Flagger's `rollback` hook, inverted: 200 only when
  the verdict is fail (Flagger then rolls back), 409 on pass or inconclusive.

Tokens: none with `--gate-open`; otherwise `Authorization: Bearer` with the admin token
or the read-only `--gate-token`. Flagger cannot send headers, so its hooks may carry the
token as `metadata.token` in the Canary's webhook spec.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiohttp import web

from proxy.adminhttp import bearer_token, json_answer, json_error, read_json, token_matches
from proxy.gate.verdict import analysis_body
from proxy.mirror.app import CONFIG_KEY, EVIDENCE_KEY
from proxy.mirror.judging import GateResult
from proxy.mirror.worker.link import WorkerUnavailable

log = logging.getLogger(__name__)

FLAGGER_KEYS = {"name", "namespace", "phase", "checksum", "metadata"}
FLAGGER_PHASES = {"Initializing", "Initialized", "Waiting", "Progressing", "WaitingPromotion",
                  "Promoting", "Finalising", "Succeeded", "Failed", "Terminating",
                  "Terminated"}
FLAGGER_LAST_KEY = web.AppKey("flagger_last", dict)


def _denied(request: web.Request, main: web.Application,
            body_token: str | None = None) -> web.Response | None:
    admin = main[CONFIG_KEY].admin
    if admin.gate_open:
        return None
    accepted = [t for t in (admin.token, admin.gate_token) if t]
    if not accepted:
        return json_error(401, "no admin or gate token configured (--admin-token, "
                               "--gate-token) and no --gate-open: the gate hooks are off")
    if token_matches([bearer_token(request), body_token], accepted):
        return None
    return json_error(401, "missing or wrong bearer token (or metadata.token)")


async def _verdict(main: web.Application) -> GateResult | web.Response:
    try:
        return await main[EVIDENCE_KEY].gate()
    except WorkerUnavailable as exc:
        return json_error(503, f"{exc}; no verdict can be computed now")


async def analysis(request: web.Request, main: web.Application) -> web.Response:
    if (denied := _denied(request, main)) is not None:
        return denied
    result = await _verdict(main)
    if isinstance(result, web.Response):
        return result
    return json_answer(analysis_body(result.as_json()), 200)


def parse_flagger(body: Any) -> dict[str, Any]:
    """Flagger's webhook payload, checked; ValueError saying what is wrong (its shape, never
    its values: `metadata.token` may be in it)."""
    if not isinstance(body, dict) or not {"name", "namespace"} <= set(body):
        shape = f"keys {sorted(map(str, body))[:10]!r}" if isinstance(body, dict) \
            else f"a JSON {type(body).__name__}"
        raise ValueError("expected Flagger's webhook body {\"name\", \"namespace\", \"phase\", "
                         f"\"checksum\", \"metadata\"}}, got {shape}")
    unknown = set(body) - FLAGGER_KEYS
    if unknown:
        raise ValueError(f"unexpected keys {sorted(unknown)} in a Flagger webhook body")
    for key in ("name", "namespace", "phase", "checksum"):
        if key in body and not isinstance(body[key], str):
            raise ValueError(f"{key} must be a string, got {body[key]!r}")
    if body.get("phase") is not None and body["phase"] not in FLAGGER_PHASES:
        raise ValueError(f"unknown Flagger phase {body['phase']!r}")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        bad = sorted(str(k) for k, v in metadata.items() if not isinstance(v, str)) \
            if isinstance(metadata, dict) else f"a JSON {type(metadata).__name__}"
        raise ValueError(f"metadata must map names to strings; not strings: {bad!r}")
    return {**body, "metadata": metadata}


async def flagger(request: web.Request, main: web.Application, hook: str,
                  last: dict[str, Any]) -> web.Response:
    try:
        payload = parse_flagger(await read_json(request))
    except ValueError as exc:  # JSON errors included
        return json_error(400, str(exc))
    if (denied := _denied(request, main, payload["metadata"].get("token"))) is not None:
        return denied
    seen = {k: payload.get(k) for k in ("name", "namespace", "phase", "checksum")}
    last.update({**seen, "hook": hook, "t_unix": time.time()})
    log.info("Flagger %s hook: canary %s/%s phase %s (metadata keys: %s)", hook,
             seen["namespace"], seen["name"], seen["phase"],
             ",".join(sorted(payload["metadata"])) or "-")
    result = await _verdict(main)
    if isinstance(result, web.Response):
        return result
    wanted = "fail" if hook == "rollback" else "pass"
    return json_answer(analysis_body(result.as_json()),
                       200 if result.verdict.verdict == wanted else 409)


def add_gate_hooks(admin: web.Application, main: web.Application) -> None:
    """Register the Argo Rollouts and Flagger forms of the gate on the admin app."""
    last: dict[str, Any] = {}
    admin[FLAGGER_LAST_KEY] = last  # the last Flagger call, shown in /admin/stats

    async def argo(request: web.Request) -> web.Response:
        return await analysis(request, main)

    async def promote(request: web.Request) -> web.Response:
        return await flagger(request, main, "gate", last)

    async def rollback(request: web.Request) -> web.Response:
        return await flagger(request, main, "rollback", last)

    admin.router.add_get("/admin/gate/analysis", argo)
    admin.router.add_post("/admin/gate/analysis", argo)
    admin.router.add_post("/admin/gate/flagger", promote)
    admin.router.add_post("/admin/gate/flagger/rollback", rollback)
