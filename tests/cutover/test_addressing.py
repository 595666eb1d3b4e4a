"""The new container's URL, built the way the proxy reaches the old one."""

from __future__ import annotations

import pytest

from proxy.cutover.addressing import url_like
from proxy.cutover.driver import ContainerInfo, DriverError, NetworkAttachment

OLD = ContainerInfo(
    id="a" * 64, name="old-vllm", image="vllm:old", state="running",
    networks={"llm": NetworkAttachment("172.20.0.5", ("vllm",)),
              "bridge": NetworkAttachment("172.17.0.2")},
    ports={"8000/tcp": (("127.0.0.1", 8000),), "9000/tcp": (("0.0.0.0", 9000), ("::", 9000))},
)
NEW = ContainerInfo(
    id="b" * 64, name="old-vllm-new", image="vllm:new", state="running",
    networks={"llm": NetworkAttachment("172.20.0.9"), "bridge": NetworkAttachment("172.17.0.7")},
    ports={"8000/tcp": (("127.0.0.1", 49153),), "9000/tcp": (("0.0.0.0", 49154),)},
)


@pytest.mark.parametrize(("like", "expected"), [
    ("http://old-vllm:8000", "http://old-vllm-new:8000"),
    ("http://vllm:8000/v1?x=1", "http://old-vllm-new:8000/v1?x=1"),
    ("http://aaaaaaaaaaaa:8000", "http://old-vllm-new:8000"),
    ("http://172.20.0.5:8000", "http://172.20.0.9:8000"),
    ("http://172.17.0.2:8000/", "http://172.17.0.7:8000/"),
    ("http://127.0.0.1:8000", "http://127.0.0.1:49153"),
    ("http://localhost:8000/v1", "http://localhost:49153/v1"),
    ("http://10.1.2.3:9000", "http://10.1.2.3:49154"),
])
def test_url_follows_the_way_the_old_one_is_reached(like: str, expected: str) -> None:
    assert url_like(OLD, NEW, like) == expected


def test_unknown_host_is_refused_with_the_url() -> None:
    with pytest.raises(DriverError, match=r"'http://elsewhere:8000'.*'old-vllm'"):
        url_like(OLD, NEW, "http://elsewhere:8000")
    with pytest.raises(DriverError, match="127.0.0.1:8001"):
        url_like(OLD, NEW, "http://127.0.0.1:8001")


def test_missing_counterpart_is_refused() -> None:
    lonely = ContainerInfo(id="c" * 64, name="lonely", image="x", state="running")
    with pytest.raises(DriverError, match="network 'llm'"):
        url_like(OLD, lonely, "http://172.20.0.5:8000")
    with pytest.raises(DriverError, match="no published host port for 8000/tcp"):
        url_like(OLD, lonely, "http://127.0.0.1:8000")
