"""DockerDriver against the real engine: find, create_like, url_for.

One old container with a rich configuration (see conftest) is reproduced by create_like
from a different image; both are inspected and compared part by part, and the new one
is reached over real HTTP the way the old one was (published port, network name).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.cutover.driver import (
    LABEL_CUTOVER,
    LABEL_REPLACES,
    LABEL_ROLE,
    Conflict,
    ContainerInfo,
    NewContainerPlan,
    NotFound,
)
from proxy.cutover.shell.docker_driver import DockerDriver
from tests.cutover.docker_scene import (
    NEW_IMAGE_CMD,
    NEW_VERSION,
    OLD_COMMAND,
    DockerScene,
    wait_http,
)

pytestmark = [pytest.mark.e2e, pytest.mark.docker]


@pytest.fixture(scope="module")
def new_pair(driver: DockerDriver, scene: DockerScene, docker_client: Any
             ) -> tuple[ContainerInfo, dict[str, Any], dict[str, Any]]:
    """(new info, old inspect, new inspect) after one create_like with no overrides."""
    old = driver.find(scene.old_name)
    plan = NewContainerPlan(image=scene.new_image, name=f"new-{scene.tag}",
                            labels={LABEL_CUTOVER: scene.tag})
    new = driver.create_like(old, plan)
    api = docker_client.api
    return new, api.inspect_container(scene.old_id), api.inspect_container(new.id)


def test_find_by_name_id_prefix_and_label(driver: DockerDriver, scene: DockerScene) -> None:
    by_name = driver.find(scene.old_name)
    assert by_name.id == scene.old_id and by_name.state == "running"
    assert driver.find(scene.old_id).name == scene.old_name
    assert driver.find(scene.old_id[:10]).id == scene.old_id
    assert driver.find(f"label=probe={scene.tag}").id == scene.old_id
    assert by_name.networks[scene.network].aliases[:1] == ("engine",)
    assert by_name.env["HF_HOME"] == "/cache" and by_name.labels["team"] == "llm"
    assert (by_name.shm_size_bytes, by_name.ipc_mode) == (256 << 20, "shareable")
    assert by_name.restart_policy == "on-failure" and by_name.command == tuple(OLD_COMMAND)


def test_find_refuses_missing_and_ambiguous(driver: DockerDriver, scene: DockerScene,
                                            new_pair: tuple[ContainerInfo, Any, Any]) -> None:
    with pytest.raises(NotFound, match=f"no container 'gone-{scene.tag}'"):
        driver.find(f"gone-{scene.tag}")
    with pytest.raises(NotFound, match="no container has the label"):
        driver.find(f"label=probe=gone-{scene.tag}")
    new = new_pair[0]  # carries the old one's labels: two containers match now
    with pytest.raises(Conflict, match=f"2 containers .*\\({new.name}, {scene.old_name}\\)"):
        driver.find(f"label=fleet={scene.tag}")
    assert driver.inspect(f"gone-{scene.tag}").state == "missing"


def test_create_like_carries_the_host_config(new_pair: tuple[ContainerInfo, Any, Any]) -> None:
    _, old, new = new_pair
    old_host, new_host = old["HostConfig"], new["HostConfig"]
    differing = {key for key in old_host if old_host[key] != new_host.get(key)}
    assert differing == {"PortBindings"}, {k: (old_host[k], new_host.get(k)) for k in differing}
    assert new_host["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]}
    assert (new_host["ShmSize"], new_host["IpcMode"]) == (256 << 20, "shareable")
    mounts = {(m["Type"], m["Destination"], m.get("Name", m["Source"]), m["RW"])
              for m in old["Mounts"]}
    assert mounts == {(m["Type"], m["Destination"], m.get("Name", m["Source"]), m["RW"])
                      for m in new["Mounts"]}


def test_create_like_takes_the_deployment_not_the_old_image(
        new_pair: tuple[ContainerInfo, Any, Any], scene: DockerScene) -> None:
    info, _, new = new_pair
    config = new["Config"]
    assert config["Image"] == scene.new_image and info.state == "running"
    assert config["Cmd"] == OLD_COMMAND  # set on the old container: kept
    assert config["Entrypoint"][-1] == NEW_VERSION  # the old image's: the new image's now
    env = dict(entry.split("=", 1) for entry in config["Env"])
    assert (env["HF_HOME"], env["SIM_EXTRA"], env["IMAGE_GENERATION"]) == ("/cache", "1", "new")
    assert "OLD_ONLY" not in env
    labels = config["Labels"]
    assert labels["team"] == "llm" and labels["io.example.generation"] == "new"
    assert (labels[LABEL_ROLE], labels[LABEL_REPLACES]) == ("new", scene.old_name)
    assert labels[LABEL_CUTOVER] == scene.tag
    assert config["StopSignal"] == "SIGINT"


def test_create_like_joins_the_networks_without_aliases(
        new_pair: tuple[ContainerInfo, Any, Any], scene: DockerScene) -> None:
    info, _, new = new_pair
    networks = new["NetworkSettings"]["Networks"]
    assert set(networks) == {scene.network, scene.second_network}
    assert "engine" not in (networks[scene.network]["Aliases"] or [])
    assert new["HostConfig"]["NetworkMode"] == scene.network
    assert info.ports["8000/tcp"][0][0] == "127.0.0.1"
    assert f"http://127.0.0.1:{info.ports['8000/tcp'][0][1]}" != scene.old_url


def test_url_for_published_port_is_answered_by_the_new_one(
        driver: DockerDriver, new_pair: tuple[ContainerInfo, Any, Any],
        scene: DockerScene) -> None:
    info = new_pair[0]
    url = driver.url_for(info, scene.old_url + "/v1")
    assert url == f"http://127.0.0.1:{info.ports['8000/tcp'][0][1]}/v1"
    assert json.loads(wait_http(url.removesuffix("/v1") + "/version"))["version"] == NEW_VERSION
    models = json.loads(wait_http(url + "/models"))
    assert [m["id"] for m in models["data"]] == ["tiny"]


def test_url_for_network_name_is_answered_on_the_network(
        driver: DockerDriver, new_pair: tuple[ContainerInfo, Any, Any],
        scene: DockerScene, docker_client: Any) -> None:
    info = new_pair[0]
    assert driver.url_for(info, "http://engine:8000") == f"http://{info.name}:8000"
    url = driver.url_for(info, f"http://{scene.old_name}:8000")
    probe = ("import json, sys, time, urllib.request\n"
             "for _ in range(100):\n"
             "    try:\n"
             f"        print(urllib.request.urlopen('{url}/version', timeout=3).read().decode())\n"
             "        sys.exit(0)\n"
             "    except OSError:\n"
             "        time.sleep(0.3)\n"
             "sys.exit(1)\n")
    output = docker_client.containers.run(
        scene.sim_image, ["-c", probe], entrypoint=["python3"], network=scene.network,
        remove=True, labels={"fleet": scene.tag})
    assert json.loads(output)["version"] == NEW_VERSION


def test_inherited_command_becomes_the_new_images(
        driver: DockerDriver, scene: DockerScene, docker_client: Any) -> None:
    api = docker_client.api
    created = api.create_container(scene.old_image, name=f"plain-{scene.tag}",
                                   labels={"fleet": scene.tag})
    old = driver.inspect(created["Id"])
    plan = NewContainerPlan(image=scene.new_image, name=f"plain-new-{scene.tag}",
                            env={"EXTRA": "2"}, gpus=())
    new = driver.create_like(old, plan)
    config = api.inspect_container(new.id)["Config"]
    assert config["Cmd"] == NEW_IMAGE_CMD and new.env["EXTRA"] == "2"
    assert new.ports == {} and new.state == "running"  # the old one published nothing


def test_create_like_refuses_missing_image_and_taken_name(
        driver: DockerDriver, scene: DockerScene, docker_client: Any) -> None:
    old = driver.find(scene.old_name)
    missing = NewContainerPlan(image=f"vllm-cutover-test/missing:{scene.tag}",
                               name=f"never-{scene.tag}")
    with pytest.raises(NotFound, match="is not on this host; docker pull it or build it"):
        driver.create_like(old, missing)
    assert driver.inspect(f"never-{scene.tag}").state == "missing"
    taken = NewContainerPlan(image=scene.new_image, name=scene.old_name)
    with pytest.raises(Conflict, match=f"creating container '{scene.old_name}'.*already in use"):
        driver.create_like(old, taken)
    assert driver.inspect(scene.old_id).state == "running"
