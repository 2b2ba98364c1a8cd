"""The broker's Sentinel transport against a real redis-server and Sentinel: a message goes
through a broker URL naming one Sentinel (kombu keeps no list of alternates then), and a
master that refuses writes for want of replicas is left with a connection error (so kombu
reconnects, asking the Sentinels again), not a plain error answer."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import kombu
import pytest
import redis

from state.ports import free_port
from state.sentinel_url import celery_broker
from workers.broker_transport import Transport


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[tuple[int, int]]:
    server = shutil.which("redis-server")
    assert server, "redis-server is needed (apt-get install redis-server; ./run test does)"
    master, port = free_port(), free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\nsentinel monitor m 127.0.0.1 {master} 1\n")
    procs = [subprocess.Popen([server, "--port", str(master), "--bind", "127.0.0.1",
                               "--save", ""], stdout=subprocess.DEVNULL),
             subprocess.Popen([server, str(conf), "--sentinel"], stdout=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                state = redis.Redis(port=port).sentinel_masters().get("m")
                if state and state["is_master"] and not state["is_sdown"]:
                    break
            except redis.exceptions.RedisError:
                pass
            assert time.monotonic() < deadline, "the Sentinel did not come up"
            time.sleep(0.1)
        yield master, port
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def connection(port: int, *more: int) -> kombu.Connection:
    """A broker connection as ``workers.app`` makes it (``state.sentinel_url``)."""
    broker, options = celery_broker(
        "redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in (port, *more)) + "/m", 2.0)
    return kombu.Connection(broker, transport_options=options)


def test_the_transport_stays_after_kombu_moves_to_the_next_url() -> None:
    """After a connection error kombu moves to the next URL and takes the transport from
    its scheme: with kombu's ``sentinel://`` it became kombu's own Sentinel transport (the
    first Sentinel believed, a NOREPLICAS answer a plain error) at the first failover."""
    conn = connection(1, 2)
    assert isinstance(conn.transport, Transport)
    for _ in range(3):
        conn.maybe_switch_next()
        assert isinstance(conn.transport, Transport), conn.transport


def test_a_message_goes_through_one_sentinel(sentinel: tuple[int, int]) -> None:
    _, port = sentinel
    queue = kombu.Queue("probes.test")
    with connection(port) as conn:
        conn.Producer().publish({"n": 1}, routing_key="probes.test", declare=[queue])
        message = conn.SimpleQueue(queue).get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()


def test_a_master_without_replicas_is_left_with_a_connection_error(
        sentinel: tuple[int, int]) -> None:
    master, port = sentinel
    redis.Redis(port=master).config_set("min-replicas-to-write", "1")
    # a connection error of redis (kombu's connection_errors) or kombu's own wrapping of it
    with connection(port) as conn, pytest.raises(
            (kombu.exceptions.OperationalError, redis.exceptions.ConnectionError),
            match="refuses writes"):
        conn.Producer().publish({"n": 1}, routing_key="probes.test", retry=False,
                                declare=[kombu.Queue("probes.test")])
