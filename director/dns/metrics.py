"""DNS metrics: plain counters on the hot path, exported through prometheus-client.

Counting a Prometheus child per query costs more than answering it, so the server counts in
plain dicts and ints (``DnsStats``) and a collector turns them into metric families at scrape
time. With several worker processes each worker sends its ``DnsStats.snapshot()`` to the
parent every second and the parent's collector adds them up.

Families: ``director_dns_queries_total{service,qtype,rcode,region,reason}``,
``director_dns_cache_hits_total`` / ``director_dns_cache_misses_total`` (the hit ratio is
hits / (hits + misses)), ``director_dns_cache_invalidated_total`` (answers dropped by state
changes), ``director_dns_uncached_total``, ``director_dns_dropped_total``,
``director_dns_rrl_total{action}``, ``director_dns_tcp_refused_total{reason}`` (TCP
connections closed on accept: over the total or the per-network cap), the histogram
``director_dns_decision_seconds`` (engine decisions: cache misses only) and the
histogram ``director_engine_plugin_seconds{stage, plugin}`` (each engine plugin's run
time in one decision in ``ENGINE_TIMINGS_EVERY``, recorded by the engine's profiles in a
``routing.PluginTimings``, summed over the workers). When the process follows the shared
state, the state refresher's families (``director_state_reachable``,
``director_state_snapshot_version``, ``director_state_region_stale{region}``, ...) are
exported too, labelled by ``worker``.
When signing: ``director_dnssec_signatures_total``, ``director_dnssec_presigned_misses_total``
(keyless edges), ``director_dnssec_signatures_expire_timestamp_seconds`` and
``director_dnssec_presigned_generation_timestamp_seconds`` (the earliest over the workers).
``director_policy_info{component="dns",version,digest,epoch}`` counts the workers serving
each policy (``state.policy_metrics``); ``/healthz`` on the same listener names it.
"""

from __future__ import annotations

import bisect
import json
import socket
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from routing import PluginTimings
from state.policy_identity import PolicyIdentity
from state.policy_metrics import policy_families

DECISION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)
# One engine decision in this many is timed plugin by plugin: a timed decision reads the
# clock around each plugin (a few microseconds on a decision of tens), so one in 16 costs
# nothing measurable and still samples hundreds of decisions a minute on a busy server.
ENGINE_TIMINGS_EVERY = 16
QUERY_LABELS = ("service", "qtype", "rcode", "region", "reason")


