# SPDX-License-Identifier: Apache-2.0
"""The continuation of a stalled answer: what the engine is sent, what cannot be
continued, and how the tap splices the continuation into the client's stream."""

from __future__ import annotations

import json
from typing import Any

import pytest

from regions.balancer.http.continuation import NotResumable, continuation
from regions.balancer.http.stream_tap import StreamTap
from regions.balancer.types import Endpoint


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def chat_chunk(content: str | None = None, *, rid: str = "chatcmpl-1", created: int = 100,
               finish: str | None = None, role: bool = False, **delta: Any) -> bytes:
    body = {"role": "assistant", "content": ""} if role else {"content": content, **delta}
    return event({"id": rid, "object": "chat.completion.chunk", "created": created,
                  "model": "m", "choices": [{"index": 0, "delta": body,
                                             "finish_reason": finish}]})


def tapped(*pieces: bytes) -> tuple[StreamTap, bytes]:
    tap = StreamTap()
    return tap, b"".join(tap(piece) for piece in pieces)


def test_only_whole_events_pass_and_a_half_event_is_dropped_at_the_stall() -> None:
    stream = chat_chunk(role=True) + chat_chunk(" the") + chat_chunk(" model")
    cut = len(stream) - 10
    tap, out = tapped(stream[:7], stream[7:cut])
    assert out == chat_chunk(role=True) + chat_chunk(" the")
    delivered = tap.delivered()
    assert delivered is not None
    assert (delivered.text, delivered.tokens, delivered.finish) == (" the", 1, None)
    assert delivered.stream_id == b"chatcmpl-1"


def test_the_continuation_reads_as_the_same_stream() -> None:
    tap, _ = tapped(chat_chunk(role=True) + chat_chunk(" the") + chat_chunk(" model"))
    delivered = tap.delivered()
    assert delivered is not None
    tap.splice(delivered)
    usage = event({"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 205,
                   "model": "m", "choices": [],
                   "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}})
    out = tap(chat_chunk(role=True, rid="chatcmpl-2", created=205)
              + chat_chunk(" answers", rid="chatcmpl-2", created=205))
    out += tap(chat_chunk(" with", rid="chatcmpl-2", created=205, finish="stop") + usage)
    events = [json.loads(e[6:]) for e in out.split(b"\n\n") if e]
    assert [e["id"] for e in events] == ["chatcmpl-1"] * 3
    assert {e["created"] for e in events} == {100}
    assert [c["delta"].get("content") for e in events for c in e["choices"]] == \
        [" answers", " with"]  # the continuation's role-only event is gone
    assert events[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 5,
                                   "total_tokens": 15}


def chat_body(**extra: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "why"}],
                       "stream": True, "max_tokens": 10, **extra}).encode()


def delivered_of(*chunks: bytes) -> Any:
    tap, _ = tapped(*chunks)
    return tap.delivered()


def test_a_chat_continues_its_final_assistant_message() -> None:
    done = delivered_of(chat_chunk(" the"), chat_chunk(" model"))
    body = json.loads(continuation(Endpoint.CHAT, chat_body(), done))
    assert body["messages"][-1] == {"role": "assistant", "content": " the model"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["max_tokens"] == 8
    already = chat_body(messages=[{"role": "user", "content": "q"},
                                  {"role": "assistant", "content": "Sure:"}],
                        continue_final_message=True, add_generation_prompt=False)
    body = json.loads(continuation(Endpoint.CHAT, already, done))
    assert body["messages"][-1]["content"] == "Sure: the model"
    assert len(body["messages"]) == 2


def test_a_completion_continues_its_prompt() -> None:
    done = delivered_of(event({"id": "c", "choices": [{"index": 0, "text": " once"}]}))
    raw = json.dumps({"model": "m", "prompt": "Tell", "max_tokens": 5}).encode()
    body = json.loads(continuation(Endpoint.COMPLETIONS, raw, done))
    assert (body["prompt"], body["max_tokens"]) == ("Tell once", 4)


@pytest.mark.parametrize(("chunks", "raw", "why"), [
    ((chat_chunk(None, tool_calls=[{"index": 0, "id": "t", "function": {"name": "f"}}]),),
     chat_body(), "tool call"),
    ((chat_chunk(" a"),), chat_body(n=2), "more than one choice"),
    ((chat_chunk(" a"),) * 10, chat_body(), "whole max_tokens"),
    ((chat_chunk(" a"),), chat_body(messages=[{"role": "assistant", "content": [
        {"type": "text", "text": "x"}]}], continue_final_message=True), "content parts"),
    ((chat_chunk(" a"),), b"not json", "not JSON"),
])
def test_what_cannot_be_continued_says_why(chunks: tuple[bytes, ...], raw: bytes,
                                           why: str) -> None:
    with pytest.raises(NotResumable, match=why):
        continuation(Endpoint.CHAT, raw, delivered_of(*chunks))


def test_an_echoing_or_tokenized_completion_cannot_be_continued() -> None:
    done = delivered_of(event({"id": "c", "choices": [{"index": 0, "text": " x"}]}))
    for body, why in (({"prompt": "p", "echo": True}, "echoes"), ({"prompt": [1, 2]}, "one text")):
        with pytest.raises(NotResumable, match=why):
            continuation(Endpoint.COMPLETIONS, json.dumps(body).encode(), done)
