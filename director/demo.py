"""``./run demo``: check the example policy and show how it decides for a few clients.

Until ``director up`` lands this is the first thing a newcomer runs: it proves residency
for the example policy and explains the decision for clients in Europe, the US and India,
healthy and with EU regions down or hot.
"""

from __future__ import annotations

from pathlib import Path

from director.console import plain_console
from director.engine import Engine, RegionState, Snapshot
from director.engine.clients import client_from_address
from director.engine.exhaustive import check_engine_residency
from director.geo import GeoLocator
from policies import check_policy

EXAMPLE = Path(__file__).resolve().parent.parent / "policies" / "examples" / "global.dp"

SCENARIOS = [
    ("all healthy", Snapshot()),
    ("eu-central down", Snapshot(1, {"eu-central": RegionState(healthy=False)})),
    ("every EU region down", Snapshot(1, {"eu-west": RegionState(healthy=False),
                                          "eu-central": RegionState(healthy=False)})),
    ("us-east at 150% of capacity", Snapshot(1, {"us-east": RegionState(utilization=1.5)})),
]
CLIENTS = [
    ("2.2.2.2", "France"),
    ("81.2.69.142", "United Kingdom"),
    ("8.8.8.8", "United States"),
    ("1.1.1.1", "Australia"),
    ("10.0.0.1", "unlocatable"),
]


def main(policy_path: Path = EXAMPLE) -> int:
    console = plain_console()
    result = check_policy(str(policy_path))
    if result.policy is None:
        console.print(result.error().render(), markup=False)
        return 1
    policy = result.policy
    violations, decisions = check_engine_residency(policy)
    console.print(f"[bold]{policy_path.name}[/bold]: {len(policy.regions)} regions, "
                  f"{len(policy.services)} services; residency proved on {len(result.proof)} "
                  f"paths, confirmed on {decisions} engine decisions, "
                  f"{len(violations)} violations")
    engine = Engine(policy)
    locator = GeoLocator()
    for title, snapshot in SCENARIOS:
        console.print(f"\n[bold]{title}[/bold]")
        for address, where in CLIENTS:
            client = client_from_address(locator, address)
            line = []
            for service in policy.services:
                decision = engine.decide(service, client, snapshot)
                answer = ",".join(decision.regions) or "nothing"
                line.append(f"{service.name.split('.')[0]}={answer} ({decision.reason})")
            console.print(f"  {address:<13} {where:<15} " + "  ".join(line), markup=False)
    console.print("\nExplain any decision: .venv/bin/director policy explain "
                  f"{policy_path} --client 2.2.2.2 --name chat.infer.example.com "
                  "--down eu-central")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
