# SPDX-License-Identifier: Apache-2.0
"""When work would start and end on a backend, from what the balancer knows of it: requests
in flight, their outstanding tokens, its slots (``cap``) and its learned decode rate.

A new request waits while every slot is taken: one mean job time (outstanding tokens per
request over the rate) per request ahead of it, spread over the slots. The ``size-aware``
and ``completion-time`` scorers rank backends by these predictions.
"""

from __future__ import annotations

from regions.balancer.types import BackendSnapshot


def wait_s(backend: BackendSnapshot) -> float:
    """Predicted seconds before a new request starts on ``backend`` (0 while a slot is free)."""
    if backend.in_flight < backend.cap or not backend.in_flight:
        return 0.0
    job_s = backend.work_tokens / backend.in_flight / backend.tokens_per_s
    return (backend.in_flight - backend.cap + 1) * job_s / max(backend.cap, 1)


def prefill_s(backend: BackendSnapshot, prompt: float) -> float:
    """Predicted seconds ``backend`` takes to prefill a prompt of cost ``prompt`` once it
    has started, after the prompts sent there before it."""
    return (backend.prefill_tokens + prompt) / backend.tokens_per_s


def first_s(backend: BackendSnapshot, prompt: float) -> float:
    """Predicted seconds until a prompt of cost ``prompt`` has prefilled on ``backend``
    (after its wait for a slot)."""
    return wait_s(backend) + prefill_s(backend, prompt)


def finish_s(backend: BackendSnapshot, tokens: float) -> float:
    """Predicted seconds until ``tokens`` of work would be done on ``backend``."""
    return wait_s(backend) + tokens / backend.tokens_per_s
