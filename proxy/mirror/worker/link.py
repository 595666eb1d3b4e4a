"""The capture worker process and the channel to it: start, feed, ask, restart.

`WorkerLink` starts `python -m proxy.mirror.worker` with one end of a socketpair,
sends it the proxy's `Configure`, counts what it was sent against what it reports
handled (`WorkerBacklog`: the proxy sheds mirrors while it is behind), answers calls
with the worker's `Reply`, and starts it again, with backoff, when it dies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from itertools import count
from typing import TypeVar

import proxy
from proxy.mirror.config import ProxyConfig
from proxy.mirror.load import LoopLoad, WorkerBacklog
from proxy.mirror.worker.ipc import Channel
from proxy.mirror.worker.messages import (
    SCHEMA,
    Bye,
    Call,
    Configure,
    ConfirmPeer,
    Done,
    PeerConfirmed,
    Progress,
    Query,
    Ready,
    Reply,
    ReplyValue,
    Shutdown,
)
from proxy.tasks import BackgroundTasks, start_task

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_CHANNEL_BYTES = 64 * 1024 * 1024  # worker this far behind: new requests are not mirrored
READY_TIMEOUT_S = 120.0
RESTART_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class WorkerUnavailable(RuntimeError):
    """The capture worker is not running (starting again) or did not answer."""


class WorkerLink:
    """The worker process and the channel to it."""

    def __init__(self, config: ProxyConfig, on_done: Callable[[int], None],
                 on_lost: Callable[[], None], cpus: tuple[int, ...] | None = None,
                 confirm_peer: Callable[[str], Awaitable[str | None]] | None = None) -> None:
        self.config = config
        self.cpus = cpus
        self._confirm_peer = confirm_peer
        self._peer_answers = BackgroundTasks()
        self._on_done = on_done
        self._on_lost_exchanges = on_lost
        self.channel: Channel | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.ready = False
        self.restarts = 0
        self._calls: dict[int, asyncio.Future[ReplyValue]] = {}
        self._call_ids = count(1)
        self._ready: asyncio.Future[None] | None = None
        self._bye: asyncio.Future[int] | None = None
        self._stopping = False
        self._restarter: asyncio.Task[None] | None = None
        self.backlog = WorkerBacklog()
        self.load = LoopLoad()  # the worker's loop, as it last reported it
        self.scheduling = ""  # as the worker reports it: nice 10, SCHED_IDLE or normal

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def start(self) -> None:
        """Start the worker and wait until it is ready (its imports take a second or two)."""
        loop = asyncio.get_running_loop()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        # The worker must run this very code, whatever the installed copy is.
        root = os.path.dirname(os.path.dirname(os.path.abspath(proxy.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "proxy.mirror.worker", "--fd", str(child.fileno()),
                "--priority", self.config.worker_priority,
                pass_fds=(child.fileno(),), env=env, stdin=asyncio.subprocess.DEVNULL)
        finally:
            child.close()
        if self.cpus:
            try:
                os.sched_setaffinity(self.process.pid, self.cpus)
            except OSError as exc:
                log.warning("capture worker: cannot pin to CPUs %s: %s", self.cpus, exc)
        self._ready = loop.create_future()
        self._bye = loop.create_future()
        self.backlog.reset()
        self.load = LoopLoad()
        channel = self.channel = Channel(self._message, self._lost)
        await loop.create_unix_connection(lambda: channel, sock=parent)
        self._send(Configure(SCHEMA, self.config, logging.getLogger().getEffectiveLevel()))
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            self.process.kill()
            raise WorkerUnavailable(f"capture worker not ready in {READY_TIMEOUT_S:.0f} s") \
                from None
        self.ready = True
        log.info("capture worker started (pid %d, %s, CPUs %s)", self.process.pid,
                 self.scheduling, ",".join(map(str, self.cpus)) if self.cpus else "inherited")

    def send(self, message: object) -> bool:
        return self.ready and self._send(message)

    def _send(self, message: object) -> bool:
        channel = self.channel
        size = channel.send(message) if channel is not None else 0
        if size:
            self.backlog.sent(size, time.monotonic())
        return size > 0

    def behind(self, max_delay_s: float) -> bool:
        """What the worker was sent has waited over `max_delay_s` (or piles up)."""
        return self.backlog.behind(time.monotonic(), max_delay_s, MAX_CHANNEL_BYTES)

    async def ask(self, query: Query, answer: type[T], timeout_s: float = 60.0) -> T:
        """`call`, the answer checked to be an `answer` (a `GateResult` for the gate)."""
        value = await self.call(query, timeout_s)
        if not isinstance(value, answer):
            # RuntimeError, like every call that fails: callers take it as no answer.
            raise RuntimeError(  # noqa: TRY004
                f"the capture worker answered {type(query).__name__} with a "
                f"{type(value).__name__}, not a {answer.__name__}")
        return value

    async def call(self, query: Query, timeout_s: float = 60.0) -> ReplyValue:
        """Ask the worker (gate, aggregates, records, metrics); WorkerUnavailable if it can't."""
        if not self.ready:
            raise WorkerUnavailable("the capture worker is not running (restarting)")
        call_id = next(self._call_ids)
        future: asyncio.Future[ReplyValue] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        try:
            if not self.send(Call(call_id, query)):
                raise WorkerUnavailable("the capture worker is not running (restarting)")
            return await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            raise WorkerUnavailable(f"the capture worker did not answer {type(query).__name__} in "
                                    f"{timeout_s:.0f} s") from None
        finally:
            self._calls.pop(call_id, None)

    def _message(self, message: object) -> None:
        if isinstance(message, Done):
            self._on_done(message.xid)
        elif isinstance(message, Reply):
            future = self._calls.get(message.call_id)
            if future is not None and not future.done():
                if message.ok:
                    future.set_result(message.value)
                else:
                    future.set_exception(RuntimeError(message.value))
        elif isinstance(message, ConfirmPeer):
            self._peer_answers.spawn(self._answer_peer(message), "confirm-peer")
        elif isinstance(message, Progress):
            self.backlog.handled(message.handled_bytes)
            self.load.lag_s, self.load.busy = message.loop_lag_s, message.loop_busy
        elif isinstance(message, Ready):
            self.scheduling = message.scheduling
            self.backlog.handled(message.handled_bytes)
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif isinstance(message, Bye):
            if self._bye is not None and not self._bye.done():
                self._bye.set_result(message.cancelled)
        else:
            log.error("capture worker sent an unexpected %s", type(message).__name__)

    async def _answer_peer(self, query: ConfirmPeer) -> None:
        check = self._confirm_peer
        try:
            refusal = None if check is None else await check(query.url)
        except Exception as exc:  # unconfirmed, never a dead worker
            log.warning("confirming a mirror connection failed", exc_info=True)
            refusal = f"the peer could not be confirmed: {type(exc).__name__}: {exc}"
        self.send(PeerConfirmed(query.call_id, refusal))

    def _lost(self, exc: Exception | None) -> None:
        self.ready = False
        for future in self._calls.values():
            if not future.done():
                future.set_exception(WorkerUnavailable("the capture worker went away"))
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(WorkerUnavailable("the capture worker exited at start"))
        if self._bye is not None and not self._bye.done():
            self._bye.set_result(-1)
        self._on_lost_exchanges()
        if self._stopping:
            return
        log.error("capture worker (pid %s) exited unexpectedly; mirroring pauses until it "
                  "is started again", self.pid)
        self._restarter = start_task(self._restart(), "worker-restart")

    async def _restart(self) -> None:
        if self.process is not None:
            await self.process.wait()
        for delay in (*RESTART_DELAYS_S, *[RESTART_DELAYS_S[-1]] * 1000):
            await asyncio.sleep(delay)
            if self._stopping:
                return
            try:
                await self.start()
            except (OSError, WorkerUnavailable) as exc:
                log.error("capture worker: restart failed: %s", exc)
                continue
            self.restarts += 1
            return

    async def stop(self, timeout_s: float) -> int:
        """Ask the worker to finish its exchanges and records, wait for it; its cancel count."""
        self._stopping = True
        if self._restarter is not None:
            self._restarter.cancel()
        process, channel = self.process, self.channel
        if process is None:
            return 0
        cancelled = 0
        if channel is not None and self.ready and self._send(Shutdown()) \
                and self._bye is not None:
            try:
                cancelled = await asyncio.wait_for(asyncio.shield(self._bye), timeout_s + 10.0)
            except asyncio.TimeoutError:
                log.error("capture worker did not finish in %.0f s; killing it", timeout_s + 10)
        if channel is not None:
            channel.close()
        await self._peer_answers.drain(1.0)
        try:
            await asyncio.wait_for(process.wait(), 10.0)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
        return cancelled
