"""The fields Argo Rollouts documents for the custom
resources in deploy/kubernetes whose CRD is not vendored in tests/deploy/crds (those are
checked against it, tests/deploy/crd_schema.py): a whitelist, so a misspelt or invented
field fails.

Sources (read through the project's search tool):
- Argo Rollouts: docs/features/bluegreen.md and docs/features/analysis.md, docs/analysis/
  web.md and prometheus.md (argoproj/argo-rollouts): Rollout spec and blueGreen fields,
  AnalysisTemplate args/metrics, the web provider (url, method, headers, body,
  timeoutSeconds, jsonPath) and the prometheus provider (address, query, timeout).
"""

from __future__ import annotations

from typing import Any

ANY = "*"  # free-form below (labels, a pod template checked on its own)
METADATA = {"name": ANY, "namespace": ANY, "labels": ANY, "annotations": ANY}
ANALYSIS_REF = {"templates": [{"templateName": ANY, "clusterScope": ANY}],
                "args": [{"name": ANY, "value": ANY, "valueFrom": ANY}]}
SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("argoproj.io/v1alpha1", "Rollout"): {
        "apiVersion": ANY, "kind": ANY, "metadata": METADATA,
        "spec": {"replicas": ANY, "selector": ANY, "template": ANY, "minReadySeconds": ANY,
                 "revisionHistoryLimit": ANY, "paused": ANY, "progressDeadlineSeconds": ANY,
                 "workloadRef": ANY,
                 "strategy": {"blueGreen": {
                     "activeService": ANY, "previewService": ANY,
                     "autoPromotionEnabled": ANY, "autoPromotionSeconds": ANY,
                     "scaleDownDelaySeconds": ANY, "scaleDownDelayRevisionLimit": ANY,
                     "previewReplicaCount": ANY, "abortScaleDownDelaySeconds": ANY,
                     "prePromotionAnalysis": ANALYSIS_REF,
                     "postPromotionAnalysis": ANALYSIS_REF,
                     "previewMetadata": ANY, "activeMetadata": ANY}}}},
    ("argoproj.io/v1alpha1", "AnalysisTemplate"): {
        "apiVersion": ANY, "kind": ANY, "metadata": METADATA,
        "spec": {"args": [{"name": ANY, "value": ANY,
                           "valueFrom": {"secretKeyRef": {"name": ANY, "key": ANY}}}],
                 "metrics": [{
                     "name": ANY, "interval": ANY, "initialDelay": ANY, "count": ANY,
                     "successCondition": ANY, "failureCondition": ANY, "failureLimit": ANY,
                     "inconclusiveLimit": ANY, "consecutiveErrorLimit": ANY,
                     "provider": {
                         "web": {"url": ANY, "method": ANY, "body": ANY, "jsonPath": ANY,
                                 "timeoutSeconds": ANY, "insecure": ANY,
                                 "headers": [{"key": ANY, "value": ANY}]},
                         "prometheus": {"address": ANY, "query": ANY, "timeout": ANY,
                                        "insecure": ANY, "headers": ANY},
                         "job": {"metadata": ANY, "spec": ANY}}}],
                 "dryRun": ANY, "measurementRetention": ANY}},
}


def unknown_fields(value: Any, schema: Any, path: str = "") -> list[str]:
    """Paths of fields `schema` does not list."""
    if schema == ANY:
        return []
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {type(value).__name__}"]
        return [p for i, item in enumerate(value)
                for p in unknown_fields(item, schema[0], f"{path}[{i}]")]
    if not isinstance(value, dict):
        return [f"{path}: expected a mapping, got {type(value).__name__}"]
    out = []
    for key, item in value.items():
        if key not in schema:
            out.append(f"{path}.{key}")
        else:
            out += unknown_fields(item, schema[key], f"{path}.{key}")
    return out
