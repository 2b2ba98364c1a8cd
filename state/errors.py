"""Errors of the shared state package.

::

    StateError
    ├── StateUnavailable      Redis unreachable, timed out, or refused the command
    ├── RecordError           a stored record could not be decoded
    └── EmbeddedServerError   the embedded Valkey could not be found or started
"""

from __future__ import annotations


class StateError(Exception):
    """Base of every error raised by :mod:`state`."""


class StateUnavailable(StateError):
    """The state server could not be reached or did not answer in time."""


class RecordError(StateError):
    """A stored record is malformed (written by an incompatible version, or by hand)."""


class EmbeddedServerError(StateError):
    """The embedded Valkey server could not be found or started."""
