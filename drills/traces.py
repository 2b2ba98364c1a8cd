# SPDX-License-Identifier: Apache-2.0
"""Read recorded request traces: arrival times and token counts.

Two formats, as kept in the repository's ``data/traces`` (see its README):

- ``azure``: the Azure LLM inference trace 2023 (Splitwise), CSV with
  ``TIMESTAMP, ContextTokens, GeneratedTokens``; timestamps are absolute, 100 ns ticks.
- ``mooncake``: the Mooncake FAST'25 traces, JSON lines with ``timestamp`` (ms from the
  start), ``input_length`` and ``output_length``.

Either may be gzip-compressed. Times come back in seconds from the first request.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO

from drills.errors import DrillError


@dataclass(frozen=True)
class TraceRequest:
    t: float              # seconds from the trace's first request
    input_tokens: int
    output_tokens: int


def _open(path: str) -> IO[str]:
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _azure_time(text: str) -> float:
    # "2023-11-16 18:15:46.6805900": 7 fractional digits, more than strptime's 6
    head, _, frac = text.strip().partition(".")
    base = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + frac) if frac else 0.0)


def _azure(stream: IO[str]) -> Iterator[tuple[float, int, int]]:
    for row in csv.DictReader(stream):
        yield (_azure_time(row["TIMESTAMP"]), int(row["ContextTokens"]),
               int(row["GeneratedTokens"]))


def _mooncake(stream: IO[str]) -> Iterator[tuple[float, int, int]]:
    for line in stream:
        if line.strip():
            row = json.loads(line)
            yield row["timestamp"] / 1000.0, int(row["input_length"]), int(row["output_length"])


def read_trace(path: str, fmt: str) -> list[TraceRequest]:
    """Every request of the trace, sorted by time, relative to the first one."""
    reader = {"azure": _azure, "mooncake": _mooncake}.get(fmt)
    if reader is None:
        raise DrillError(f"unknown trace format {fmt!r} (expected azure or mooncake)")
    try:
        with _open(path) as stream:
            rows = sorted(reader(stream))
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise DrillError(f"cannot read trace {path} as {fmt}: {exc}") from exc
    if not rows:
        raise DrillError(f"trace {path} has no requests")
    t0 = rows[0][0]
    return [TraceRequest(t - t0, max(1, i), max(1, o)) for t, i, o in rows]
