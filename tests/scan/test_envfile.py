from __future__ import annotations

from proxy.scan.envfile import find_in_env_file
from proxy.scan.model import line_and_column


def test_env_file(fixture_text) -> None:
    text = fixture_text("vllm.env")
    found = [(o.name, o.value, line_and_column(text, o.offset)) for o in find_in_env_file(text)]
    assert found == [("HF_HUB_OFFLINE", "1", (2, 1)), ("VLLM_USE_TRTLLM_FP4_GEMM", "1", (3, 8)),
                     ("VLLM_USE_FBGEMM", "0", (4, 1)), ("VLLM_LOGGING_LEVEL", "INFO", (5, 1))]


def test_quoted_value_span_is_inside_quotes() -> None:
    text = 'A="x"\n'
    [occ] = find_in_env_file(text)
    start, end = occ.site.value_span  # type: ignore[union-attr,misc]
    assert text[start:end] == "x"


def test_inline_comment_is_not_part_of_the_value() -> None:
    text = "VLLM_USE_FBGEMM=1   # fbgemm kernels\n"
    [occ] = find_in_env_file(text)
    assert occ.value == "1"
    start, end = occ.site.value_span  # type: ignore[union-attr,misc]
    assert text[start:end] == "1"
