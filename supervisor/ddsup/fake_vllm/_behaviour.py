"""How a fake vLLM lane behaves: every knob of ``ddsup fake-vllm`` in one frozen value.

The knobs exist so tests and rehearsals can make a lane slow to start, slow per token,
short of capacity, unhealthy, or dead at a chosen moment. They are validated here once,
so the server code can trust them and a bad flag is reported as a usage error that names
the flag instead of failing later inside the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ddsup._errors import UsageError

DEFAULT_MODEL = "fake-model"
DEFAULT_MAX_TOKENS = 16
DEFAULT_MAX_MODEL_LEN = 4096
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's own default for --max-num-seqs
DEFAULT_SHUTDOWN_TIMEOUT = 0.0  # vLLM's own default: in-flight requests are aborted at once


@dataclass(frozen=True)
class LoraModule:
    """A LoRA adapter of ``--lora-modules``: served as the model ``name``.

    ``base_model_name`` is the ``parent`` in ``/v1/models`` (default: the first served
    name), as vLLM shows it.
    """

    name: str
    path: str
    base_model_name: str | None = None


@dataclass(frozen=True)
class Behaviour:
    """The validated configuration of one fake vLLM server.

    ``model`` is vLLM's model (``vllm serve MODEL``: a path or hub id, the ``root`` of
    its ``/v1/models`` cards); it is served under ``served_model_names`` (aliases: the
    first is the name in answers and metrics labels), or under its own name when there
    are none, and LoRA adapters under their own names. ``lane_id`` is the identity a
    test uses to tell lanes apart; it defaults to the port (``None`` here means "use the
    bound port"). Optional times are ``None`` when off. ``api_keys`` stay out of
    ``repr``. ``ignore_sigterm``, ``headless`` and the ``engine_*`` and parallelism knobs
    concern the process and are acted on by the command line only;
    :func:`serve_fake_vllm` uses the rest.
    """

    host: str = "127.0.0.1"
    port: int = 0
    model: str = DEFAULT_MODEL
    served_model_names: tuple[str, ...] = ()
    lora_modules: tuple[LoraModule, ...] = ()
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    lane_id: str | None = None
    startup_delay: float = 0.0
    ttft: float = 0.0
    tokens_per_second: float = 0.0
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    crash_after_requests: int | None = None
    crash_after_seconds: float | None = None
    ignore_sigterm: bool = False
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    spawn_engine: bool = False
    engine_pid_file: Path | None = None
    engine_setsid: bool = True
    engine_outlives_server: bool = False
    engine_clear_env: bool = False
    headless: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    fail_health: bool = False
    fail_health_after: float | None = None

    def __post_init__(self) -> None:
        _check(0 <= self.port <= 65535, "--port", "must be between 0 and 65535")
        _check(bool(self.model.strip()), "--model", "must not be empty")
        names = [*self.served_model_names, *(lora.name for lora in self.lora_modules)]
        _check(all(n.strip() for n in names), "--served-model-name", "must not be empty")
        _check(len(set(names)) == len(names), "--lora-modules", "names must be unique")
        _check(self.lane_id is None or bool(self.lane_id), "--lane-id", "must not be empty")
        for flag, value in (
            ("--startup-delay", self.startup_delay),
            ("--ttft", self.ttft),
            ("--tokens-per-second", self.tokens_per_second),
            ("--shutdown-timeout", self.shutdown_timeout),
            ("--crash-after-seconds", self.crash_after_seconds),
            ("--fail-health-after", self.fail_health_after),
        ):
            _check(value is None or value >= 0, flag, "must not be negative")
        for flag, count in (
            ("--max-num-seqs", self.max_num_seqs),
            ("--default-max-tokens", self.default_max_tokens),
            ("--max-model-len", self.max_model_len),
            ("--crash-after-requests", self.crash_after_requests),
            ("--tensor-parallel-size", self.tensor_parallel_size),
            ("--pipeline-parallel-size", self.pipeline_parallel_size),
            ("--nnodes", self.nnodes),
        ):
            _check(count is None or count >= 1, flag, "must be at least 1")
        _check(0 <= self.node_rank < self.nnodes, "--node-rank", "must be in [0, --nnodes)")
        for flag, on in (
            ("--engine-pid-file", self.engine_pid_file is not None),
            ("--no-engine-setsid", not self.engine_setsid),
            ("--engine-outlives-server", self.engine_outlives_server),
            ("--engine-clear-env", self.engine_clear_env),
        ):
            _check(not on or self.spawn_engine, flag, "needs --spawn-engine")

    def served_names(self) -> tuple[str, ...]:
        """The names the base model answers to; the first is the one in answers."""
        return self.served_model_names or (self.model,)

    def lane(self, bound_port: int) -> str:
        """The lane identity served in ``x-fake-vllm-lane`` and in every generated text."""
        return self.lane_id if self.lane_id is not None else str(bound_port)

    def token_interval(self) -> float:
        """Seconds between two generated tokens; 0 when tokens come as fast as possible."""
        return 1.0 / self.tokens_per_second if self.tokens_per_second > 0 else 0.0


def _check(ok: bool, flag: str, message: str) -> None:
    if not ok:
        raise UsageError(f"fake-vllm: {flag} {message}")
