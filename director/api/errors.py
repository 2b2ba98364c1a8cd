"""Errors the admin API answers with; each one renders as ``{"error": message, ...}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    """An error answered with ``status`` and a JSON body ``{"error": message, **extra}``."""

    status = 400

    def __init__(self, message: str, *, status: int | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra: Mapping[str, Any] = extra
        if status is not None:
            self.status = status

    def body(self) -> dict[str, Any]:
        return {"error": self.message, **self.extra}


class NotFound(ApiError):
    status = 404


class Unavailable(ApiError):
    status = 503


class BadGateway(ApiError):
    status = 502


class PolicyRejected(ApiError):
    """A policy that failed to parse, validate or prove residency (the old one stays)."""

    status = 422
