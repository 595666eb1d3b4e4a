"""Docker's exceptions as the operator reads them (no engine: the SDK's own classes)."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from proxy.cutover.driver import Conflict, DriverError, EngineUnavailable, NotFound
from proxy.cutover.shell.docker_driver import DockerDriver, _engine_message


def _api_error(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("call", response=response, explanation=explanation)


@pytest.mark.parametrize(("raised", "expected", "message"), [
    (docker.errors.ImageNotFound("No such image: x"), NotFound,
     "image 'img:1' is not on this host; docker pull it or build it first"),
    (docker.errors.NotFound("No such container: c"), NotFound, "^doing it$"),
    (_api_error(409, "name in use"), Conflict, "doing it: name in use"),
    (_api_error(500, "driver failed"), DriverError, "doing it: driver failed"),
    (_api_error(400, "multiple IDs found with provided prefix: ab"), Conflict, "prefix: ab"),
    (requests.exceptions.ConnectionError("Connection refused"), EngineUnavailable,
     "refuses connections"),
    (requests.exceptions.ReadTimeout("slow"), EngineUnavailable, "doing it: the Docker engine did not answer within 120 s \\(slow\\)"),
])
def test_errors_are_translated(raised: Exception, expected: type[Exception],
                               message: str) -> None:
    driver = DockerDriver(base_url="unix:///unused.sock")
    with pytest.raises(expected, match=message) as caught, \
            driver._errors("doing it", image="img:1"):
        raise raised
    assert caught.type is expected


def test_engine_messages_name_the_fix() -> None:
    denied = _engine_message("", PermissionError(13, "Permission denied"))
    assert "--group-add $(stat -c %g /var/run/docker.sock)" in denied
    tcp = _engine_message("tcp://10.0.0.9:2375", OSError("boom"))
    assert tcp == "cannot reach the Docker engine at tcp://10.0.0.9:2375: boom"
