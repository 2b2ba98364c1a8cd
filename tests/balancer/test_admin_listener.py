# SPDX-License-Identifier: Apache-2.0
"""The admin listener: ``/metrics`` and ``/_admin/*`` only there, never on the public port;
off loopback only with a token; a token, once set, required."""

from __future__ import annotations

import pytest

from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.errors import BalancerConfigError
from regions.balancer.http.admin_listen import AdminListen, read_token_file
from regions.simulator import Fleet, ServerSpec
from tests.balancer.helpers import MODEL, admin_client, stack

ADMIN_ROUTES = [("GET", "/metrics"), ("GET", "/_admin/state"), ("POST", "/_admin/drain"),
                ("POST", "/_admin/undrain"), ("POST", "/_admin/explain")]


async def test_the_public_port_serves_no_admin_route() -> None:
    async with stack(speeds=(1.0,)) as (_, balancer, client):
        assert balancer.admin_port != balancer.port
        for method, path in ADMIN_ROUTES:
            async with client.request(method, path, json={"backend": "gpu0"}) as resp:
                assert resp.status == 404, (method, path)
        assert not balancer.pool["gpu0"].draining
        async with client.get("/healthz") as resp:  # what a load balancer probes stays
            assert resp.status == 200


async def test_the_admin_listener_serves_metrics_state_and_drains() -> None:
    async with stack(speeds=(1.0,)) as (_, balancer, _client), admin_client(balancer) as adm:
        assert balancer.admin_url.startswith("http://127.0.0.1:")
        async with adm.get("/metrics") as resp:
            assert resp.status == 200
            assert "director_balancer_decisions_total" in await resp.text()
        async with adm.post("/_admin/drain", json={"backend": "gpu0"}) as resp:
            assert resp.status == 200 and (await resp.json())["draining"] is True
        assert balancer.pool["gpu0"].draining
        async with adm.get("/_admin/state") as resp:
            assert (await resp.json())["backends"][0]["drained_by"] == ["admin"]


async def test_a_token_once_set_is_required() -> None:
    token = "s3cret-admin-token"
    async with Fleet([ServerSpec("gpu0", models=(MODEL,))], time_scale=20) as fleet:
        balancer = build_balancer(
            "r",
            [BackendSpec("gpu0", fleet["gpu0"].url, (MODEL,))],
            BalancerConfig(admin=AdminListen("127.0.0.1", 0, token)),
        )
        async with balancer:
            for given in (None, "wrong", token + "x"):
                async with admin_client(balancer, given) as adm, adm.get("/metrics") as resp:
                    assert resp.status == 401, given
                    assert resp.headers["WWW-Authenticate"] == "Bearer"
                async with admin_client(balancer, given) as adm, \
                        adm.post("/_admin/drain", json={"backend": "gpu0"}) as resp:
                    assert resp.status == 401, given
            assert not balancer.pool["gpu0"].draining
            async with admin_client(balancer, token) as adm:
                async with adm.get("/metrics") as resp:
                    assert resp.status == 200
                async with adm.post("/_admin/drain", json={"backend": "gpu0"}) as resp:
                    assert resp.status == 200
            assert balancer.pool["gpu0"].draining


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::", "balancer.internal"])
def test_off_loopback_without_a_token_cannot_be_configured(host: str) -> None:
    with pytest.raises(BalancerConfigError, match="not a loopback address"):
        AdminListen(host, 9180)
    assert AdminListen(host, 9180, "token").token == "token"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.2.1", "::1", "localhost"])
def test_loopback_needs_no_token(host: str) -> None:
    assert AdminListen(host, 0).token is None


def test_token_file(tmp_path) -> None:
    path = tmp_path / "admin.token"
    path.write_text("  abc123  \nignored\n")
    assert read_token_file(path) == "abc123"
    path.write_text("  \n")
    with pytest.raises(BalancerConfigError, match="empty"):
        read_token_file(path)
    with pytest.raises(BalancerConfigError, match=r"admin\.token"):
        read_token_file(tmp_path / "none" / "admin.token")
