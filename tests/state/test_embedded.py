from __future__ import annotations

from pathlib import Path

import pytest
import redis

from state import EmbeddedValkey
from state.embedded import find_server_binary


def test_binary_is_found() -> None:
    assert find_server_binary().is_file()


def test_start_answers_ping_on_loopback_and_stop_frees_it() -> None:
    server = EmbeddedValkey().start()
    try:
        assert server.running
        assert server.url.startswith(f"redis://:{server.password}@127.0.0.1:")
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
        assert redis.Redis(port=port, password=server.password).ping()
    assert not server.running


def test_it_refuses_a_client_without_its_password_which_no_command_line_shows() -> None:
    with EmbeddedValkey(users={"dns": "dns-secret-1234567890"}) as server:
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(port=server.port).ping()
        assert server._process is not None
        cmdline = Path(f"/proc/{server._process.pid}/cmdline").read_bytes()
        assert server.password.encode() not in cmdline
        assert b"dns-secret" not in cmdline
        assert redis.Redis.from_url(server.url_for("dns")).acl_whoami() in ("dns", b"dns")
