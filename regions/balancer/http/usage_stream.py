# SPDX-License-Identifier: Apache-2.0
"""Exact token counts for streamed answers: ask the engine for its usage, and hide the
answer's extra usage event from a client that did not ask for it.

OpenAI-compatible servers (vLLM, SGLang, TGI) send a final event with ``"choices": []`` and
the request's ``usage`` only when ``stream_options.include_usage`` is set. ``ask_for_usage``
adds it to a request body that lacks it (a byte splice before the closing brace; a JSON
round trip only when ``stream_options`` is already there); ``UsageEventFilter`` drops that
final event from what the client receives, whole events only, holding back a partial
event until its end arrives. The other events keep the ``"usage": null`` the option adds,
which OpenAI's clients read as absent.
"""

from __future__ import annotations

import json

INCLUDE_USAGE = b',"stream_options":{"include_usage":true}}'


def ask_for_usage(raw: bytes) -> bytes | None:
    """``raw`` asking for usage, or None when it already does (or is not an object)."""
    if b"stream_options" not in raw:
        end = raw.rstrip()
        if not end.endswith(b"}") or end.lstrip()[:1] != b"{" or end.replace(b" ", b"") == b"{}":
            return None
        return end[:-1] + INCLUDE_USAGE
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    options = body.get("stream_options") if isinstance(body, dict) else None
    if not isinstance(options, dict) or options.get("include_usage"):
        return None
    body["stream_options"] = {**options, "include_usage": True}
    return json.dumps(body, separators=(",", ":")).encode()


class UsageEventFilter:
    """Drops the usage-only event (``"choices":[]`` with a ``usage`` object) from an SSE
    body, piece by piece."""

    __slots__ = ("_carry",)

    def __init__(self) -> None:
        self._carry = b""

    def __call__(self, piece: bytes) -> bytes:
        data = self._carry + piece if self._carry else piece
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._carry = data
            return b""
        whole, self._carry = data[:cut + 2], data[cut + 2:]
        if b'"choices":[]' not in whole and b'"choices": []' not in whole:
            return whole
        kept = [event for event in whole.split(b"\n\n")
                if not (event.startswith(b"data:") and b'"usage":{' in event.replace(b" ", b"")
                        and b'"choices":[]' in event.replace(b" ", b""))]
        return b"\n\n".join(kept)

    def rest(self) -> bytes:
        """What is held back when the body ends (an unterminated last event)."""
        carry, self._carry = self._carry, b""
        return carry
