"""Configuration is validated once and every error quotes the bad value."""

from __future__ import annotations

import os
import re

import pytest

from proxy.cli import build_parser
from proxy.cli.proxy_cmd import build_config
from proxy.mirror.config import ConfigError, MirrorConfig, ProxyConfig, RouteConfig


@pytest.mark.parametrize("bad", ["ftp://x", "a:1", "http://", "http://h:99999", "http://h/?q=1"])
def test_bad_urls_quoted(bad):
    with pytest.raises(ConfigError, match=re.escape(repr(bad))):
        RouteConfig(bad)


def test_url_normalized_and_baseline_needs_shadow():
    assert RouteConfig("http://h:1/").primary == "http://h:1"
    with pytest.raises(ConfigError, match="needs a shadow"):
        RouteConfig("http://h:1", None, "http://h:2")


@pytest.mark.parametrize(("kwargs", "quoted"), [
    ({"sample_rate": 1.5}, "1.5"), ({"shadow_timeout_s": 0}, "0"),
    ({"max_shadow_inflight": -1}, "-1")])
def test_mirror_limits(kwargs, quoted):
    with pytest.raises(ConfigError, match=quoted):
        MirrorConfig(**kwargs)


def test_own_metrics_path_cannot_hide_primary_metrics():
    with pytest.raises(ConfigError, match="/metrics"):
        ProxyConfig(RouteConfig("http://h:1"), main_metrics_path="/metrics")


def test_cli_builds_frozen_config(monkeypatch):
    monkeypatch.setenv("VLLM_CUTOVER_ADMIN_TOKEN", "from-env-token")
    args = build_parser().parse_args([
        "proxy", "--port", "9000", "--primary", "http://127.0.0.1:8001", "--shadow",
        "http://127.0.0.1:8002/", "--sample-rate", "0.25", "--sample-header", "X-User",
        "--admin-port", "9001", "--db", "r.db", "--retention", "10", "--store-text"])
    config = build_config(args)
    assert config.routes == RouteConfig("http://127.0.0.1:8001", "http://127.0.0.1:8002")
    assert config.mirror.sample_rate == 0.25 and config.mirror.sample_header == "X-User"
    assert config.admin.token == "from-env-token" and config.admin.host == "127.0.0.1"
    assert config.store.db_path == "r.db" and config.store.store_text
    with pytest.raises(AttributeError):
        config.port = 1  # type: ignore[misc]


def test_capture_worker_flags(capsys):
    from proxy.cli import main

    base = ["proxy", "--primary", "http://h:1", "--shadow", "http://h:2"]
    config = build_config(build_parser().parse_args(base))
    assert config.capture_worker and config.worker_priority == "nice"
    assert config.worker_cpus is None
    assert config.mirror.overload_lag_s == 0.01 and config.mirror.overload_busy == 0.5
    assert config.gate.min_coverage == 0.5
    cpu = min(os.sched_getaffinity(0))
    config = build_config(build_parser().parse_args([
        *base, "--capture-in-process", "--worker-cpus", f"{cpu},{cpu}",
        "--worker-priority", "normal"]))
    assert not config.capture_worker and config.worker_priority == "normal"
    assert config.worker_cpus == (cpu, cpu)
    with pytest.raises(SystemExit) as exited:  # argparse's own usage error
        build_parser().parse_args([*base, "--worker-cpus", "1,x"])
    assert exited.value.code == 3
    assert "'1,x'" in capsys.readouterr().err
    assert main([*base, "--worker-cpus", "100000"]) == 3
    assert "this machine has CPUs 0.." in capsys.readouterr().err


def test_cli_rejects_bad_value_with_exit_3(capsys):
    from proxy.cli import main

    code = main(["proxy", "--primary", "nope", "--shadow", "http://h:1"])
    assert code == 3
    assert "'nope'" in capsys.readouterr().err


