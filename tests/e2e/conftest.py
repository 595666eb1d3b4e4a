"""End-to-end fixtures: the tiny model and real vLLM CPU servers (images: tests/conftest.py).

Servers and images are session-scoped and shared: a suite that needs two or three vLLM
servers asks `vllm_servers.start_many(...)` from its own session/module fixture, and
asking again for the same spec returns the server already running.

    from tests.e2e.vllm_servers import VllmSpec
    from tests.e2e.servers import complete

    def test_x(vllm_servers, tiny_model, tiny_models):
        old, baseline, new = vllm_servers.start_many([
            VllmSpec(tiny_model), VllmSpec(tiny_model, replica=1),  # two identical servers
            VllmSpec(tiny_models(perturb=1)),  # computes differently, same served name
        ])
        complete(old.url, "tiny")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.tiny_model import ensure_tiny_model
from tests.e2e.vllm_servers import Trio, VllmServerFactory, VllmSpec


@pytest.fixture(scope="session")
def tiny_models(vllm_python: str) -> Callable[..., Path]:
    """`tiny_models(seed=0, perturb=0) -> Path`: perturb>0 computes differently."""

    def get(seed: int = 0, perturb: int = 0) -> Path:
        return ensure_tiny_model(vllm_python, seed=seed, perturb=perturb)

    return get


@pytest.fixture(scope="session")
def tiny_model(tiny_models: Callable[..., Path]) -> Path:
    return tiny_models()


@pytest.fixture(scope="session")
def vllm_servers(
    vllm_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServerFactory]:
    factory = VllmServerFactory(vllm_python, tmp_path_factory.mktemp("vllm-logs"))
    yield factory
    factory.close()


@pytest.fixture
def vllm_room(vllm_servers: VllmServerFactory) -> Callable[[int], None]:
    """`vllm_room(n)`: a test about to run n vLLM engines outside the factory (in
    containers, or under the launcher) makes room for them first."""
    return vllm_servers.make_room


def trio_specs(tiny_model: Path, tiny_models: Callable[..., Path]) -> list[VllmSpec]:
    """The trio's specs: a suite that needs more servers starts them together with these."""
    return [VllmSpec(tiny_model, "tiny"), VllmSpec(tiny_model, "tiny", replica=1),
            VllmSpec(tiny_models(perturb=1), "tiny")]


@pytest.fixture(scope="module")
def trio(vllm_servers: VllmServerFactory, tiny_model: Path,
         tiny_models: Callable[..., Path]) -> Trio:
    """Three servers of the tiny model (`Trio`), started concurrently, shared by the suites.

    Module-scoped: the factory may have stopped them for another suite's engines since."""
    old_a, old_b, different = vllm_servers.start_many(trio_specs(tiny_model, tiny_models))
    return Trio(old_a, old_b, different)
