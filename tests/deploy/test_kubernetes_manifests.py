"""deploy/kubernetes validated offline: Kubernetes objects against their schemas
(kubernetes-validate ships them), custom resources against their projects' CRD schemas
(vendored in tests/deploy/crds, checked by tests/deploy/crd_schema.py), the references
between objects, the generated rules."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from proxy.cli import build_parser
from proxy.cli.proxy_cmd import build_config
from proxy.fleet.rules import rendered_files
from tests.deploy.crd_schema import schema_errors, schemas

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("argo-rollouts", "flagger")
K8S_VERSION = "1.30"


def render(directory: Path) -> list[dict[str, Any]]:
    """A kustomization of `resources` and `namespace` (all ours use), rendered."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "namespace"}, kustomization
    objects: list[dict[str, Any]] = []
    for entry in kustomization["resources"]:
        path = directory / entry
        if path.is_dir():
            objects += render(path)
        else:
            objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    if "namespace" in kustomization:
        for obj in objects:
            obj.setdefault("metadata", {})["namespace"] = kustomization["namespace"]
    return objects


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates(overlay):
    objects = render(KUBE / overlay)
    assert objects
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"])
        if key in schemas():
            assert schema_errors(obj) == [], key
        else:  # a core object: its OpenAPI schema, unknown fields refused
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    for rollout in by_kind(objects, "Rollout").values():  # its pod template, as a Deployment's
        kubernetes_validate.validate({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "t"},
            "spec": {k: rollout["spec"][k] for k in ("replicas", "selector", "template")}},
            K8S_VERSION, strict=True)
    for template in by_kind(objects, "AnalysisTemplate").values():  # a job's spec, as a Job's
        for metric in template["spec"]["metrics"]:
            if "job" in metric["provider"]:
                kubernetes_validate.validate({
                    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t"},
                    "spec": metric["provider"]["job"]["spec"]}, K8S_VERSION, strict=True)
                (container,) = metric["provider"]["job"]["spec"]["template"]["spec"][
                    "containers"]
                assert container["command"][:2] == ["vllm-cutover", "gate"]
                build_parser().parse_args(container["command"][1:])  # our CLI takes it


def test_a_bad_field_is_caught():
    rollout = by_kind(render(KUBE / "argo-rollouts"), "Rollout")["vllm"]
    rollout["spec"]["strategy"]["blueGreen"]["previewServce"] = "typo"
    assert schema_errors(rollout) == [("spec.strategy.blueGreen: Additional properties are not "
                                       "allowed ('previewServce' was unexpected)")]
    service = by_kind(render(KUBE / "argo-rollouts"), "Service")["vllm-active"]
    service["spec"]["ports"][0]["port"] = "eight thousand"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, K8S_VERSION, strict=True)


def test_the_crd_schemas_catch_a_bad_type_pattern_field_and_a_missing_one():
    (rules,) = by_kind(render(KUBE / "argo-rollouts"), "PrometheusRule").values()
    assert schema_errors(rules) == []
    group = rules["spec"]["groups"][0]
    group["interval"] = "30 seconds"  # a Prometheus duration is 30s
    group["rules"][0]["recrod"] = group["rules"][0].pop("record")  # misspelt
    del group["rules"][1]["expr"]
    group["limit"] = "ten"
    errors = schema_errors(rules)
    assert len(errors) == 4, errors
    assert errors[0].startswith("spec.groups.0.interval: '30 seconds' does not match '^(0|")
    assert errors[1:] == [
        "spec.groups.0.limit: 'ten' is not of type 'integer'",
        "spec.groups.0.rules.0: Additional properties are not allowed ('recrod' was unexpected)",
        "spec.groups.0.rules.1: 'expr' is a required property",
    ]
    monitor = by_kind(render(KUBE / "flagger"), "ServiceMonitor")["vllm-cutover"]
    assert schema_errors(monitor) == []
    monitor["spec"]["endpoints"][0]["scheme"] = "grpc"
    del monitor["spec"]["selector"]
    assert schema_errors(monitor) == [
        "spec.endpoints.0.scheme: 'grpc' is not one of ['http', 'https', 'HTTP', 'HTTPS']",
        "spec: 'selector' is a required property"]
    canary = by_kind(render(KUBE / "flagger"), "Canary")["vllm"]
    canary["spec"]["analysis"]["webhooks"][0]["type"] = "confirm-promotoin"
    canary["spec"]["analysis"]["interval"] = "one minute"
    errors = schema_errors(canary)
    assert len(errors) == 2 and errors[0].startswith(
        "spec.analysis.interval: 'one minute' does not match '^[0-9]+(m|s)'"), errors
    assert errors[1].startswith("spec.analysis.webhooks.0.type: 'confirm-promotoin' is not "
                                "one of ['', 'confirm-rollout'")


