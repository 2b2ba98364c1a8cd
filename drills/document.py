# SPDX-License-Identifier: Apache-2.0
"""The drill file's schema: which keys each block has, their types and defaults.

The grammar, in short (``docs/drills.md`` has the reference)::

    apiVersion: drill/v1          kind: Drill
    metadata: {name, title, owner, tags}
    hypothesis: text
    vars: {name: scalar}          # ${name} anywhere below; ${env:NAME} reads the environment
    blast_radius: {regions, max_duration, ttl_margin}
    targets: {name: {kind: region|gpu, select: {region, jurisdiction, gpu}, mode, on_empty}}
    load: {service, request, rate | trace, phases, cohorts, tenants, client, dns, geoip,
           seed, max_requests}
    method: [{id, type, target, start, duration, params}]
    checks: [{name, type, when, cohorts, tenants, expect, ...type fields}]
    guards: {evaluate_every, stop_when: [{check} | {name, type, window, expect} |
             {name, type: kill_switch, file}]}
    restore: {strategy: always|never, steps, wait_healthy}
    report: {formats, drain}
"""

from __future__ import annotations

from drills.model import CheckType, FaultType, When
from drills.schema import (
    AnyValue,
    Bool,
    Duration,
    Either,
    Field,
    ListOf,
    MapOf,
    Multiplier,
    Num,
    Obj,
    Str,
)

NAME = r"[a-z0-9][a-z0-9_.-]{0,62}"
MAX_FAULT_SECONDS = 600.0  # the supervisor's dead-man limit


def _names(item: Str | None = None) -> ListOf:
    return ListOf(item or Str(), min_len=1, scalar_ok=True)


SELECT = Obj({
    "region": Field(_names()),
    "jurisdiction": Field(_names()),
    "gpu": Field(_names()),
}, "a selector {region, jurisdiction, gpu}")

TARGET = Obj({
    "kind": Field(Str(("region", "gpu")), required=True),
    "select": Field(SELECT, default={}),
    "mode": Field(Str(pattern=r"all|count:[1-9][0-9]*|percent:(100|[1-9][0-9]?)",
                      expected="all, count:N or percent:P"), default="all"),
    "on_empty": Field(Str(("fail", "skip")), default="fail"),
}, "a target {kind, select, mode, on_empty}")

RESIDENCY = Obj({
    "regions": Field(_names()),
    "jurisdictions": Field(_names()),
}, "a residency {regions, jurisdictions}")

COHORT = Obj({
    "name": Field(Str(pattern=NAME, expected="a name of lower-case letters, digits, - _ ."),
                  required=True),
    "share": Field(Num(0, 1, lo_open=True), required=True,
                   hint="a share is the fraction of the load this cohort sends, e.g. 0.4"),
    "countries": Field(_names(Str(pattern=r"[A-Z]{2}",
                                  expected="an ISO 3166 country code like DE"))),
    "subnets": Field(_names()),
    "subnets_per_country": Field(Num(1, 64, integer=True), default=2),
    "residency": Field(RESIDENCY),
}, "a cohort {name, share, countries | subnets, residency}")

TENANT_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"

TENANT = Obj({
    "name": Field(Str(pattern=TENANT_NAME, expected="a tenant of the running policy"),
                  required=True),
    "share": Field(Num(0, 1, lo_open=True), required=True,
                   hint="the fraction of the load this tenant sends, e.g. 0.4"),
}, "a tenant {name, share}")

PHASE = Obj({
    "name": Field(Str(pattern=NAME, expected="a phase name"), required=True),
    "duration": Field(Duration(positive=True, hi=6 * 3600), required=True),
    "rps": Field(Multiplier(), default=("x", 1.0)),
    "ramp": Field(Duration(), default=0.0),
}, "a phase {name, duration, rps, ramp}")

