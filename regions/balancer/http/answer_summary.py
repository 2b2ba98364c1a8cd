# SPDX-License-Identifier: Apache-2.0
"""What a traced request's answer said about itself, read from the pieces its client is
sent (``Exchange.capture``): the response's id and model, the finish reasons and the
token usage, as an OpenAI-compatible server writes them in SSE events or a JSON body.
Only sampled requests are read, and only the events that carry these fields are parsed.
"""

from __future__ import annotations

import json
from typing import Any

from telemetry import genai

MAX_BODY = 1024 * 1024  # a JSON answer read for its fields up to this size


class AnswerSummary:
    """A capture (``Exchange.capture``) that reads an answer's id, model, finish reasons
    and usage."""

    __slots__ = ("_body", "_partial", "finish_reasons", "input_tokens", "model",
                 "output_tokens", "response_id", "sse")

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.model: str | None = None
        self.finish_reasons: list[str] = []
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.sse: bool | None = None
        self._body = bytearray()
        self._partial = b""

    def __call__(self, piece: bytes) -> None:
        if self.sse is None:
            self.sse = piece.lstrip().startswith((b"data:", b":", b"event:"))
        if not self.sse:
            if len(self._body) + len(piece) <= MAX_BODY:
                self._body += piece
            return
        text = self._partial + piece
        lines = text.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line.startswith(b"data:") and (self.response_id is None
                                              or b'"finish_reason":"' in line
                                              or b'"finish_reason": "' in line
                                              or b'"usage"' in line):
                self._read(line[5:])

    def _read(self, data: bytes) -> None:
        try:
            event = json.loads(data)
        except ValueError:
            return
        if isinstance(event, dict):
            self._fields(event)

    def _fields(self, event: dict[str, Any]) -> None:
        if self.response_id is None and isinstance(event.get("id"), str):
            self.response_id = event["id"]
        if self.model is None and isinstance(event.get("model"), str):
            self.model = event["model"]
        for choice in event.get("choices") or ():
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            if isinstance(reason, str):
                self.finish_reasons.append(reason)
        usage = event.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("prompt_tokens"), int):
                self.input_tokens = usage["prompt_tokens"]
            if isinstance(usage.get("completion_tokens"), int):
                self.output_tokens = usage["completion_tokens"]

    def attributes(self) -> dict[str, Any]:
        """GenAI attributes of what was read (``telemetry.genai``)."""
        if not self.sse and self._body:
            self._read(bytes(self._body))
            self._body.clear()
        out: dict[str, Any] = {}
        if self.response_id is not None:
            out[genai.RESPONSE_ID] = self.response_id
        if self.model is not None:
            out[genai.RESPONSE_MODEL] = self.model
        if self.finish_reasons:
            out[genai.RESPONSE_FINISH_REASONS] = self.finish_reasons
        if self.input_tokens is not None:
            out[genai.USAGE_INPUT_TOKENS] = self.input_tokens
        if self.output_tokens is not None:
            out[genai.USAGE_OUTPUT_TOKENS] = self.output_tokens
        return out
