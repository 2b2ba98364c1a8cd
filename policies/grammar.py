"""What each block of a policy may contain: directive names, usage, multiplicity, blocks.

The parser (``policies.parser``) reads any ``name args { ... }`` shape; this table says which
of those shapes mean something, so the compiler can reject unknown, repeated, missing or
misplaced directives with the same message everywhere. ``docs/policy-language.md`` documents
the same table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    usage: str  # arguments, as shown in messages: "<duration>"
    block: str | None = None  # context of the directive's block, None: no block allowed
    repeat: bool = False
    required: bool = False


TOP = "policy"

CONTEXTS: dict[str, dict[str, Spec]] = {
    TOP: {
        "zone": Spec("<apex>", block="zone", required=True),
        "jurisdiction": Spec("<name>", block="jurisdiction", repeat=True),
        "healthcheck": Spec("<name>", block="healthcheck", repeat=True),
        "state": Spec("", block="state"),
        "region": Spec("<name>", block="region", repeat=True, required=True),
        "service": Spec("<host name>", block="service", repeat=True, required=True),
        "identity": Spec("", block="identity"),
        "tenant": Spec("<name>", block="tenant", repeat=True),
        "include": Spec('"<file>"', repeat=True),
    },
    "zone": {
        "ttl": Spec("<duration>"),
        "soa": Spec("", block="soa"),
        "ns": Spec("<host name> [<glue address> ...]", repeat=True, required=True),
        "admin-networks": Spec("<cidr> ..."),
    },
    "soa": {
        "mname": Spec("<host name>"),
        "rname": Spec("<mailbox as host name>"),
        "serial": Spec("<number>"),
        "refresh": Spec("<duration>"),
        "retry": Spec("<duration>"),
        "expire": Spec("<duration>"),
        "minimum": Spec("<duration>"),
    },
    "jurisdiction": {
        "countries": Spec("<country code> ...", repeat=True),
        "continents": Spec("<continent code> ...", repeat=True),
    },
    "healthcheck": {
        "path": Spec("<http path>"),
        "expect": Spec("<status code>"),
        "interval": Spec("<duration>"),
        "timeout": Spec("<duration>"),
        "metrics": Spec("<http path>"),
    },
    "state": {
        "stale-after": Spec("<duration>"),
    },
    "region": {
        "location": Spec("<latitude> <longitude>", required=True),
        "jurisdiction": Spec("<label>", required=True),
        "endpoints": Spec("<address> ...", repeat=True, required=True),
        "capacity": Spec("<rate> | <gpus> gpus x <rate>", required=True),
        "weight": Spec("<number>"),
        "healthcheck": Spec("<healthcheck name>"),
        "gpu": Spec("<name>", block="gpu", repeat=True),
        "split": Spec("<model> <revision> <percent>% ...", repeat=True),
        "adapter": Spec("<name> base <model> path <path>", repeat=True),
        "include": Spec('"<file>"', repeat=True),
    },
    "gpu": {
        "url": Spec("<url>", required=True),
        "models": Spec("<model> ...", repeat=True, required=True),
        "kind": Spec("<gpu kind>"),
        "speed": Spec("<relative speed>"),
        "engine": Spec("vllm | sglang | tgi | triton"),
        "max-seqs": Spec("<count>"),
        "kv-events": Spec("<zmq address> [replay <zmq address>]"),
        "scheduling": Spec("fcfs | priority"),
        "tokenizer": Spec("<directory> | simulator | estimate"),
        "revision": Spec("<model> <revision>", repeat=True),
        "adapter-slots": Spec("<count>"),
        "standby": Spec("[wake <duration>]"),
    },
    "service": {
        "ttl": Spec("<duration>"),
        "degraded-ttl": Spec("<duration>"),
        "steer": Spec("<method> ..."),
        "priority": Spec("<region> ..."),
        "regions": Spec("<region> ..."),
        "models": Spec("<model> ...", repeat=True),
        "answers": Spec("<count>"),
        "spillover": Spec("", block="spillover"),
        "failover": Spec("", block="failover"),
        "residency": Spec("<rule name>", block="residency", repeat=True),
        "unknown-location": Spec("regions <region> ... | refuse | any"),
        "no-ecs": Spec("resolver | unknown"),
        "partial-location": Spec("intersect | unknown"),
        "affinity": Spec("none | subnet"),
        "all-down": Spec("answer-allowed | answer-nothing | fallback <region> ...",
                         required=True),
        "healthcheck": Spec("<healthcheck name>"),
        "cache": Spec("<ttl> [max <size>] [tenants <tenant> ...]"),
        "degrade": Spec("", block="degrade"),
        "slo": Spec("", block="slo"),
    },
    "slo": {
        "availability": Spec("<percent>"),
        "ttft": Spec("p<percentile> <duration>"),
        "itl": Spec("p<percentile> <duration>"),
        "period": Spec("<duration>"),
        "tenants": Spec("<tenant> ..."),
    },
    "degrade": {
        "overflow": Spec("[when <trigger> <value>]"),
        "model": Spec("<model> [when <trigger> <value>]", repeat=True),
        "cache": Spec("[when <trigger> <value>]"),
        "shed": Spec("[when <trigger> <value>]"),
    },
    "spillover": {
        "at": Spec("<percent of capacity>", required=True),
        "max": Spec("<percent of traffic>", required=True),
        "to": Spec("<region> ..."),
    },
    "failover": {
        "fall": Spec("<count>"),
        "rise": Spec("<count>"),
        "interval": Spec("<duration>"),
        "timeout": Spec("<duration>"),
    },
    "residency": {
        "clients": Spec("jurisdiction|country|continent <value> ...", repeat=True,
                        required=True),
        "allow": Spec("<region> ... | jurisdiction <label> ...", required=True),
        "all-down": Spec("answer-allowed | answer-nothing | fallback <region> ...",
                         required=True),
        "spillover-to": Spec("<region> ... | none"),
        "cross-border": Spec("<region> ..."),
    },
    "identity": {
        "api-keys": Spec("on | off"),
        "jwt": Spec("", block="jwt"),
    },
    "jwt": {
        "jwks": Spec("<file> | <https url>", required=True),
        "issuer": Spec("<issuer>"),
        "audience": Spec("<audience>"),
        "tenant-claim": Spec("<claim name>"),
        "leeway": Spec("<duration>"),
    },
    "tenant": {
        "weight": Spec("<number>"),
        "priority": Spec("<tier>"),
        "quota": Spec("", block="quota"),
        "services": Spec("<host name> ...", repeat=True),
        "models": Spec("<model> ...", repeat=True),
        "regions": Spec("<region> ..."),
        "redis-down": Spec("open | closed"),
        "reserve": Spec("<percent of capacity>"),
    },
    "quota": {
        "requests": Spec("<count>/<unit> [burst <count>]"),
        "input-tokens": Spec("<count>/<unit> [burst <count>]"),
        "output-tokens": Spec("<count>/<unit> [burst <count>]"),
        "concurrent": Spec("<count>"),
    },
}

# Defaults an operator does not have to write (documented in docs/policy-language.md).
DEFAULT_TTL = 30.0
DEFAULT_DEGRADED_TTL = 5.0
DEFAULT_STALE_AFTER = 60.0
DEFAULT_FALL = 3
DEFAULT_RISE = 2
DEFAULT_PROBE_INTERVAL = 5.0
DEFAULT_PROBE_TIMEOUT = 2.0
DEFAULT_ADMIN_NETWORKS = ("127.0.0.0/8", "::1/128")
ENGINES = ("vllm", "sglang", "tgi", "triton")
TENANT_PRIORITY_RANGE = (-100, 100)
DEFAULT_TENANT_CLAIM = "tenant"
