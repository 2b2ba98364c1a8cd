# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by the GPU server simulator.

::

    SimulatorError
    ├── SimConfigError          a spec or engine setting is out of range
    ├── FaultSpecError          a ``POST /_sim/fault`` body is malformed
    ├── RequestError            an OpenAI request is malformed (HTTP 400)
    │   ├── ContextLengthError  prompt + output exceed ``max_model_len`` (HTTP 400)
    │   ├── PriorityError       a non-zero ``priority`` without priority scheduling (400)
    │   ├── ModelNotFoundError  the server does not serve that model (HTTP 404)
    │   └── OverloadedError     more in flight than the server accepts (TGI: HTTP 429)
    └── SequenceAborted         a sequence was cancelled while a caller waited on it
"""

from __future__ import annotations


class SimulatorError(Exception):
    """Root of the simulator's exceptions."""


class SimConfigError(SimulatorError, ValueError):
    """A server spec or engine setting is out of range; the message names the field."""


class FaultSpecError(SimulatorError, ValueError):
    """A fault switch body is malformed; the message names the field."""


class RequestError(SimulatorError):
    """An OpenAI-style request is malformed.

    ``param`` names the offending body field; ``status``, ``error_type`` and ``code`` fill
    the OpenAI error JSON.
    """

    status = 400
    error_type = "invalid_request_error"
    code: str | None = None

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param



class OverloadedError(RequestError):
    """More requests in flight than the server accepts at once (TGI's router: 429)."""

    status = 429
    error_type = "overloaded"

class PriorityError(RequestError):
    """A request gave a ``priority`` the engine does not schedule by (vLLM: 400)."""


class ContextLengthError(RequestError):
    """Prompt plus requested output exceed the model's context window."""

    code = "context_length_exceeded"


class ModelNotFoundError(RequestError):
    """The requested model is not among the ones this server serves."""

    status = 404
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model `{model}` does not exist or you do not have access to it.", "model"
        )


class SequenceAborted(SimulatorError):
    """The sequence was aborted (fault switch, shutdown) before it finished."""
