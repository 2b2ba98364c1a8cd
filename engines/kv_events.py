# SPDX-License-Identifier: Apache-2.0
"""vLLM's KV-cache events (prefix-cache blocks stored and removed) as msgpack payloads, and
our typed copies of them. Pure: no sockets (``kv_event_publisher``/``kv_event_subscriber``
move the payloads).

The format is vLLM's ``vllm/distributed/kv_events.py``; at commit
0181ea3173e53eea8cf04a86891488e3dc89bb34 both the batch and its events are msgspec Structs
with ``omit_defaults=True, gc=False``, the events also ``tag=True``, so on the wire:

- a batch is a map ``{"ts": float, "events": [...], "data_parallel_rank": int}``
  (``data_parallel_rank`` left out when None);
- an event is a map whose first key ``"type"`` is the class name (``"BlockStored"``,
  ``"BlockRemoved"``, ``"AllBlocksCleared"``), then every field without a default (even
  when None), then the fields with a default that are not None;
- a block hash is ``ExternalBlockHash = bytes | int`` (``vllm/v1/core/kv_cache_utils.py``):
  32 sha256 bytes, or an int (masked to 64 bits) when vLLM runs with
  ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``.

Older vLLM declared the structs ``array_like=True`` (commit
b4e69e0af33f4698e157a262cc787fe61983cd3d, the v0.9 era: batch ``[ts, events]``, events
``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id]``), and
after vLLM PR #42892 an array batch holds map events (as reported in
llm-d/llm-d-kv-cache#661, and seen in vLLM v0.26.0's stream, volcano-sh/kthena#1535).
``decode_batch`` reads all of them, batch and each event independently; fields are only
ever appended, so the array form is read positionally in the order the dataclasses below
declare, a missing trailing field reads as None and an extra one is ignored.
``encode_batch`` writes the map form of the commit above.
``tests/engines/fixtures/vllm_kv_events/`` holds payloads made with vLLM's own struct
options.

Exception tree::

    EngineDataError (ValueError)
        KvEventDecodeError       a payload is not a batch of vLLM KV-cache events
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeAlias, TypeVar

import msgspec

from engines.errors import EngineDataError

BlockHash: TypeAlias = bytes | int
"""vLLM's ``ExternalBlockHash``: sha256 bytes, or an int when hashes are sent as ints."""

ExtraKeys: TypeAlias = tuple[object, ...] | None
"""One block's extra hash keys (multimodal hashes, LoRA name, cache salt), or None."""

TAG_KEY = "type"  # msgspec's default tag field

_T = TypeVar("_T")


class KvEventDecodeError(EngineDataError):
    """A payload is not msgpack, or not a batch of vLLM KV-cache events; says where."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks entered the prefix cache: ``block_hashes`` in prefix order, the first one
    chained to ``parent_block_hash`` (None at the start of a prompt)."""

    block_hashes: tuple[BlockHash, ...]
    parent_block_hash: BlockHash | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None  # "GPU", "CPU", ...; None from vLLM before it had the field
    lora_name: str | None = None
    extra_keys: tuple[ExtraKeys, ...] | None = None  # one entry per block
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left the prefix cache (evicted)."""

    block_hashes: tuple[BlockHash, ...]
    medium: str | None = None
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole prefix cache was reset."""


KvEvent: TypeAlias = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class EventBatch:
    """The events of one engine step, stamped with the engine's wall clock (seconds).
    ``unknown_events`` counts events whose tag this codec does not know, skipped when
    decoding; it is never encoded."""

    ts: float
    events: tuple[KvEvent, ...]
    data_parallel_rank: int | None = None
    unknown_events: int = 0


# -- encoding: structs declared with the options of vLLM at 0181ea3 -------------------------


class _WireEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class _WireBatch(msgspec.Struct, omit_defaults=True, gc=False):
    ts: float
    events: list[_WireEvent]
    data_parallel_rank: int | None = None


