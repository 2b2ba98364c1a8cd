"""State URLs naming a Sentinel set: how they are read, how a master is chosen among the
Sentinels' answers, what Celery's broker is given. The stores, the broker and every
component following a real Sentinel set through a failover and a partition: tests/lab."""

from __future__ import annotations

import pytest

from state.sentinel_client import newest_master
from state.sentinel_url import SentinelUrl, celery_broker, parse_sentinel_url


def test_a_sentinel_url_is_read_whole() -> None:
    spec = parse_sentinel_url("redis+sentinel://api:s%40cret@10.0.0.1:26379,[::1]:26380/"
                              "main/3?sentinel_password=x")
    assert spec == SentinelUrl((("10.0.0.1", 26379), ("::1", 26380)), "main", 3, "api",
                               "s@cret", None, "x")
    assert parse_sentinel_url("redis+sentinel://h:1/m").db == 0


@pytest.mark.parametrize(("url", "problem"), [
    ("redis+sentinel://h/m", "expected host:port"),
    ("redis+sentinel://h:99999/m", "expected host:port"),
    ("redis+sentinel://h:1", "expected /<master name>"),
    ("redis+sentinel://h:1/m/x", "the database must be a number"),
    ("redis+sentinel://h:1/m/0/extra", "expected /<master name>"),
])
def test_a_broken_sentinel_url_says_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_sentinel_url(url)


def test_the_newest_epoch_names_the_master() -> None:
    """A Sentinel beside a master cut off by a partition still names it; the majority's
    newer failover (a higher epoch) wins however the Sentinels are ordered."""
    def state(ip: str, epoch: int) -> dict[str, object]:
        return {"ip": ip, "port": 6379, "config-epoch": epoch, "is_master": True}

    stale, new = state("10.0.0.1", 0), state("10.0.0.2", 1)
    assert newest_master([stale, new, new], lambda s: True) == ("10.0.0.2", 6379)
    assert newest_master([None, stale], lambda s: True) == ("10.0.0.1", 6379)
    assert newest_master([new], lambda s: False) is None
    # a tie of epochs: the address most Sentinels name
    assert newest_master([stale, state("10.0.0.3", 0), state("10.0.0.3", 0)],
                         lambda s: True) == ("10.0.0.3", 6379)


def test_the_celery_broker_of_a_sentinel_url() -> None:
    broker, options = celery_broker("redis+sentinel://w:p%40ss@10.0.0.1:26379,[::1]:26380/"
                                    "main/2?sentinel_password=s", timeout=5.0)
    assert broker == ("quorum-sentinel://w:p%40ss@10.0.0.1:26379/2;"
                      "quorum-sentinel://w:p%40ss@[::1]:26380/2")
    assert options["master_name"] == "main"
    assert options["sentinel_kwargs"]["password"] == "s"
    assert options["socket_timeout"] == options["socket_connect_timeout"] == 5.0
    plain, plain_options = celery_broker("redis://h:6379/0", timeout=5.0)
    assert plain == "redis://h:6379/0" and plain_options["socket_timeout"] == 5.0
    assert "master_name" not in plain_options
