# SPDX-License-Identifier: Apache-2.0
"""``engines.kv_events``: payloads made with vLLM's own struct options (fixtures, see
fixtures/vllm_kv_events/README.md) decode field by field; ours encode byte for byte as
vLLM's map form; malformed payloads raise ``KvEventDecodeError`` saying where."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engines.errors import EngineDataError
from engines.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    KvEventDecodeError,
    decode_batch,
    encode_batch,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm_kv_events"
TS = 1718000000.25
H1, H2, H3, PARENT = b"\x11" * 32, b"\x22" * 32, b"\x33" * 32, b"\xaa" * 32
BIG = 15760518052499183552


def fixture(name: str) -> bytes:
    return bytes.fromhex((FIXTURES / f"{name}.hex").read_text(encoding="ascii"))


def pack(obj: object) -> bytes:
    return msgspec.msgpack.encode(obj)


# -- the fixtures ----------------------------------------------------------------------------


def test_fixture_files_match_their_script() -> None:
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    made = script.payloads()
    assert sorted(made) == sorted(p.stem for p in FIXTURES.glob("*.hex"))
    for name, payload in made.items():
        assert fixture(name) == payload, name


def test_map_form_at_0181ea3_every_field() -> None:
    batch = decode_batch(fixture("map_0181ea3_full"))
    assert batch == EventBatch(
        ts=TS,
        events=(
            BlockStored(
                block_hashes=(H1, H2), parent_block_hash=PARENT, token_ids=tuple(range(32)),
                block_size=16, lora_id=None, medium="GPU", lora_name=None,
                extra_keys=(None, ("mm-hash-1", 3)), group_idx=0,
                kv_cache_spec_kind="full_attention", kv_cache_spec_sliding_window=None,
            ),
            BlockRemoved(block_hashes=(H3,), medium="GPU", group_idx=0),
            AllBlocksCleared(),
        ),
        data_parallel_rank=0,
        unknown_events=0,
    )


def test_map_form_with_int_hashes_every_field() -> None:
    batch = decode_batch(fixture("map_0181ea3_int_hashes"))
    assert batch == EventBatch(
        ts=TS + 1,
        events=(
            BlockStored(
                block_hashes=(BIG, 7), parent_block_hash=None, token_ids=(1, 2, 3, 4),
                block_size=2, lora_id=3, medium="CPU", lora_name="adapter-a", extra_keys=None,
                group_idx=1, kv_cache_spec_kind="sliding_window",
                kv_cache_spec_sliding_window=4096,
            ),
            BlockRemoved(block_hashes=(BIG,), medium=None, group_idx=None),
        ),
        data_parallel_rank=None,
    )


def test_array_form_at_b4e69e0_every_field() -> None:
    batch = decode_batch(fixture("array_b4e69e0"))
    assert batch == EventBatch(
        ts=TS,
        events=(
            BlockStored(block_hashes=(101, -202), parent_block_hash=99, token_ids=(5, 6, 7, 8),
                        block_size=2, lora_id=None, medium=None, lora_name=None,
                        extra_keys=None, group_idx=None, kv_cache_spec_kind=None,
                        kv_cache_spec_sliding_window=None),
            BlockRemoved(block_hashes=(101,), medium=None, group_idx=None),
            AllBlocksCleared(),
        ),
        data_parallel_rank=None,
    )


def test_array_form_with_medium_every_field() -> None:
    batch = decode_batch(fixture("array_0ef0f42"))
    assert batch == EventBatch(
        ts=TS,
        events=(
            BlockStored(block_hashes=(BIG,), parent_block_hash=None, token_ids=(9, 10),
                        block_size=2, lora_id=None, medium="GPU"),
            BlockRemoved(block_hashes=(BIG,), medium="GPU"),
        ),
    )


def test_array_batch_of_map_events_every_field() -> None:
    batch = decode_batch(fixture("hybrid_pr42892"))
    assert batch == EventBatch(
        ts=TS,
        events=(
            BlockStored(block_hashes=(BIG,), parent_block_hash=None, token_ids=tuple(range(16)),
                        block_size=16, lora_id=None, medium="GPU", lora_name=None,
                        extra_keys=(None,), group_idx=0, kv_cache_spec_kind="full_attention"),
        ),
        data_parallel_rank=0,
    )


@pytest.mark.parametrize("name", ["map_0181ea3_full", "map_0181ea3_int_hashes"])
def test_encoding_is_byte_for_byte_vllms_map_form(name: str) -> None:
    assert encode_batch(decode_batch(fixture(name))) == fixture(name)


@pytest.mark.parametrize("name", ["array_b4e69e0", "array_0ef0f42", "hybrid_pr42892"])
def test_older_forms_reencode_to_the_same_batch(name: str) -> None:
    batch = decode_batch(fixture(name))
    assert decode_batch(encode_batch(batch)) == batch


# -- round trips and tolerance ---------------------------------------------------------------

hashes = st.lists(st.one_of(st.binary(min_size=32, max_size=32),
                            st.integers(min_value=-(2**63), max_value=2**64 - 1)),
                  min_size=1, max_size=4).map(tuple)
maybe_str = st.none() | st.sampled_from(["GPU", "CPU", "adapter-a"])
maybe_int = st.none() | st.integers(min_value=0, max_value=2**31)
events = st.one_of(
    st.builds(BlockStored, block_hashes=hashes, parent_block_hash=st.none() | st.integers(0, 9),
              token_ids=st.lists(st.integers(0, 200_000), max_size=8).map(tuple),
              block_size=st.integers(1, 256), lora_id=maybe_int, medium=maybe_str,
              lora_name=maybe_str, group_idx=maybe_int, kv_cache_spec_kind=maybe_str,
              kv_cache_spec_sliding_window=maybe_int),
    st.builds(BlockRemoved, block_hashes=hashes, medium=maybe_str, group_idx=maybe_int),
    st.just(AllBlocksCleared()),
)


@given(st.builds(EventBatch, ts=st.floats(0, 2e9), events=st.lists(events, max_size=5).map(tuple),
                 data_parallel_rank=maybe_int))
def test_round_trip(batch: EventBatch) -> None:
    assert decode_batch(encode_batch(batch)) == batch


def test_unknown_event_tags_are_skipped_and_counted() -> None:
    payload = pack({"ts": 1.0, "events": [
        {"type": "BlockPinned", "block_hashes": [1]},
        ["BlockStored", [5], None, [1, 2], 2, None, "GPU", None],
        ["SomethingNew", 1, 2, 3],
        {"type": "AllBlocksCleared"},
    ]})
    batch = decode_batch(payload)
    assert batch.unknown_events == 2
    assert batch.events == (BlockStored((5,), None, (1, 2), 2, medium="GPU"), AllBlocksCleared())


def test_fields_from_newer_vllm_are_ignored() -> None:
    array_event = ["BlockRemoved", [5], "GPU", 0, "LOCAL", "tier-2"]  # locality, ownership
    map_event = {"type": "BlockRemoved", "block_hashes": [6], "medium": None, "locality": "x"}
    batch = decode_batch(pack([2.0, [array_event, map_event], 1, "future"]))
    assert batch.events == (BlockRemoved((5,), "GPU", 0), BlockRemoved((6,), None))
    assert batch.data_parallel_rank == 1


def test_nested_extra_keys_read_as_tuples() -> None:
    (event,) = decode_batch(nested(4)).events
    assert isinstance(event, BlockStored) and event.extra_keys == ((((None,),),),)


def test_integer_timestamp_reads_as_float() -> None:
    assert decode_batch(pack([3, []])).ts == 3.0


# -- malformed payloads ----------------------------------------------------------------------

STORED = {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
          "token_ids": [1], "block_size": 1}


def batch_of(*evs: object) -> bytes:
    return pack({"ts": 1.0, "events": list(evs)})


def nested(depth: int) -> bytes:
    """A stored event whose extra keys nest ``depth`` arrays deep."""
    return batch_of({**STORED, "extra_keys": "@"}).replace(
        pack("@"), b"\x91" * depth + b"\xc0")


@pytest.mark.parametrize(("payload", "says"), [
    (b"", "not msgpack"),
    (b"\xc1", "not msgpack"),
    (pack({"ts": 1.0, "events": []})[:-1], "not msgpack"),
    (pack(7), "expected a map or an array, got int"),
    (pack([1.0]), "array of 1"),
    (pack({"ts": 1.0}), "missing events"),
    (pack({"ts": "now", "events": []}), "ts: expected a number, got str"),
    (pack({"ts": True, "events": []}), "ts: expected a number, got bool"),
    (pack({"ts": 1.0, "events": {}}), "events: expected an array, got dict"),
    (pack({"ts": 1.0, "events": [], "data_parallel_rank": "0"}), "rank: expected an int"),
    (batch_of(5), "event 0: expected a tagged map or array, got int"),
    (batch_of([]), "event 0: expected a tagged map or array, got list"),
    (batch_of({"block_hashes": [1]}), "event 0: tag: expected a string, got nil"),
    (batch_of([3, [1]]), "event 0: tag: expected a string, got int"),
    (batch_of({**STORED, "block_hashes": 1}), "block_hashes: expected an array"),
    (batch_of({**STORED, "block_hashes": [1.5]}), "block_hashes[0]: expected block hashes"),
    (batch_of({**STORED, "token_ids": [1, True]}), "token_ids[1]: expected ints, got bool"),
    (batch_of({**STORED, "block_size": None}), "block_size: expected an int, got nil"),
    (batch_of({**STORED, "medium": 3}), "medium: expected a string or nil, got int"),
    (batch_of({**STORED, "extra_keys": ["x"]}), "extra_keys[0]: expected arrays or nil"),
    (batch_of(STORED, {k: v for k, v in STORED.items() if k != "token_ids"}),
     "event 1 (BlockStored): missing token_ids"),
    (batch_of(["BlockStored", [1], None, [1]]), "missing block_size"),
    (batch_of(["BlockRemoved"]), "event 0 (BlockRemoved): missing block_hashes"),
    (nested(100_000), "arrays nested too deeply"),
    (pack([1.0, [msgspec.msgpack.Ext(1, b"x")]]), "event 0: expected a tagged map or array, "
                                                  "got Ext"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_malformed_payload_raises_one_error_saying_where(payload: bytes, says: str) -> None:
    with pytest.raises(KvEventDecodeError) as caught:
        decode_batch(payload)
    assert says in str(caught.value)
    assert isinstance(caught.value, EngineDataError)
