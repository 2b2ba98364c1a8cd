# SPDX-License-Identifier: Apache-2.0
"""The routing benchmark's matrix of conditions: each cell is a fleet, an engine, a trace, a
length mode and a load, so that no single tuning wins by accident.

Dimensions (``--cells`` selects a sub-matrix, e.g. ``slots=16,256;speeds=mixed;load=0.9``):

- ``slots``: sequence slots per server, 16, 64 or 256 (vLLM's ``max_num_seqs`` defaults to
  256 on most GPUs and 1024 on 80 GB ones: ``EngineArgs.get_batch_defaults``), or ``mixed``
  (256, 16 and 64 in turn, so each speed class mixes them). The KV budget matches: 4,096
  tokens per slot, at least the model's context length;
- ``speeds``: six servers at ``uniform`` speed 1.0, or ``mixed`` 1.0/1.0/0.6/0.6/0.4/0.4;
- ``engine``: ``whole`` (each prompt prefilled apart, the decodes waiting) or ``chunked``
  (vLLM v1's default scheduling: decodes and prompt chunks share 8,192 tokens an iteration,
  its ``max_num_batched_tokens`` for the OpenAI server on H100-class GPUs);
- ``trace``: Azure LLM inference 2023 ``azure-conv`` and ``azure-code``, Mooncake FAST'25
  ``mooncake-conv`` (its first 45 minutes, with a 128k context);
- ``lengths``: ``hidden`` (``max_tokens`` is the service's cap and the answer ends earlier, as
  real clients send it) or ``declared`` (``max_tokens`` is the true length);
- ``load``: 0.7 or 0.9 of the fleet's capacity on that trace, measured (``capacity``);
- ``prompts``: ``counts`` (a one-character prompt and the trace's count in
  ``x_prompt_tokens``) or ``shared`` (the text ``shared_prompts`` builds from the request's
  hash ids, so that a prefix cache can hit: traces with hash ids only, ``mooncake-conv``);
- ``api``: ``completions`` or ``chat`` (``/v1/chat/completions``, a multi-turn
  conversation with ``prompts=shared``).

A dimension ``--cells`` does not name takes every value, except ``prompts`` and ``api``,
which take their first (today's requests); ``prompts=shared`` cells of traces without hash
ids are left out. Labels name ``prompts`` and ``api`` only when they differ from it.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from regions.simulator.config import EngineConfig

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "slots": ("16", "64", "256", "mixed"),
    "speeds": ("uniform", "mixed"),
    "engine": ("whole", "chunked"),
    "trace": ("azure-conv", "azure-code", "mooncake-conv"),
    "lengths": ("hidden", "declared"),
    "load": ("0.7", "0.9"),
    "prompts": ("counts", "shared"),
    "api": ("completions", "chat"),
}
DEFAULT_ONLY = ("prompts", "api")  # dimensions that take their first value unless named
HASHED_TRACES = ("mooncake-conv",)  # traces whose requests carry hash ids
SPEEDS = {"uniform": (1.0,) * 6, "mixed": (1.0, 1.0, 0.6, 0.6, 0.4, 0.4)}
MIXED_SLOTS = (256, 16, 64, 256, 16, 64)
KV_TOKENS_PER_SLOT = 4096
CHUNK_TOKENS = 8192
CONTEXT = {"azure-conv": 16_384, "azure-code": 16_384, "mooncake-conv": 131_072}
SERVICE_CAP = {"azure-conv": 1000, "azure-code": 2048, "mooncake-conv": 2048}


@dataclass(frozen=True)
class Server:
    name: str
    speed: float
    engine: EngineConfig  # speed included


@dataclass(frozen=True)
class Cell:
    slots: str
    speeds: str
    engine: str
    trace: str
    lengths: str
    load: float
    prompts: str = "counts"
    api: str = "completions"

    @property
    def label(self) -> str:
        extra = "".join(f" {name}={getattr(self, name)}" for name in DEFAULT_ONLY
                        if getattr(self, name) != DIMENSIONS[name][0])
        return (f"slots={self.slots} speeds={self.speeds} engine={self.engine} "
                f"trace={self.trace} lengths={self.lengths} load={self.load:g}{extra}")

    @property
    def max_tokens(self) -> int | None:
        """The requests' ``max_tokens``: the service cap, or None (each its true length)."""
        return SERVICE_CAP[self.trace] if self.lengths == "hidden" else None

    def servers(self) -> list[Server]:
        """The six GPU servers of the cell's fleet."""
        slots = MIXED_SLOTS if self.slots == "mixed" else (int(self.slots),) * 6
        return [Server(f"gpu{i}", speed, self.engine_config(n, speed))
                for i, (speed, n) in enumerate(zip(SPEEDS[self.speeds], slots, strict=True))]

    def engine_config(self, slots: int, speed: float = 1.0) -> EngineConfig:
        context = CONTEXT[self.trace]
        config = EngineConfig(speed=speed, max_num_seqs=slots, max_model_len=context,
                              kv_cache_tokens=max(slots * KV_TOKENS_PER_SLOT, context),
                              max_prefill_tokens=max(16_384, CHUNK_TOKENS))
        return config.chunked(CHUNK_TOKENS) if self.engine == "chunked" else config

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def parse_cells(text: str = "") -> list[Cell]:
    """The cells ``text`` selects: ``;``-separated ``dimension=value,value`` filters, every
    value of a dimension it does not name (the first of ``DEFAULT_ONLY``'s)."""
    chosen = {name: list(values[:1] if name in DEFAULT_ONLY else values)
              for name, values in DIMENSIONS.items()}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, values = part.partition("=")
        if not sep or name not in DIMENSIONS:
            raise ValueError(f"--cells: expected DIMENSION=VALUE[,VALUE] with a dimension of "
                             f"{', '.join(DIMENSIONS)}, got {part!r}")
        picked = [v.strip() for v in values.split(",") if v.strip()]
        unknown = [v for v in picked if v not in DIMENSIONS[name]]
        if unknown or not picked:
            raise ValueError(f"--cells: {name} takes {', '.join(DIMENSIONS[name])}, got "
                             f"{values!r}")
        chosen[name] = picked
    cells = []
    for combo in itertools.product(*(chosen[name] for name in DIMENSIONS)):
        f = dict(zip(DIMENSIONS, combo, strict=True))
        if f["prompts"] == "shared" and f["trace"] not in HASHED_TRACES:
            continue
        cells.append(Cell(slots=f["slots"], speeds=f["speeds"], engine=f["engine"],
                          trace=f["trace"], lengths=f["lengths"], load=float(f["load"]),
                          prompts=f["prompts"], api=f["api"]))
    if not cells:
        raise ValueError(f"--cells: prompts=shared needs a trace with hash ids "
                         f"({', '.join(HASHED_TRACES)}), got {text!r}")
    return cells
