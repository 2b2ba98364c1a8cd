"""A corpus of engine decisions for the differential test (``test_decision_corpus.py``):
policies x clients x snapshots, each decided by ``Engine.decide`` and compared, explain
chain and all (``Decision.as_dict()``), with the decisions recorded in
``decisions.json.gz`` (written by ``regen_decisions.py``).

Policies: the examples in ``policies/examples`` and ``EVERY_FEATURE`` below (every steering
method, spillover with service and rule targets, overlapping residency rules, every
all-down kind, every unknown-location kind, ``affinity none``, several answers). Clients:
located with and without coordinates in and outside every jurisdiction the policies name,
not in the database, without location, IPv6. Snapshots: healthy, down, stale, draining,
degraded, never probed, under and over the spill thresholds, measured RTTs, all down.
"""

from __future__ import annotations

import gzip
import ipaddress
import json
import random
from collections.abc import Iterator
from pathlib import Path

from director.engine import Client, ClientSource, Engine, RegionState, Snapshot
from director.geo import Location
from policies import Policy, load_policy, load_policy_text

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FIXTURE = HERE / "decisions.json.gz"

EVERY_FEATURE = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries DE FR IE NO }
jurisdiction IN { countries IN }
region us-east { location 38.9 -77.0; jurisdiction US; weight 100
    endpoints 127.0.1.1; capacity 10rps
}
region us-west { location 37.7 -122.4; jurisdiction US; weight 0
    endpoints 127.0.5.1; capacity 10rps
}
region eu-west { location 53.3 -6.2; jurisdiction EU; weight 60
    endpoints 127.0.2.1; capacity 10rps
}
region eu-central { location 50.1 8.6; jurisdiction EU; weight 30
    endpoints 127.0.3.1; capacity 10rps
}
region ap-south { location 19.0 72.8; jurisdiction IN; weight 40
    endpoints 127.0.4.1; capacity 10rps
}
service weighted.infer.example.com {
    steer weighted priority
    priority ap-south eu-central eu-west us-west us-east
    answers 2
    spillover { at 80%; max 50%; to eu-central us-east ap-south }
    residency eu {
        clients jurisdiction EU
        allow eu-west eu-central
        all-down fallback eu-central us-east
        spillover-to eu-west
    }
    residency india { clients jurisdiction IN; allow ap-south; all-down answer-nothing }
    unknown-location any
    all-down fallback us-east ap-south
}
service mixed.infer.example.com {
    steer latency weighted geo priority
    priority us-west us-east eu-west
    affinity none
    regions us-east us-west eu-west eu-central
    spillover { at 50%; max 100% }
    residency eu { clients jurisdiction EU; allow jurisdiction EU; all-down answer-allowed }
    residency europe {
        clients continent EU
        allow eu-central us-east
        all-down answer-allowed
        spillover-to none
    }
    unknown-location regions eu-central us-east
    all-down answer-allowed
}
service geo.infer.example.com {
    steer geo latency
    answers 3
    spillover { at 100%; max 30% }
    residency eu { clients jurisdiction EU; allow jurisdiction EU; all-down fallback us-east }
    residency india { clients country IN; allow ap-south us-west; all-down answer-allowed }
    unknown-location refuse
    all-down answer-nothing
}
"""

# label -> (address, source network prefix, location: (country, continent, lat, lon, block)
# or None for no location)
CLIENTS: dict[str, tuple[str, int, tuple[str | None, str | None, float | None, float | None,
                                          str] | None]] = {
    "us-ny": ("8.8.8.8", 24, ("US", "NA", 40.7, -74.0, "8.8.8.0/22")),
    "us-ny-2": ("8.8.9.8", 24, ("US", "NA", 40.7, -74.0, "8.8.8.0/22")),
    "us-sf": ("4.7.8.1", 24, ("US", "NA", 37.8, -122.4, "4.7.8.0/21")),
    "us-sf-2": ("4.7.9.1", 24, ("US", "NA", 37.8, -122.4, "4.7.8.0/21")),
    "us-sf-3": ("4.7.10.1", 24, ("US", "NA", 37.8, -122.4, "4.7.8.0/21")),
    "us-no-coordinates": ("3.3.3.3", 24, ("US", "NA", None, None, "3.3.0.0/16")),
    "de": ("2.163.20.7", 24, ("DE", "EU", 50.1, 8.7, "2.163.0.0/16")),
    "de-2": ("2.163.21.7", 24, ("DE", "EU", 50.1, 8.7, "2.163.0.0/16")),
    "fr": ("2.2.70.1", 24, ("FR", "EU", 48.9, 2.3, "2.2.64.0/18")),
    "ie-host": ("5.34.247.9", 32, ("IE", "EU", 53.3, -6.3, "5.34.240.0/20")),
    "no": ("77.88.1.1", 24, ("NO", "EU", 59.9, 10.7, "77.88.0.0/16")),
    "ch": ("81.2.69.1", 24, ("CH", "EU", 47.4, 8.5, "81.2.64.0/19")),
    "in": ("1.22.42.1", 24, ("IN", "AS", 19.1, 72.9, "1.22.0.0/16")),
    "in-no-coordinates": ("1.23.1.1", 24, ("IN", "AS", None, None, "1.23.0.0/16")),
    "jp": ("1.0.16.1", 24, ("JP", "AS", 35.7, 139.7, "1.0.16.0/20")),
    "br-continent-only": ("17.43.176.1", 24, (None, "SA", -23.5, -46.6, "17.43.0.0/16")),
    "not-in-database": ("10.1.2.3", 24, (None, None, None, None, "10.0.0.0/8")),
    "no-location": ("192.0.2.1", 24, None),
    "ecs-opt-out": ("0.0.0.0", 0, None),
    "v6-de": ("2001:db8:1::1", 56, ("DE", "EU", 52.5, 13.4, "2001:db8::/32")),
    "v6-us": ("2001:db9::1", 48, ("US", "NA", 39.0, -77.5, "2001:db9::/32")),
}
# more subnets of one place, so that spillover's and weighted steering's hashes vary
CLIENTS.update({f"us-ny-subnet-{i}": (f"8.8.{16 + 3 * i}.1", 24,
                                      ("US", "NA", 40.7, -74.0, "8.8.0.0/17"))
                for i in range(8)})
CLIENTS.update({f"de-subnet-{i}": (f"2.163.{40 + 5 * i}.1", 24,
                                   ("DE", "EU", 50.1, 8.7, "2.163.0.0/16"))
                for i in range(6)})
# shapes of location residency must hold for (``policies.matching``); last, so that the
# random draws of the cases above stay as recorded
CLIENTS.update({
    # continent-only EU (GeoLite2: 2.16.0.0/22 and 6,400 more networks): may be an EU client
    "eu-continent-only": ("2.16.1.1", 24, (None, "EU", 47.0, 8.0, "2.16.0.0/22")),
    "as-continent-only": ("2.16.9.1", 24, (None, "AS", 35.0, 105.0, "2.16.8.0/22")),
    "unknown-country-code": ("2.16.17.1", 24, ("ZZ", None, 51.0, 9.0, "2.16.16.0/22")),
})

REGIONS = ("us-east", "us-west", "eu-west", "eu-central", "ap-south")
LATENCY = {
    "8.8.8.0/24": {"us-east": 12.0, "us-west": 70.0, "eu-west": 80.0, "eu-central": 90.0,
                   "ap-south": 200.0},
    "8.0.0.0/8": {"us-east": 30.0, "us-west": 30.0, "eu-west": 90.0, "eu-central": 95.0,
                  "ap-south": 210.0},
    "2.163.0.0/16": {"us-east": 95.0, "us-west": 150.0, "eu-west": 25.0, "eu-central": 9.0,
                     "ap-south": 120.0},
    "4.7.8.0/24": {"us-east": 70.0, "us-west": 0.0, "eu-west": 140.0},  # incomplete, zero
    "not a network": {"us-east": 1.0},
}


def _snapshots() -> dict[str, Snapshot]:
    down, up = RegionState(healthy=False), RegionState(healthy=True)
    states: dict[str, dict[str, RegionState]] = {
        "calm": {},
        "all-up-probed": {r: up for r in REGIONS},
        "all-down": {r: down for r in REGIONS},
        "all-draining": {r: RegionState(draining=True) for r in REGIONS},
        "all-down-stale": {r: RegionState(healthy=False, stale=True) for r in REGIONS},
        "eu-down": {"eu-west": down, "eu-central": RegionState(healthy=False, stale=True)},
        "us-down": {"us-east": down, "us-west": RegionState(draining=True)},
        "only-ap-up": {r: down for r in REGIONS if r != "ap-south"},
        "only-us-west-up": {r: down for r in REGIONS if r != "us-west"},
        "hot-everywhere": {r: RegionState(utilization=3.0) for r in REGIONS},
        "hot-targets-cold": {"us-east": RegionState(utilization=1.5),
                             "eu-central": RegionState(utilization=1.9),
                             "ap-south": RegionState(utilization=1.2),
                             "us-west": RegionState(utilization=0.1),
                             "eu-west": RegionState(utilization=0.2)},
        "at-threshold": {r: RegionState(utilization=u) for r, u in
                         zip(REGIONS, (0.85, 0.8, 0.5, 1.0, 0.3), strict=True)},
        "cold": {r: RegionState(utilization=0.1, healthy=True) for r in REGIONS},
        "zero-load": {r: RegionState(utilization=0.0) for r in REGIONS},
        "degraded-stale": {"us-east": RegionState(degraded=True),
                           "eu-west": RegionState(stale=True, healthy=True),
                           "eu-central": RegionState(degraded=True, utilization=0.4),
                           "ap-south": RegionState(stale=True)},
        "hot-and-down": {"us-east": RegionState(utilization=2.0),
                         "eu-central": down, "us-west": RegionState(draining=True),
                         "eu-west": RegionState(utilization=1.1, degraded=True)},
    }
    for region in REGIONS:
        states[f"{region}-down"] = {region: down}
        states[f"{region}-hot"] = {region: RegionState(utilization=1.3)}
    snapshots = {name: Snapshot(index + 1, regions)
                 for index, (name, regions) in enumerate(states.items())}
    for name in ("calm", "us-east-down", "eu-central-down", "hot-targets-cold", "all-down",
                 "eu-west-hot", "us-east-hot"):
        snapshots[f"{name}+rtt"] = Snapshot(100 + len(snapshots), snapshots[name].regions,
                                            LATENCY)
    return snapshots


SNAPSHOTS = _snapshots()


RECORDED_EXAMPLES = ("global", "minimal")


def policies() -> dict[str, Policy]:
    # the examples there were when the corpus was recorded (ha.dp, `director up --ha`'s,
    # came later: its engine decisions are those of global.dp's features)
    found = {name: load_policy(str(ROOT / "policies" / "examples" / f"{name}.dp"))
             for name in RECORDED_EXAMPLES}
    found["every-feature"] = load_policy_text(EVERY_FEATURE, prove=False)
    return found


def client(label: str) -> Client:
    address, prefix, where = CLIENTS[label]
    ip = ipaddress.ip_address(address)
    network = ipaddress.ip_network((ip, prefix), strict=False)
    if where is None:
        return Client(ip, network, ClientSource.ECS, None)
    country, continent, lat, lon, block = where
    location = Location(country, continent, lat, lon, ipaddress.ip_network(block))
    source = ClientSource.GIVEN if prefix == ip.max_prefixlen else ClientSource.ECS
    return Client(ip, network, source, location)


def cases(policy_name: str, policy: Policy) -> Iterator[tuple[str, str, str, Client, Snapshot]]:
    """(service, client label, snapshot name, client, snapshot), in a fixed order."""
    for service in policy.services:
        for label in CLIENTS:
            for snapshot_name, snapshot in SNAPSHOTS.items():
                yield service.name, label, snapshot_name, client(label), snapshot


def engine(policy_name: str, policy: Policy) -> Engine:
    """The engine a policy's cases run on: seeded, so ``affinity none`` replays."""
    return Engine(policy, rng=random.Random(f"corpus {policy_name}"))


def decide_all() -> dict[str, str]:
    """``policy/service/client/snapshot`` -> the decision's ``as_dict()`` as JSON text."""
    out: dict[str, str] = {}
    for policy_name, policy in policies().items():
        e = engine(policy_name, policy)
        for service, label, snapshot_name, c, snapshot in cases(policy_name, policy):
            decision = e.decide(service, c, snapshot)
            out[f"{policy_name}/{service}/{label}/{snapshot_name}"] = json.dumps(
                decision.as_dict(), ensure_ascii=False)
    return out


def write_fixture(decisions: dict[str, str]) -> None:
    """Decisions stored once each (many cases decide alike), cases pointing at them."""
    unique: dict[str, int] = {}
    index = {key: unique.setdefault(text, len(unique)) for key, text in decisions.items()}
    body = {"decisions": [json.loads(text) for text in unique], "cases": index}
    data = json.dumps(body, ensure_ascii=False, indent=0, separators=(",", ":")).encode()
    FIXTURE.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))


def read_fixture() -> dict[str, str]:
    body = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    texts = [json.dumps(d, ensure_ascii=False) for d in body["decisions"]]
    return {key: texts[i] for key, i in body["cases"].items()}
