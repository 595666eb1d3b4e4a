"""Credentials in backend URLs (`http://user:pass@host:port`): used, never shown.

A backend behind a reverse proxy with HTTP Basic auth is reached with the URL's
user and password as an `Authorization: Basic` header. Everything that names a
backend (records, metrics labels, the admin API, logs) names it without them:
`without_credentials` is a backend's identity, `redact` hides them in any text.
Only the state file (mode 0600) and the proxy's connection pools keep them.
"""

from __future__ import annotations

import base64
import logging
import re
from urllib.parse import unquote, urlsplit, urlunsplit

# scheme://userinfo@ in any text; the userinfo ends at the last '@' before the host (a
# user name may hold an '@' of its own: http://me@corp.example:pw@host, as urlsplit reads it).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/\s:'\"]*)"
                       r"(?P<password>:[^/\s'\"]*)?@(?=[^/@\s'\"]*(?:[/\s'\"]|$))")


def without_credentials(url: str) -> str:
    """`url` without its userinfo (a backend's identity in records, metrics and views)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def basic_authorization(url: str) -> str | None:
    """The `Authorization` header value for the URL's user and password, or None."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return None
    user, _, password = parts.netloc.rpartition("@")[0].partition(":")
    raw = f"{unquote(user)}:{unquote(password)}".encode()
    return "Basic " + base64.b64encode(raw).decode("ascii")


def redact(text: str) -> str:
    """`text` with every URL's password replaced by *** (`http://user:***@host`); userinfo
    without a password is a token itself (`http://TOKEN@host`) and is hidden whole."""
    return _USERINFO.sub(
        lambda m: f"{m['scheme']}{m['user']}:***@" if m["password"] else f"{m['scheme']}***@",
        text)


def redact_json(value: object) -> object:
    """`value` (JSON-like) with `redact` applied to every string in it, keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_json(k): redact_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_json(v) for v in value]
    return value


class RedactingFilter(logging.Filter):
    """Redacts URL credentials in every record a handler writes (whatever logged them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def install_log_redaction() -> None:
    """Add `RedactingFilter` to the root logger's handlers (after logging.basicConfig)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


# A flag or environment variable whose name says it holds a secret (vLLM's --api-key, a
# Hugging Face token, a password): its value is never shown where no token is asked for.
_SECRET_NAME = re.compile(r"key|token|secret|password|passwd|credential", re.IGNORECASE)
HIDDEN = "<hidden>"


def secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """`argv` with the value of every secret-named flag hidden (`--api-key X` and
    `--api-key=X` alike) and URL credentials removed."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(HIDDEN)
            hide_next = False
        elif word.startswith("-") and "=" in word and secret_name(word.split("=", 1)[0]):
            out.append(f"{word.split('=', 1)[0]}={HIDDEN}")
        elif word.startswith("--") and secret_name(word):
            out.append(word)
            hide_next = True
        else:
            out.append(redact(word))
    return out


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with the value of every secret-named variable hidden."""
    return {k: HIDDEN if secret_name(k) else redact(v) for k, v in env.items()}
