# SPDX-License-Identifier: Apache-2.0
"""What a resumable stream has delivered, and the splice of its continuation.

A stream the proxy may resume after a stall goes through a ``StreamTap`` before anything
else sees it (the client, the usage filter, the meter):

- only whole events pass (a piece ending mid-event holds the rest back until its end
  arrives), so a stall never leaves the client half an event the continuation could not
  complete; the held part is dropped at the stall, and its token is generated again;
- the events that passed are kept (bounded: a stream larger than ``MAX_KEPT_BYTES`` is no
  longer resumable), to read the partial answer from when it stalls.

Once ``splice`` is called, what comes next is a continuation from another server, made to
read as the rest of the same stream: its ``id`` and ``created`` become the first stream's,
its opening role-only event (chat) is dropped, and its usage event counts the whole answer
(``completion_tokens`` plus the tokens delivered before; ``prompt_tokens`` minus them, the
partial answer having been sent back as prompt).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_KEPT_BYTES = 4 * 1024 * 1024
_ID = re.compile(rb'"id":\s*"([^"]{1,200})"')
_CREATED = re.compile(rb'"created":\s*(\d{1,20})')


@dataclass
class Delivered:
    """The partial answer read from what was delivered."""

    text: str = ""
    tokens: int = 0  # events that carried text: the tokens sent back as prompt
    finish: str | None = None  # the answer is whole when a finish reason went out
    tool_calls: bool = False  # a tool call began: not resumable
    choices_ok: bool = True  # one choice (index 0) only
    stream_id: bytes | None = None
    created: bytes | None = None
    usage_seen: bool = False
    done_seen: bool = False


@dataclass
class _Splice:
    delivered_tokens: int
    stream_id: bytes | None
    created: bytes | None
    their_id: bytes | None = None
    their_created: bytes | None = None
    opened: bool = False  # the continuation's first events are behind us


@dataclass
class StreamTap:
    """Aligns a stream on whole events, keeps them, and splices continuations."""

    kept: list[bytes] = field(default_factory=list)
    kept_bytes: int = 0
    overflowed: bool = False
    _carry: bytes = b""
    _splice: _Splice | None = None

    def __call__(self, piece: bytes) -> bytes:
        data = self._carry + piece if self._carry else piece
        if data.endswith(b"\n\n"):  # the usual piece: whole events, nothing to hold back
            whole, self._carry = data, b""
        else:
            cut = data.rfind(b"\n\n")
            if cut < 0:
                self._carry = data
                return b""
            whole, self._carry = data[:cut + 2], data[cut + 2:]
        if self._splice is not None:
            whole = self._rewrite(whole, self._splice)
        if not self.overflowed:
            self.kept_bytes += len(whole)
            if self.kept_bytes > MAX_KEPT_BYTES:
                self.overflowed, self.kept = True, []
            else:
                self.kept.append(whole)
        return whole

    def rest(self) -> bytes:
        """What is held back when the body ends (an unterminated last event)."""
        carry, self._carry = self._carry, b""
        return carry

    def delivered(self) -> Delivered | None:
        """The partial answer so far; None when it cannot be read (too large, not JSON)."""
        if self.overflowed:
            return None
        out = Delivered()
        parts: list[str] = []
        for event in b"".join(self.kept).split(b"\n\n"):
            if not event.startswith(b"data:"):
                continue
            data = event[5:].strip()
            if data == b"[DONE]":
                out.done_seen = True
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                return None
            if not isinstance(chunk, dict):
                return None
            if out.stream_id is None:
                found, at = _ID.search(data), _CREATED.search(data)
                out.stream_id = found.group(1) if found else None
                out.created = at.group(1) if at else None
            _read_chunk(chunk, out, parts)
        out.text = "".join(parts)
        self._carry = b""  # the stalled stream's half event is dropped
        return out

    def splice(self, delivered: Delivered) -> None:
        """From now on, pieces are a continuation of ``delivered`` (or, when no event went
        out, the answer from its start: kept as it comes)."""
        self._carry = b""
        self._splice = None if delivered.stream_id is None else _Splice(
            delivered.tokens, delivered.stream_id, delivered.created)

    def _rewrite(self, whole: bytes, splice: _Splice) -> bytes:
        if not splice.opened:
            whole = self._open(whole, splice)
        if splice.their_id is not None and splice.stream_id is not None:
            whole = whole.replace(b'"' + splice.their_id + b'"', b'"' + splice.stream_id + b'"')
        if splice.their_created is not None and splice.created is not None:
            whole = whole.replace(splice.their_created, splice.created)
        if b'"usage":{' in whole.replace(b" ", b""):
            whole = b"".join(_recount(event, splice.delivered_tokens)
                             for event in whole.split(b"\n\n") if event)
        return whole

    @staticmethod
    def _open(whole: bytes, splice: _Splice) -> bytes:
        """The continuation's first events: learn its id, drop its role-only event."""
        splice.opened = True
        found, at = _ID.search(whole), _CREATED.search(whole)
        splice.their_id = found.group(1) if found else None
        splice.their_created = at.group(0) if at else None
        if splice.created is not None:
            splice.created = b'"created":' + splice.created
        kept = [event for event in whole.split(b"\n\n") if event and not _role_only(event)]
        return b"".join(event + b"\n\n" for event in kept)


def _read_chunk(chunk: dict[str, Any], out: Delivered, parts: list[str]) -> None:
    if chunk.get("usage") and not chunk.get("choices"):
        out.usage_seen = True
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            out.choices_ok = False
            continue
        delta = choice.get("delta")
        text = choice.get("text") if delta is None else delta.get("content")
        if isinstance(delta, dict) and delta.get("tool_calls"):
            out.tool_calls = True
        if isinstance(text, str) and text:
            parts.append(text)
            out.tokens += 1
        if choice.get("finish_reason"):
            out.finish = str(choice["finish_reason"])


def _role_only(event: bytes) -> bool:
    if b'"role"' not in event:
        return False
    try:
        chunk = json.loads(event[5:])
        (choice,) = chunk["choices"]
        delta = choice["delta"]
    except (ValueError, KeyError, TypeError):
        return False
    return not delta.get("content") and not delta.get("tool_calls")


def _recount(event: bytes, delivered: int) -> bytes:
    """An event with its usage counting the tokens delivered before the splice."""
    compact = event.replace(b" ", b"")
    if not event.startswith(b"data:") or b'"usage":{' not in compact:
        return event + b"\n\n"
    try:
        chunk = json.loads(event[5:])
        usage = chunk["usage"]
        completion = int(usage["completion_tokens"]) + delivered
        prompt = max(0, int(usage["prompt_tokens"]) - delivered)
    except (ValueError, KeyError, TypeError):
        return event + b"\n\n"
    usage.update(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=prompt + completion)
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
