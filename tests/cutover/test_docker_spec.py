"""The new container's create request from the old one's inspect JSON (no engine)."""

from __future__ import annotations

from typing import Any

from proxy.cutover.docker_spec import create_request, info_from_attrs, requested_gpus
from proxy.cutover.driver import LABEL_CUTOVER, LABEL_REPLACES, LABEL_ROLE, NewContainerPlan

OLD_IMAGE = {
    "Entrypoint": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
    "Cmd": None,
    "Env": ["PATH=/usr/local/bin:/usr/bin", "VLLM_VERSION=0.10.2"],
    "Labels": {"org.opencontainers.image.version": "0.10.2"},
    "ExposedPorts": {"8000/tcp": {}},
    "WorkingDir": "/vllm-workspace",
    "User": "",
    "StopSignal": None,
}


def _old(**config: Any) -> dict[str, Any]:
    base_config = {
        "Image": "vllm/vllm-openai:v0.10.2",
        "Entrypoint": OLD_IMAGE["Entrypoint"],
        "Cmd": ["--model", "/models/m", "--port", "8000"],
        "Env": [*OLD_IMAGE["Env"], "HF_HOME=/cache", "VLLM_VERSION=0.10.2"],
        "Labels": {**OLD_IMAGE["Labels"], "team": "llm",
                   "com.docker.compose.service": "old-vllm",
                   LABEL_CUTOVER: "previous", LABEL_ROLE: "new"},
        "ExposedPorts": {"8000/tcp": {}, "9000/tcp": {}},
        "WorkingDir": "/vllm-workspace",
        "User": "",
        "Hostname": "0123456789ab",
        "Volumes": None,
    }
    base_config.update(config)
    return {
        "Id": "0123456789ab" + "c" * 52,
        "Name": "/old-vllm",
        "Image": "sha256:" + "1" * 64,
        "Config": base_config,
        "State": {"Status": "running", "ExitCode": 0},
        "HostConfig": {
            "Binds": ["/srv/models:/models:ro", "hf-cache:/cache"],
            "ShmSize": 2 << 30, "IpcMode": "host",
            "Ulimits": [{"Name": "memlock", "Soft": -1, "Hard": -1}],
            "DeviceRequests": [{"Driver": "", "Count": 0, "DeviceIDs": ["0"],
                                "Capabilities": [["gpu"]], "Options": {}}],
            "RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0},
            "PortBindings": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8000"}]},
            "NetworkMode": "llm-net", "CapAdd": ["SYS_NICE"],
            "ContainerIDFile": "/run/old.cid",
        },
        "NetworkSettings": {
            "Networks": {
                "llm-net": {"IPAddress": "172.20.0.5", "Aliases": ["vllm", "0123456789ab"]},
                "monitoring": {"IPAddress": "172.21.0.3", "Aliases": None},
            },
            "Ports": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8000"}],
                      "9000/tcp": None},
        },
    }


def _plan(**changes: Any) -> NewContainerPlan:
    return NewContainerPlan(**{"image": "ours/vllm:0.32", "name": "old-vllm-new", **changes})


