# SPDX-License-Identifier: Apache-2.0
"""Parsing a request body once into ``RequestInfo``; header sanitizing."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from regions.balancer.errors import RequestRejected
from regions.balancer.http.headers import downstream_response_headers, upstream_request_headers
from regions.balancer.http.request_info import parse_request
from regions.balancer.scheduling.output_lengths import OutputLengths
from regions.balancer.types import Endpoint

CASES = [
    (
        "completion-chars",
        Endpoint.COMPLETIONS,
        {"model": "m", "prompt": "x" * 40, "max_tokens": 7},
        {},
        (10, 7.0, 0, None),
    ),
    (
        "completion-exact-tokens",
        Endpoint.COMPLETIONS,
        {"model": "m", "prompt": "x", "x_prompt_tokens": 3000},
        {},
        (3000, 16.0, 0, None),
    ),
    (
        "declared-below-the-text-counts-the-text",  # a 4 MB prompt is not one token
        Endpoint.COMPLETIONS,
        {"model": "m", "prompt": "x" * (4 << 20), "x_prompt_tokens": 1, "max_tokens": 1},
        {},
        (1 << 20, 1.0, 0, None),
    ),
    (
        "chat-declared-below-the-messages",
        Endpoint.CHAT,
        {"model": "m", "messages": [{"role": "user", "content": "y" * 4000}],
         "x_prompt_tokens": 3, "max_tokens": 1},
        {},
        (1000 + 4, 1.0, 0, None),
    ),
    (
        "chat-default-output",
        Endpoint.CHAT,
        {"model": "m", "messages": [{"role": "user", "content": "y" * 8}], "user": "u1"},
        {},
        (2 + 4, 256.0, 0, "u1"),
    ),
    (
        "chat-max-completion-tokens",
        Endpoint.CHAT,
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5},
        {"x-director-priority": "7", "x-director-session": "s9"},
        (1 + 4, 5.0, 7, "s9"),
    ),
    (
        "embeddings",
        Endpoint.EMBEDDINGS,
        {"model": "m", "input": ["abcd", "efgh"]},
        {"x-director-priority": "-5000"},
        (2, 0.0, -1000, None),
    ),
]


@pytest.mark.parametrize(
    ("endpoint", "body", "headers", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_parse(endpoint, body, headers, expected) -> None:
    info = parse_request(endpoint, body, headers, prefill_ratio=100.0)
    assert (info.prompt_tokens, info.output_tokens, info.priority, info.session) == expected
    assert info.cost_tokens == pytest.approx(info.prompt_tokens / 100.0 + info.output_tokens)


def _lengths(prompt_chars: int, cap: int | None, output: int, n: int = 8) -> OutputLengths:
    lengths = OutputLengths()
    for _ in range(n):
        lengths.observe("m", prompt_chars // 4, cap, output)
    return lengths


@pytest.mark.parametrize(
    ("learned_cap", "learned_output", "max_tokens", "expected"),
    [
        (1000, 20, 50, 50 * 0.02),  # a share of 2% of the cap, of this request's cap
        (None, 20, None, 20.0),  # no caps: the mean answer
        (None, 80, 50, 50.0),  # a learned mean above this request's cap: the cap
        (100, 100, None, 100.0),  # no cap: the mean answer, capped ones included
        (None, None, 50, 50.0),  # nothing learned: the cap
    ],
    ids=["share", "mean", "capped", "no-cap", "nothing"],
)
def test_learned_output(learned_cap, learned_output, max_tokens, expected) -> None:
    lengths = (
        _lengths(400, learned_cap, learned_output) if learned_output is not None else None
    )
    body = {"model": "m", "prompt": "x" * 400}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    info = parse_request(Endpoint.COMPLETIONS, body, {}, prefill_ratio=100.0, lengths=lengths)
    assert info.output_tokens == pytest.approx(expected)
    assert info.cost_tokens == pytest.approx(info.prompt_tokens / 100.0 + expected)


def test_embeddings_predict_no_output_whatever_was_learned() -> None:
    body = {"model": "m", "input": "x" * 400}
    info = parse_request(
        Endpoint.EMBEDDINGS, body, {}, prefill_ratio=100.0, lengths=_lengths(400, None, 300)
    )
    assert info.output_tokens == 0.0


@pytest.mark.parametrize(
    ("body", "headers", "match"),
    [
        ([1, 2], {}, "JSON object"),
        ({"prompt": "x"}, {}, "model parameter"),
        ({"model": "m", "max_tokens": 0}, {}, "max_tokens"),
        ({"model": "m"}, {"x-director-priority": "high"}, "x-director-priority"),
    ],
    ids=["not-object", "no-model", "bad-max-tokens", "bad-priority"],
)
def test_rejects(body, headers, match) -> None:
    with pytest.raises(RequestRejected, match=match) as info:
        parse_request(Endpoint.COMPLETIONS, body, headers, prefill_ratio=100.0)
    assert info.value.status == 400


def test_hop_by_hop_and_control_headers_are_stripped() -> None:
    headers = CIMultiDict(
        {
            "Connection": "keep-alive, X-Secret-Hop",
            "X-Secret-Hop": "1",
            "Keep-Alive": "timeout=5",
            "Transfer-Encoding": "chunked",
            "Host": "balancer",
            "Content-Length": "12",
            "Authorization": "Bearer k",
            "x-director-priority": "3",
            "Accept-Encoding": "gzip",
        }
    )
    up = upstream_request_headers(headers)
    assert dict(up) == {"Authorization": "Bearer k", "Accept-Encoding": "identity"}
    down = downstream_response_headers(
        CIMultiDict(
            {
                "Content-Type": "text/event-stream",
                "Transfer-Encoding": "chunked",
                "Upgrade": "h2c",
                "x-director-backend": "spoofed",
            }
        )
    )
    assert dict(down) == {"Content-Type": "text/event-stream"}
