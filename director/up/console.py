"""What ``director up`` tells the operator: where everything is and the commands to try,
which work for the policy it runs (with API keys on, they make a key and send it)."""

from __future__ import annotations

import json
import shlex
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
    """A dig with ECS and a streaming curl through the address DNS returns, with what the
    policy's ``identity`` needs first (making an API key, or a JWT); lines starting with
    ``#`` say what to do by hand."""
    service = policy.services[0]
    dns_host, dns_port = options.dns
    api = f"http://{hostport(options.api)}"
    model = next((gpu.models[0] for region in policy.regions for gpu in region.gpus
                  if gpu.models), "sim-model")
    dig = (f"dig @{dns_host} -p {dns_port} {service.name} A +subnet={TRY_SUBNET}")
    body = json.dumps({"model": model, "stream": True, "max_tokens": 32,
                       "messages": [{"role": "user", "content": "Hello from Paris"}]})
    steps, header = credential_steps(policy, options, service.name, model)
    curl = (f"curl -N http://$(dig +short @{dns_host} -p {dns_port} {service.name} A "
            f"+subnet={TRY_SUBNET} | head -1):{options.balancer_port}/v1/chat/completions "
            f"-H 'X-Director-Client-IP: {TRY_CLIENT}' -H 'Content-Type: application/json'"
            f"{header} -d '{body}'")
    signed = ([f"dig @{dns_host} -p {dns_port} {service.name} A +dnssec   (signed; the "
               f"DS: director dnssec ds --policy {options.policy_path} --keys "
               f"{options.dnssec_keys})"] if options.dnssec else [])
    return [dig, *signed, *steps, curl, f"open {api}/#token={read_token}   (status page)"]


def credential_steps(policy: Policy, options: UpOptions, service: str, model: str
                     ) -> tuple[list[str], str]:
    """What a request needs to be identified under ``policy``: the commands to run first
    and the header to add to the curl (none when the policy identifies nobody)."""
    identity = policy.identity
    if identity is None:
        return [], ""
    bearer = " -H \"Authorization: Bearer ${}\""
    if identity.api_keys:
        tenant = try_tenant(policy, service, model)
        if tenant is None:
            return ["# API keys are on but the policy declares no tenant: add one "
                    "(tenant NAME {}) to make a key for it"], ""
        admin_token = shlex.quote(str(options.run_dir / "admin.token"))
        make_key = (f"KEY=$(curl -s -X POST http://{hostport(options.api)}/api/v1/tenants/"
                    f"{tenant}/keys -H \"Authorization: Bearer $(cat {admin_token})\" | "
                    "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"key\"])')")
        return [f"# API keys are on: make one for tenant {tenant} (shown once)", make_key], \
            bearer.format("KEY")
    jwt = identity.jwt
    if jwt is None:
        return [], ""
    issuer = f", iss {jwt.issuer}" if jwt.issuer else ""
    return [f"# JWTs identify tenants: TOKEN=<a JWT from your identity provider: aud "
            f"{jwt.audience}{issuer}, the tenant in '{jwt.tenant_claim}'>"], \
        bearer.format("TOKEN")


def try_tenant(policy: Policy, service: str, model: str) -> str | None:
    """A declared tenant that may use ``service`` and ``model``, the least restricted first
    (one served in every region before one that lists regions: the region DNS answers is
    not known here); None without tenants."""
    fits = [t for t in policy.tenants if (not t.services or service in t.services)
            and (not t.models or model in t.models)] or list(policy.tenants)
    if not fits:
        return None
    return min(fits, key=lambda t: (bool(t.regions), bool(t.services) + bool(t.models))).name


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
