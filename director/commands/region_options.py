# SPDX-License-Identifier: Apache-2.0
"""The options of ``director region serve``, one type each (typer reads the help from
them)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from regions.balancer.http.admin_listen import DEFAULT_ADMIN_PORT
from regions.balancer.scheduling.registry import DEFAULT_PICKER, DEFAULT_SCORERS

DEFAULT_SCORERS_TEXT = " ".join(f"{name}={weight:g}" for name, weight in DEFAULT_SCORERS)

PolicyOption = Annotated[Path, typer.Option("--policy", help="Policy file.")]

RegionOption = Annotated[str, typer.Option("--region", help="Region whose balancer to run.")]

ListenOption = Annotated[
    str | None,
    typer.Option(
        "--listen", help="HOST:PORT (default: the region's first endpoint, port 8080)."
    ),
]

GeoipOption = Annotated[
    Path | None,
    typer.Option(
        "--geoip",
        help="MaxMind database for the residency re-check (default: GeoLite2 City 2018).",
    ),
]

TrustedOption = Annotated[
    list[str] | None,
    typer.Option(
        "--trusted-network",
        help="CIDR of an edge (a proxy in front of the balancer) whose "
        "X-Director-Client-IP / -Country headers are believed; repeatable. Default: "
        "none, every client is located by its own address. The edge must overwrite "
        "both headers.",
    ),
]

RedisUrlOption = Annotated[
    str | None,
    typer.Option(
        "--redis",
        help="Shared state (redis://HOST:PORT/DB): publish the region's load every "
        "second, follow GPU drains and probe health; serving goes on if it fails.",
    ),
]

StatePrefixOption = Annotated[
    str,
    typer.Option("--state-prefix", help="Key prefix of the deployment in the shared state."),
]

StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        envvar="DIRECTOR_BALANCER_STATE_DIR",
        help="Directory where the balancer keeps what must outlive a restart during a "
        "shared state outage: the tenant API key table (ids and SHA-256 digests, mode "
        "0600). Without it, a balancer started while the state is unreachable answers "
        "503 to API keys until the state is back.",
    ),
]

QuotaWaitOption = Annotated[
    float,
    typer.Option(
        "--quota-wait",
        min=0.01,
        envvar="DIRECTOR_QUOTA_WAIT",
        help="Seconds a request waits at least for the shared quota in Redis before the "
        "balancer decides it by its local limits (each balancer the whole quota); the "
        "wait grows with measured round trips, up to 2 s or this. Raise it where Redis "
        "answers slowly now and then, to keep a tenant within its quota.",
    ),
]

AdminListenOption = Annotated[
    str | None,
    typer.Option(
        "--admin-listen",
        help="HOST:PORT of the admin listener (/metrics, /_admin/*), apart from the "
        "public port (default: the --listen host if it is a loopback address, else "
        f"127.0.0.1; port {DEFAULT_ADMIN_PORT}). Off loopback it needs "
        "--admin-token-file.",
    ),
]

AdminTokenFileOption = Annotated[
    Path | None,
    typer.Option(
        "--admin-token-file",
        help="File holding the bearer token the admin listener requires (on its first "
        "line); required when --admin-listen is not a loopback address.",
    ),
]

FollowPolicyOption = Annotated[
    bool,
    typer.Option(
        "--follow-policy",
        help="Follow the policy stored in Redis (set by `director up` or "
        "PUT /api/v1/policy): the region's GPU servers, residency rules and tenants "
        "change live. The default with --redis.",
    ),
]

NoFollowPolicyOption = Annotated[
    bool,
    typer.Option(
        "--no-follow-policy",
        help="Serve the policy file only, even with --redis (tests, special cases).",
    ),
]

OverflowOption = Annotated[
    str,
    typer.Option(
        "--overflow",
        help="When saturated: off (429), redirect (307) or proxy to the "
        "nearest sibling region the client may use.",
    ),
]

SiblingOption = Annotated[
    list[str] | None,
    typer.Option(
        "--sibling",
        help="REGION=URL of a sibling balancer (repeatable; default: the "
        "region's first endpoint and --balancer-port).",
    ),
]

BalancerPortOption = Annotated[
    int | None,
    typer.Option(
        "--balancer-port", help="Port of the sibling balancers (default: this one's)."
    ),
]

ScorerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--scorer",
        help="NAME=WEIGHT, repeatable: the scheduling profile's scorers "
        f"(default: {DEFAULT_SCORERS_TEXT}).",
    ),
]

PickerOption = Annotated[
    str | None,
    typer.Option("--picker", help=f"The profile's picker (default: {DEFAULT_PICKER})."),
]

LateBindingOption = Annotated[
    bool,
    typer.Option(
        "--late-binding",
        help="Hold requests in the region queue once every GPU server runs its learned "
        "capacity (off by default: each held request waits an engine iteration; a "
        "policy's max-seqs always holds).",
    ),
]

TtftEjectOption = Annotated[
    float,
    typer.Option(
        "--ttft-eject",
        min=0.0,
        help="Eject a GPU server whose TTFT average is above FACTOR times the others' "
        "median (a gray failure detector; 0, the default: off, as bursts of long "
        "prompts trip it on healthy fleets).",
    ),
]

HedgeOption = Annotated[
    float,
    typer.Option(
        "--hedge",
        min=0.0,
        max=1.0,
        help="First-byte hedging: a stream whose first token is later than the region's "
        "p90 for its prompt size gets a copy on another server, at most SHARE of requests "
        "(0, the default: off).",
    ),
]

ProvisionalGrowthOption = Annotated[
    float,
    typer.Option(
        "--provisional-growth",
        min=0.0,
        help="In a region with tenants, a GPU server not yet seen saturated may run "
        "FACTOR times the most it was seen running, doubling while it runs all it is "
        "given (0: unbounded until saturated; --late-binding alone does not use it).",
    ),
]
