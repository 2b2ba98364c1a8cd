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
from director.geo import GeoLocator
from director.policy_gate import accept

EXAMPLE = Path(__file__).resolve().parent.parent / "policies" / "examples" / "global.dp"

SCENARIOS = [
    ("all healthy", Snapshot()),
    ("eu-central down", Snapshot(1, {"eu-central": RegionState(healthy=False)})),
    ("every EU region down", Snapshot(1, {"eu-west": RegionState(healthy=False),
                                          "eu-central": RegionState(healthy=False)})),
    ("us-east at 150% of capacity (chat spills over above 85%, at most 30% of its clients)",
     Snapshot(1, {"us-east": RegionState(utilization=1.5)})),
]
CLIENTS = [
    ("2.2.2.2", "France"),
    ("81.2.69.142", "United Kingdom"),
    ("8.8.8.8", "United States"),
    ("1.1.1.1", "Australia"),
    ("10.0.0.1", "unlocatable"),
]


SPILL_REGION = "us-east"
US_POOL = [f"8.8.{i}.8" for i in range(256)]  # one address in each of 256 US /24s


def _spilled(engine: Engine, locator: GeoLocator,
             snapshot: Snapshot) -> tuple[int, int, str | None]:
    """How many of the US pool's /24s the chat service spills away from the hot region, and
    the first that does: one fixed client may well be among those that stay."""
    moved: list[str] = []
    for address in US_POOL:
        client = client_from_address(locator, address)
        if engine.decide("chat.infer.example.com", client, snapshot).reason == "spillover":
            moved.append(address)
    return len(moved), len(US_POOL), moved[0] if moved else None


def main(policy_path: Path = EXAMPLE) -> int:
    console = plain_console()
    acceptance = accept(str(policy_path))
    if acceptance.policy is None or acceptance.engine is None:
        console.print(acceptance.error().render(), markup=False)
        return 1
    policy = acceptance.policy
    console.print(f"[bold]{policy_path.name}[/bold]: {len(policy.regions)} regions, "
                  f"{len(policy.services)} services; residency proved on "
                  f"{len(acceptance.result.proof)} paths, confirmed on "
                  f"{acceptance.engine.summary()}, "
                  f"{len(acceptance.engine.violations)} violations")
    engine = Engine(policy)
    locator = GeoLocator()
    for title, snapshot in SCENARIOS:
        console.print(f"\n[bold]{title}[/bold]")
        clients = list(CLIENTS)
        if snapshot.region(SPILL_REGION).utilization is not None:
            moved, total, sample = _spilled(engine, locator, snapshot)
            example = f"; {sample} below is one of them" if sample else ""
            console.print(f"  {moved} of {total} US client /24s move off {SPILL_REGION} for "
                          f"chat (chosen by client hash{example})", markup=False)
            if sample is not None:
                clients.insert(3, (sample, "United States"))
        for address, where in clients:
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
