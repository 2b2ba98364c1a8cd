"""``GET /api/v1/explain``: the engine's decision for one client and name, step by step.

The data is the decision's own (``Decision.as_dict``), the text lines those of the DNS
``_explain`` TXT answer (``director.dns.explain.explain_lines``), so every surface explains
a decision in the same words.
"""

from __future__ import annotations

from director.api.errors import ApiError, NotFound
from director.dns.explain import explain_lines
from director.engine import Client, Engine, Snapshot
from director.engine.clients import ClientInputError, client_from_input
from director.geo import GeoLocator
from policies import Policy
from policies.model import Service


class BadQuery(ApiError):
    status = 422


def find_service(policy: Policy, name: str) -> Service:
    """The service for a host name, fully qualified or relative to the zone."""
    wanted = name.lower().rstrip(".")
    for candidate in (wanted, f"{wanted}.{policy.zone.apex}"):
        try:
            return policy.service(candidate)
        except KeyError:
            continue
    names = ", ".join(s.name for s in policy.services)
    raise NotFound(f"no service '{name}' in the policy (services: {names})")


def make_client(locator: GeoLocator, client: str | None, ecs: str | None) -> Client:
    """The client to decide for: its ECS prefix when given, else its address."""
    try:
        return client_from_input(locator, client, ecs)
    except ClientInputError as exc:
        raise BadQuery(str(exc)) from None


def explain(policy: Policy, engine: Engine, snapshot: Snapshot, client: Client,
            name: str) -> dict[str, object]:
    """The decision as JSON, with the client's location, the answer's addresses and the
    explain text lines."""
    service = find_service(policy, name)
    decision = engine.decide(service, client, snapshot)
    addresses: list[str] = []
    for region in decision.regions:
        r = policy.region(region)
        addresses += [*r.endpoints_v4, *r.endpoints_v6]
    location = client.location
    return {
        **decision.as_dict(),
        "name": service.name,
        "client": {
            "address": str(client.address), "network": str(client.network),
            "source": client.source,
            "country": location.country if location else None,
            "continent": location.continent if location else None,
            "latitude": location.latitude if location else None,
            "longitude": location.longitude if location else None,
            "database_network": str(location.network) if location else None,
        },
        "addresses": addresses,
        "lines": explain_lines(decision, decision.scope_prefix),
        "snapshot_version": snapshot.version,
    }
