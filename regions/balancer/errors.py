# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by the regional balancer.

::

    BalancerError
    ├── BalancerConfigError   a backend spec or setting is invalid (message names the field)
    ├── RequestRejected       the request cannot be served as sent (HTTP 4xx)
    ├── NoBackendError        no backend can serve this request now (HTTP 503 / 404)
    └── ShedError             the region is saturated: queue full or deadline passed (HTTP 429)
"""

from __future__ import annotations


class BalancerError(Exception):
    """Root of the balancer's exceptions."""


class BalancerConfigError(BalancerError, ValueError):
    """A backend spec or balancer setting is invalid; the message names the field."""


class RequestRejected(BalancerError):
    """The client's request is malformed or too large; carries the HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


class NoBackendError(BalancerError):
    """No backend passes the filters (``stage`` names the filter that dropped the last one)."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message


class ShedError(BalancerError):
    """The request is shed; ``retry_after`` is in whole seconds, from the real backlog."""

    def __init__(self, reason: str, retry_after: int) -> None:
        super().__init__(f"region saturated ({reason}); retry after {retry_after}s")
        self.reason = reason
        self.retry_after = retry_after