LOAD = Obj({
    "service": Field(Str(), required=True, hint="the service to send load to, e.g. chat"),
    "request": Field(Obj({
        "model": Field(Str(), required=True),
        "route": Field(Str(("/v1/chat/completions", "/v1/completions")),
                       default="/v1/chat/completions"),
        "max_tokens": Field(Num(1, 100_000, integer=True), default=32),
        "prompt_tokens": Field(Num(1, 1_000_000, integer=True), default=200),
        "max_prompt_tokens": Field(Num(1, 1_000_000, integer=True), default=8000),
    }), required=True),
    "rate": Field(Obj({
        "rps": Field(Num(0, 10_000, lo_open=True), required=True),
        "arrivals": Field(Str(("poisson", "uniform")), default="poisson"),
    })),
    "trace": Field(Obj({
        "file": Field(Str(), required=True),
        "format": Field(Str(("azure", "mooncake"))),
        "offset": Field(Duration(), default=0.0),
        "speedup": Field(Num(0, 1000, lo_open=True), default=1.0),
    })),
    "phases": Field(ListOf(PHASE, min_len=1), required=True),
    "cohorts": Field(ListOf(COHORT, min_len=1), required=True),
    "tenants": Field(ListOf(TENANT, min_len=1)),
    "client": Field(Obj({
        "connect_timeout": Field(Duration(positive=True), default=2.0),
        "first_byte_timeout": Field(Duration(positive=True), default=10.0),
        "stall_timeout": Field(Duration(positive=True), default=10.0),
        "total_timeout": Field(Duration(positive=True), default=60.0),
        "retries": Field(Num(0, 10, integer=True), default=2),
        "backoff": Field(Duration(), default=0.5),
        "max_backoff": Field(Duration(), default=8.0),
        "max_retry_after": Field(Duration(), default=5.0),
        "max_in_flight": Field(Num(1, 10_000, integer=True), default=256),
    }), default={}),
    "dns": Field(Obj({
        "ecs": Field(Bool(), default=True),
        "timeout": Field(Duration(positive=True), default=2.0),
        "cache": Field(Str(("none", "ttl")), default="none"),
        "max_ttl": Field(Duration(), default=300.0),
    }), default={}),
    "geoip": Field(Str()),
    "seed": Field(Num(0, 2**32, integer=True), default=1),
    "max_requests": Field(Num(1, 1_000_000, integer=True), default=20_000),
}, "a load {service, request, rate | trace, phases, cohorts}")

START = Either(
    scalar=Duration(),
    mapping=Obj({
        "phase": Field(Str()),
        "after": Field(Str()),
        "plus": Field(Duration(), default=0.0),
    }, "{phase: NAME, plus: DURATION} or {after: FAULT-ID, plus: DURATION}"),
)

FAULT = Obj({
    "id": Field(Str(pattern=NAME, expected="an id of lower-case letters, digits, - _ ."),
                required=True),
    "type": Field(Str(tuple(t.value for t in FaultType)), required=True),
    "target": Field(Either(scalar=Str(), mapping=TARGET)),
    "start": Field(START, required=True),
    "duration": Field(Duration(positive=True, hi=MAX_FAULT_SECONDS), required=True),
    "params": Field(MapOf(AnyValue()), default={}),
}, "a fault {id, type, target, start, duration, params}")

EXPECT = MapOf(AnyValue())

CHECK = Obj({
    "name": Field(Str(pattern=NAME, expected="a check name"), required=True),
    "type": Field(Str(tuple(t.value for t in CheckType)), required=True),
    "when": Field(Str(tuple(w.value for w in When))),
    "cohorts": Field(Either(scalar=Str(("all",)), sequence=ListOf(Str(), min_len=1))),
    "tenants": Field(Either(scalar=Str(("all",)), sequence=ListOf(Str(), min_len=1))),
    "expect": Field(EXPECT, default={}),
    # per type
    "fault": Field(Str()),
    "quantile": Field(Num(0, 1, lo_open=True)),
    "share": Field(Num(0, 1, lo_open=True)),
    "window": Field(Duration(positive=True)),
    "min_requests": Field(Num(1, 10_000, integer=True)),
    "surviving": Field(_names()),
    "regions": Field(_names()),
    "backends": Field(_names()),
    "healthy": Field(_names()),
    "unhealthy": Field(_names()),
    "exclude_in_flight_at_fault": Field(Bool()),
    "compare_to": Field(Obj({"cohort": Field(Str()),
                             "when": Field(Str(tuple(w.value for w in When
                                                     if w is not When.CONTINUOUS))),
                             "max_ratio": Field(Num(0, lo_open=True)),
                             "min_ratio": Field(Num(0, lo_open=True))},
                            "{cohort | when, max_ratio | min_ratio}")),
    "min_admitted": Field(Num(0, 1)),
    "burst": Field(Duration()),
    "status": Field(Str(("rolled-back", "completed", "paused"))),
}, "a check {name, type, when, cohorts, tenants, expect}")

