# SPDX-License-Identifier: Apache-2.0
"""OpenAI wire format: parse request bodies into token counts, build responses and chunks.

Token counts: a prompt's tokens are estimated as ``ceil(chars / 4)`` (chat adds 4 tokens per
message for the template); a non-standard ``x_prompt_tokens`` body field overrides the
estimate. The output length is ``max_tokens`` (``max_completion_tokens`` for chat; defaults
16 for completions as in OpenAI's legacy API, 256 for chat), or ``x_output_tokens`` capped
by ``max_tokens``: benchmarks replay traces with exact counts this way. The finish reason is
``length`` when the output reached ``max_tokens``, else ``stop``.

Continuations (a stream resumed elsewhere after a stall): a chat request with
``continue_final_message`` (and ``add_generation_prompt: false``, as vLLM requires) whose
last message is the assistant's, or a completion whose prompt ends with generated text,
continues that answer. Generated text is deterministic (``token_text``), so the
continuation is the rest of the answer an unbroken request would have streamed: it
starts at token ``k`` when the partial answer is the first ``k`` generated tokens, and
stops where that answer would have (``max_tokens`` counts only the new tokens, as in
vLLM). The partial answer's ``k`` tokens count as prompt tokens.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import random
import time
from dataclasses import dataclass
from typing import Any

from engines.sim_tokens import CHARS_PER_TOKEN, TEMPLATE_CHARS, chat_stream, completion_stream
from regions.simulator.errors import ModelNotFoundError, RequestError

CHAT_TOKENS_PER_MESSAGE = TEMPLATE_CHARS // CHARS_PER_TOKEN  # the chat template's tokens
DEFAULT_COMPLETION_TOKENS = 16
DEFAULT_CHAT_TOKENS = 256
EMBEDDING_DIM = 64
_WORDS = (" the", " model", " answers", " with", " simulated", " tokens", " from", " a", " GPU")


class Endpoint(enum.Enum):
    COMPLETIONS = "text_completion"
    CHAT = "chat.completion"
    EMBEDDINGS = "embedding"


@dataclass(frozen=True)
class InferenceRequest:
    """What the engine needs from one request, plus what the response echoes."""

    endpoint: Endpoint
    model: str
    prompt_tokens: int
    output_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    user: str | None
    inputs: tuple[str, ...] = ()
    token_stream: str = ""  # the prompt as the prefix cache sees it (``prompt_blocks``)
    first_token: int = 0  # a continuation's: how many tokens of the answer came before
    priority: int = 0  # vLLM's extra ``priority`` (lower first; needs priority scheduling)

    @property
    def finish_reason(self) -> str:
        return "length" if self.output_tokens == self.max_tokens else "stop"


def parse_request(endpoint: Endpoint, body: Any, models: tuple[str, ...]) -> InferenceRequest:
    """Validate an OpenAI request body; raise ``RequestError`` / ``ModelNotFoundError``."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("you must provide a model parameter", "model")
    if model not in models:
        raise ModelNotFoundError(model)
    if endpoint is Endpoint.EMBEDDINGS:
        return _parse_embeddings(body, model)
    if endpoint is Endpoint.CHAT:
        estimate = _estimate_chat(body.get("messages"))
        stream_text = chat_stream(body["messages"])
        max_tokens = _opt_int(body, "max_completion_tokens", 1) or _opt_int(body, "max_tokens", 1)
        default_out = DEFAULT_CHAT_TOKENS
        partial = _final_message(body)
        done = generated_tokens(partial) if partial else 0
        if done:  # the partial answer's k tokens replace its message's estimate
            estimate = _estimate_chat(body["messages"][:-1]) + done
    else:
        estimate = _estimate_prompt(body.get("prompt"))
        stream_text = completion_stream(body["prompt"])
        max_tokens = _opt_int(body, "max_tokens", 1)
        default_out = DEFAULT_COMPLETION_TOKENS
        done = generated_suffix_tokens(body["prompt"])
        if done:  # the answer it carries on counts its own k tokens
            prompt = body["prompt"][0] if isinstance(body["prompt"], list) else body["prompt"]
            carried = sum(len(token_text(i)) for i in range(done))
            estimate = _estimate_prompt(prompt[:-carried]) + done if carried < len(prompt) \
                else done
    if body.get("n", 1) != 1:
        raise RequestError("only n=1 is supported by the simulator", "n")
    exact_out = _opt_int(body, "x_output_tokens", 1)
    if exact_out is None:
        output = max_tokens if max_tokens is not None else default_out - done
    else:
        output = exact_out - done
        output = min(output, max_tokens) if max_tokens is not None else output
    output = max(1, output)
    stream = bool(body.get("stream", False))
    options = body.get("stream_options") or {}
    user = body.get("user")
    declared = _opt_int(body, "x_prompt_tokens", 1)
    return InferenceRequest(
        endpoint=endpoint,
        model=model,
        prompt_tokens=declared + done if declared else estimate,
        output_tokens=output,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=stream and isinstance(options, dict) and bool(options.get("include_usage")),
        user=user if isinstance(user, str) else None,
        token_stream=stream_text,
        first_token=done,
        priority=_priority(body),
    )


