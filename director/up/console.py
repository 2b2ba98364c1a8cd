"""What ``director up`` tells the operator: where everything is and two commands to try."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from director.up.plan import ChildSpec, UpOptions, hostport
from policies.model import Policy

# 2.2.2.0/24 is in France in the bundled GeoLite2 City 2018: an EU client with residency.
TRY_SUBNET = "2.2.2.0/24"
TRY_CLIENT = "2.2.2.2"


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def process_table(specs: list[ChildSpec], pids: dict[str, int | None]) -> Table:
    table = Table(title="director up", title_justify="left", show_edge=False)
    for column in ("process", "serves", "pid"):
        table.add_column(column)
    for spec in specs:
        pid = pids.get(spec.name)
        table.add_row(spec.name, spec.address or "-", str(pid) if pid else "-")
    return table


def try_commands(policy: Policy, options: UpOptions, read_token: str) -> list[str]:
    """A dig with ECS and a streaming curl through the address DNS returns."""
    service = policy.services[0]
    dns_host, dns_port = options.dns
    api = f"http://{hostport(options.api)}"
    model = next((gpu.models[0] for region in policy.regions for gpu in region.gpus
                  if gpu.models), "sim-model")
    dig = (f"dig @{dns_host} -p {dns_port} {service.name} A +subnet={TRY_SUBNET}")
    body = json.dumps({"model": model, "stream": True, "max_tokens": 32,
                       "messages": [{"role": "user", "content": "Hello from Paris"}]})
    curl = (f"curl -N http://$(dig +short @{dns_host} -p {dns_port} {service.name} A "
            f"+subnet={TRY_SUBNET} | head -1):{options.balancer_port}/v1/chat/completions "
            f"-H 'X-Director-Client-IP: {TRY_CLIENT}' -H 'Content-Type: application/json' "
            f"-d '{body}'")
    return [dig, curl, f"open {api}/#token={read_token}   (status page)"]


def print_ready(console: Console, policy: Policy, options: UpOptions, specs: list[ChildSpec],
                pids: dict[str, int | None], read_token: str) -> None:
    console.print(process_table(specs, pids))
    console.print(f"\nzone {policy.zone.apex}: DNS on {hostport(options.dns)}, admin API on "
                  f"http://{hostport(options.api)} (docs at /docs)")
    console.print(f"admin token: {options.run_dir / 'admin.token'}   logs: "
                  f"{options.run_dir / 'logs'}\n")
    console.print("try:")
    for command in try_commands(policy, options, read_token):
        console.print(f"  {command}", markup=False, soft_wrap=True)
    console.print("\nCtrl-C stops everything.")