class ReaderCounters:
    """What one UDP reader thread counts: answers per label slot (``DnsStats.counts``
    indexing) and datagrams dropped because the event loop was too far behind."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.dropped = 0


class DnsStats:
    """Counters of one process; cheap to bump, read by a collector."""

    def __init__(self) -> None:
        # Answers counted per label tuple, by a small integer id: bumping a list slot is
        # several times cheaper than hashing a 5-tuple on every query.
        self.label_ids: dict[tuple[str, ...], int] = {}
        self.labels: list[tuple[str, ...]] = []
        self.counts: list[int] = []
        self.cache_misses = 0
        self.uncached = 0
        self.dropped = 0
        self.invalidated = 0  # cached answers dropped because the state changed them
        self.rrl: defaultdict[str, int] = defaultdict(int)
        self.tcp_refused: defaultdict[str, int] = defaultdict(int)  # by cap: total, per-network
        self.decision_counts = [0] * (len(DECISION_BUCKETS) + 1)
        self.decision_sum = 0.0
        self.plugin_timings = PluginTimings(every=ENGINE_TIMINGS_EVERY)  # the engine's
        self.state_registry: CollectorRegistry | None = None  # the state refresher's metrics
        self.readers: list[ReaderCounters] = []  # bumped by UDP reader threads, one each
        self.policy_served: Callable[[], PolicyIdentity | None] = lambda: None
        self.policy_refused: Callable[[], int] = lambda: 0
        # DNSSEC: signatures made, keyless misses, when signatures expire, when the
        # pre-signed answers were published (director.dnssec; empty when not signing)
        self.dnssec: Callable[[], dict[str, float]] = lambda: {}

    def new_reader(self) -> ReaderCounters:
        """Counters for one UDP reader thread to bump alone
        (``director.dns.transports.udp_reader``)."""
        counters = ReaderCounters()
        self.readers.append(counters)
        return counters

    def label_id(self, labels: tuple[str, ...]) -> int:
        """The counter slot of ``labels`` (service, qtype, rcode, region, reason)."""
        slot = self.label_ids.get(labels)
        if slot is None:
            slot = self.label_ids[labels] = len(self.labels)
            self.labels.append(labels)
            self.counts.append(0)
        return slot

    @property
    def responses(self) -> dict[tuple[str, ...], int]:
        counts = list(self.counts)
        for reader in self.readers:
            for slot, count in enumerate(list(reader.counts)[:len(counts)]):
                counts[slot] += count
        return {labels: count for labels, count in zip(self.labels, counts, strict=False)
                if count}

    def observe_decision(self, seconds: float) -> None:
        self.decision_counts[bisect.bisect_left(DECISION_BUCKETS, seconds)] += 1
        self.decision_sum += seconds

    def snapshot(self) -> dict:
        """A picklable copy of every counter."""
        return {"responses": self.responses, "cache_misses": self.cache_misses,
                "uncached": self.uncached, "invalidated": self.invalidated,
                "dropped": self.dropped + sum(reader.dropped for reader in self.readers),
                "rrl": dict(self.rrl), "tcp_refused": dict(self.tcp_refused),
                "decision_counts": list(self.decision_counts),
                "decision_sum": self.decision_sum,
                "plugin_seconds": plugin_histograms(self.plugin_timings),
                "state": {"0": generate_latest(self.state_registry).decode()}
                if self.state_registry is not None else {},
                "policy": [served.as_dict()] if (served := self.policy_served()) else [],
                "policy_refused": self.policy_refused(),
                "dnssec": self.dnssec()}


def merge(snapshots: Iterable[dict]) -> dict:
    """The sum of several ``DnsStats.snapshot()`` dicts."""
    total = DnsStats().snapshot()
    for index, snap in enumerate(snapshots):
        total["state"].update({str(snap.get("worker", index)): text
                               for text in snap.get("state", {}).values()})
        for key, value in snap["responses"].items():
            total["responses"][key] = total["responses"].get(key, 0) + value
        for counts in ("rrl", "tcp_refused"):
            for key, value in snap.get(counts, {}).items():
                total[counts][key] = total[counts].get(key, 0) + value
        total["policy"] += snap.get("policy", [])
        total["dnssec"] = _merge_dnssec(total["dnssec"], snap.get("dnssec", {}))
        for name in ("cache_misses", "uncached", "invalidated", "dropped", "decision_sum",
                     "policy_refused"):
            total[name] += snap.get(name, 0)
        total["decision_counts"] = [a + b for a, b in
                                    zip(total["decision_counts"], snap["decision_counts"],
                                        strict=True)]
        plugins = total["plugin_seconds"]
        for key, (buckets, seconds) in snap.get("plugin_seconds", {}).items():
            if key not in plugins:
                plugins[key] = (buckets, seconds)
            else:
                had, had_seconds = plugins[key]
                plugins[key] = ([(bound, a + b) for (bound, a), (_, b)
                                 in zip(had, buckets, strict=True)], had_seconds + seconds)
    return total


def _merge_dnssec(total: dict[str, float], one: dict[str, float]) -> dict[str, float]:
    """Counters added up; timestamps: the earliest (the worker closest to trouble)."""
    merged = dict(total)
    for key, value in one.items():
        if key in ("signatures", "presigned_misses"):
            merged[key] = merged.get(key, 0) + value
        else:
            merged[key] = min(merged.get(key, value), value)
    return merged


# (stage, plugin) -> (cumulative buckets [(upper bound, count)], sum of seconds)
PluginHistograms = dict[tuple[str, str], tuple[list[tuple[str, float]], float]]


def plugin_histograms(timings: PluginTimings) -> PluginHistograms:
    """The engine's plugin run times as plain data, to send and add up across workers."""
    out: PluginHistograms = {}
    for family in timings.families("plugin_seconds", ""):
        for sample in family.samples:
            key = (sample.labels["stage"], sample.labels["plugin"])
            buckets = out.setdefault(key, ([], 0.0))[0]
            if sample.name.endswith("_bucket"):
                buckets.append((sample.labels["le"], sample.value))
            elif sample.name.endswith("_sum"):
                out[key] = (buckets, sample.value)
    return out


