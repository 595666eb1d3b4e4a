"""Who may be sent a mirrored prompt: each new mirror-lane connection is confirmed first.

An address names whoever holds it now. After a promotion the shadow is the old
container, and once it is gone another container may take its IP at once: a pool that
only knew the address would send it the users' prompts. So every new connection to a
shadow or baseline is confirmed after it is established and before its first byte
(`Http1Pool(confirm=...)`): the cutover, which knows the container behind the URL by its
id, asks its driver whether that container still holds the address. A TCP connection
cannot change peers, so one confirmed after it was established stays confirmed; the
primary lane is never asked.

`PeerGuard` is made before the router (its pools need it) and bound to the cutover
service once that exists; in capture-worker mode the worker asks the proxy for each
connection (`ConfirmPeer`/`PeerConfirmed` messages) and the guard answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

NOT_BOUND = "the proxy's cutover service is not open yet: the peer cannot be confirmed"


class PeerGuard:
    """`confirm(url)`: None when a new connection to `url` may carry a prompt, else why
    not. Until `bind()` every connection is refused (nothing serves before it anyway)."""

    def __init__(self) -> None:
        self._check: Callable[[str], Awaitable[str | None]] | None = None

    def bind(self, check: Callable[[str], Awaitable[str | None]]) -> None:
        self._check = check

    async def confirm(self, url: str) -> str | None:
        check = self._check
        if check is None:
            return NOT_BOUND
        return await check(url)
