# SPDX-License-Identifier: Apache-2.0
"""Asking an engine for a stream's usage and hiding the usage event from a client that did
not ask (``usage_stream``)."""

from __future__ import annotations

import json

import pytest

from regions.balancer.http.engine_priority import with_priority
from regions.balancer.http.usage_stream import UsageEventFilter, ask_for_usage


@pytest.mark.parametrize(("raw", "want"), [
    (b'{"model":"m","stream":true}', {"model": "m", "stream": True,
                                      "stream_options": {"include_usage": True}}),
    (b'{"model": "m", "stream": true}\n', {"model": "m", "stream": True,
                                           "stream_options": {"include_usage": True}}),
    (b'{"stream":true,"stream_options":{"continuous_usage_stats":false}}',
     {"stream": True, "stream_options": {"continuous_usage_stats": False,
                                         "include_usage": True}}),
])
def test_a_request_is_made_to_ask_for_usage(raw: bytes, want: dict) -> None:
    asked = ask_for_usage(raw)
    assert asked is not None and json.loads(asked) == want


@pytest.mark.parametrize("raw", [
    b'{"stream":true,"stream_options":{"include_usage":true}}',  # asks already
    b"{}", b"[1, 2]", b"not json",
])
def test_a_request_that_asks_already_or_is_odd_is_left_alone(raw: bytes) -> None:
    assert ask_for_usage(raw) is None


TOKEN = b'data: {"id":"x","choices":[{"index":0,"text":"a"}],"usage":null}\n\n'
USAGE = (b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,'
         b'"total_tokens":5}}\n\n')
DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize("cut", [1, 7, 40, len(TOKEN), len(TOKEN) + 30, 300])
def test_the_usage_event_is_dropped_however_the_body_is_cut(cut: int) -> None:
    body = TOKEN + TOKEN + USAGE + DONE
    drop = UsageEventFilter()
    pieces = [body[i:i + cut] for i in range(0, len(body), cut)]
    out = b"".join(drop(piece) for piece in pieces) + drop.rest()
    assert out == TOKEN + TOKEN + DONE


def test_events_without_usage_pass_unchanged_and_at_once() -> None:
    drop = UsageEventFilter()
    assert drop(TOKEN) == TOKEN
    assert drop(b'data: {"choices":[]}\n\n') == b'data: {"choices":[]}\n\n'
    assert drop(DONE) == DONE and drop.rest() == b""


@pytest.mark.parametrize(("raw", "priority", "want"), [
    (b'{"model":"m"}', 3, b'{"model":"m","priority":-3}'),
    (b'{"model":"m"}\n', -2, b'{"model":"m","priority":2}'),
    (b'{"model":"m"}', 0, b'{"model":"m"}'),
    (b'{"model":"m","priority":7}', 3, b'{"model":"m","priority":7}'),
    (b"{}", 3, b"{}"),
])
def test_the_priority_is_passed_negated(raw: bytes, priority: int, want: bytes) -> None:
    assert with_priority(raw, priority) == want
