"""DNS decisions sampled into spans over real packets, exported over OTLP/HTTP: the span
says why, and carries the correlation id the balancer's spans of the same clients carry
(and the ``_explain`` TXT shows)."""

from __future__ import annotations

import asyncio
import json
import threading

import dns.rdatatype
from dns_helpers import ask, make_query
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from telemetry.correlation import correlation_id
from telemetry.otel import build_tracing
from telemetry.receiver import OtlpReceiver

NAME = "chat.infer.example.com"


class ReceiverThread:
    """The OTLP receiver on a loop of its own thread (the DNS server has its own)."""

    def __enter__(self) -> OtlpReceiver:
        self.loop = asyncio.new_event_loop()
        self.receiver = OtlpReceiver()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.receiver.start(), self.loop).result(10)
        return self.receiver

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.receiver.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def answer_spans(sampler, app_args, queries) -> tuple[list, list[dict]]:
    """The answers to ``queries`` from a DNS server tracing with ``sampler``, and the
    spans it exported."""
    with ReceiverThread() as receiver:
        tracing = build_tracing("director-dns", "director.dns", OTLPSpanExporter(
            endpoint=f"{receiver.endpoint}/v1/traces"), sampler, schedule_delay_ms=50)
        app = DnsApp(*app_args, tracer=tracing.tracer)
        config = ServerConfig(listen=(("127.0.0.1", 0),), tcp_idle_timeout=1.0)
        with ServerThread(app, config) as server:
            answers = [ask(server.addresses[0], q) for q in queries]
        tracing.shutdown()  # exports what it holds
        return answers, list(receiver.spans)


def test_a_fresh_decision_is_a_span_with_its_reasons(example_policy, geolite2, snapshots):
    query = make_query(NAME, ecs="2.2.2.0/24")
    app_args = (example_policy, geolite2, snapshots)
    answers, spans = answer_spans(ALWAYS_ON, app_args, [query, query, make_query(
        f"_explain.{NAME}", "TXT", ecs="2.2.2.0/24")])
    assert answers[0].answer and answers[0].answer == answers[1].answer
    decided = [s for s in spans if s["name"] == "director.dns.decide"]
    assert len(decided) == 1, "the second query is answered from the memo: no new decision"
    attrs = decided[0]["attributes"]
    assert attrs["director.dns.service"] == NAME
    assert attrs["director.dns.client_network"] == "2.2.2.0/24"
    assert attrs["director.dns.answer"] == ["eu-central"]
    assert attrs["director.dns.reason"] == "primary"
    assert attrs["director.dns.rules"] == ["eu-gdpr"]
    assert attrs["director.dns.same_as_explained"] is True
    steps = json.loads(attrs["director.dns.steps"])
    assert any(s.startswith("filter residency:") and "us-east: not allowed" in s
               for s in steps)
    expected = correlation_id(NAME, "2.2.2.77")
    assert attrs["director.correlation_id"] == expected
    txt = [t.decode() for rr in answers[2].answer if rr.rdtype == dns.rdatatype.TXT
           for rd in rr for t in rd.strings]
    assert f"correlation {expected}" in txt


def test_unsampled_decisions_write_nothing(example_policy, geolite2, snapshots):
    app_args = (example_policy, geolite2, snapshots)
    answers, spans = answer_spans(ALWAYS_OFF, app_args, [make_query(NAME, ecs=f"2.2.{i}.0/24")
                                                  for i in range(5)])
    assert all(a.answer for a in answers)
    assert spans == []
