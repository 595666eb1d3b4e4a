"""GPU availability for the new container: existence and holders (no engine, no GPU)."""

from __future__ import annotations

import pytest

from proxy.cutover.driver import Conflict, NotFound
from proxy.cutover.shell.gpus import GpuHolder, HostGpu, check_gpus, parse_nvidia_smi_list

SMI = """GPU 0: NVIDIA H200 (UUID: GPU-aaaa-0000)
GPU 1: NVIDIA H200 (UUID: GPU-bbbb-1111)
GPU 2: NVIDIA H200 (UUID: GPU-cccc-2222)
"""
HOST = parse_nvidia_smi_list(SMI)
OLD = GpuHolder("old-vllm", "f" * 64, ("0",))


def test_nvidia_smi_list_is_parsed() -> None:
    assert HOST[1] == HostGpu(index="1", uuid="GPU-bbbb-1111", name="NVIDIA H200")
    assert parse_nvidia_smi_list("No devices were found\n") == []


def test_free_gpus_pass() -> None:
    check_gpus(("1", "GPU-cccc-2222"), HOST, [OLD])
    check_gpus((), HOST, [GpuHolder("all-of-them", "e" * 64, ("all",))])


def test_missing_gpu_is_refused_with_the_host_list() -> None:
    with pytest.raises(NotFound, match=r"GPU '7' does not exist.*0 \(GPU-aaaa-0000\)"):
        check_gpus(("1", "7"), HOST, [])


def test_held_gpu_is_refused_naming_the_container() -> None:
    with pytest.raises(Conflict, match=r"GPU 0 by running container 'old-vllm' \(ffffffffffff\)"
                                       r".*--new-gpus \(free: 1, 2\)"):
        check_gpus(("GPU-aaaa-0000",), HOST, [OLD])


def test_holders_by_uuid_and_all() -> None:
    by_uuid = GpuHolder("other", "d" * 64, ("GPU-bbbb-1111",))
    with pytest.raises(Conflict, match="GPU 1 by running container 'other'"):
        check_gpus(("1",), HOST, [OLD, by_uuid])
    with pytest.raises(Conflict, match="GPU 0 by .*'old-vllm'.*GPU 1 by .*'other'"):
        check_gpus(("all",), HOST, [OLD, by_uuid])
    greedy = GpuHolder("greedy", "c" * 64, ("all",))
    with pytest.raises(Conflict, match=r"GPU 2 by running container 'greedy'.*free: none"):
        check_gpus(("2",), HOST, [greedy])


def test_without_a_gpu_list_only_holders_by_the_same_name_count() -> None:
    check_gpus(("0",), [], [])  # a host without GPUs: nothing to check
    check_gpus(("1",), [], [OLD])
    with pytest.raises(Conflict, match="GPU 0 by running container 'old-vllm'"):
        check_gpus(("0",), [], [OLD])
    with pytest.raises(Conflict, match="'greedy'"):
        check_gpus(("3",), [], [GpuHolder("greedy", "c" * 64, ("all",))])
