# SPDX-License-Identifier: Apache-2.0
"""Engine settings of one simulated GPU server (frozen; see ``engine`` for the calibration)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

from regions.simulator.errors import SimConfigError

_MAY_BE_ZERO = frozenset({"decode_alpha", "decode_context_ms_per_ktoken", "kv_watermark",
                          "max_catchup_s", "max_loras", "max_cpu_loras", "lora_load_s"})


SCHEDULING_POLICIES = ("fcfs", "priority")
# a sequence's context when a caller does not say: about the Azure conversation trace's mean
# (1,155 prompt + 129 output tokens, half of them generated on average)
CONTEXT_TOKENS = 1200


@dataclass(frozen=True)
class EngineConfig:
    """Continuous-batching parameters of one simulated server, in model seconds.

    - ``speed``: GPU speed factor dividing every duration (1.0 H100-like, 0.6 A100,
      0.4 throttled).
    - ``max_num_seqs``: sequences decoded together at most (vLLM's ``--max-num-seqs``;
      default 256, vLLM's own on GPUs under 70 GiB, ``EngineArgs.get_batch_defaults``).
    - ``kv_cache_tokens``: KV-cache budget in tokens, counting prompt and generated tokens
      of running sequences (default 432,000: an 8B model with 8 KV heads of 128 dimensions
      in 32 layers holds 128 KiB of bf16 KV per token, and an 80 GB GPU at vLLM's
      ``gpu_memory_utilization`` 0.9 leaves about 54 GB for it after 16 GB of weights).
    - ``max_model_len``: longest prompt + output accepted; longer requests get HTTP 400.
    - ``max_prefill_tokens``: prompt tokens prefilled in one iteration at most (vLLM's
      ``--max-num-batched-tokens``); a single longer prompt is still admitted alone. With
      ``chunked_prefill``, the tokens of one iteration at most, decodes included.
    - ``chunked_prefill``: vLLM v1's scheduling (its default): every iteration decodes each
      running sequence and spends what is left of ``max_prefill_tokens`` on prompt chunks,
      oldest first; see ``batching``.
    - ``prefill_tokens_per_s``: prefill throughput at speed 1.0.
    - ``decode_base_ms``, ``decode_alpha``, ``decode_context_ms_per_ktoken``: one decode step
      of a batch of ``b`` sequences holding ``t`` context tokens in all takes
      ``(decode_base_ms * (1 + decode_alpha * (b - 1)) + decode_context_ms_per_ktoken *
      t / 1000) / speed`` milliseconds. The context term is attention reading every
      sequence's KV once a step: 128 KiB a token (above) at an H100 SXM's 3.35 TB/s of HBM3
      is 0.039 ms per 1,000 tokens at full bandwidth, 0.05 at the ~78 % decode-attention
      kernels reach. ``decode_alpha`` (0.035) is the per-sequence rest: with the Azure
      conversation trace's mean context (about 1,200 tokens) a sequence adds what 0.04
      alone added before context counted, so a 12k-token context costs twice a 1k one.
    - ``kv_watermark``: share of the KV budget kept free when admitting new sequences, so
      running ones can grow before anything must be preempted (vLLM's default is 1%).
    - ``prefix_caching``: vLLM's automatic prefix caching (on by default in vLLM v1): a
      prompt's leading blocks found in the KV cache are reused, not prefilled again; see
      ``prefix_cache``.
    - ``block_size``: tokens per KV block (vLLM's ``--block-size``, 16 on CUDA).
    - ``max_catchup_s``: how far the engine may run behind the clock and catch up (absorbs
      event-loop jitter so throughput does not depend on how busy the process is).
    - ``max_loras``: LoRA adapters a batch may use at once (vLLM's ``--max-loras``; 0, the
      default, serves no adapter, as without ``--enable-lora``); a request whose adapter
      would be one too many waits while others pass it.
    - ``max_cpu_loras``: adapters kept loaded in memory, least recently used evicted
      (vLLM's ``--max-cpu-loras``; 0: as many as ``max_loras``, vLLM's default).
    - ``lora_load_s``: reading one adapter's weights into memory. The engine does nothing
      else meanwhile (vLLM loads between iterations, in its engine core), so a load stalls
      every running sequence; a request whose adapter was evicted pays it again at its
      admission. The default, 0.5 s, is an assumption (a rank-16 adapter of an 8B model
      is some 40 MB of safetensors plus its conversion), not a measurement.
    - ``scheduling_policy``: vLLM's ``--scheduling-policy``: ``fcfs`` (its default; a
      request with a non-zero ``priority`` is refused, as vLLM refuses it) or ``priority``
      (the waiting queue ordered by priority, lower first, then arrival; when the KV cache
      runs out, the running sequence of the lowest priority, latest arrival, is preempted,
      as vLLM v1's scheduler does; nothing is preempted to admit a waiting request).
    """

    speed: float = 1.0
    max_num_seqs: int = 256
    kv_cache_tokens: int = 432_000
    max_model_len: int = 16_384
    max_prefill_tokens: int = 16_384
    prefill_tokens_per_s: float = 16_000.0
    decode_base_ms: float = 12.0
    decode_alpha: float = 0.035
    decode_context_ms_per_ktoken: float = 0.05
    kv_watermark: float = 0.01
    max_catchup_s: float = 0.5
    chunked_prefill: bool = False
    prefix_caching: bool = True
    block_size: int = 16
    max_loras: int = 0
    max_cpu_loras: int = 0
    lora_load_s: float = 0.5
    scheduling_policy: str = "fcfs"

    def __post_init__(self) -> None:
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise SimConfigError(f"engine.scheduling_policy: one of "
                                 f"{', '.join(SCHEDULING_POLICIES)}, got "
                                 f"{self.scheduling_policy!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("chunked_prefill", "prefix_caching", "scheduling_policy"):
                continue
            if f.name in _MAY_BE_ZERO:
                if value < 0:
                    raise SimConfigError(f"engine.{f.name}: must be >= 0, got {value!r}")
            elif not value > 0:
                raise SimConfigError(f"engine.{f.name}: must be > 0, got {value!r}")
        if self.max_cpu_loras and self.max_cpu_loras < self.max_loras:
            raise SimConfigError(f"engine.max_cpu_loras: {self.max_cpu_loras} is below "
                                 f"max_loras {self.max_loras} (vLLM refuses that too)")
        if self.kv_watermark >= 1:
            raise SimConfigError(f"engine.kv_watermark: must be < 1, got {self.kv_watermark!r}")
        if self.chunked_prefill and self.max_prefill_tokens <= self.max_num_seqs:
            raise SimConfigError(
                f"engine.max_prefill_tokens: {self.max_prefill_tokens} leaves no room for a "
                f"prompt chunk beside {self.max_num_seqs} decodes (chunked_prefill)"
            )
        if self.kv_cache_tokens < self.max_model_len:
            raise SimConfigError(
                f"engine.kv_cache_tokens: {self.kv_cache_tokens} is smaller than "
                f"max_model_len {self.max_model_len}; the longest request could never run"
            )

    @property
    def adapter_slots(self) -> int:
        """Adapters held loaded at once (``max_cpu_loras``, at least ``max_loras``)."""
        return max(self.max_cpu_loras, self.max_loras)

    def chunked(self, tokens: int) -> EngineConfig:
        """This engine with vLLM v1's chunked prefill, ``tokens`` per iteration."""
        return dataclasses.replace(self, chunked_prefill=True, max_prefill_tokens=tokens)

    def prefill_seconds(self, tokens: int, slow_factor: float = 1.0) -> float:
        """Model seconds to prefill ``tokens`` prompt tokens."""
        return tokens / self.prefill_tokens_per_s / self.speed * slow_factor

    def decode_step_seconds(self, batch: int, slow_factor: float = 1.0,
                            context_tokens: int | None = None) -> float:
        """Model seconds of one decode step over ``batch`` running sequences holding
        ``context_tokens`` KV tokens in all (None: ``CONTEXT_TOKENS`` each)."""
        if context_tokens is None:
            context_tokens = batch * CONTEXT_TOKENS
        ms = (self.decode_base_ms * (1 + self.decode_alpha * (batch - 1))
              + self.decode_context_ms_per_ktoken * context_tokens / 1000)
        return ms / 1000.0 / self.speed * slow_factor

    def mixed_step_seconds(
        self, decodes: int, prefill_tokens: int, slow_factor: float = 1.0,
        context_tokens: int | None = None,
    ) -> float:
        """Model seconds of one chunked-prefill iteration: ``decodes`` running sequences
        (``context_tokens`` KV tokens in all) decode beside ``prefill_tokens`` prompt
        tokens. Decoding is bound by memory reads and prefill by compute, so the two overlap
        (Sarathi-Serve's piggybacked decodes): the step takes the longer of the two."""
        decode = (self.decode_step_seconds(decodes, slow_factor, context_tokens)
                  if decodes else 0.0)
        return max(decode, self.prefill_seconds(prefill_tokens, slow_factor))
