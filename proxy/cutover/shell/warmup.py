"""HTTP probes of a vLLM backend, made directly (never through the proxy, so they are no
evidence): readiness = /health, /v1/models lists the expected names, one tiny completion.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from proxy.cutover.steps import Identity, WarmupResult

PROBE_TIMEOUT_S = 10.0
COMPLETION_TIMEOUT_S = 60.0  # a cold engine compiles or allocates on its first request


class ProbeError(RuntimeError):
    """A probe that did not get the answer it needs (the message says which and why)."""


def _why(exc: aiohttp.ClientConnectorError) -> str:
    """Why a connection failed, in words ("connection refused"), not the library's."""
    if isinstance(exc.os_error, ConnectionRefusedError):
        return "connection refused"
    return (exc.os_error.strerror or str(exc.os_error)) if exc.os_error else str(exc)


async def _get_json(session: aiohttp.ClientSession, url: str, path: str,
                    body: dict[str, Any] | None = None,
                    timeout_s: float = PROBE_TIMEOUT_S) -> Any:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        if body is None:
            request = session.get(f"{url}{path}", timeout=timeout)
        else:
            request = session.post(f"{url}{path}", json=body, timeout=timeout)
        async with request as resp:
            text = await resp.text()
            if resp.status != 200:
                raise ProbeError(f"{path} answered {resp.status}: {text[:200]}")
            return json.loads(text) if text else None
    except aiohttp.ClientConnectorError as exc:  # in plain words, not the library's
        raise ProbeError(f"{path}: nothing answers at {url} ({_why(exc)})") from exc
    except asyncio.TimeoutError as exc:
        raise ProbeError(f"{path}: no answer from {url} within {timeout_s:g}s") from exc
    except ValueError as exc:
        raise ProbeError(f"{path}: the answer is not JSON ({exc})") from exc
    except aiohttp.ClientError as exc:
        raise ProbeError(f"{path}: {type(exc).__name__}: {exc}") from exc


async def not_listening(session: aiohttp.ClientSession, url: str) -> str | None:
    """Why nothing can answer at `url` in plain words (no process accepts connections
    there, or the name does not resolve); None when something answers HTTP at all (an
    engine still loading answers /health with 503: that one is waited for) or is only
    slow to."""
    try:
        async with session.get(f"{url}/health",
                               timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)):
            return None
    except aiohttp.ClientConnectorError as exc:
        return f"nothing answers at {url} ({_why(exc)})"
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None


async def healthy(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        await _get_json(session, url, "/health")
    except ProbeError:
        return False
    return True


async def served_models(session: aiohttp.ClientSession, url: str) -> tuple[str, ...]:
    data = await _get_json(session, url, "/v1/models")
    try:
        names = tuple(str(m["id"]) for m in data["data"])
    except (KeyError, TypeError) as exc:
        raise ProbeError(f"/v1/models answered no model list: {str(data)[:200]}") from exc
    if not names:
        raise ProbeError("/v1/models lists no model")
    return names


async def vllm_version(session: aiohttp.ClientSession, url: str) -> str | None:
    try:
        data = await _get_json(session, url, "/version")
    except ProbeError:
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return str(version) if version is not None else None


async def engine_identity(session: aiohttp.ClientSession, url: str) -> Identity:
    """Who answers at `url` (ProbeError when /v1/models does not answer a model list)."""
    return Identity(await served_models(session, url), await vllm_version(session, url))


async def probe_ready(session: aiohttp.ClientSession, url: str,
                      expected_models: tuple[str, ...]) -> WarmupResult:
    """How far `url` is from ready; stops at the first step that does not work."""
    try:
        await _get_json(session, url, "/health")
    except ProbeError as exc:
        return WarmupResult(error=str(exc))
    try:
        models = await served_models(session, url)
    except ProbeError as exc:
        return WarmupResult(healthy=True, error=str(exc))
    version = await vllm_version(session, url)
    if any(m not in models for m in expected_models):
        return WarmupResult(healthy=True, models=models, vllm_version=version,
                            error=f"/v1/models lists {list(models)!r}")
    model = expected_models[0] if expected_models else models[0]
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    try:
        data = await _get_json(session, url, "/v1/completions", body, COMPLETION_TIMEOUT_S)
        if not isinstance(data, dict) or not data.get("choices"):
            raise ProbeError(f"/v1/completions answered no choices: {str(data)[:200]}")
    except ProbeError as exc:
        return WarmupResult(healthy=True, models=models, vllm_version=version, error=str(exc))
    return WarmupResult(healthy=True, models=models, completion_ok=True, vllm_version=version)