def test_host_config_is_carried_whole_with_ports_made_ephemeral() -> None:
    old = _old()
    request = create_request(old, OLD_IMAGE, _plan())
    host = request["HostConfig"]
    assert host["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]}
    assert host["ContainerIDFile"] == ""
    unchanged = {k: v for k, v in old["HostConfig"].items()
                 if k not in ("PortBindings", "ContainerIDFile")}
    assert {k: host[k] for k in unchanged} == unchanged
    assert request["ExposedPorts"] == {"9000/tcp": {}, "8000/tcp": {}}


def test_explicit_command_is_kept_and_inherited_entrypoint_left_to_the_new_image() -> None:
    request = create_request(_old(), OLD_IMAGE, _plan())
    assert request["Entrypoint"] is None  # the new image's: our launcher
    assert request["Cmd"] == ["--model", "/models/m", "--port", "8000"]


def test_inherited_command_is_left_to_the_new_image() -> None:
    request = create_request(_old(Cmd=["serve"]), {**OLD_IMAGE, "Cmd": ["serve"]}, _plan())
    assert request["Entrypoint"] is None and request["Cmd"] is None


def test_explicit_entrypoint_is_kept_with_its_own_command() -> None:
    old = _old(Entrypoint=["vllm"], Cmd=None)
    request = create_request(old, {**OLD_IMAGE, "Cmd": ["--help"]}, _plan())
    assert request["Entrypoint"] == ["vllm"]
    assert request["Cmd"] == []  # not the new image's CMD, as with `docker run --entrypoint`


def test_plan_overrides_command_entrypoint_env_and_labels() -> None:
    plan = _plan(command=("--model", "/m2"), entrypoint=("launch",),
                 env={"HF_HOME": "/other", "NEW": "1"}, env_remove=("VLLM_VERSION",),
                 labels={LABEL_CUTOVER: "c42", "team": "infra"})
    request = create_request(_old(), OLD_IMAGE, plan)
    assert (request["Entrypoint"], request["Cmd"]) == (["launch"], ["--model", "/m2"])
    assert sorted(request["Env"]) == ["HF_HOME=/other", "NEW=1"]
    assert request["Labels"][LABEL_CUTOVER] == "c42" and request["Labels"]["team"] == "infra"


def test_env_and_labels_keep_only_what_the_container_set() -> None:
    request = create_request(_old(), OLD_IMAGE, _plan())
    assert request["Env"] == ["HF_HOME=/cache"]  # not the old image's PATH or version
    assert request["Labels"] == {"team": "llm", LABEL_ROLE: "new", LABEL_REPLACES: "old-vllm"}
    assert "WorkingDir" not in request and "User" not in request and "Hostname" not in request


def test_fields_set_by_the_user_are_copied() -> None:
    old = _old(User="1000:1000", WorkingDir="/srv", Hostname="engine-a", StopSignal="SIGINT",
               StopTimeout=90, Healthcheck={"Test": ["CMD", "true"]})
    request = create_request(old, OLD_IMAGE, _plan())
    assert (request["User"], request["WorkingDir"], request["Hostname"]) == (
        "1000:1000", "/srv", "engine-a")
    assert (request["StopSignal"], request["StopTimeout"]) == ("SIGINT", 90)
    assert request["Healthcheck"] == {"Test": ["CMD", "true"]}


def test_networks_joined_without_aliases_or_static_ips() -> None:
    request = create_request(_old(), OLD_IMAGE, _plan())
    assert request["NetworkingConfig"] == {"EndpointsConfig": {"llm-net": {}}}
    assert request["x-networks"] == ["monitoring"]


def test_default_bridge_is_joined_through_the_network_mode() -> None:
    old = _old()
    old["HostConfig"]["NetworkMode"] = "default"
    old["NetworkSettings"]["Networks"] = {"bridge": {"IPAddress": "172.17.0.2"}}
    request = create_request(old, OLD_IMAGE, _plan())
    assert "NetworkingConfig" not in request and request["x-networks"] == []


def test_gpu_request_follows_the_plan() -> None:
    old = _old()
    assert create_request(old, OLD_IMAGE, _plan())["HostConfig"]["DeviceRequests"] == \
        old["HostConfig"]["DeviceRequests"]
    moved = create_request(old, OLD_IMAGE, _plan(gpus=("1", "2")))["HostConfig"]
    assert requested_gpus(moved) == ("1", "2")
    assert moved["DeviceRequests"][0]["Capabilities"] == [["gpu"]]
    every = create_request(old, OLD_IMAGE, _plan(gpus=("all",)))["HostConfig"]
    assert requested_gpus(every) == ("all",)
    assert create_request(old, OLD_IMAGE, _plan(gpus=()))["HostConfig"]["DeviceRequests"] == []


def test_gpu_counts_are_the_first_indices() -> None:
    request = {"Driver": "nvidia", "Count": 2, "DeviceIDs": None, "Capabilities": [["gpu"]]}
    assert requested_gpus({"DeviceRequests": [request]}) == ("0", "1")
    assert requested_gpus({"DeviceRequests": [{**request, "Count": -1}]}) == ("all",)
    assert requested_gpus({"DeviceRequests": None}) == ()


def test_info_reads_the_snapshot() -> None:
    info = info_from_attrs(_old())
    assert (info.name, info.image, info.state) == ("old-vllm", "vllm/vllm-openai:v0.10.2",
                                                   "running")
    assert info.networks["llm-net"].aliases == ("vllm", "0123456789ab")
    assert info.networks["monitoring"].ip == "172.21.0.3"
    assert info.ports == {"8000/tcp": (("127.0.0.1", 8000),)}
    assert (info.gpus, info.shm_size_bytes, info.ipc_mode) == (("0",), 2 << 30, "host")
    assert info.restart_policy == "unless-stopped" and info.exit_code is None
    assert info.env["HF_HOME"] == "/cache" and info.command[0] == "--model"
