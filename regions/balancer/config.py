# SPDX-License-Identifier: Apache-2.0
"""Everything a balancer is built from, in one frozen value: how it routes, learns and
times out (defaults suit a vLLM fleet), and where and for whom it serves.
``director region serve`` builds it once from the policy and the command line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from opentelemetry.trace import Tracer

from policies.model import DegradeStep, Policy, ResponseCache
from regions.balancer.adapters.placement import AdapterSpec
from regions.balancer.http.admin_listen import AdminListen
from regions.balancer.http.client_timeouts import ClientTimeouts
from regions.balancer.http.hedging import HedgeSettings
from regions.balancer.http.silence_bound import SilenceSettings
from regions.balancer.request_chain import STAGES
from regions.balancer.scheduling.admission import AdmissionConfig
from regions.balancer.scheduling.backend import OutlierConfig
from regions.balancer.scheduling.capacity import CapacityConfig
from regions.balancer.scheduling.demand import DemandSettings
from regions.balancer.scheduling.registry import DEFAULT_FILTERS, DEFAULT_PICKER, DEFAULT_SCORERS
from regions.balancer.scheduling.revision_split import RevisionSplit
from regions.balancer.signals.model_catalog import DEFAULT_TTL_S
from regions.balancer.signals.overflow import OverflowConfig
from regions.balancer.signals.policy_follow import FollowPolicy
from regions.balancer.signals.shared_state import SharedStateConfig
from regions.balancer.signals.standby import StandbySettings
from regions.balancer.tenancy.residency_check import ResidencyCheck

SERVED_PORT = 8080  # where a served balancer listens unless told (``region serve``)


@dataclass(frozen=True)
class BalancerConfig:
    """Settings of one balancer (defaults suit a vLLM fleet).

    ``max_concurrency``: pins every backend's capacity that the policy does not pin (None,
    the default: learned from the backends, see ``capacity``); ``capacity``: how it is
    learned and the headroom of requests allowed to wait at a server beyond it (everything
    beyond waits in the region queue, late bound); ``scrape_every_s``: how often the
    balancer reads each busy backend's metrics (0: never; then only what the shared state
    carries), ``info_every_s`` its engine's info endpoint; ``scorer_params``: keyword
    arguments per scorer name, e.g. ``{"size-aware": {"hold": 0.5}}``;
    ``usage_reconcile_s``: with tenants, at most how often each backend's metrics are read
    to add the output tokens its engine generated for cancelled requests after the last
    piece relayed (``usage_reconcile``; independent of ``scrape_every_s``; 0: never);
    ``client``: how long a client may keep the balancer waiting (``client_timeouts``).
    ``models_ttl_s``: how long each backend's ``/v1/models`` is cached (``model_catalog``).
    ``stages``: a request's stages, in order (``request_chain``).
    ``max_resumes``: how many times a stream whose server went silent mid-answer is
    continued on another (0: never; ``http.proxy``), ``silence`` how long a silence that
    is (``http.silence_bound``); ``hedge``: first-byte hedging (``http.hedging``).
    ``adapters``: LoRA adapters it may load on its backends (``adapters.placement``; more
    are found in the backends' ``/v1/models`` every ``adapter_sync_s``).

    Where and for whom it serves: ``listen`` (host, port; port 0: any free one),
    ``jurisdiction``; ``policy``: whose ``identity`` and ``tenants`` the balancer enforces;
    ``residency`` re-checks every client; ``shared_state`` publishes load and follows drains
    in Redis; ``capacity_rps`` (the policy's region capacity) is what the published
    utilization is relative to; ``overflow`` sends what would be shed to a sibling region
    (it needs ``residency``); ``follow_policy`` applies the stored policy's GPU servers live
    (each version through the policy gate); ``admin``: where ``/metrics`` and ``/_admin/*``
    listen (default: 127.0.0.1, any free port); ``tracer``: where the ``trace`` stage opens
    its spans (``http.trace_stage``; None, the default: tracing off, the stage left out).
    """

    max_body_bytes: int = 8 * 1024 * 1024
    max_retries: int = 2
    max_resumes: int = 2
    silence: SilenceSettings = field(default_factory=SilenceSettings)
    hedge: HedgeSettings = field(default_factory=HedgeSettings)
    cache: ResponseCache | None = None  # every request's, without a policy that says
    degrade: tuple[DegradeStep, ...] = ()  # every request's ladder, without a policy's
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 300.0
    prefill_ratio: float = 150.0
    default_tokens_per_s: float = 50.0
    max_concurrency: int | None = None
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    scrape_every_s: float = 1.0
    info_every_s: float = 30.0
    filters: tuple[str, ...] = DEFAULT_FILTERS
    scorers: tuple[tuple[str, float], ...] = DEFAULT_SCORERS
    picker: str = DEFAULT_PICKER
    scorer_params: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    outliers: OutlierConfig = field(default_factory=OutlierConfig)
    usage_reconcile_s: float = 1.0
    client: ClientTimeouts = field(default_factory=ClientTimeouts)
    models_ttl_s: float = DEFAULT_TTL_S
    stages: tuple[str, ...] = STAGES
    splits: tuple[RevisionSplit, ...] = ()  # models split over revisions (``revision_split``)
    adapters: tuple[AdapterSpec, ...] = ()
    adapter_sync_s: float = 10.0
    listen: tuple[str, int] = ("127.0.0.1", 0)
    jurisdiction: str | None = None
    policy: Policy | None = None
    residency: ResidencyCheck | None = None
    shared_state: SharedStateConfig | None = None
    capacity_rps: float | None = None
    overflow: OverflowConfig | None = None
    follow_policy: FollowPolicy | None = None
    tracer: Tracer | None = None  # spans of sampled requests (``telemetry.otel``); None: off
    demand: DemandSettings = field(default_factory=DemandSettings)  # the autoscaling signal
    standby: StandbySettings = field(default_factory=StandbySettings)  # warm standby
    admin: AdminListen | None = None
