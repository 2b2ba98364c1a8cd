"""Sample client locations: what DNS answers for them right now, per service.

The subnets are networks the bundled GeoLite2 City (2018) database places in the city named;
the decisions come from the same engine and snapshot the DNS tier uses.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from director.engine import Engine, Snapshot
from director.engine.clients import client_from_ecs
from director.geo import GeoLocator
from policies import Policy


@dataclass(frozen=True)
class SampleLocation:
    label: str
    subnet: str


SAMPLE_LOCATIONS: tuple[SampleLocation, ...] = (
    SampleLocation("Frankfurt, DE", "2.163.20.0/24"),
    SampleLocation("Paris, FR", "2.2.70.0/24"),
    SampleLocation("Dublin, IE", "5.34.247.0/24"),
    SampleLocation("New York, US", "3.184.0.0/24"),
    SampleLocation("San Francisco, US", "4.7.8.0/24"),
    SampleLocation("Mumbai, IN", "1.22.42.0/24"),
    SampleLocation("Tokyo, JP", "1.0.16.0/24"),
    SampleLocation("São Paulo, BR", "17.43.176.0/24"),
)


def sample_decisions(policy: Policy, engine: Engine, snapshot: Snapshot,
                     locator: GeoLocator,
                     locations: tuple[SampleLocation, ...] = SAMPLE_LOCATIONS
                     ) -> list[dict[str, object]]:
    """One entry per location and service: the regions DNS answers and why."""
    # A seeded generator: 'affinity none' picks stay the same from one status call to the next.
    sampler = Engine(policy, engine.methods, random.Random(0))
    zone = policy.zone.apex
    samples: list[dict[str, object]] = []
    for location in locations:
        client = client_from_ecs(locator, location.subnet)
        found = client.location
        for service in policy.services:
            decision = sampler.decide(service, client, snapshot)
            short = service.name[: -len(zone) - 1] if service.name.endswith("." + zone) \
                else service.name
            samples.append({
                "label": location.label, "subnet": location.subnet, "service": short,
                "name": service.name, "regions": list(decision.regions),
                "reason": decision.reason,
                "country": found.country if found else None,
                "latitude": found.latitude if found else None,
                "longitude": found.longitude if found else None,
            })
    return samples


def region_shares(samples: list[dict[str, object]], regions: tuple[str, ...]) -> dict[str, float]:
    """Each region's fraction of the answered samples (a sample answering several regions
    counts a share for each)."""
    shares = dict.fromkeys(regions, 0.0)
    answered = [s for s in samples if s["regions"]]
    for sample in answered:
        chosen = sample["regions"]
        assert isinstance(chosen, list)  # sample() stores the answered regions as a list
        for region in chosen:
            if region in shares:
                shares[region] += 1.0 / len(chosen) / len(answered)
    return {name: round(share, 4) for name, share in shares.items()}
