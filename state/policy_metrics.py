"""The policy a component serves, as Prometheus families every component exports the same way.

``director_policy_info{component,version,digest,epoch}``: one series per policy served, its
value the number of processes serving it (1, or a DNS server's workers);
``version`` is 0 for a local file never stored, ``digest`` the first 16 hex digits of
:func:`state.policy_identity.policy_digest`. ``director_policy_refused_total{component}``:
stored versions refused as older than the one served (a store that lost its data).

The skew alert (``deploy/prometheus/alerts-policy.yml``) compares the digests the followers
serve with the admin API's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from state.policy_identity import PolicyIdentity

DIGEST_LABEL_LENGTH = 16


def info_labels(identity: PolicyIdentity) -> tuple[str, str, str]:
    """``version``, ``digest`` and ``epoch`` label values of one identity."""
    return (str(identity.version or 0), identity.digest[:DIGEST_LABEL_LENGTH], identity.epoch)


def policy_families(component: str, served: Iterable[PolicyIdentity | None],
                    refused: int) -> Iterator[Metric]:
    """The families for ``component`` serving ``served`` (one per process; None: unknown)."""
    info = GaugeMetricFamily(
        "director_policy_info", "Policy served: version (0: a local file), digest of its "
        "sources, store epoch; value: processes serving it",
        labels=("component", "version", "digest", "epoch"))
    counts = Counter(info_labels(identity) for identity in served if identity is not None)
    for labels, count in sorted(counts.items()):
        info.add_metric([component, *labels], count)
    yield info
    refusals = CounterMetricFamily(
        "director_policy_refused", "Stored policy versions refused as older than the one "
        "served (a store that lost its data)", labels=("component",))
    refusals.add_metric([component], refused)
    yield refusals


class PolicyCollector(Collector):
    """``policy_families`` of one process: ``served()`` and ``refused()`` read at scrape."""

    def __init__(self, component: str, served: Callable[[], PolicyIdentity | None],
                 refused: Callable[[], int] = lambda: 0) -> None:
        self.component = component
        self.served = served
        self.refused = refused

    def collect(self) -> Iterator[Metric]:
        yield from policy_families(self.component, [self.served()], self.refused())
