from __future__ import annotations

from pathlib import Path

from proxy.scan.model import line_and_column
from proxy.scan.scanner import scan_paths
from proxy.scan.template import find_in_template, flatten

HELM = """\
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: "{{ .Values.image }}"
          args:
            - {{ .Values.model }}
            - --fp4-gemm-backend
            - cutlass
            - "--quantization=nvfp4"
          env:
            - name: VLLM_USE_FBGEMM
              value: "1"
          {{- with .Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
          {{- end }}
"""


def test_flatten_keeps_offsets() -> None:
    assert len(flatten(HELM)) == len(HELM)


def test_template_settings_are_found_with_lines() -> None:
    found = [(o.kind, o.name, o.value, line_and_column(HELM, o.offset)[0])
             for o in find_in_template(HELM)]
    assert ("flag", "--fp4-gemm-backend", "cutlass", 11) in found
    assert ("flag", "--quantization", "nvfp4", 13) in found
    assert ("env", "VLLM_USE_FBGEMM", "1", 15) in found


def test_unparseable_yaml_is_reported_for_a_manual_edit(tmp_path: Path, translate) -> None:
    chart = tmp_path / "templates" / "deployment.yaml"
    chart.parent.mkdir()
    chart.write_text(HELM)
    report = scan_paths([tmp_path], translate, fix=True)
    names = {(f.name, f.line, f.status) for f in report.findings}
    assert ("--fp4-gemm-backend", 11, "manual") in names
    assert all("not valid YAML" in f.note for f in report.findings)
    assert chart.read_text() == HELM and not report.fixed
