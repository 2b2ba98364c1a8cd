# SPDX-License-Identifier: Apache-2.0
"""A trace as text: its spans as a tree, each with its service, offset from the trace's
start, duration and chosen attributes (``director traces show``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

# attributes shown by default, in this order; ``all_attributes`` shows every one
SHOWN = ("director.correlation_id", "director.dns.service", "director.dns.client_network",
         "director.dns.client_place", "director.dns.answer", "director.dns.reason",
         "director.dns.rules", "director.region", "director.tenant", "gen_ai.request.model",
         "director.revision", "director.queue.wait_s", "director.backend",
         "director.decision.totals", "director.decision.scores", "director.decision.dropped",
         "director.retries",
         "director.resumes", "director.hedge", "director.overflow", "director.degraded",
         "director.cache", "director.relay_end", "http.response.status_code",
         "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
         "gen_ai.response.finish_reasons", "gen_ai.response.time_to_first_chunk",
         "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e",
         "gen_ai.usage.completion_tokens", "server.address", "server.port")


def render_trace(spans: Sequence[dict[str, Any]], *, all_attributes: bool = False) -> str:
    """The tree of ``spans`` (one trace, as ``receiver.decoded_spans`` gives them)."""
    if not spans:
        return "(no spans)"
    ids = {s["span_id"] for s in spans}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        parent = span["parent_span_id"] if span["parent_span_id"] in ids else None
        children.setdefault(parent, []).append(span)
    for group in children.values():
        group.sort(key=lambda s: s["start_ns"])
    start = min(s["start_ns"] for s in spans)
    lines = [f"trace {spans[0]['trace_id']}"]
    for root in children.get(None, []):
        lines.extend(_lines(root, children, start, "", all_attributes))
    return "\n".join(lines)


def _lines(span: dict[str, Any], children: dict[str | None, list[dict[str, Any]]],
           start: int, indent: str, every: bool) -> Iterable[str]:
    offset = (span["start_ns"] - start) / 1e6
    took = (span["end_ns"] - span["start_ns"]) / 1e6
    status = "" if span["status"] != "ERROR" else f"  ERROR {span.get('status_message') or ''}"
    yield (f"{indent}{span['name']}  [{span['service']}, {span['kind'].lower()}]  "
           f"+{offset:.1f} ms  {took:.1f} ms{status}")
    attributes = span["attributes"]
    keys = sorted(attributes) if every else [k for k in SHOWN if k in attributes]
    for key in keys:
        yield f"{indent}    {key} = {_shown(attributes[key])}"
    for link in span.get("links", ()):
        yield f"{indent}    link -> trace {link['trace_id']} span {link['span_id']}"
    for child in children.get(span["span_id"], []):
        yield from _lines(child, children, start, indent + "  ", every)


def _shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 200 else text[:197] + "..."