GUARD = Obj({
    "name": Field(Str(pattern=NAME, expected="a guard name")),
    "check": Field(Str()),
    "type": Field(Str((*(t.value for t in CheckType), "kill_switch"))),
    "window": Field(Duration(positive=True), default=10.0),
    "cohorts": Field(Either(scalar=Str(("all",)), sequence=ListOf(Str(), min_len=1))),
    "expect": Field(EXPECT, default={}),
    "file": Field(Str()),
    "quantile": Field(Num(0, 1, lo_open=True)),
    "min_requests": Field(Num(1, 10_000, integer=True)),
    "failure_threshold": Field(Num(1, 100, integer=True), default=1),
}, "a guard {check} or {name, type, window, expect}")

RESTORE_STEP = Obj({
    "type": Field(Str(("region.undrain", "gpu.undrain", "gpu.clear", "process.restore")),
                  required=True),
    "target": Field(Either(scalar=Str(), mapping=TARGET)),
    "names": Field(_names()),
}, "a restore step {type, target | names}")

DOCUMENT = Obj({
    "apiVersion": Field(Str(("drill/v1",)), required=True),
    "kind": Field(Str(("Drill",)), required=True),
    "metadata": Field(Obj({
        "name": Field(Str(pattern=NAME, expected="a drill name"), required=True),
        "title": Field(Str(), default=""),
        "owner": Field(Str()),
        "tags": Field(ListOf(Str()), default=[]),
    }), required=True),
    "hypothesis": Field(Str(), default=""),
    "vars": Field(MapOf(AnyValue()), default={}),
    "environment": Field(Str()),
    "blast_radius": Field(Obj({
        "regions": Field(_names()),
        "max_duration": Field(Duration(positive=True, hi=MAX_FAULT_SECONDS),
                              default=MAX_FAULT_SECONDS),
        "ttl_margin": Field(Duration(), default=15.0),
    }), default={}),
    "targets": Field(MapOf(TARGET), default={}),
    "load": Field(LOAD, required=True),
    "method": Field(ListOf(FAULT), default=[]),
    "checks": Field(ListOf(CHECK), default=[]),
    "guards": Field(Obj({
        "evaluate_every": Field(Duration(positive=True), default=1.0),
        "stop_when": Field(ListOf(GUARD), default=[]),
    }), default={}),
    "restore": Field(Obj({
        "strategy": Field(Str(("always", "never")), default="always"),
        "steps": Field(ListOf(RESTORE_STEP), default=[]),
        "wait_healthy": Field(Duration(), default=30.0),
    }), default={}),
    "report": Field(Obj({
        "formats": Field(ListOf(Str(("json", "html", "junit"))), default=["json", "html"]),
        "drain": Field(Duration(), default=15.0),
    }), default={}),
}, "a drill document")

