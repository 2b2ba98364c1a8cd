"""The shared state's ACL on a real Valkey: a client without credentials is refused, and
each role's user (state.acl) can do its job through the real code paths, and nothing that
belongs to another role: mint tenant keys, store a policy, drain a region, write health."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from policies.model import RedisDown, TenantQuota
from state import EmbeddedValkey, StateStore
from state.acl import ROLES, acl_file, new_password, role_rules
from state.aio import AsyncStateStore
from state.credentials import PasswordFile, client_options, redacted, with_credentials
from state.errors import StateError
from state.records import GpuLoad, LatencySample, RegionLoad
from tenants.api_keys import load_keys, new_key, store_key
from tenants.quota import QuotaGate
from tenants.throttles import ThrottleLedger
from tenants.usage import UsageEvent, UsageKey, UsageLedger, read_log
from workers.app import create_app
from workers.config import WorkerSettings

PREFIX = "acl-test"
REGION = "eu-west"


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedValkey]:
    with EmbeddedValkey(users={role: new_password() for role in ROLES}, prefix=PREFIX) as s:
        yield s


def sync_store(server: EmbeddedValkey, role: str) -> StateStore:
    return StateStore.from_url(server.url_for(role), prefix=PREFIX)


def async_store(server: EmbeddedValkey, role: str) -> AsyncStateStore:
    return AsyncStateStore.from_url(server.url_for(role), prefix=PREFIX)


def refused(call: object) -> None:
    with pytest.raises(StateError, match="no permissions"):
        call()  # type: ignore[operator]


def raw_reply(port: int, command: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(command)
        return sock.recv(200)


def test_a_client_without_credentials_is_refused(server: EmbeddedValkey) -> None:
    assert server.port is not None
    assert raw_reply(server.port, b"PING\r\n").startswith(b"-NOAUTH")
    assert raw_reply(server.port, b"HGETALL acl-test:policy\r\n").startswith(b"-NOAUTH")
    store = StateStore.from_url(server.address, prefix=PREFIX)
    with pytest.raises(StateError):
        store.ping()
    store.close()
    wrong = StateStore.from_url(server.address.replace("://", "://api:wrong@"), prefix=PREFIX)
    with pytest.raises(StateError):
        wrong.ping()
    wrong.close()


def test_the_api_stores_policies_drains_and_tenant_keys(server: EmbeddedValkey) -> None:
    store = sync_store(server, "api")
    try:
        assert store.set_policy("zone x {}", name="p.dp") >= 1
        store.set_drain(REGION)
        assert REGION in store.drains().regions
        store.set_drain(REGION, draining=False)
    finally:
        store.close()


async def test_the_api_mints_tenant_keys_and_the_others_cannot(server: EmbeddedValkey) -> None:
    api = async_store(server, "api")
    made = new_key("acme")
    await store_key(api, made.stored)
    for role in ("balancer", "worker", "dns"):
        other = async_store(server, role)
        with pytest.raises(StateError, match="no permissions"):
            await store_key(other, new_key("mallory").stored)
        assert made.stored.key_id in await load_keys(other)  # every role reads them
        await other.close()
    await api.close()


async def test_a_balancer_writes_its_load_quotas_usage_and_throttles(
        server: EmbeddedValkey) -> None:
    store = async_store(server, "balancer")
    try:
        await store.write_region_load(REGION, RegionLoad(1.0, 2.0, 0.5, 10.0, 0.1, time.time()))
        gate = QuotaGate(store.client, PREFIX)
        admission = await gate.admit("acme", TenantQuota(requests_per_minute=600, concurrent=4),
                                     RedisDown.CLOSED, input_tokens=3, max_output_tokens=8,
                                     request_id="r1")
        assert admission.allowed
        await admission.finish(8)
        await gate.aclose()
        usage = UsageLedger(store)
        key = UsageKey("acme", "chat", "m", REGION, "gpu0")
        usage.record(UsageEvent(time.time(), key, 3, 8, False, 0.1, request_id="r1"))
        assert await usage.flush()
        assert [fields["request_id"] for _, fields in await read_log(store)] == ["r1"]
        throttles = ThrottleLedger(store)
        throttles.record("acme", REGION, 429, "requests")
        assert await throttles.flush()
        await store.drains()
        with pytest.raises(StateError, match="no permissions"):
            await store.set_drain(REGION)
        with pytest.raises(StateError, match="no permissions"):
            await store.record_probe(REGION, "gpu0", ok=False, rise=1, fall=1)
    finally:
        await store.close()
    sync = sync_store(server, "balancer")
    refused(lambda: sync.set_policy("zone y {}"))
    sync.close()


def test_a_worker_writes_probes_loads_and_latency_only(server: EmbeddedValkey) -> None:
    store = sync_store(server, "worker")
    try:
        store.record_probe(REGION, "gpu0", ok=True, rise=1, fall=1)
        store.record_probe(REGION, None, ok=True, rise=1, fall=1)
        store.write_gpu_load(REGION, "gpu0", GpuLoad("vllm", 1.0, 2.0, 0.5, time.time()))
        store.write_region_load(REGION, RegionLoad(1.0, 2.0, 0.5, 10.0, 0.1, time.time()))
        store.write_latency(LatencySample("10.0.0.0/8", REGION, 12.0, time.time()))
        assert store.gpu_health(REGION, "gpu0") is not None
        refused(lambda: store.set_drain(REGION))
        refused(lambda: store.set_policy("zone y {}"))
    finally:
        store.close()


def test_a_worker_runs_the_celery_broker_under_its_prefix(server: EmbeddedValkey) -> None:
    app = create_app(WorkerSettings(redis_url=server.url_for("worker"), state_prefix=PREFIX))
    with app.connection_for_write() as connection:
        queue = connection.SimpleQueue("probes.acl-test")
        queue.put({"probe": 1})
        message = queue.get(timeout=5)
        assert message.payload == {"probe": 1}
        message.ack()
        queue.close()
    assert app.control.ping(timeout=0.3) == []  # the pidbox fanout and its reply queue
    # what a worker's consumer does for remote control: kombu PSUBSCRIBEs the pidbox,
    # and an ACL checks a pattern literally
    worker = redis.Redis.from_url(server.url_for("worker"))
    pubsub = worker.pubsub()
    pubsub.psubscribe(f"{PREFIX}:celery:/0.celery.pidbox")
    assert pubsub.get_message(timeout=1)["type"] == "psubscribe"
    pubsub.close()
    worker.close()
    admin = redis.Redis.from_url(server.url)
    names = [k.decode() for k in admin.scan_iter(match="*")]
    admin.close()
    assert names and all(name.startswith(f"{PREFIX}:") for name in names), names


async def test_a_dns_server_reads_and_follows_but_writes_nothing(
        server: EmbeddedValkey) -> None:
    store = async_store(server, "dns")
    try:
        await store.policy()
        await store.drains()
        pubsub = store.subscribe()
        await pubsub.subscribe(store.keys.changes)
        await pubsub.aclose()
        with pytest.raises(StateError, match="no permissions"):
            await store.write_region_load(REGION, RegionLoad(1.0, 2.0, 0.5, 10.0, 0.1, time.time()))
        with pytest.raises(StateError, match="no permissions"):
            await store.set_drain(REGION)
    finally:
        await store.close()


def test_a_keyless_dns_edge_reports_misses_and_only_the_api_publishes_signatures(
        server: EmbeddedValkey) -> None:
    dns_user = redis.Redis.from_url(server.url_for("dns"), decode_responses=True)
    api_user = redis.Redis.from_url(server.url_for("api"), decode_responses=True)
    try:
        api_user.set(f"{PREFIX}:dnssec:current", "{}")
        api_user.hset(f"{PREFIX}:dnssec:signed:1", "rrset", "rrsig")
        assert dns_user.get(f"{PREFIX}:dnssec:current") == "{}"
        assert dns_user.sadd(f"{PREFIX}:dnssec:misses", "an rrset") == 1
        for forge in (lambda: dns_user.set(f"{PREFIX}:dnssec:current", "{}"),
                      lambda: dns_user.hset(f"{PREFIX}:dnssec:signed:1", "rrset", "forged")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                forge()
    finally:
        dns_user.close()
        api_user.close()


@pytest.mark.parametrize("role", ROLES)
def test_no_role_may_administer_the_server(server: EmbeddedValkey, role: str) -> None:
    client = redis.Redis.from_url(server.url_for(role))
    try:
        for command in (("FLUSHALL",), ("CONFIG", "GET", "*"), ("ACL", "LIST"),
                        ("KEYS", "*"), ("FLUSHDB",), ("CLIENT", "KILL", "ID", "999999")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)
    finally:
        client.close()


def test_credentials_from_a_password_file(server: EmbeddedValkey, tmp_path: Path) -> None:
    secret = tmp_path / "balancer.password"
    secret.write_text(server.users["balancer"] + "\n")
    env = {"DIRECTOR_REDIS_USER": "balancer", "DIRECTOR_REDIS_PASSWORD_FILE": str(secret)}
    provider = client_options(server.address, env)["credential_provider"]
    assert isinstance(provider, PasswordFile)
    store = StateStore.from_url(server.address, prefix=PREFIX, credentials=provider)
    assert store.client.acl_whoami() in ("balancer", b"balancer")
    store.close()
    assert server.users["balancer"] not in repr(provider)
    assert client_options(server.url_for("dns"), env) == {}  # the URL's own win
    broker = with_credentials(server.address, env)
    assert redis.Redis.from_url(broker).acl_whoami() in ("balancer", b"balancer")
    assert server.users["balancer"] not in redacted(broker)
    assert redacted(broker).startswith("redis://balancer:***@127.0.0.1:")
    with pytest.raises(StateError, match="DIRECTOR_REDIS_PASSWORD_FILE"):
        client_options(server.address, {"DIRECTOR_REDIS_USER": "dns"})
    missing = StateStore.from_url(server.address, prefix=PREFIX, credentials=PasswordFile(
        "dns", tmp_path / "absent"))
    with pytest.raises(StateError, match="cannot read the state password"):
        missing.ping()
    missing.close()


def test_the_acl_file_turns_the_default_user_off_and_hides_passwords() -> None:
    passwords = {role: new_password() for role in ROLES}
    text = acl_file(passwords, "director")
    assert text.splitlines()[0] == "user default reset off"
    assert [line.split()[1] for line in text.splitlines()[1:]] == list(ROLES)
    assert not any(password in text for password in passwords.values())
    with pytest.raises(ValueError, match="unknown state role"):
        role_rules("admin")
    with pytest.raises(ValueError, match="state prefix"):
        role_rules("dns", "dir*")
