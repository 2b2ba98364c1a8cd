"""Worker settings, from the environment (or given in-process by ``director up``).

=========================  ==========================================  =====================
variable                   meaning                                     default
=========================  ==========================================  =====================
``DIRECTOR_REDIS_URL``     state server and Celery broker              redis://127.0.0.1:6379/0
``DIRECTOR_POLICY``        policy file the beat schedule follows       (required for beat)
``DIRECTOR_STATE_PREFIX``  key prefix of the shared state              director
``DIRECTOR_VANTAGE``       client network (CIDR) latency is measured   (none: no latency
                           for from this worker                        samples written)
``DIRECTOR_BALANCER_PORT`` port of regional balancers on their         80
                           endpoint addresses
``DIRECTOR_BALANCER_URLS`` per-region balancer base URLs,              (none)
                           ``eu-west=http://127.0.0.1:8081,...``
``DIRECTOR_FOLLOW_POLICY`` beat follows the policy stored in the       1 (``0``: the file
                           state server (``PUT /api/v1/policy``)       only, for tests)
=========================  ==========================================  =====================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True)
class WorkerSettings:
    redis_url: str = DEFAULT_REDIS_URL
    policy_path: str | None = None
    state_prefix: str = "director"
    vantage: str = ""  # empty: this worker stands for no client network
    balancer_port: int = 80
    balancer_urls: Mapping[str, str] = field(default_factory=dict)
    follow_policy: bool = True  # the stored policy wins over the file once there is one

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        env = os.environ if env is None else env
        return cls(
            redis_url=env.get("DIRECTOR_REDIS_URL") or DEFAULT_REDIS_URL,
            policy_path=env.get("DIRECTOR_POLICY") or None,
            state_prefix=env.get("DIRECTOR_STATE_PREFIX") or "director",
            vantage=env.get("DIRECTOR_VANTAGE") or "",
            balancer_port=int(env.get("DIRECTOR_BALANCER_PORT") or 80),
            balancer_urls=parse_balancer_urls(env.get("DIRECTOR_BALANCER_URLS", "")),
            follow_policy=parse_switch(env.get("DIRECTOR_FOLLOW_POLICY", ""), True,
                                       "DIRECTOR_FOLLOW_POLICY"),
        )

    def to_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in a child process."""
        env = {
            "DIRECTOR_REDIS_URL": self.redis_url,
            "DIRECTOR_STATE_PREFIX": self.state_prefix,
            "DIRECTOR_VANTAGE": self.vantage,
            "DIRECTOR_BALANCER_PORT": str(self.balancer_port),
            "DIRECTOR_BALANCER_URLS": ",".join(f"{k}={v}" for k, v in self.balancer_urls.items()),
            "DIRECTOR_FOLLOW_POLICY": "1" if self.follow_policy else "0",
        }
        if self.policy_path:
            env["DIRECTOR_POLICY"] = self.policy_path
        return env


def parse_balancer_urls(text: str) -> dict[str, str]:
    """``region=url,region=url`` -> {region: url}; raises ValueError naming a bad item."""
    urls: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        region, sep, url = item.partition("=")
        if not sep or not region or not url:
            raise ValueError(f"DIRECTOR_BALANCER_URLS: expected region=url, got {item!r}")
        urls[region.strip()] = url.strip()
    return urls


def parse_switch(text: str, default: bool, name: str) -> bool:
    """``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case); empty:
    ``default``; anything else raises ValueError naming the variable."""
    value = text.strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}: expected 1 or 0, got {text!r}")