class DnsCollector(Collector):
    """Metric families from a function returning a (merged) stats snapshot."""

    def __init__(self, read: Callable[[], dict]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        snap = self.read()
        queries = CounterMetricFamily("director_dns_queries", "DNS answers sent",
                                      labels=QUERY_LABELS)
        answered = 0
        for key, value in sorted(snap["responses"].items()):
            queries.add_metric(list(key), value)
            answered += value
        yield queries
        hits = max(0, answered - snap["cache_misses"] - snap["uncached"])
        yield CounterMetricFamily("director_dns_cache_hits", "answers served from the caches",
                                  value=hits)
        yield CounterMetricFamily("director_dns_cache_misses",
                                  "cacheable answers built by the full path",
                                  value=snap["cache_misses"])
        yield CounterMetricFamily("director_dns_uncached",
                                  "answers built by the full path and not cacheable "
                                  "(unusual queries, explain, errors)", value=snap["uncached"])
        yield CounterMetricFamily("director_dns_cache_invalidated",
                                  "cached answers (and lane answers) dropped by state changes "
                                  "that changed what answers read", value=snap["invalidated"])
        yield CounterMetricFamily("director_dns_dropped",
                                  "queries not answered (not a query, or unparseable header)",
                                  value=snap["dropped"])
        rrl = CounterMetricFamily("director_dns_rrl", "response rate limiting actions",
                                  labels=("action",))
        for action, value in sorted(snap["rrl"].items()):
            rrl.add_metric([action], value)
        yield rrl
        refused = CounterMetricFamily("director_dns_tcp_refused",
                                      "TCP connections closed as soon as accepted: over the "
                                      "total cap or the cap per client /24 (/56)",
                                      labels=("reason",))
        for reason, value in sorted(snap.get("tcp_refused", {}).items()):
            refused.add_metric([reason], value)
        yield refused
        buckets = []
        running = 0
        for bound, count in zip((*DECISION_BUCKETS, float("inf")), snap["decision_counts"],
                                strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        yield HistogramMetricFamily("director_dns_decision_seconds",
                                    "time of one engine decision (memo misses)",
                                    buckets=buckets, sum_value=snap["decision_sum"])
        plugins = HistogramMetricFamily(
            "director_engine_plugin_seconds",
            f"run time of each decision engine plugin, one decision in {ENGINE_TIMINGS_EVERY}",
            labels=("stage", "plugin"))
        for (stage, plugin), (buckets, seconds) in sorted(snap["plugin_seconds"].items()):
            plugins.add_metric([stage, plugin], buckets, seconds)
        yield plugins
        yield from _state_families(snap.get("state", {}))
        yield from _dnssec_families(snap.get("dnssec", {}))
        yield from policy_families("dns", [PolicyIdentity(**served)
                                           for served in snap.get("policy", [])],
                                   snap.get("policy_refused", 0))


def _dnssec_families(values: dict[str, float]) -> Iterator[Metric]:
    """The DNSSEC families, when the server signs."""
    if "signatures" in values:
        yield CounterMetricFamily("director_dnssec_signatures",
                                  "RRSIGs made by this server (each cached for its window)",
                                  value=values["signatures"])
    if "presigned_misses" in values:
        yield CounterMetricFamily("director_dnssec_presigned_misses",
                                  "answers a keyless edge had no signature for (SERVFAIL, "
                                  "reported to the presigner)", value=values["presigned_misses"])
    if "presigned_generation" in values:
        yield GaugeMetricFamily("director_dnssec_presigned_generation_timestamp_seconds",
                                "when the pre-signed answers a keyless edge serves were "
                                "published", value=values["presigned_generation"])
    if "expiration" in values:
        yield GaugeMetricFamily("director_dnssec_signatures_expire_timestamp_seconds",
                                "when the signatures answers carry now expire",
                                value=values["expiration"])


def _state_families(texts: dict[str, str]) -> Iterator[Metric]:
    """The state refreshers' families, one sample set per worker (label ``worker``)."""
    families: dict[str, Metric] = {}
    for worker, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation,
                                                        family.type)
            for sample in family.samples:
                merged.add_sample(sample.name, {**sample.labels, "worker": worker},
                                  sample.value)
    yield from families.values()


class StatsHub:
    """The parent's view of its workers' stats: the latest snapshot from each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[int, dict] = {}

    def put(self, worker: int, snapshot: dict) -> None:
        snapshot["worker"] = str(worker)
        with self._lock:
            self._latest[worker] = snapshot

    def read(self) -> dict:
        with self._lock:
            return merge(list(self._latest.values()))


def serve_metrics(listen: str, read: Callable[[], dict]) -> tuple[str, int]:
    """Serve the DNS metrics over HTTP at ``listen`` ('ADDR:PORT', port 0 allowed) in a
    daemon thread, and ``/healthz`` (``health``); returns the bound address."""
    host, port = split_host_port(listen)
    registry = CollectorRegistry()
    registry.register(DnsCollector(read))
    metrics = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/healthz":
            return metrics(environ, start_response)
        body = json.dumps(health(read())).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(body)))])
        return [body]

    class Server(ThreadingWSGIServer):
        address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

    server = make_server(host, port, app, Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="dns-metrics", daemon=True).start()
    bound = server.server_address
    return str(bound[0]), int(bound[1])


def health(snapshot: dict) -> dict:
    """``/healthz``: the policy the workers serve (``policy``: the one most of them serve;
    ``policies``: each one with its number of workers, more than one while a new version
    spreads or when a worker cannot load it)."""
    counts = Counter(json.dumps(served, sort_keys=True) for served in snapshot.get("policy", []))
    policies = [{**json.loads(key), "workers": n} for key, n in counts.most_common()]
    policy = {k: v for k, v in policies[0].items() if k != "workers"} if policies else None
    return {"ok": True, "policy": policy, "policies": policies}


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Scrapes are not logged."""


def split_host_port(listen: str) -> tuple[str, int]:
    """'127.0.0.1:53' -> ('127.0.0.1', 53); '[::1]:53' -> ('::1', 53)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected ADDR:PORT, got {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