def test_cli_gate_criteria(capsys):
    from proxy.cli import main

    args = build_parser().parse_args([
        "proxy", "--primary", "http://h:1", "--shadow", "http://h:2", "--gate-min-samples", "7",
        "--gate-require-baseline"])
    gate = build_config(args).gate
    assert gate.min_samples == 7 and gate.require_baseline
    assert main(["proxy", "--primary", "http://h:1", "--shadow", "http://h:2",
                 "--gate-min-match-rate", "2"]) == 3
    assert "2.0" in capsys.readouterr().err


def test_db_directory_must_exist(tmp_path):
    from proxy.mirror.config import StoreConfig

    bad = str(tmp_path / "missing" / "r.db")
    with pytest.raises(ConfigError, match=re.escape(repr(bad))):
        StoreConfig(db_path=bad)
    assert StoreConfig(db_path=str(tmp_path / "r.db")).db_path.endswith("r.db")


def test_metrics_path_flag():
    args = build_parser().parse_args(["proxy", "--primary", "http://h:1", "--shadow",
                                      "http://h:2", "--metrics-path", ""])
    assert build_config(args).main_metrics_path is None
    with pytest.raises(ConfigError, match="/metrics"):
        build_config(build_parser().parse_args([
            "proxy", "--primary", "http://h:1", "--shadow", "http://h:2",
            "--metrics-path", "/metrics"]))


def test_port_in_use_is_a_clean_error(capsys):
    import socket

    from proxy.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["proxy", "--host", "127.0.0.1", "--port", str(port),
                     "--primary", "http://127.0.0.1:1", "--shadow", "http://127.0.0.1:2"])
    assert code == 1
    assert "cannot start" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [-0.001, float("nan")])
def test_negative_overload_lag_quoted(bad):
    with pytest.raises(ConfigError, match="overload lag"):
        MirrorConfig(overload_lag_s=bad)


def test_shedding_flags_and_their_bad_values(capsys):
    from proxy.cli import main

    base = ["proxy", "--primary", "http://h:1", "--shadow", "http://h:2"]
    config = build_config(build_parser().parse_args([
        *base, "--overload-busy", "0", "--max-worker-delay-ms", "250",
        "--gate-min-coverage", "0.9", "--worker-priority", "idle"]))
    assert config.mirror.overload_busy == 0.0 and config.mirror.max_worker_delay_s == 0.25
    assert config.gate.min_coverage == 0.9 and config.worker_priority == "idle"
    for flag, bad in (("--overload-busy", "1.5"), ("--max-worker-delay-ms", "0"),
                      ("--gate-min-coverage", "-0.1")):
        assert main([*base, flag, bad]) == 3
        assert bad in capsys.readouterr().err


def test_latency_ratio_limits_are_flags_and_zero_turns_one_off() -> None:
    import argparse

    from proxy.cli.gate_args import add_gate_arguments, gate_criteria

    parser = argparse.ArgumentParser()
    add_gate_arguments(parser, "gate")
    defaults = gate_criteria(parser.parse_args([]))
    assert (defaults.max_ttft_p50_ratio, defaults.max_tpot_p99_ratio) == (1.10, 1.25)
    loose = gate_criteria(parser.parse_args(["--gate-max-ttft-p99-ratio", "2.5",
                                             "--gate-max-tpot-p50-ratio", "0"]))
    assert loose.max_ttft_p99_ratio == 2.5 and loose.max_tpot_p50_ratio is None
    # Unstreamed E2E p99 is off unless asked for (its tail is the length mix's).
    assert [name for name, *_ in loose.ratio_limits()] == [
        "max_ttft_p50_ratio", "max_ttft_p99_ratio", "max_tpot_p99_ratio",
        "max_e2e_unstreamed_p50_ratio",
        "max_tpot_unstreamed_p50_ratio", "max_tpot_unstreamed_p99_ratio"]
    asked = gate_criteria(parser.parse_args(["--gate-max-e2e-unstreamed-p99-ratio", "2"]))
    assert ("max_e2e_unstreamed_p99_ratio" in
            [name for name, *_ in asked.ratio_limits()])
    with pytest.raises(ValueError, match="-1"):
        gate_criteria(parser.parse_args(["--gate-max-ttft-p50-ratio", "-1"]))
