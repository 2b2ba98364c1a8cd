"""Errors of the shared state package.

::

    StateError
    ├── StateUnavailable      Redis unreachable, timed out, or refused the command
    ├── RecordError           a stored record could not be decoded
    ├── PolicyVersionMismatch the stored policy is not the version a writer expected
    └── EmbeddedServerError   the embedded Valkey could not be found or started
"""

from __future__ import annotations


class StateError(Exception):
    """Base of every error raised by :mod:`state`."""


class StateUnavailable(StateError):
    """The state server could not be reached or did not answer in time."""


class RecordError(StateError):
    """A stored record is malformed (written by an incompatible version, or by hand)."""


class PolicyVersionMismatch(StateError):
    """A policy write expected another stored version (``If-Match``); nothing was written.
    ``version`` and ``digest`` are what the store holds (0 and "": no policy)."""

    def __init__(self, expected: int, version: int, digest: str) -> None:
        held = f"version {version}" if version else "no policy"
        super().__init__(f"the stored policy is {held}, not version {expected}")
        self.expected = expected
        self.version = version
        self.digest = digest


class EmbeddedServerError(StateError):
    """The embedded Valkey server could not be found or started."""