FAULT_PARAMS: dict[FaultType, Obj] = {
    FaultType.REGION_KILL: Obj({"include": Field(
        ListOf(Str(("balancer", "gpus")), min_len=1), default=["balancer", "gpus"])}),
    FaultType.REGION_FREEZE: Obj({"include": Field(
        ListOf(Str(("balancer", "gpus")), min_len=1), default=["balancer"])}),
    FaultType.REGION_DRAIN: Obj({}),
    FaultType.GPU_ERRORS: Obj({"rate": Field(Num(0, 1), default=1.0),
                               "status": Field(Num(500, 503, integer=True))}),
    FaultType.GPU_SLOW: Obj({"factor": Field(Num(0, 1000, lo_open=True), default=3.0)}),
    FaultType.GPU_HANG: Obj({}),
    FaultType.GPU_FAIL: Obj({}),
    FaultType.GPU_KILL: Obj({}),
    FaultType.GPU_DRAIN: Obj({}),
    FaultType.GPU_SHORT: Obj({"factor": Field(Num(0, 1, lo_open=True), default=0.3)}),
    FaultType.GPU_STALL: Obj({"rate": Field(Num(0, 1), default=1.0)}),
    FaultType.GPU_LATE: Obj({"factor": Field(Num(1, 1000, lo_open=True), default=5.0),
                             "rate": Field(Num(0, 1), default=1.0)}),
    FaultType.GPU_SWAP: Obj({"model": Field(Str(), required=True),
                             "root": Field(Str(), required=True,
                                           hint="what /v1/models says it was loaded from")}),
    FaultType.ROLLOUT_START: Obj({
        "model": Field(Str(), required=True),
        "baseline": Field(Str(), required=True),
        "candidate": Field(Str(), required=True),
        "steps": Field(ListOf(Num(0, 100, lo_open=True), min_len=1),
                       default=[1, 5, 25, 50, 100]),
        "interval": Field(Duration(positive=True), default=60.0),
        "regions": Field(_names()),
        "gates": Field(MapOf(Num(0, lo_open=True)),
                       hint="gate name -> threshold, e.g. {ttft-p95: 1.25}; default: every "
                            "gate at its default"),
        "min_samples": Field(Num(1, 1_000_000, integer=True)),
    }),
    FaultType.REDIS_DOWN: Obj({"process": Field(Str(), default="valkey"),
                               "mode": Field(Str(("kill", "freeze")), default="kill")}),
    FaultType.WORKERS_KILL: Obj({"process": Field(Str(), default="workers")}),
    FaultType.PROCESS_KILL: Obj({"names": Field(_names(), required=True)}),
    FaultType.PROCESS_FREEZE: Obj({"names": Field(_names(), required=True)}),
    FaultType.TRAFFIC_SPIKE: Obj({"multiplier": Field(Num(0, 1000, lo_open=True),
                                                      required=True),
                                  "ramp": Field(Duration(), default=0.0)}),
    FaultType.TENANT_FLOOD: Obj({
        "tenant": Field(Str(pattern=TENANT_NAME, expected="a tenant of the running policy"),
                        required=True),
        "multiplier": Field(Num(0, 1000, lo_open=True), required=True,
                            hint="N: the tenant sends N times its rate"),
        "rate": Field(Num(0, 10_000, lo_open=True)),
    }),
}

RATIO = Obj({"min": Field(Num(0, 1)), "max": Field(Num(0, 1))}, "{min, max} as fractions")
COUNT = Obj({"min": Field(Num(0)), "max": Field(Num(0))}, "{min, max} as counts")
SECONDS = Obj({"min": Field(Duration()), "max": Field(Duration())}, "{min, max} as durations")

# how each check type's ``expect`` reads, and its default ``when``
CHECK_EXPECT: dict[CheckType, tuple[Obj | None, When]] = {
    CheckType.RESIDENCY: (Obj({"violations": Field(Num(0, 0, integer=True)),
                               "max": Field(Num(0, 0, integer=True))},
                              "{violations: 0} (a residency check always allows none)"),
                          When.CONTINUOUS),
    CheckType.LOST: (Obj({"min": Field(Num(0)), "max": Field(Num(0)),
                          "max_ratio": Field(Num(0, 1))}, "{max, max_ratio}"),
                     When.CONTINUOUS),
    CheckType.SHED_RATIO: (RATIO, When.DURING),
    CheckType.ERROR_RATIO: (RATIO, When.DURING),
    CheckType.COMPLETED: (RATIO, When.DURING),
    CheckType.GOODPUT: (Obj({"min": Field(Num(0)), "max": Field(Num(0))},
                            "{min, max} in completed requests per second"), When.DURING),
    CheckType.THROTTLED: (Obj({"min": Field(Num(0))},
                              "{min: share of the requests above the quota refused}"),
                          When.DURING),
    CheckType.TTFT: (SECONDS, When.DURING),
    CheckType.FAILOVER_TIME: (SECONDS, When.DURING),
    CheckType.TRAFFIC_SHARE: (RATIO, When.DURING),
    CheckType.REGION_HEALTH: (None, When.BEFORE),
    CheckType.ROLLOUT: (SECONDS, When.CONTINUOUS),
}
