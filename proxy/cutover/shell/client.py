"""A small synchronous client of the proxy's cutover admin API (what the CLI talks through).

Failures become two exceptions the CLI maps to exit codes: the API cannot be reached at
all, or it answered with an error (its status and message kept).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

DEFAULT_ADMIN_URL = "http://127.0.0.1:8001"


class AdminUnreachable(RuntimeError):
    """No answer: connection refused, name not resolved, timed out."""


class AdminError(RuntimeError):
    """The admin API answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class CutoverClient:
    """The cutover endpoints of one proxy's admin API (bearer token when given)."""

    def __init__(self, admin_url: str = DEFAULT_ADMIN_URL, token: str | None = None,
                 timeout_s: float = 30.0) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/admin/cutover")

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        # The proxy checks the engine, the image and the old backend before answering.
        return self._call("POST", "/admin/cutover", request, timeout_s=max(self.timeout_s, 120))

    def command(self, name: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call("POST", f"/admin/cutover/{name}", body)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              timeout_s: float | None = None) -> dict[str, Any]:
        url = self.admin_url + path
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as resp:
                return _decode(resp.read(), url)
        except urllib.error.HTTPError as exc:
            raise AdminError(exc.code, _message(exc.read(), exc.code)) from None
        except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdminUnreachable(f"the proxy's admin API at {self.admin_url} cannot be "
                                   f"reached ({reason}); is the proxy running with "
                                   "--admin-port, and is --admin-url right?") from None


def _decode(raw: bytes, url: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError:
        raise AdminError(502, f"{url} answered something that is not JSON: {raw[:200]!r}") \
            from None
    if not isinstance(data, dict):
        raise AdminError(502, f"{url} answered {data!r}, not a JSON object")
    return data


def _message(raw: bytes, status: int) -> str:
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {raw[:200].decode(errors='replace')}"
