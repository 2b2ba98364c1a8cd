from __future__ import annotations

import redis

from state import EmbeddedValkey
from state.embedded import find_server_binary


def test_binary_is_found() -> None:
    assert find_server_binary().is_file()


def test_start_answers_ping_on_loopback_and_stop_frees_it() -> None:
    server = EmbeddedValkey().start()
    try:
        assert server.running
        assert server.url.startswith("redis://127.0.0.1:")
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        assert client.config_get("save")["save"] == ""
        assert client.config_get("appendonly")["appendonly"] == "no"
        client.close()
    finally:
        server.stop()
    assert not server.running


def test_context_manager_stops_the_process() -> None:
    with EmbeddedValkey() as server:
        port = server.port
        assert redis.Redis(port=port).ping()
    assert not server.running
