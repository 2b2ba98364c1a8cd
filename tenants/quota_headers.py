"""OpenAI's rate-limit headers for a quota decision: ``x-ratelimit-*`` and ``Retry-After``."""

from __future__ import annotations

import functools
import math

from tenants.local_limits import Bucket, Decision


def quota_headers(decision: Decision) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers (``requests``, and ``tokens`` for the token limit
    that refused, else the one with the smallest share left), and ``Retry-After`` (whole
    seconds, rounded up, at least 1) on a refusal."""
    headers: dict[str, str] = {}
    requests = decision.buckets.get("requests")
    if requests is not None:
        headers.update(_bucket_headers("requests", requests))
    tokens = _token_bucket(decision)
    if tokens is not None:
        headers.update(_bucket_headers("tokens", tokens))
    if not decision.allowed:
        headers["Retry-After"] = str(max(1, math.ceil(decision.wait_s)))
    return headers


def openai_duration(seconds: float) -> str:
    """A duration as OpenAI's headers write it (Go's style): ``120ms``, ``1.5s``, ``6m0s``;
    rounded up to the millisecond."""
    ms = math.ceil(round(max(0.0, seconds) * 1000, 3))
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    return f"{hours}h{text}" if hours else text


def _token_bucket(decision: Decision) -> Bucket | None:
    if decision.refused_by in ("input_tokens", "output_tokens"):
        return decision.buckets[decision.refused_by]
    candidates = [decision.buckets[name] for name in ("input_tokens", "output_tokens")
                  if name in decision.buckets]
    return min(candidates, key=lambda bucket: bucket.remaining / bucket.limit, default=None)


def _bucket_headers(kind: str, bucket: Bucket) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{kind}": _number(bucket.limit),
        f"x-ratelimit-remaining-{kind}": str(bucket.remaining),
        f"x-ratelimit-reset-{kind}": openai_duration(bucket.reset_s),
    }


@functools.lru_cache(maxsize=256)
def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
