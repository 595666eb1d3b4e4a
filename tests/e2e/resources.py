"""Skip-or-fail rule for tests that need a real resource (vLLM venv, Docker engine).

Missing resource: the test is skipped on a developer machine, but FAILS when
VLLM_CUTOVER_REQUIRE_E2E=1 (CI provisions everything, so a skip there hides a break).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ENV = "VLLM_CUTOVER_REQUIRE_E2E"


def e2e_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0", "false", "no")


def skip_or_fail(reason: str) -> NoReturn:
    if e2e_required():
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1 forbids skipping)", pytrace=False)
    pytest.skip(reason)