def test_the_argo_crd_schemas_catch_a_bad_type_a_missing_field_and_a_bad_pattern():
    """Argo's CRDs declare no enums (the controller checks such values), so the enum case
    is the ServiceMonitor's and the Canary's above."""
    objects = render(KUBE / "argo-rollouts")
    rollout = by_kind(objects, "Rollout")["vllm"]
    blue_green = rollout["spec"]["strategy"]["blueGreen"]
    rollout["spec"]["replicas"] = "two"
    blue_green["autoPromotionEnabled"] = "yes"
    del blue_green["activeService"]
    blue_green["prePromotionAnalysis"]["templates"][0]["templateName"] = 7
    (container,) = rollout["spec"]["template"]["spec"]["containers"]
    container["env"] = [{"name": "CPUS", "valueFrom": {"resourceFieldRef": {
        "resource": "limits.cpu", "divisor": "a few"}}}]
    errors = schema_errors(rollout)
    assert len(errors) == 5, errors
    assert errors[:4] == [
        "spec.replicas: 'two' is not of type 'integer'",
        "spec.strategy.blueGreen.autoPromotionEnabled: 'yes' is not of type 'boolean'",
        ("spec.strategy.blueGreen.prePromotionAnalysis.templates.0.templateName: "
         "7 is not of type 'string'"),
        "spec.strategy.blueGreen: 'activeService' is a required property"]
    assert errors[4].startswith("spec.template.spec.containers.0.env.0.valueFrom."
                                "resourceFieldRef.divisor: 'a few' does not match '^("), errors
    web = by_kind(objects, "AnalysisTemplate")["vllm-cutover-gate-web"]
    provider = web["spec"]["metrics"][0]["provider"]["web"]
    provider["timeoutSeconds"] = "20s"
    del provider["url"]
    provider["headers"][0]["val"] = provider["headers"][0].pop("value")
    assert schema_errors(web) == [
        "spec.metrics.0.provider.web.headers.0: 'value' is a required property",
        ("spec.metrics.0.provider.web.headers.0: Additional properties are not allowed "
         "('val' was unexpected)"),
        "spec.metrics.0.provider.web.timeoutSeconds: '20s' is not of type 'integer'",
        "spec.metrics.0.provider.web: 'url' is a required property"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_references_hold(overlay, tmp_path):
    objects = render(KUBE / overlay)
    services, configmaps = by_kind(objects, "Service"), by_kind(objects, "ConfigMap")
    routes = configmaps["vllm-cutover-routes"]["data"]
    sidecar = by_kind(objects, "Deployment")["vllm-cutover"]
    (container,) = sidecar["spec"]["template"]["spec"]["containers"]
    env = {"PRIMARY_URL": routes["primary"], "SHADOW_URL": routes["shadow"]}
    argv = ["proxy"] + [a.replace("$(PRIMARY_URL)", env["PRIMARY_URL"])
                        .replace("$(SHADOW_URL)", env["SHADOW_URL"])
                        .replace("/data/", f"{tmp_path}/") for a in container["args"]]
    config = build_config(build_parser().parse_args(argv))  # our own CLI accepts them
    assert config.admin.port == 8001 and config.main_metrics_path == "/_vllm_cutover/metrics"
    monitor = by_kind(objects, "ServiceMonitor")["vllm-cutover"]
    assert monitor["spec"]["endpoints"][0]["path"] == config.main_metrics_path
    for rollout in by_kind(objects, "Rollout").values():
        blue_green = rollout["spec"]["strategy"]["blueGreen"]
        assert routes == {"primary": f"http://{blue_green['activeService']}:8000",
                          "shadow": f"http://{blue_green['previewService']}:8000"}
        assert {blue_green["activeService"], blue_green["previewService"]} <= set(services)
        templates = by_kind(objects, "AnalysisTemplate")
        for phase in ("prePromotionAnalysis", "postPromotionAnalysis"):
            assert {t["templateName"] for t in blue_green[phase]["templates"]} <= set(templates)
    for canary in by_kind(objects, "Canary").values():
        name = canary["spec"]["targetRef"]["name"]
        assert routes == {"primary": f"http://{name}-primary:8000",
                          "shadow": f"http://{name}-canary:8000"}
        hooks = {w["type"]: w["url"] for w in canary["spec"]["analysis"]["webhooks"]}
        assert hooks == {
            "confirm-promotion": "http://vllm-cutover.llm.svc:8001/admin/gate/flagger",
            "rollback": "http://vllm-cutover.llm.svc:8001/admin/gate/flagger/rollback"}


def test_generated_rules_and_templates_are_current():
    for path, text in rendered_files().items():
        assert (ROOT / path).read_text() == text, f"{path}: run python -m proxy.fleet.rules"


def test_promtool_accepts_the_rules():
    promtool = shutil.which("promtool")
    assert promtool, "promtool comes with Debian's prometheus package (scripts/dev.sh)"
    done = subprocess.run([promtool, "check", "rules",
                           str(ROOT / "deploy/prometheus/vllm-cutover-rules.yml")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "SUCCESS: 21 rules found" in done.stdout, done


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl (kustomize) here")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubectl_kustomize_renders_the_same(overlay):
    done = subprocess.run(["kubectl", "kustomize", str(KUBE / overlay)], capture_output=True,
                          text=True, timeout=60, check=True)
    theirs = sorted((o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
                    for o in yaml.safe_load_all(done.stdout) if o)
    ours = sorted((o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
                  for o in render(KUBE / overlay))
    assert theirs == ours
