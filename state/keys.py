"""Key and channel names of the shared state, in one place.

Everything lives under a prefix (``director`` by default, so several deployments or test runs
can share one server)::

    {p}:health:gpu:{region}:{gpu}     hash  rise/fall health of one GPU server
    {p}:health:balancer:{region}      hash  rise/fall health of a region's balancer
    {p}:health:endpoint:{region}:{address}  hash  rise/fall health of the balancer at one
                                      of a region's endpoints (regions with several)
    {p}:health:version:{region}:{gpu} hash  the revisions one GPU server reports and the
                                      models it is refused for (state.records.VersionRecord)
    {p}:load:gpu:{region}:{gpu}       hash  load scraped from one GPU server's /metrics
    {p}:load:region:{region}          hash  aggregate load published by a region's balancer
    {p}:split:{region}                hash  field model -> JSON [[revision, percent], ...]:
                                      a rollout's split, in place of the policy's
    {p}:rollouts                      hash  field rollout id -> JSON of the rollout
                                      (director.rollouts.controller); "{p}:rollouts:lock"
                                      the controller instance that runs them now
    {p}:outcomes:{region}             hash  field "{model}|{revision}|{epoch}" -> the
                                      cumulative answer counts of one revision by one
                                      balancer run (state.outcomes)
    {p}:latency                       hash  field "{vantage}|{region}" -> "{ms} {timestamp}"
    {p}:policy                        hash  text, version, epoch, digest, timestamp of the
                                      active policy (state.policy_identity)
    {p}:drain                         hash  field "{region}" or "{region}/{gpu}" -> set-at
                                      timestamp, or "{set-at} until {end}" for a ttl
    {p}:tenant-keys                   hash  field key id -> JSON of the tenant API key
                                      (tenant, SHA-256 of its secret, label, created)
    {p}:instances                     hash  field "{role}/{name}" -> JSON heartbeat of one
                                      process (state.instances)
    {p}:beat:leader                   string  the worker whose beat sends the probes now
                                      (workers.beat_lease), with its lease as the ttl
    {p}:ack:{{key}}                   string  the last confirmation of a critical write to
                                      ``key`` (state.durability)
    {p}:changes                       pub/sub channel; each message is the key that changed

Redis Cluster: the hysteresis, policy, drain-end and beat-lease scripts touch one key each;
the two that touch several share a hash tag (a tenant's quota keys ``{p}:quota:{tenant}:*``,
``tenants.quota_scripts``; a region's response cache ``{p}:cache:{region}:*``,
``regions.balancer.degrade.response_store``), and a confirmation's ack key carries the
written key as its hash tag, so each lands on one shard. Pipelines that write several keys
(a rollout's splits) are not transactions and need no common slot.

Region and GPU server names never contain ``:`` or ``|`` (the policy grammar's identifiers).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

DEFAULT_PREFIX = "director"


class KeyKind(enum.Enum):
    GPU_HEALTH = "health:gpu"
    GPU_VERSION = "health:version"
    BALANCER_HEALTH = "health:balancer"
    ENDPOINT_HEALTH = "health:endpoint"
    GPU_LOAD = "load:gpu"
    REGION_LOAD = "load:region"
    LATENCY = "latency"
    POLICY = "policy"
    DRAIN = "drain"


@dataclass(frozen=True)
class ParsedKey:
    kind: KeyKind
    region: str | None = None
    gpu: str | None = None
    address: str | None = None  # an endpoint's


@dataclass(frozen=True)
class Keys:
    """Names every key of one deployment; ``parse`` is the inverse of the builders."""

    prefix: str = DEFAULT_PREFIX

    @property
    def changes(self) -> str:
        return f"{self.prefix}:changes"

    @property
    def latency(self) -> str:
        return f"{self.prefix}:latency"

    @property
    def policy(self) -> str:
        return f"{self.prefix}:policy"

    @property
    def tenant_keys(self) -> str:
        return f"{self.prefix}:tenant-keys"

    @property
    def instances(self) -> str:
        return f"{self.prefix}:instances"

    @property
    def beat_leader(self) -> str:
        return f"{self.prefix}:beat:leader"

    @property
    def rollouts(self) -> str:
        return f"{self.prefix}:rollouts"

    @property
    def drain(self) -> str:
        return f"{self.prefix}:drain"

    def gpu_health(self, region: str, gpu: str) -> str:
        return f"{self.prefix}:health:gpu:{region}:{gpu}"

    def balancer_health(self, region: str) -> str:
        return f"{self.prefix}:health:balancer:{region}"

    def endpoint_health(self, region: str, address: str) -> str:
        return f"{self.prefix}:health:endpoint:{region}:{address}"

    def gpu_version(self, region: str, gpu: str) -> str:
        return f"{self.prefix}:health:version:{region}:{gpu}"

    def health(self, region: str, gpu: str | None = None) -> str:
        """A GPU server's health key, or the region balancer's when ``gpu`` is None."""
        return self.balancer_health(region) if gpu is None else self.gpu_health(region, gpu)

    def gpu_load(self, region: str, gpu: str) -> str:
        return f"{self.prefix}:load:gpu:{region}:{gpu}"

    def region_load(self, region: str) -> str:
        return f"{self.prefix}:load:region:{region}"

    def split(self, region: str) -> str:
        return f"{self.prefix}:split:{region}"

    def outcomes(self, region: str) -> str:
        return f"{self.prefix}:outcomes:{region}"

    def parse(self, key: str) -> ParsedKey | None:
        """The kind and names a key was built from; None for a key that is not ours."""
        head = self.prefix + ":"
        if not key.startswith(head):
            return None
        parts = key[len(head) :].split(":")
        match parts:
            case ["latency"]:
                return ParsedKey(KeyKind.LATENCY)
            case ["policy"]:
                return ParsedKey(KeyKind.POLICY)
            case ["drain"]:
                return ParsedKey(KeyKind.DRAIN)
            case ["health", "gpu", region, gpu]:
                return ParsedKey(KeyKind.GPU_HEALTH, region, gpu)
            case ["health", "version", region, gpu]:
                return ParsedKey(KeyKind.GPU_VERSION, region, gpu)
            case ["health", "balancer", region]:
                return ParsedKey(KeyKind.BALANCER_HEALTH, region)
            case ["health", "endpoint", region, *address] if address:
                # an IPv6 address has colons of its own
                return ParsedKey(KeyKind.ENDPOINT_HEALTH, region, address=":".join(address))
            case ["load", "gpu", region, gpu]:
                return ParsedKey(KeyKind.GPU_LOAD, region, gpu)
            case ["load", "region", region]:
                return ParsedKey(KeyKind.REGION_LOAD, region)
        return None


def latency_field(vantage: str, region: str) -> str:
    return f"{vantage}|{region}"


def drain_field(region: str, gpu: str | None = None) -> str:
    return region if gpu is None else f"{region}/{gpu}"
