"""Errors of the probe workers.

::

    WorkerError
    ├── MetricsError        a /metrics page could not be parsed or lacks the engine's metrics
    └── PolicySourceError   the policy for the beat schedule could not be loaded
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base of every error raised by :mod:`workers`."""


class MetricsError(WorkerError):
    """A scraped metrics page is not Prometheus text, or has none of the engine's metrics."""


class PolicySourceError(WorkerError):
    """No policy could be loaded for the beat schedule."""
