"""Configuration of the simulated vLLM server (built once by the CLI or a test)."""

from __future__ import annotations

from dataclasses import dataclass


class SimConfigError(ValueError):
    """A knob has a value the simulator cannot use (the message quotes it)."""


@dataclass(frozen=True)
class SimConfig:
    """Every knob of `vllm-cutover sim`; the defaults answer instantly and never fail."""

    host: str = "127.0.0.1"
    port: int = 8000
    model_name: str = "sim-model"
    version: str = "0.32.0-sim"
    max_model_len: int = 4096
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    jitter: float = 0.0  # each delay is scaled by a uniform factor in [1 - jitter, 1 + jitter]
    tokens_per_chunk: int = 1
    min_natural_tokens: int = 16  # length range of an answer that ends by itself ("stop")
    max_natural_tokens: int = 128
    divergence_rate: float = 0.0  # of deterministic requests, the fraction whose tokens differ
    divergence_at: int | None = None  # token index of the divergence; None: hash-chosen
    error_rate: float = 0.0  # HTTP 500 instead of an answer
    reset_rate: float = 0.0  # connection dropped mid-answer
    garbage_rate: float = 0.0  # invalid SSE / JSON mid-answer
    seed: int = 0
    # Structured answers (proxy.sim.agentic): a reasoning part before the content, and the
    # one field a deterministic answer differs in ("content", "choice:N", "tool_arguments",
    # "reasoning"; None: none).
    reasoning: bool = False
    diverge_field: str | None = None

    # A tail-only slowdown: this share of requests has its first token `ttft_tail_factor`
    # times later (a kernel that stalls now and then under load; the p50 stays).
    ttft_tail_share: float = 0.0
    ttft_tail_factor: float = 1.0

    def __post_init__(self) -> None:
        self._check_diverge_field()
        if not 0.0 <= self.ttft_tail_share <= 1.0 or self.ttft_tail_factor < 1.0:
            raise SimConfigError("need 0 <= ttft_tail_share <= 1 and ttft_tail_factor >= 1, got "
                                 f"{self.ttft_tail_share!r} and {self.ttft_tail_factor!r}")
        for name in ("divergence_rate", "error_rate", "reset_rate", "garbage_rate", "jitter"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise SimConfigError(f"{name} must be between 0 and 1, got {value!r}")
        for name in ("ttft_ms", "itl_ms"):
            if getattr(self, name) < 0:
                raise SimConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.tokens_per_chunk < 1:
            raise SimConfigError(f"tokens_per_chunk must be >= 1, got {self.tokens_per_chunk!r}")
        if not 1 <= self.min_natural_tokens <= self.max_natural_tokens:
            raise SimConfigError(
                "natural token range must satisfy 1 <= min <= max, got "
                f"{self.min_natural_tokens!r}..{self.max_natural_tokens!r}"
            )
        if self.divergence_at is not None and self.divergence_at < 0:
            raise SimConfigError(f"divergence_at must be >= 0, got {self.divergence_at!r}")
        if not 0 <= self.port <= 65535:
            raise SimConfigError(f"port must be 0..65535, got {self.port!r}")
        if self.max_model_len < 2:
            raise SimConfigError(f"max_model_len must be >= 2, got {self.max_model_len!r}")

    def _check_diverge_field(self) -> None:
        field = self.diverge_field
        if field is None or field in DIVERGE_FIELDS:
            return
        number = field.removeprefix("choice:")
        if field.startswith("choice:") and number.isdigit():
            return
        raise SimConfigError(f"diverge_field must be one of {', '.join(DIVERGE_FIELDS)} or "
                             f"choice:N, got {field!r}")


DIVERGE_FIELDS = ("content", "tool_arguments", "reasoning")
