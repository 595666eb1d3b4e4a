"""The capture worker's channel: typed messages cross it whole, each as it was sent."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import random
import socket
from typing import Any

import pytest

from proxy.evidence.aggregates import PairCounts, RoleCounts
from proxy.evidence.window import EvidenceWindow
from proxy.gate.stats import LatencySamples
from proxy.gate.verdict import GateInputs, MatchCounts, evaluate
from proxy.mirror.config import ProxyConfig, RouteConfig
from proxy.mirror.judging import GateResult, WindowFacts
from proxy.mirror.worker import messages as m
from proxy.mirror.worker.ipc import _LENGTH, Channel

BIG = bytes(range(256)) * (3 * 4096)  # 3 MiB: more than one socket buffer

# One of every message the proxy and the worker exchange, every field set to a value
# no other field of the class has, so a field read in another one's place shows.
EXAMPLES: list[Any] = [
    m.Configure(m.SCHEMA, ProxyConfig(RouteConfig("http://old:8000", "http://new:8000")), 20),
    m.Start(7, 3, "http://old:8000", "http://new:8000", "http://old2:8000", "/v1/completions",
            [("Authorization", "Bearer t"), ("X-A", "é")], {"prompt": "hi"}, "chat",
            1.7e9, 123.25),
    m.Chunks(7, "text/event-stream", [b"data: {}\n\n", BIG], [1.5, 2.5]),
    m.End(7, "application/json", [b"{}"], [3.5], 200, "reset", True, 4.5),
    m.AdmissionCounts(1.7e9, [("http://old:8000", "http://new:8000", "eligible", 4)]),
    m.GateQuery(),
    m.WindowGateQuery(EvidenceWindow(1.5, "http://old:8000", "http://new:8000", None)),
    m.AggregatesQuery(),
    m.RecordsQuery(10, 50),
    m.MetricsQuery(),
    m.Call(11, m.RecordsQuery(12, 13)),
    m.Shutdown(),
    m.PeerConfirmed(14, "the old container old is exited"),
    m.Ready("nice 10", 4096),
    m.Done(7),
    m.Reply(11, False, {"verdict": "pass", "n": [1, 2]}),
    m.Reply(16, True, GateResult(
        evaluate(GateInputs(MatchCounts(60, 1), MatchCounts(60, 2),
                            latency={"primary": LatencySamples(ttft_s=(0.1, 0.2)),
                                     "shadow": LatencySamples(ttft_s=(0.3,))})),
        PairCounts(60, 1), PairCounts(60, 2),
        WindowFacts(EvidenceWindow(1.5, "http://old:8000", "http://new:8000"), 61,
                    {"old": RoleCounts(61, 1, 0, {"stop": 60})}))),
    m.Progress(8192, 0.015, 0.25),
    m.Bye(2),
    m.ConfirmPeer(15, "http://u:p@old:8000"),
]


def test_every_message_type_has_an_example():
    assert {type(e) for e in EXAMPLES} == set(m.MESSAGE_TYPES)
    assert m.MESSAGE_TYPES[0] is m.Configure  # the handshake's code never moves


async def _pair() -> tuple[Channel, Channel, list[Any], asyncio.Future[Any]]:
    loop = asyncio.get_running_loop()
    left_sock, right_sock = socket.socketpair()
    got: list[Any] = []
    lost: asyncio.Future[Any] = loop.create_future()
    _, left = await loop.create_connection(
        lambda: Channel(lambda _: None, lambda exc: None), sock=left_sock)
    _, right = await loop.create_connection(
        lambda: Channel(got.append, lost.set_result), sock=right_sock)
    return left, right, got, lost


async def _until(got: list[Any], n: int) -> None:
    for _ in range(500):
        if len(got) >= n:
            return
        await asyncio.sleep(0.01)


async def test_each_message_type_round_trips_across_a_socketpair():
    left, right, got, lost = await _pair()
    for example in EXAMPLES:
        assert left.send(example) > 0
    await _until(got, len(EXAMPLES))
    assert got == EXAMPLES  # dataclass equality: same class, every field equal by name
    for sent, received in zip(EXAMPLES, got, strict=True):
        for field in dataclasses.fields(sent):
            assert getattr(received, field.name) == getattr(sent, field.name), field.name
    left.close()
    assert await asyncio.wait_for(lost, 5) is None
    assert right.closed and not right.send(m.Done(1))


def test_frames_are_whole_across_arbitrary_splits():
    stream = b"".join(_frame(m.to_wire(e)) for e in EXAMPLES)
    rng = random.Random(7)
    for _ in range(100):
        got: list[Any] = []
        channel = Channel(got.append, lambda exc: None)
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 40)))
        for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            channel.data_received(stream[start:end])
        assert got == EXAMPLES


def _frame(wire: object) -> bytes:
    data = pickle.dumps(wire)
    return _LENGTH.pack(len(data)) + data


def test_a_bad_frame_or_a_failing_handler_does_not_end_the_channel(caplog):
    got: list[Any] = []

    def handle(message: Any) -> None:
        if message == m.Done(2):
            raise ValueError("boom")
        got.append(message)

    channel = Channel(handle, lambda exc: None)
    # A frame of other code: a wire code past the table, and one with a field too many.
    channel.data_received(_frame(m.to_wire(m.Done(1))) + _frame((999, 1))
                          + _frame((*m.to_wire(m.Done(3)), "extra")) + _frame(m.to_wire(m.Done(2)))
                          + _frame(m.to_wire(m.Bye(4))))
    assert got == [m.Done(1), m.Bye(4)] and not channel.closed
    assert "handling a frame failed" in caplog.text and "handling Done failed" in caplog.text


def test_the_schema_changes_when_a_field_is_added():
    @dataclasses.dataclass(slots=True)
    class Done:
        xid: int
        extra: int

    assert m.SCHEMA == m._schema()
    original = m.MESSAGE_TYPES
    try:
        m.MESSAGE_TYPES = tuple(Done if c is m.Done else c for c in original)
        assert m._schema() != m.SCHEMA
    finally:
        m.MESSAGE_TYPES = original


async def test_a_worker_of_another_schema_exits_without_starting(caplog):
    from proxy.mirror.worker.process import serve

    proxy_sock, worker_sock = socket.socketpair()
    served = asyncio.ensure_future(serve(worker_sock))
    loop = asyncio.get_running_loop()
    lost: asyncio.Future[Any] = loop.create_future()
    got: list[Any] = []
    _, proxy_end = await loop.create_connection(
        lambda: Channel(got.append, lost.set_result), sock=proxy_sock)
    config = ProxyConfig(RouteConfig("http://old:8000"))
    proxy_end.send(m.Configure("0" * 16, config, 20))
    await asyncio.wait_for(lost, 10)
    await asyncio.wait_for(served, 10)
    assert got == [] and "different code" in caplog.text


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: type(e).__name__)
def test_wire_form_is_the_code_then_the_fields_by_declaration(example):
    wire = m.to_wire(example)
    assert m.MESSAGE_TYPES[wire[0]] is type(example)
    assert wire[1:] == tuple(getattr(example, f.name) for f in dataclasses.fields(example))
    assert m.from_wire(wire) == example
