"""Every flag of ``vllm serve``, as data: its option strings and how many values it takes.

``ddsup fake-vllm`` accepts the exact argv of a real vLLM unit (``ddsup start
--rehearse``), so it must know each vLLM flag and its arity, or a flag's value would be
mistaken for the positional model or for another flag. The table holds the parser of
``vllm serve`` of every release in :data:`VLLM_VERSIONS`, each read back from that
release's own option table, so it holds every accepted spelling: short forms (``-tp``),
``--no-…`` negations of boolean flags, and the ``--enable-…``/``--disable-…`` pairs of
vLLM's ``EnableDisableAction`` (including the hidden ``--no-enable-…`` forms). 0.34.0
(commit ``62d4bc3c7``) was read from its wheel with the heavy imports stubbed out; later
additions come from ``scripts/gen-vllm-flags``, run with an installed vLLM's Python.

One line per flag, its option strings separated by spaces; the block says the arity:

- switches take no value (``store_true`` and boolean pairs);
- one value (``--port 8000`` or ``--port=8000``);
- an optional value (``--hf-token`` alone, or with a token);
- one or more values (``--served-model-name a b``, ``--lora-modules x=/p y=/q``).

To update: ``.venv-vllm/bin/python scripts/gen-vllm-flags`` adds the installed
release's flags and spellings, checks their arities, and never drops one (users run
newer releases on GPUs than the tests install); ``tests/vllm/test_vllm_flags.py`` fails
while the table lacks a flag of the installed vLLM, and
``tests/fake_vllm/test_vllm_flags.py`` pins what the fake relies on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

VLLM_VERSION = "0.34.0"
"""The newest vLLM release whose ``vllm serve`` parser the table below holds."""

VLLM_VERSIONS = ("0.32.0", "0.34.0")
"""Every release whose parser the table holds (``scripts/gen-vllm-flags`` adds to it)."""


class Arity(enum.Enum):
    """How many values follow a flag on the command line (argparse's ``nargs``)."""

    SWITCH = 0
    ONE = 1
    OPTIONAL = "?"
    ONE_OR_MORE = "+"


@dataclass(frozen=True)
class VllmFlag:
    """One ``vllm serve`` option: every spelling of it and its arity."""

    names: tuple[str, ...]
    arity: Arity

    @property
    def name(self) -> str:
        """The canonical (first, long) spelling, used in messages."""
        return self.names[0]


_SWITCHES = """
--aggregate-engine-logging
--allow-credentials --no-allow-credentials
--allow-deprecated-quantization --no-allow-deprecated-quantization
--async-scheduling --no-async-scheduling
--checkpoint-prepare-on-startup --no-checkpoint-prepare-on-startup
--cohere-is-reasoning-model --no-cohere-is-reasoning-model
--cudagraph-metrics --no-cudagraph-metrics
--data-parallel-external-lb --no-data-parallel-external-lb -dpe
--data-parallel-hybrid-lb --no-data-parallel-hybrid-lb -dph
--data-parallel-multi-port-external-lb -dpm
--dcp-q-replicate --no-dcp-q-replicate
--disable-cascade-attn --no-disable-cascade-attn --enable-cascade-attn
--disable-chunked-mm-input --no-disable-chunked-mm-input --enable-chunked-mm-input
--disable-custom-all-reduce --no-disable-custom-all-reduce --enable-custom-all-reduce
--disable-fastapi-docs --no-disable-fastapi-docs --enable-fastapi-docs
--disable-hybrid-kv-cache-manager --no-disable-hybrid-kv-cache-manager --enable-hybrid-kv-cache-manager
--disable-log-stats
--disable-nccl-for-dp-synchronization --no-disable-nccl-for-dp-synchronization --enable-nccl-for-dp-synchronization
--disable-sliding-window --no-disable-sliding-window --enable-sliding-window
--disable-uvicorn-access-log --no-disable-uvicorn-access-log --enable-uvicorn-access-log
--enable-auto-tool-choice --no-enable-auto-tool-choice --disable-auto-tool-choice
--enable-batch-sharded-sampling --no-enable-batch-sharded-sampling --disable-batch-sharded-sampling
--enable-chunked-prefill --no-enable-chunked-prefill --disable-chunked-prefill
--enable-cumem-allocator --no-enable-cumem-allocator --disable-cumem-allocator
--enable-dbo --no-enable-dbo --disable-dbo
--enable-elastic-ep --no-enable-elastic-ep --disable-elastic-ep
--enable-ep-weight-filter --no-enable-ep-weight-filter --disable-ep-weight-filter
--enable-eplb --no-enable-eplb --disable-eplb
--enable-expert-parallel --no-enable-expert-parallel --disable-expert-parallel -ep
--enable-extensible-kv-cache --no-enable-extensible-kv-cache --disable-extensible-kv-cache
--enable-fault-tolerance --no-enable-fault-tolerance --disable-fault-tolerance
--enable-flash-late-interaction --no-enable-flash-late-interaction --disable-flash-late-interaction
--enable-flashinfer-autotune --no-enable-flashinfer-autotune --disable-flashinfer-autotune
--enable-force-include-usage --no-enable-force-include-usage --disable-force-include-usage
--enable-hc-sp --no-enable-hc-sp --disable-hc-sp
--enable-layerwise-nvtx-tracing --no-enable-layerwise-nvtx-tracing --disable-layerwise-nvtx-tracing
--enable-log-deltas --no-enable-log-deltas --disable-log-deltas
--enable-log-outputs --no-enable-log-outputs --disable-log-outputs
--enable-log-requests --no-enable-log-requests --disable-log-requests
--enable-logging-iteration-details --no-enable-logging-iteration-details --disable-logging-iteration-details
--enable-lora --no-enable-lora --disable-lora
--enable-mamba-cache-stochastic-rounding --no-enable-mamba-cache-stochastic-rounding --disable-mamba-cache-stochastic-rounding
--enable-mamba-shared-prefix-checkpoint --no-enable-mamba-shared-prefix-checkpoint --disable-mamba-shared-prefix-checkpoint
--enable-mfu-metrics --no-enable-mfu-metrics --disable-mfu-metrics
--enable-mixed-moe-lora-format --no-enable-mixed-moe-lora-format --disable-mixed-moe-lora-format
--enable-mm-embeds --no-enable-mm-embeds --disable-mm-embeds
--enable-moe-shared-loras --no-enable-moe-shared-loras --disable-moe-shared-loras
--enable-nccl-comm-suspend --no-enable-nccl-comm-suspend --disable-nccl-comm-suspend
--enable-offline-docs --no-enable-offline-docs --disable-offline-docs
--enable-per-request-metrics --no-enable-per-request-metrics --disable-per-request-metrics
--enable-prefix-caching --no-enable-prefix-caching --disable-prefix-caching
--enable-prompt-embeds --no-enable-prompt-embeds --disable-prompt-embeds
--enable-prompt-tokens-details --no-enable-prompt-tokens-details --disable-prompt-tokens-details
--enable-request-id-headers --no-enable-request-id-headers --disable-request-id-headers
--enable-return-routed-experts --no-enable-return-routed-experts --disable-return-routed-experts
--enable-scale-out --no-enable-scale-out --disable-scale-out
--enable-server-load-tracking --no-enable-server-load-tracking --disable-server-load-tracking
--enable-shm-tensor-arena --no-enable-shm-tensor-arena --disable-shm-tensor-arena
--enable-sleep-mode --no-enable-sleep-mode --disable-sleep-mode
--enable-ssl-refresh --no-enable-ssl-refresh --disable-ssl-refresh
--enable-tokenizer-info-endpoint --no-enable-tokenizer-info-endpoint --disable-tokenizer-info-endpoint
--enable-tower-connector-lora --no-enable-tower-connector-lora --disable-tower-connector-lora
--enable-trace-replay --no-enable-trace-replay --disable-trace-replay
--enforce-eager --no-enforce-eager
--exclude-tools-when-tool-choice-none --no-exclude-tools-when-tool-choice-none
--fail-on-environ-validation --no-fail-on-environ-validation
--fully-sharded-loras --no-fully-sharded-loras
--grpc
--headless
--interleave-mm-strings --no-interleave-mm-strings
--jit-monitor-verbose --no-jit-monitor-verbose
--kv-cache-metrics --no-kv-cache-metrics
--kv-sharing-fast-prefill --no-kv-sharing-fast-prefill
--language-model-only --no-language-model-only
--log-error-stack --no-log-error-stack
--long-prefill-token-threshold-adaptive --no-long-prefill-token-threshold-adaptive
--mm-device-do-normalize --no-mm-device-do-normalize
--mm-encoder-only --no-mm-encoder-only
--monokernel --no-monokernel
--numa-bind --no-numa-bind
--ray-workers-use-nsight --no-ray-workers-use-nsight
--return-sampling-mask --no-return-sampling-mask
--return-tokens-as-token-ids --no-return-tokens-as-token-ids
--scheduler-reserve-full-isl --no-scheduler-reserve-full-isl
--shuffle-safetensors-files --no-shuffle-safetensors-files
--skip-mm-profiling --no-skip-mm-profiling
--skip-tokenizer-init --no-skip-tokenizer-init
--sleep-mode-offload-cudagraph --no-sleep-mode-offload-cudagraph
--specialize-active-lora --no-specialize-active-lora
--swa-bounded-replay --no-swa-bounded-replay
--tokens-only --no-tokens-only
--trust-remote-code --no-trust-remote-code
--trust-request-chat-template --no-trust-request-chat-template
--trust-request-mm-kwargs --no-trust-request-mm-kwargs
--use-fp64-gumbel --no-use-fp64-gumbel
--use-replayssm --no-use-replayssm
--use-tqdm-on-load --no-use-tqdm-on-load
"""

_ONE_VALUE = """
--additional-config
--all2all-backend
--allowed-headers
--allowed-local-media-path
--allowed-methods
--allowed-origins
--anthropic-disabled-thinking-effort
--api-server-count -asc
--attention-backend
--attention-config -ac
--aux-output-config
--block-size
--cache-aware-admission-threshold
--cache-aware-admission-window
--chat-template
--chat-template-content-format
--code-revision
--cohere-format
--compilation-config -cc
--config
--config-format
--convert
--cp-kv-cache-interleave-size
--cpu-distributed-timeout-seconds
--cpu-offload-gb
--custom-histogram-buckets
--data-parallel-address -dpa
--data-parallel-backend -dpb
--data-parallel-rank -dpn
--data-parallel-rpc-port -dpp
--data-parallel-size -dp
--data-parallel-size-local -dpl
--data-parallel-start-rank -dpr
--data-parallel-supervisor-port
--dbo-decode-token-threshold
--dbo-prefill-token-threshold
--dcp-comm-backend
--dcp-kv-cache-interleave-size
--decode-context-parallel-size -dcp
--default-chat-template-kwargs
--default-mm-loras
--device-ids
--diffusion-config -dc
--disable-access-log-for-endpoints
--distributed-executor-backend
--distributed-timeout-seconds
--download-dir
--dp-supervisor-probe-failure-threshold
--dp-supervisor-probe-interval-s
--dp-supervisor-probe-timeout-s
--dp-sync-interval
--dtype
--ec-manager-config
--ec-transfer-config
--elastic-ep-max-dp-size
--engram-config
--eplb-config
--expert-placement-strategy
--fault-tolerance-config
--fingerprint-mode
--fingerprint-value
--gdn-prefill-backend
--generation-config
--gpu-memory-utilization --device-memory-utilization
--grpc-port
--h11-max-header-count
--h11-max-incomplete-event-size
--headless-client-handshake-address
--hf-config-path
--hf-overrides
--host
--io-processor-plugin
--ir-op-priority
--jit-monitor-mode
--kda-decode-backend
--kda-prefill-backend
--kernel-config
--kv-cache-dtype
--kv-cache-memory-bytes
--kv-cache-metrics-sample
--kv-events-config
--kv-offloading-backend
--kv-offloading-size
--kv-transfer-config
--limit-mm-per-prompt
--linear-backend
--load-format
--log-config-file
--log-level
--logging-config
--logprobs-mode
--long-prefill-token-threshold
--lora-dtype
--mamba-backend
--mamba-block-size
--mamba-cache-dtype
--mamba-cache-mode
--mamba-cache-philox-rounds
--mamba-ssm-cache-dtype
--mamba-ssu-algorithm
--master-addr
--master-port
--max-cpu-loras
--max-cudagraph-capture-size
--max-log-len
--max-logprobs
--max-lora-cls-labels
--max-lora-rank
--max-loras
--max-model-len
--max-num-active-seqs
--max-num-batched-tokens
--max-num-inflight-kv-loads
--max-num-queued-reqs
--max-num-queued-tokens
--max-num-scheduled-tokens
--max-num-seqs
--max-parallel-loading-workers
--media-io-kwargs
--middleware
--mm-encoder-attn-backend
--mm-encoder-attn-dtype
--mm-encoder-fp8-scale-path
--mm-encoder-fp8-scale-save-margin
--mm-encoder-fp8-scale-save-path
--mm-encoder-tp-mode
--mm-hasher-algorithm
--mm-ipc-gpu-memory-gb
--mm-processor-cache-gb
--mm-processor-cache-type
--mm-processor-device
--mm-processor-kwargs
--mm-shm-cache-max-object-size-mb
--mm-tensor-ipc
--model
--model-class-overrides
--model-impl
--model-loader-extra-config
--moe-backend
--nnodes -n
--node-rank -r
--num-gpu-blocks-override
--offload-backend
--offload-group-size
--offload-num-in-group
--offload-prefetch-step
--optimization-level
--otlp-traces-endpoint
--override-generation-config
--per-request-spec-decode-metrics
--performance-mode
--pipeline-parallel-size -pp
--pooler-config
--port
--prefill-context-parallel-size -pcp
--prefill-schedule-interval
--prefix-cache-retention-interval
--prefix-caching-hash-algo
--prefix-match-unit
--profiler-config
--pt-load-map-location
--quantization -q
--quantization-config
--reasoning-config
--reasoning-effort-map
--reasoning-parser
--reasoning-parser-plugin
--renderer-num-workers
--replayssm-buffer-len
--response-role
--revision
--root-path
--runner
--safetensors-load-strategy
--safetensors-prefetch-block-size
--safetensors-prefetch-num-threads
--scheduler-cls
--scheduling-policy
--seed
--show-hidden-metrics-for-version
--shutdown-timeout
--sleep-mode-backend
--sparse-indexer-topk-backend
--spec-method
--spec-model
--spec-tokens
--speculative-config -sc
--sse-keep-alive-interval
--ssl-ca-certs
--ssl-cert-reqs
--ssl-certfile
--ssl-ciphers
--ssl-keyfile
--stream-interval
--structured-outputs-config
--tensor-parallel-size -tp
--tokenizer
--tokenizer-mode
--tokenizer-revision
--tool-call-parser
--tool-parser-plugin
--tool-server
--tool-strict-level
--ubatch-size
--uds
--uvicorn-log-level
--video-pruning-method
--video-pruning-rate
--watchdog-config
--watermark
--watermark-config
--weight-transfer-config
--worker-cls
--worker-extension-cls
"""

_OPTIONAL_VALUE = """
--hf-token
"""

_ONE_OR_MORE_VALUES = """
--allowed-media-domains
--api-key
--collect-detailed-traces
--cpu-offload-params
--cudagraph-capture-sizes
--ignore-patterns
--kv-cache-dtype-skip-layers
--logits-processors
--lora-modules
--lora-target-modules
--numa-bind-cpus
--numa-bind-nodes
--offload-params
--served-model-name
--sleep-preserve-parameter-names
"""


def _flags(block: str, arity: Arity) -> tuple[VllmFlag, ...]:
    return tuple(VllmFlag(tuple(line.split()), arity) for line in block.splitlines() if line)


VLLM_SERVE_FLAGS: tuple[VllmFlag, ...] = (
    *_flags(_SWITCHES, Arity.SWITCH),
    *_flags(_ONE_VALUE, Arity.ONE),
    *_flags(_OPTIONAL_VALUE, Arity.OPTIONAL),
    *_flags(_ONE_OR_MORE_VALUES, Arity.ONE_OR_MORE),
)
"""Every option of ``vllm serve`` (besides ``-h/--help``); the positional is the model."""