class _WireBlockStored(_WireEvent, tag="BlockStored"):
    block_hashes: Sequence[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: Sequence[int]
    block_size: int
    lora_id: int | None  # lora_id, medium, lora_name have no default in vLLM: always sent
    medium: str | None
    lora_name: str | None
    extra_keys: Sequence[ExtraKeys] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class _WireBlockRemoved(_WireEvent, tag="BlockRemoved"):
    block_hashes: Sequence[BlockHash]
    medium: str | None
    group_idx: int | None = None


class _WireAllBlocksCleared(_WireEvent, tag="AllBlocksCleared"):
    pass


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder()


def _to_wire(event: KvEvent) -> _WireEvent:
    if isinstance(event, BlockStored):
        return _WireBlockStored(**{f.name: getattr(event, f.name) for f in fields(event)})
    if isinstance(event, BlockRemoved):
        return _WireBlockRemoved(event.block_hashes, event.medium, event.group_idx)
    return _WireAllBlocksCleared()


def encode_batch(batch: EventBatch) -> bytes:
    """``batch`` as the msgpack payload vLLM (at 0181ea3) publishes: a map batch of map
    events, fields with a default left out when None."""
    wire = _WireBatch(batch.ts, [_to_wire(e) for e in batch.events], batch.data_parallel_rank)
    return _ENCODER.encode(wire)


# -- decoding: map or array form, batch and events independently ---------------------------

_EVENT_TYPES: dict[str, type[BlockStored] | type[BlockRemoved] | type[AllBlocksCleared]] = {
    "BlockStored": BlockStored,
    "BlockRemoved": BlockRemoved,
    "AllBlocksCleared": AllBlocksCleared,
}
_FIELD_ORDER = {tag: tuple(f.name for f in fields(cls)) for tag, cls in _EVENT_TYPES.items()}
_REQUIRED = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size"),
    "BlockRemoved": ("block_hashes",),
    "AllBlocksCleared": (),
}


def decode_batch(payload: bytes) -> EventBatch:
    """A vLLM KV-event payload, map or array form, -> ``EventBatch``. Events with an
    unknown tag are skipped and counted in ``unknown_events``; anything else that is not
    what vLLM sends raises ``KvEventDecodeError``."""
    try:
        return _decode_batch(payload)
    except RecursionError:
        raise KvEventDecodeError("KV-event payload: arrays nested too deeply") from None


def _decode_batch(payload: bytes) -> EventBatch:
    try:
        raw = _DECODER.decode(payload)
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        raise KvEventDecodeError(f"KV-event payload is not msgpack: {exc}") from None
    if isinstance(raw, Mapping):
        missing = [k for k in ("ts", "events") if k not in raw]
        if missing:
            raise KvEventDecodeError(f"KV-event batch: missing {', '.join(missing)}")
        ts, events, rank = raw["ts"], raw["events"], raw.get("data_parallel_rank")
    elif isinstance(raw, list):
        if len(raw) < 2:
            raise KvEventDecodeError(f"KV-event batch: array of {len(raw)}, expected [ts, events]")
        ts, events, rank = raw[0], raw[1], raw[2] if len(raw) > 2 else None
    else:
        raise KvEventDecodeError(f"KV-event batch: expected a map or an array, got {_kind(raw)}")
    if isinstance(ts, bool) or not isinstance(ts, float | int):
        raise KvEventDecodeError(f"KV-event batch: ts: expected a number, got {_kind(ts)}")
    if not isinstance(events, list):
        raise KvEventDecodeError(f"KV-event batch: events: expected an array, got {_kind(events)}")
    decoded: list[KvEvent] = []
    for index, item in enumerate(events):
        event = _decode_event(item, f"KV-event batch: event {index}")
        if event is not None:
            decoded.append(event)
    return EventBatch(
        ts=float(ts),
        events=tuple(decoded),
        data_parallel_rank=_check(_opt(_is_int), rank, "an int or nil",
                                  "KV-event batch: data_parallel_rank"),
        unknown_events=len(events) - len(decoded),
    )


