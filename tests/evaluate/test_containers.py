"""A container's log and memory are read through a `ContainerReader`; the driver's errors
become bad input naming the container (the real Docker engine: test_docker_sources.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.cutover.driver import EngineUnavailable, NotFound
from proxy.cutover.shell.docker_driver import DockerDriver
from proxy.evaluate.checklist import VerifyOptions, read_inputs
from proxy.evaluate.containers import ContainerReader, container_log, container_memory
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.results import ContainerMemory


class Reader:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.asked: list[str] = []

    def log_chunks(self, container_id: str) -> Iterator[bytes]:
        self.asked.append(container_id)
        if self.error:
            raise self.error
        yield b"(APIServer pid=1) INFO non-default args: {}\n"

    def memory_use(self, container_id: str) -> tuple[int | None, int | None]:
        self.asked.append(container_id)
        if self.error:
            raise self.error
        return 100, 1000


def test_the_docker_driver_is_a_container_reader() -> None:
    reader: ContainerReader = DockerDriver(base_url="unix:///nonexistent.sock")
    with pytest.raises(EvalInputError, match=r"--container 'box': .*does not exist"):
        container_log(reader, "box", 1 << 20)
    with pytest.raises(EvalInputError, match=r"--container 'box'"):
        container_memory(reader, "box")


def test_readings_and_errors_name_the_container() -> None:
    assert container_memory(Reader(), "c1") == ContainerMemory("c1", 100, 1000)
    for error in (NotFound("no container 'c2' on this host"), EngineUnavailable("down")):
        with pytest.raises(EvalInputError, match=r"--container 'c2': "):
            container_log(Reader(error), "c2", 1 << 20)
    reader = Reader()
    log, report = read_inputs(VerifyOptions(url="http://e", container="c3"), reader)
    assert reader.asked == ["c3"] and log is not None and "non-default args" in log
    assert report is None


class EndlessLog:
    """A container whose log never ends (a server logging each request for weeks)."""

    def __init__(self) -> None:
        self.read = 0
        self.closed = False

    def log_chunks(self, container_id: str) -> Iterator[bytes]:
        try:
            yield b"(APIServer pid=1) INFO non-default args: {'model': 'm'}\n"
            while True:
                chunk = b"INFO 200 OK /v1/chat/completions\n" * 30_000  # ~1 MiB
                self.read += len(chunk)
                yield chunk
        finally:
            self.closed = True

    def memory_use(self, container_id: str) -> tuple[int | None, int | None]:
        return None, None


def test_the_container_log_is_read_from_its_start_up_to_the_cap_and_then_closed() -> None:
    reader = EndlessLog()
    opts = VerifyOptions(url="http://e", container="c4", log_max_bytes=8 << 20)
    log, _ = read_inputs(opts, reader)
    assert log is not None and "non-default args: {'model': 'm'}" in log
    assert "200 OK" not in log  # only the lines the checklist reads are kept
    assert 8 << 20 <= reader.read < (8 << 20) + (2 << 20) and reader.closed