def _final_message(body: dict[str, Any]) -> str:
    """The partial answer a chat request asks to continue ("" when it asks none)."""
    if not body.get("continue_final_message"):
        return ""
    if body.get("add_generation_prompt", True):
        raise RequestError("Cannot set both `continue_final_message` and "
                           "`add_generation_prompt` to True.", "continue_final_message")
    last = body["messages"][-1]
    if last.get("role") != "assistant":
        raise RequestError("continue_final_message requires the last message to be the "
                           "assistant's", "continue_final_message")
    content = last.get("content") or ""
    return content if isinstance(content, str) else ""


def generated_tokens(text: str) -> int:
    """``k`` when ``text`` is the first ``k`` generated tokens, else 0."""
    count, at = 0, 0
    while at < len(text):
        word = token_text(count)
        if not text.startswith(word, at):
            return 0
        at += len(word)
        count += 1
    return count


def generated_suffix_tokens(prompt: Any) -> int:
    """The longest ``k`` such that ``prompt`` (a text) ends with the first ``k`` generated
    tokens: the answer a completion's prompt carries on."""
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        return 0
    best, end, run = 0, len(prompt), 0
    index = next((i for i, w in enumerate(_WORDS) if prompt.endswith(w)), None)
    while index is not None and prompt.endswith(_WORDS[index], 0, end):
        end -= len(_WORDS[index])
        run += 1
        if index == 0:
            best = run
        index = (index - 1) % len(_WORDS)
    return best


def _parse_embeddings(body: dict[str, Any], model: str) -> InferenceRequest:
    raw = body.get("input")
    inputs = (raw,) if isinstance(raw, str) else raw
    if not isinstance(inputs, list | tuple) or not inputs:
        raise RequestError("input must be a string or a non-empty list of strings", "input")
    if not all(isinstance(x, str) for x in inputs):
        raise RequestError("input must be a string or a non-empty list of strings", "input")
    estimate = sum(_text_tokens(x) for x in inputs)
    return InferenceRequest(
        endpoint=Endpoint.EMBEDDINGS,
        model=model,
        prompt_tokens=_opt_int(body, "x_prompt_tokens", 1) or estimate,
        output_tokens=0,
        max_tokens=None,
        stream=False,
        include_usage=False,
        user=body.get("user") if isinstance(body.get("user"), str) else None,
        inputs=tuple(inputs),
    )


def _text_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def _estimate_prompt(prompt: Any) -> int:
    if isinstance(prompt, str):
        return _text_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        if len(prompt) != 1:
            raise RequestError("only one prompt per request is supported", "prompt")
        return _text_tokens(prompt[0])
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)  # already tokenized
    raise RequestError("prompt must be a string or a list of token ids", "prompt")


