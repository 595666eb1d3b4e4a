"""A container's log and memory are read through a `ContainerReader`; the driver's errors
become bad input naming the container (the real Docker engine: test_docker_sources.py)."""

from __future__ import annotations

import pytest

from proxy.cutover.docker_driver import DockerDriver
from proxy.cutover.driver import EngineUnavailable, NotFound
from proxy.evaluate.checklist import VerifyOptions, read_inputs
from proxy.evaluate.containers import ContainerReader, container_log, container_memory
from proxy.evaluate.jsonl import EvalInputError
from proxy.evaluate.results import ContainerMemory


class Reader:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.asked: list[str] = []

    def logs(self, container_id: str) -> str:
        self.asked.append(container_id)
        if self.error:
            raise self.error
        return "(APIServer pid=1) INFO non-default args: {}\n"

    def memory_use(self, container_id: str) -> tuple[int | None, int | None]:
        self.asked.append(container_id)
        if self.error:
            raise self.error
        return 100, 1000


def test_the_docker_driver_is_a_container_reader() -> None:
    reader: ContainerReader = DockerDriver(base_url="unix:///nonexistent.sock")
    with pytest.raises(EvalInputError, match=r"--container 'box': .*does not exist"):
        container_log(reader, "box")
    with pytest.raises(EvalInputError, match=r"--container 'box'"):
        container_memory(reader, "box")


def test_readings_and_errors_name_the_container() -> None:
    assert container_memory(Reader(), "c1") == ContainerMemory("c1", 100, 1000)
    for error in (NotFound("no container 'c2' on this host"), EngineUnavailable("down")):
        with pytest.raises(EvalInputError, match=r"--container 'c2': "):
            container_log(Reader(error), "c2")
    reader = Reader()
    log, report = read_inputs(VerifyOptions(url="http://e", container="c3"), reader)
    assert reader.asked == ["c3"] and log is not None and "non-default args" in log
    assert report is None