def _decode_event(item: object, where: str) -> KvEvent | None:
    """One event, map or array form; None for an unknown tag."""
    if isinstance(item, Mapping):
        tag = item.get(TAG_KEY)
        values: Mapping[object, object] = item
    elif isinstance(item, list) and item:
        tag = item[0]
        values = dict(zip(_FIELD_ORDER.get(tag, ()) if isinstance(tag, str) else (), item[1:],
                          strict=False))
    else:
        raise KvEventDecodeError(f"{where}: expected a tagged map or array, got {_kind(item)}")
    if not isinstance(tag, str):
        raise KvEventDecodeError(f"{where}: tag: expected a string, got {_kind(tag)}")
    cls = _EVENT_TYPES.get(tag)
    if cls is None:
        return None
    where = f"{where} ({tag})"
    missing = [name for name in _REQUIRED[tag] if name not in values]
    if missing:
        raise KvEventDecodeError(f"{where}: missing {', '.join(missing)}")
    # each value checked against its field's type just above, hence Any
    args: dict[str, Any] = {name: _FIELDS[name](values[name], f"{where}: {name}")
                            for name in _FIELD_ORDER[tag] if name in values}
    return cls(**args)


# -- field checks ----------------------------------------------------------------------------


def _kind(value: object) -> str:
    return "nil" if value is None else type(value).__name__


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) or _is_int(value)


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _opt(test: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or test(value)


def _check(test: Callable[[object], bool], value: _T, expected: str, where: str) -> _T:
    if not test(value):
        raise KvEventDecodeError(f"{where}: expected {expected}, got {_kind(value)}")
    return value


def _array_of(test: Callable[[object], bool], expected: str, value: object,
              where: str) -> tuple[object, ...]:
    if not isinstance(value, list):
        raise KvEventDecodeError(f"{where}: expected an array of {expected}, got {_kind(value)}")
    for index, item in enumerate(value):
        _check(test, item, expected, f"{where}[{index}]")
    return tuple(value)


def _ints(value: object, where: str) -> tuple[object, ...]:
    """An array of ints (token ids: thousands per event, so checked without a Python loop
    per item, falling back to one to name the first bad item)."""
    if isinstance(value, list) and set(map(type, value)) <= {int}:
        return tuple(value)
    return _array_of(_is_int, "ints", value, where)


def _frozen(value: object) -> object:
    """msgpack arrays as tuples, all the way down (vLLM's extra keys are tuples)."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _extra_keys(value: object, where: str) -> object:
    if value is None:
        return None
    keys = _array_of(_opt(lambda v: isinstance(v, list)), "arrays or nil", value, where)
    return tuple(_frozen(k) for k in keys)


_FIELDS: dict[str, Callable[[object, str], object]] = {
    "block_hashes": lambda v, w: _array_of(_is_hash, "block hashes (bin or int)", v, w),
    "parent_block_hash": lambda v, w: _check(_opt(_is_hash), v, "a block hash or nil", w),
    "token_ids": _ints,
    "block_size": lambda v, w: _check(_is_int, v, "an int", w),
    "lora_id": lambda v, w: _check(_opt(_is_int), v, "an int or nil", w),
    "medium": lambda v, w: _check(_opt(_is_str), v, "a string or nil", w),
    "lora_name": lambda v, w: _check(_opt(_is_str), v, "a string or nil", w),
    "extra_keys": _extra_keys,
    "group_idx": lambda v, w: _check(_opt(_is_int), v, "an int or nil", w),
    "kv_cache_spec_kind": lambda v, w: _check(_opt(_is_str), v, "a string or nil", w),
    "kv_cache_spec_sliding_window": lambda v, w: _check(_opt(_is_int), v, "an int or nil", w),
}
