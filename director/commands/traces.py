# SPDX-License-Identifier: Apache-2.0
"""``director traces``: receive spans over OTLP/HTTP on a loopback port, and show a trace
as text (``telemetry.receiver``, ``telemetry.trace_text``). For a workstation or a drill;
in production point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at an OpenTelemetry Collector."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from director.console import plain_console

app = typer.Typer(help="Receive and read OpenTelemetry traces.", no_args_is_help=True)
err = plain_console(stderr=True)
out = plain_console()


@app.command()
def receive(
    out_file: Annotated[Path, typer.Argument(help="Spans are appended here, one JSON per "
                                             "line.")],
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT (OTLP/HTTP's port is "
                                        "4318).")] = "127.0.0.1:4318",
) -> None:
    """Receive spans (``POST /v1/traces``) until interrupted; point the processes'
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` at http://HOST:PORT."""
    from state.ports import parse_hostport
    from telemetry.receiver import OtlpReceiver

    try:
        host, port = parse_hostport(listen)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--listen") from None

    async def run() -> None:
        async with OtlpReceiver(host, port, out=out_file) as receiver:
            err.print(f"receiving OTLP/HTTP traces on {receiver.endpoint}/v1/traces, "
                      f"appending to {out_file}", markup=False)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


@app.command()
def show(
    spans_file: Annotated[Path, typer.Argument(help="JSON lines from 'director traces "
                                               "receive'.")],
    trace_id: Annotated[str | None, typer.Option("--trace", help="The trace (hex id); "
                                                 "default: the newest.")] = None,
    every: Annotated[bool, typer.Option("--all-attributes", help="Every attribute, not "
                                        "the chosen few.")] = False,
) -> None:
    """Print one trace as a tree of spans."""
    from telemetry.trace_text import render_trace

    spans = _read(spans_file)
    if not spans:
        err.print(f"error: no spans in {spans_file}", markup=False)
        raise typer.Exit(1)
    wanted = trace_id or max(spans, key=lambda s: s["start_ns"])["trace_id"]
    chosen = [s for s in spans if s["trace_id"] == wanted]
    if not chosen:
        err.print(f"error: no span of trace {wanted} in {spans_file}", markup=False)
        raise typer.Exit(1)
    out.print(render_trace(chosen, all_attributes=every), markup=False, highlight=False)


def _read(path: Path) -> list[dict[str, Any]]:
    spans = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        err.print(f"error: {path}: {exc.strerror}", markup=False)
        raise typer.Exit(1) from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            span = json.loads(line)
        except ValueError:
            err.print(f"warning: {path}:{number}: not JSON, skipped", markup=False)
            continue
        if isinstance(span, dict) and {"trace_id", "span_id", "start_ns"} <= set(span):
            spans.append(span)
    return spans
