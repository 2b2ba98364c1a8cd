# SPDX-License-Identifier: Apache-2.0
"""The balancer's own answers to a request it does not forward: OpenAI's error body."""

from __future__ import annotations

from aiohttp import web


def error_response(
    status: int,
    message: str,
    error_type: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """``status`` with ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": error_type, "param": param, "code": status}}
    return web.json_response(body, status=status, headers=headers)
