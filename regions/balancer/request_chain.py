# SPDX-License-Identifier: Apache-2.0
"""The stages a request goes through, in order, before the proxy forwards it
(``http.exchange``: each wraps the rest):

1. ``trace`` (``http.trace_stage.TraceRequests``): the request's server span, when tracing
   is on (``BalancerConfig.tracer``; left out otherwise).
2. ``sli`` (``http.sli.RecordSli``): the request counted towards its model's and tenant's
   service level indicators (availability, TTFT, ITL) once answered.
3. ``identify`` (``tenancy.access.Identify``): who sends it; 401/403/503.
4. ``overflow`` (``signals.overflow.SpillOver``): a sibling's request is not sent on again;
   what would be shed here goes to an allowed sibling.
5. ``account`` (``tenancy.accounting.Account``): a tenant's ended request is accounted.
6. ``parse`` (``http.parse.Parse``): the body read and parsed once; 400/408/413.
7. ``residency`` (``tenancy.residency_check.CheckResidency``): 451 for a client this
   region may not serve the model to.
8. ``tenant`` (``tenancy.tenant_quota.AdmitTenant``): the tenant's model and quota; 403/429.
9. ``revision`` (``http.revision_choice.ChooseRevision``): the model's revision, when the
   region splits it over several (its session's, ``scheduling.revision_split``).
10. ``degrade`` (``degrade.ladder.DegradeLadder``): the service's degradation ladder, under
    overload or failure: a sibling region, a lighter model, a cache hit, a kept 429.
11. ``cache`` (``degrade.cache_stage.ResponseCacheStage``): a deterministic request of a
    service that caches is answered from the region's exact-match cache, or its answer
    stored there.
12. ``standby`` (``signals.standby.HoldForStandby``): a request whose model no server
    serves now waits while a standby server wakes, or is shed for a sibling when the wake
    would outlast its deadline.
13. ``adapter`` (``adapters.stage.PlaceAdapter``): a LoRA adapter's request goes to the
    servers that hold it, loaded on one first if need be; 503 when none can.

Then ``http.proxy.Proxy.forward`` binds it to a GPU server and relays the answer. A stage
may be left out (``BalancerConfig.stages``); ``parse`` may not, and the stages that read
the parsed request come after it.
"""

from __future__ import annotations

from collections.abc import Iterable

from regions.balancer.errors import BalancerConfigError

STAGES = ("trace", "sli", "identify", "overflow", "account", "parse", "residency", "tenant",
          "revision", "degrade", "cache", "standby", "adapter")
# the stages that read the parsed request
AFTER_PARSE = frozenset({"residency", "tenant", "revision", "degrade", "cache", "standby",
                         "adapter"})


def check_stages(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` as given, or BalancerConfigError for an unknown or repeated stage, no
    ``parse``, or a stage that reads the parsed request placed before it."""
    chosen = tuple(names)
    unknown = sorted(set(chosen) - set(STAGES))
    if unknown:
        raise BalancerConfigError(f"unknown request stage(s) {', '.join(unknown)} "
                                  f"(known: {', '.join(STAGES)})")
    if len(set(chosen)) != len(chosen):
        raise BalancerConfigError(f"a request stage is named twice in {', '.join(chosen)}")
    if "parse" not in chosen:
        raise BalancerConfigError("the request stages need 'parse'")
    early = [n for n in chosen[:chosen.index("parse")] if n in AFTER_PARSE]
    if early:
        raise BalancerConfigError(f"stage(s) {', '.join(early)} read the parsed request: "
                                  "place them after 'parse'")
    return chosen
