# SPDX-License-Identifier: Apache-2.0
"""A request's priority passed on to an engine that schedules by it (vLLM's
``--scheduling-policy priority``, named in the policy by ``gpu { scheduling priority }``).

vLLM runs lower ``priority`` values first and refuses a non-zero one under its default
``fcfs`` policy, so the field is sent only to such servers, negated (our higher tiers go
first), spliced in before the body's closing brace.
"""

from __future__ import annotations


def with_priority(raw: bytes, priority: int) -> bytes:
    """``raw`` with vLLM's ``priority`` field for our ``priority``; unchanged for 0, for a
    body that sets its own, or one that is not a JSON object with fields."""
    if not priority or b'"priority"' in raw:
        return raw
    end = raw.rstrip()
    if not end.endswith(b"}") or end.replace(b" ", b"") == b"{}":
        return raw
    return end[:-1] + b',"priority":%d}' % -priority
