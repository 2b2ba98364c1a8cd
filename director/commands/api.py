"""``director api serve|token``: the admin API, and its bearer tokens."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from director.console import plain_console

app = typer.Typer(help="Run the admin API and manage its tokens.", no_args_is_help=True)
err = plain_console(stderr=True)


@app.command()
def serve(
    policy: Annotated[Path, typer.Option("--policy", help="Policy file (Redis's policy "
                                         "record wins when it holds one).")],
    redis_url: Annotated[str, typer.Option("--redis", help="Shared state, "
                                           "redis://HOST:PORT/DB.")],
    listen: Annotated[str, typer.Option(help="ADDR:PORT; IPv6 as [::1]:8080.")]
    = "127.0.0.1:8080",
    allow_remote: Annotated[bool, typer.Option("--allow-remote", help="Allow a "
                                               "non-loopback --listen address.")] = False,
    tokens: Annotated[Path | None, typer.Option(help="Tokens file (hashed; see director "
                                                "api token).")] = None,
    audit_log: Annotated[Path | None, typer.Option(help="Audit log, one JSON line per "
                                                   "change.")] = None,
    control: Annotated[Path | None, typer.Option(help="Supervisor control socket (set by "
                                                 "director up).")] = None,
    dns: Annotated[str | None, typer.Option(help="ADDR:PORT[,...] the DNS server answers "
                                            "on, shown in the status.")] = None,
    policy_store: Annotated[Path | None, typer.Option(help="Directory keeping every "
                                                      "accepted policy version.")] = None,
    geoip: Annotated[Path | None, typer.Option(help="MaxMind database (default: GeoLite2 "
                                               "City 2018).")] = None,
    balancer_port: Annotated[int, typer.Option(help="Port of the regional balancers on "
                                               "their endpoints.")] = 8080,
    max_body: Annotated[int, typer.Option(help="Largest request body in bytes (413 "
                                          "beyond).")] = 1024 * 1024,
    policy_deadline: Annotated[float, typer.Option(help="Seconds a policy may take through "
                                                   "the policy gate (proofs included) when "
                                                   "PUT or followed; refused beyond.",
                                                   min=1.0)]
    = 120.0,
    state_prefix: Annotated[str, typer.Option(help="Key prefix of the deployment in the "
                                              "shared state.")] = "director",
    enable_chaos: Annotated[bool, typer.Option("--enable-chaos", help="Mount the chaos routes "
                                               "(/api/v1/chaos/...: kill processes, fault GPU "
                                               "servers) for drills; off by default (404).")]
    = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Serve the admin API (OpenAPI docs at /docs, status page at /#token=...)."""
    from director.api import ApiConfig, PolicyDocument, build_api
    from director.api.auth import TokenFileError
    from director.api.server import RemoteListenRefused, bind
    from director.api.server import serve as run
    from director.geo import GeoDatabaseError
    from policies import PolicyError

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s "
                        "%(name)s: %(message)s")
    try:
        sock = bind(listen, allow_remote=allow_remote)
    except (RemoteListenRefused, ValueError, OSError) as exc:
        _fail(str(exc) if not isinstance(exc, OSError) else f"cannot listen on {listen}: {exc}")
    try:
        document, _ = PolicyDocument.from_file(str(policy))
    except PolicyError as exc:
        sock.close()
        err.print(exc.render(), markup=False)
        raise typer.Exit(1) from None
    if tokens is None:
        logging.getLogger("director.api").warning(
            "api: no --tokens file: every authenticated route answers 401")
    config = ApiConfig(
        policy=document, redis_url=redis_url, tokens_path=tokens, audit_path=audit_log,
        control_socket=control, dns_listen=tuple(d for d in (dns or "").split(",") if d),
        policy_store=policy_store, geoip_path=str(geoip) if geoip else None,
        balancer_port=balancer_port, max_body=max_body, prefix=state_prefix,
        policy_deadline=policy_deadline, enable_chaos=enable_chaos, listen=listen)
    try:
        api = build_api(config)
    except (TokenFileError, GeoDatabaseError, OSError, ValueError) as exc:
        sock.close()
        _fail(str(exc))
    run(api, sock, log_level.lower())


@app.command()
def token(
    tokens: Annotated[Path, typer.Option(help="Tokens file (created if absent).")],
    name: Annotated[str, typer.Option(help="Who the token is for (shown in the audit "
                                      "log).")],
    scope: Annotated[str, typer.Option(help="read or admin (admin implies read).")] = "read",
) -> None:
    """Add a token to the tokens file (stored hashed) and print it, once."""
    from director.api.auth import TokenFileError, add_token

    try:
        plaintext = add_token(tokens, name, scope)
    except (ValueError, TokenFileError, OSError) as exc:
        _fail(str(exc))
    print(plaintext)


def _fail(message: str) -> None:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(2)
