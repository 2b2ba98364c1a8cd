"""Small policies for the state and worker tests, written in the policy language and loaded
(validated and proved) exactly like an operator's file."""

from __future__ import annotations

from dataclasses import dataclass

from policies import Policy, load_policy_text
from policies.model import Failover


@dataclass(frozen=True)
class RegionText:
    """A region to render: GPU server names -> URLs, its balancer on 127.0.<index>.1."""

    name: str
    gpus: dict[str, str]
    index: int = 1
    engine: str = "vllm"
    models: tuple[str, ...] = ("llama",)
    kind: str | None = "H100"
    healthcheck: str | None = "balancer"

    def render(self) -> str:
        lines = [
            f"region {self.name} {{",
            "    location 0 0",
            "    jurisdiction US",
            f"    endpoints 127.0.{self.index}.1",
            "    capacity 100rps",
            "    weight 1",
        ]
        if self.healthcheck:
            lines.append(f"    healthcheck {self.healthcheck}")
        for gpu, url in self.gpus.items():
            kind = f"; kind {self.kind}" if self.kind else ""
            lines.append(f"    gpu {gpu} {{ url {url}; models {' '.join(self.models)}{kind}; "
                         f"engine {self.engine} }}")
        return "\n".join([*lines, "}"])


def region(name: str, gpus: dict[str, str], *, index: int = 1,
           engine: str = "vllm") -> RegionText:
    return RegionText(name, gpus, index, engine)


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def make_policy(
    regions: tuple[RegionText, ...],
    *,
    gpu_interval: float = 2.0,
    balancer_interval: float = 1.0,
    failover: Failover | None = None,
    stale_after: float = 30.0,
    healthchecks: bool = True,
) -> Policy:
    """A policy with ``regions`` and one service over all of them."""
    return load_policy_text(make_policy_text(
        regions, gpu_interval=gpu_interval, balancer_interval=balancer_interval,
        failover=failover, stale_after=stale_after, healthchecks=healthchecks))


def make_policy_text(
    regions: tuple[RegionText, ...],
    *,
    gpu_interval: float = 2.0,
    balancer_interval: float = 1.0,
    failover: Failover | None = None,
    stale_after: float = 30.0,
    healthchecks: bool = True,
) -> str:
    """The text of ``make_policy``."""
    failover = failover or Failover(fall=3, rise=2, interval=1.0, timeout=0.5)
    parts = [
        "zone infer.example.com {",
        "    ttl 30s",
        "    soa { serial 1; refresh 3600s; retry 600s; expire 86400s; minimum 60s }",
        "    ns ns1.infer.example.com 127.0.0.1",
        "}",
        f"state {{ stale-after {_ms(stale_after)} }}",
    ]
    if healthchecks:
        parts += [
            f"healthcheck gpu {{ path /health; expect 200; interval {_ms(gpu_interval)}; "
            f"timeout {_ms(min(1.0, gpu_interval))}; metrics /metrics }}",
            f"healthcheck balancer {{ path /healthz; expect 200; "
            f"interval {_ms(balancer_interval)}; timeout {_ms(balancer_interval / 2)} }}",
        ]
    parts += [r.render() for r in regions]
    parts += [
        "service chat.infer.example.com {",
        "    ttl 30s",
        "    degraded-ttl 5s",
        "    steer geo",
        "    affinity none",
        f"    failover {{ fall {failover.fall}; rise {failover.rise}; "
        f"interval {_ms(failover.interval)}; timeout {_ms(failover.timeout)} }}",
        "    unknown-location any",
        "    all-down answer-nothing",
        "}",
    ]
    return "\n".join(parts) + "\n"


def fleet_policy(regions: dict[str, list[str]], *, stale_after: float = 30.0) -> Policy:
    """Regions -> GPU server names (at http://127.0.<i>.<11+j>:8000), no health checks."""
    built = tuple(
        RegionText(name, {g: f"http://127.0.{i + 1}.{j + 11}:8000" for j, g in enumerate(gpus)},
                   index=i + 1, models=("m",), kind=None, healthcheck=None)
        for i, (name, gpus) in enumerate(regions.items())
    )
    return make_policy(built, stale_after=stale_after, healthchecks=False)