def _estimate_chat(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    chars = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestError(f"messages[{i}] must be an object", f"messages[{i}]")
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string", f"messages[{i}]")
        chars += len(content)
    return max(1, math.ceil(chars / CHARS_PER_TOKEN)) + CHAT_TOKENS_PER_MESSAGE * len(messages)


def _opt_int(body: dict[str, Any], key: str, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RequestError(f"{key} must be an integer >= {minimum}, got {value!r}", key)
    return value


# -- responses -------------------------------------------------------------------------------


def token_text(index: int) -> str:
    """The text of generated token ``index`` (deterministic filler)."""
    return _WORDS[index % len(_WORDS)]


def new_id(endpoint: Endpoint, seq_id: int) -> str:
    prefix = "chatcmpl" if endpoint is Endpoint.CHAT else "cmpl"
    return f"{prefix}-sim{seq_id:08x}{time.time_ns() & 0xFFFFFF:06x}"


def usage(req: InferenceRequest, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": req.prompt_tokens + completion_tokens,
    }


def completion_body(req: InferenceRequest, rid: str, created: int) -> dict[str, Any]:
    """The non-streaming response of a finished completion or chat request."""
    first = req.first_token
    text = "".join(token_text(first + i) for i in range(req.output_tokens))
    if req.endpoint is Endpoint.CHAT:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
    else:
        choice = {"index": 0, "text": text}
    choice |= {"logprobs": None, "finish_reason": req.finish_reason}
    return {
        "id": rid,
        "object": req.endpoint.value,
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": usage(req, req.output_tokens),
    }


def chunk_body(
    req: InferenceRequest, rid: str, created: int, index: int | None, *, role: bool = False
) -> dict[str, Any]:
    """One streamed chunk: token ``index``, or (chat, ``role=True``) the opening role delta."""
    last = index is not None and index == req.output_tokens - 1
    finish = req.finish_reason if last else None
    text = token_text(req.first_token + index) if index is not None else ""
    if req.endpoint is Endpoint.CHAT:
        delta = {"role": "assistant", "content": ""} if role else {"content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None}
        obj = "text_completion"
    choice["finish_reason"] = None if role else finish
    body: dict[str, Any] = {
        "id": rid,
        "object": obj,
        "created": created,
        "model": req.model,
        "choices": [choice],
    }
    if req.include_usage:
        body["usage"] = None
    return body


def usage_chunk(req: InferenceRequest, rid: str, created: int) -> dict[str, Any]:
    """The final chunk sent when ``stream_options.include_usage`` is set."""
    obj = "chat.completion.chunk" if req.endpoint is Endpoint.CHAT else "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": req.model,
        "choices": [],
        "usage": usage(req, req.output_tokens),
    }


def sse(payload: dict[str, Any] | str) -> bytes:
    """Encode one server-sent event as OpenAI does: ``data: {...}\\n\\n``."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"


def embeddings_body(req: InferenceRequest) -> dict[str, Any]:
    """Deterministic unit vectors seeded by each input's hash."""
    data = []
    for i, text in enumerate(req.inputs):
        rng = random.Random(hashlib.sha256(text.encode()).digest())
        vec = [rng.gauss(0.0, 1.0) for _ in range(EMBEDDING_DIM)]
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        data.append({"object": "embedding", "index": i, "embedding": [v / norm for v in vec]})
    return {
        "object": "list",
        "data": data,
        "model": req.model,
        "usage": {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens},
    }


def error_body(
    message: str, error_type: str, param: str | None = None, code: str | int | None = None
) -> dict[str, Any]:
    """OpenAI's error JSON."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _priority(body: dict[str, Any]) -> int:
    value = body.get("priority", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError("priority must be an integer", "priority")
    return value
