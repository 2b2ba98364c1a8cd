# SPDX-License-Identifier: Apache-2.0
"""The request that continues a stalled answer on another server.

The engine is sent the prompt plus the text already streamed, and asked to go on from it:

- chat: the partial answer becomes the final assistant message (appended to it when the
  client already asked to continue one) with ``continue_final_message: true`` and
  ``add_generation_prompt: false`` (vLLM's chat-template options);
- completions: the prompt followed by the partial answer.

``max_tokens`` (and ``max_completion_tokens``) shrink by the tokens already delivered,
since an engine counts only what it generates. Some answers cannot be continued, and
``continuation`` says why instead: more than one choice, a tool call begun (its
arguments would be re-sampled), an echoed or tokenized prompt, a content-parts message
to extend, or a stream whose delivered part could not be read.
"""

from __future__ import annotations

import json
from typing import Any

from regions.balancer.http.stream_tap import Delivered
from regions.balancer.types import Endpoint


class NotResumable(Exception):
    """Why an answer cannot be continued elsewhere."""


def continuation(endpoint: Endpoint, raw: bytes, delivered: Delivered) -> bytes:
    """The body that asks an engine for the rest of ``delivered``; raises ``NotResumable``."""
    if not delivered.choices_ok:
        raise NotResumable("the answer has more than one choice")
    if delivered.tool_calls:
        raise NotResumable("the answer had begun a tool call")
    try:
        body = json.loads(raw)
    except ValueError:
        raise NotResumable("the request body is not JSON") from None
    if not isinstance(body, dict) or body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
        raise NotResumable("the request asks for more than one choice")
    if not delivered.tokens and not delivered.text:
        return raw  # nothing of the answer went out: the request itself, again
    _shrink_budget(body, delivered.tokens)
    if endpoint is Endpoint.CHAT:
        _continue_chat(body, delivered.text)
    elif endpoint is Endpoint.COMPLETIONS:
        _continue_completion(body, delivered.text)
    else:
        raise NotResumable(f"{endpoint.value} answers are not streamed")
    return json.dumps(body, separators=(",", ":")).encode()


def _shrink_budget(body: dict[str, Any], delivered: int) -> None:
    for key in ("max_tokens", "max_completion_tokens"):
        limit = body.get(key)
        if isinstance(limit, int) and not isinstance(limit, bool):
            if limit - delivered < 1:
                raise NotResumable("the answer has used its whole max_tokens")
            body[key] = limit - delivered


def _continue_chat(body: dict[str, Any], text: str) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise NotResumable("the request has no messages")
    last = messages[-1]
    if body.get("continue_final_message") and isinstance(last, dict) \
            and last.get("role") == "assistant":
        content = last.get("content") or ""
        if not isinstance(content, str):
            raise NotResumable("the message to continue is made of content parts")
        messages[-1] = {**last, "content": content + text}
    else:
        messages.append({"role": "assistant", "content": text})
    body["continue_final_message"] = True
    body["add_generation_prompt"] = False


def _continue_completion(body: dict[str, Any], text: str) -> None:
    if body.get("echo"):
        raise NotResumable("the answer echoes its prompt")
    if body.get("suffix"):
        raise NotResumable("the request has a suffix")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        body["prompt"] = [prompt[0] + text]
    elif isinstance(prompt, str):
        body["prompt"] = prompt + text
    else:
        raise NotResumable("the prompt is not one text")
