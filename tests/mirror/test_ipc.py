"""The capture worker's channel: frames survive any split of the byte stream."""

from __future__ import annotations

import asyncio
import pickle
import random
import socket
from typing import Any

from proxy.mirror.ipc import _LENGTH, Channel


def _frames(messages: list[Any]) -> bytes:
    out = bytearray()
    for message in messages:
        data = pickle.dumps(message)
        out += _LENGTH.pack(len(data)) + data
    return bytes(out)


def test_frames_are_whole_across_arbitrary_splits():
    messages: list[Any] = [("chunks", 1, [b"data: {}\n\n", 0.5]), ("end", 1), {"k": "é" * 300},
                           ("config", None), b"", ("x" * 70000,)]
    stream = _frames(messages)
    rng = random.Random(7)
    for _ in range(200):
        got: list[Any] = []
        channel = Channel(got.append, lambda exc: None)
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 40)))
        for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            channel.data_received(stream[start:end])
        assert got == messages


def test_a_failing_handler_does_not_end_the_channel():
    got: list[Any] = []

    def handle(message: Any) -> None:
        if message == "bad":
            raise ValueError("boom")
        got.append(message)

    channel = Channel(handle, lambda exc: None)
    channel.data_received(_frames(["a", "bad", "b"]))
    assert got == ["a", "b"] and not channel.closed


async def test_messages_cross_a_socketpair_both_ways_and_loss_is_reported():
    loop = asyncio.get_running_loop()
    left_sock, right_sock = socket.socketpair()
    got: list[Any] = []
    lost = loop.create_future()
    _, left = await loop.create_connection(
        lambda: Channel(lambda m: None, lambda exc: None), sock=left_sock)
    _, right = await loop.create_connection(
        lambda: Channel(got.append, lost.set_result), sock=right_sock)
    big = b"\x00" * (3 * 1024 * 1024)  # larger than one socket buffer
    assert left.send(("chunks", 1, [big])) and left.send(("end", 1))
    for _ in range(500):
        if len(got) == 2:
            break
        await asyncio.sleep(0.01)
    assert got == [("chunks", 1, [big]), ("end", 1)]
    left.close()
    assert await asyncio.wait_for(lost, 5) is None
    assert right.closed and not right.send("late")
